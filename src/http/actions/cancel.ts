// POST /v1/actions/{name}/cancel: delete the NodeAction; its finalizer lets the
// controller stop its hooks and record phase Cancelled first.
import { NODE_ACTIONS_PATH } from '../../api/paths.ts';
import { isTerminal } from '../../api/phases.ts';
import { KubeApiError } from '../../kube/rest.ts';
import { ApiError } from '../api-error.ts';
import type { Reply, Request } from '../router.ts';
import type { ActionsContext } from './context.ts';
import { REQUESTER_ROLE, onAction, phaseOf } from './view.ts';

export async function cancelAction(c: ActionsContext, req: Request): Promise<Reply> {
  const caller = await c.access.caller(req);
  const name = req.params.name ?? '';
  await c.access.authorize(caller, onAction('delete', name), REQUESTER_ROLE);
  const action = await c.store.mustRead(name);
  const phase = phaseOf(action);
  if (isTerminal(phase)) {
    throw new ApiError(
      409,
      `NodeAction ${name} has already ended (${phase}): there is nothing to cancel, and its record is kept`,
    );
  }
  if (!action.metadata.deletionTimestamp) {
    try {
      await c.store.rest.request(`${NODE_ACTIONS_PATH}/${name}`, {
        method: 'DELETE',
        body: {
          apiVersion: 'v1',
          kind: 'DeleteOptions',
          preconditions: { uid: action.metadata.uid },
          propagationPolicy: 'Background',
        },
      });
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 404)) {
        throw c.store.writeFailure(error, `cancel NodeAction ${name}`);
      }
    }
    c.log.info({ action: name, by: caller.username }, 'action cancelled over HTTP');
  }
  return {
    status: 202,
    body: {
      name,
      message: `cancelling ${name}: the controller stops its hooks, records phase Cancelled and then deletes it`,
    },
    headers: { Location: `/v1/actions/${name}` },
  };
}
