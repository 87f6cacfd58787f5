// GET /v1/actions[?node=&phase=]: this instance's actions, oldest first.
import type { Reply, Request } from '../router.ts';
import type { ActionsContext } from './context.ts';
import { parsePhase } from './query.ts';
import { READER_ROLE, actionView, phaseOf } from './view.ts';

export async function listActions(c: ActionsContext, req: Request): Promise<Reply> {
  const caller = await c.access.caller(req);
  await c.access.authorize(caller, { verb: 'list', resource: 'nodeactions' }, READER_ROLE);
  const node = req.url.searchParams.get('node');
  const phase = parsePhase(req.url.searchParams.get('phase'), 'phase');
  const items = await c.store.list('list NodeActions');
  const selected = items
    .filter(
      (a) => (node === null || a.spec.nodeName === node) && (phase === undefined || phaseOf(a) === phase),
    )
    .sort(
      (a, b) =>
        (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
  return { status: 200, body: { items: selected.map(actionView) } };
}
