// GET /v1/actions/{name}[?wait=&phase=]: one action, or with ?wait= a long-poll that
// answers as soon as its phase differs from the one the caller knows (or ?wait= is up).
import type { ServerResponse } from 'node:http';
import type { ActionObject } from '../../api/node-action.ts';
import type { NodeActionPhase } from '../../api/node-action.ts';
import { isTerminal } from '../../api/phases.ts';
import { ApiError } from '../api-error.ts';
import type { Reply, Request } from '../router.ts';
import type { ActionsContext } from './context.ts';
import { parsePhase, parseWait } from './query.ts';
import { READER_ROLE, actionView, onAction, phaseOf } from './view.ts';

export async function getAction(c: ActionsContext, req: Request, res: ServerResponse): Promise<Reply> {
  const caller = await c.access.caller(req);
  const name = req.params.name ?? '';
  await c.access.authorize(caller, onAction('get', name), READER_ROLE);
  const waitMs = parseWait(req.url.searchParams.get('wait'), c.access.limits.maxWaitMs);
  const known = parsePhase(req.url.searchParams.get('phase'), 'phase');
  const action = await c.store.mustRead(name);
  if (waitMs === 0) return { status: 200, body: actionView(action) };
  const baseline = known ?? phaseOf(action);
  if (phaseOf(action) !== baseline || isTerminal(phaseOf(action))) {
    return { status: 200, body: actionView(action) };
  }
  const release = c.access.openStream(caller);
  const closed = new AbortController();
  const onClose = () => closed.abort();
  res.once('close', onClose);
  try {
    const after = await waitForChange(c, action, baseline, waitMs, closed.signal);
    if (after === 'deleted') {
      throw new ApiError(
        404,
        `NodeAction "${name}" was deleted while waiting (a cancelled action is deleted once it stops)`,
      );
    }
    return { status: 200, body: actionView(after ?? action) };
  } finally {
    res.off('close', onClose);
    release();
  }
}

function waitForChange(
  c: ActionsContext,
  action: ActionObject,
  baseline: NodeActionPhase,
  waitMs: number,
  signal: AbortSignal,
): Promise<ActionObject | 'deleted' | undefined> {
  const name = action.metadata.name;
  return new Promise((resolve) => {
    let latest = action;
    const following: { stop?: () => void } = {};
    const finish = (result: ActionObject | 'deleted' | undefined) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      following.stop?.();
      resolve(result);
    };
    const onAbort = () => finish(undefined);
    const timer = setTimeout(() => finish(latest), waitMs);
    signal.addEventListener('abort', onAbort, { once: true });
    const check = c.followers.reader(name, (current) => {
      if (!current) finish('deleted');
      else {
        latest = current;
        if (phaseOf(current) !== baseline || isTerminal(phaseOf(current))) finish(current);
      }
    });
    following.stop = c.followers.follow(name, action.spec.nodeName, check);
    // The informer may already be past the object read at the start.
    check();
  });
}
