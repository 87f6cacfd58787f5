// POST /v1/actions/{name}/executed: someone performed an External action (e.g. ran
// `talosctl reboot` once it was Approved) and says so; the controller then watches for
// the node's new boot. The CLI's direct backend applies the same rules.
import type { ActionObject } from '../../api/node-action.ts';
import { EXECUTED_ANNOTATION } from '../../api/names.ts';
import { NODE_ACTIONS_PATH } from '../../api/paths.ts';
import { PHASES, isTerminal } from '../../api/phases.ts';
import { KubeApiError } from '../../kube/rest.ts';
import { ApiError } from '../api-error.ts';
import type { Reply, Request } from '../router.ts';
import type { ActionsContext } from './context.ts';
import { REQUESTER_ROLE, actionView, onAction, phaseOf } from './view.ts';

/**
 * Whether the controller has already seen an External action performed (the node went
 * down or came back with a new boot): marking it executed then changes nothing, and
 * succeeds, so that `talosctl reboot` (which waits for the node) followed by the mark
 * works however quickly gatehouse noticed.
 */
export function performanceObserved(action: ActionObject): boolean {
  const phase = phaseOf(action);
  return (action.spec.execution ?? 'Managed') === 'External' && PHASES[phase].performed;
}

/** The merge patch that marks an action executed, conditional on the version judged Approved. */
export function executedMark(action: ActionObject): Record<string, unknown> {
  return {
    metadata: {
      resourceVersion: action.metadata.resourceVersion,
      annotations: { [EXECUTED_ANNOTATION]: 'true' },
    },
  };
}

/**
 * Why an action cannot be marked executed now, or undefined if it can: only an
 * External action, only once Approved and before it ended.
 */
export function executedRefusal(action: ActionObject): string | undefined {
  const name = action.metadata.name;
  if ((action.spec.execution ?? 'Managed') !== 'External') {
    return `NodeAction ${name} has Managed execution: the controller performs it, so there is nothing to mark executed`;
  }
  const phase = phaseOf(action);
  if (isTerminal(phase))
    return `NodeAction ${name} has already ended (${phase}): it cannot be marked executed`;
  if (action.metadata.deletionTimestamp) {
    return `NodeAction ${name} is being cancelled: it cannot be marked executed`;
  }
  if (phase !== 'Approved') {
    return `NodeAction ${name} is not approved yet (phase ${phase}): perform the action only once it is Approved, then mark it executed`;
  }
  return undefined;
}

export async function markExecuted(c: ActionsContext, req: Request): Promise<Reply> {
  const caller = await c.access.caller(req);
  const name = req.params.name ?? '';
  await c.access.authorize(caller, onAction('patch', name), REQUESTER_ROLE);
  for (let attempt = 1; ; attempt++) {
    const action = await c.store.mustRead(name);
    // The admission policy's rule, answered here first: the requester, or a bypass holder.
    if (action.spec.requestedBy !== caller.username)
      await c.access.authorize(caller, { verb: 'bypass', resource: 'nodeactions', name }, 'gatehouse:bypass');
    if (performanceObserved(action)) return { status: 200, body: actionView(action) };
    // A mark already there does not make an action markable: the same refusal as without it.
    const refusal = executedRefusal(action);
    if (refusal) throw new ApiError(409, refusal);
    if (action.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true')
      return { status: 200, body: actionView(action) };
    try {
      const patched = await c.store.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: executedMark(action),
      });
      c.log.info({ action: name, by: caller.username }, 'action marked executed over HTTP');
      return { status: 200, body: actionView(patched) };
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409 && attempt < 5) continue;
      throw c.store.writeFailure(error, `mark NodeAction ${name} executed`);
    }
  }
}
