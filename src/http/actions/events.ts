// GET /v1/actions/{name}/events: server-sent events of an action's progress (with its
// node), until it ends or is deleted.
import type { ServerResponse } from 'node:http';
import type { ActionObject } from '../../api/node-action.ts';
import { isTerminal } from '../../api/phases.ts';
import { nodeView } from '../node-view.ts';
import { canonicalJson } from '../../canonical-json.ts';
import type { Reply, Request } from '../router.ts';
import type { NodeView } from '../schemas.ts';
import type { ActionsContext } from './context.ts';
import { READER_ROLE, actionView, onAction, phaseOf } from './view.ts';

function nodeOf(c: ActionsContext, action: ActionObject): NodeView {
  const name = action.spec.nodeName;
  return nodeView(name, c.nodes.get(name));
}

export async function actionEvents(
  c: ActionsContext,
  req: Request,
  res: ServerResponse,
): Promise<Reply | undefined> {
  const caller = await c.access.caller(req);
  const name = req.params.name ?? '';
  await c.access.authorize(caller, onAction('watch', name), READER_ROLE);
  const action = await c.store.mustRead(name);
  if (req.method === 'HEAD') return { status: 200, contentType: 'text/event-stream' };
  const release = c.access.openStream(caller);
  res.writeHead(200, {
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-store',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  res.write('retry: 2000\n\n');
  let lastSent = '';
  let ended = false;
  const send = (event: string, data: unknown, id?: string) => {
    if (ended) return;
    res.write(`event: ${event}\n${id ? `id: ${id}\n` : ''}data: ${JSON.stringify(data)}\n\n`);
  };
  const end = () => {
    if (ended) return;
    ended = true;
    stop();
    clearInterval(heartbeat);
    release();
    res.end();
  };
  const progress = (current: ActionObject) => {
    const data = { action: actionView(current), node: nodeOf(c, current) };
    const text = canonicalJson(data);
    if (text === lastSent) return;
    lastSent = text;
    send('progress', data, current.metadata.resourceVersion);
    const phase = phaseOf(current);
    if (isTerminal(phase)) {
      send('end', { name, phase, message: current.status?.message ?? '' });
      end();
    }
  };
  const check = c.followers.reader(name, (current) => {
    if (!current) {
      send('deleted', { name, message: `NodeAction "${name}" was deleted` });
      end();
    } else progress(current);
  });
  const heartbeat = setInterval(() => {
    if (!ended) res.write(': keep-alive\n\n');
  }, c.heartbeatMs);
  heartbeat.unref();
  const stop = c.followers.follow(name, action.spec.nodeName, check);
  res.once('close', end);
  progress(action);
  return undefined;
}
