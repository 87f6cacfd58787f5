// Setting a mark on an action for its requester, as the HTTP API does for the executed
// mark (executed.ts) and the release (released.ts): the caller may patch NodeActions,
// and is the action's requester or holds the verb bypass (the admission policy's rule,
// answered here first); the mark goes on, conditional on the version judged, unless the
// action is past it already or may not have it now.
import type { ActionObject } from '../../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../../api/paths.ts';
import { KubeApiError } from '../../kube/rest.ts';
import { ApiError } from '../api-error.ts';
import type { Reply, Request } from '../router.ts';
import type { ActionsContext } from './context.ts';
import { REQUESTER_ROLE, actionView, onAction } from './view.ts';

export interface RequesterMark {
  /** What it does to NodeAction `name`, for failures and the log: "mark NodeAction x executed". */
  doing: (name: string) => string;
  /** The action is past the mark already: setting it now changes nothing, and succeeds. */
  past: (action: ActionObject) => boolean;
  /** Why the action cannot have the mark now (409), or undefined. */
  refusal: (action: ActionObject) => string | undefined;
  /** The action carries the mark already. */
  marked: (action: ActionObject) => boolean;
  /** The merge patch that sets it, conditional on the version judged. */
  patch: (action: ActionObject) => Record<string, unknown>;
}

export async function setRequesterMark(c: ActionsContext, req: Request, mark: RequesterMark): Promise<Reply> {
  const caller = await c.access.caller(req);
  const name = req.params.name ?? '';
  await c.access.authorize(caller, onAction('patch', name), REQUESTER_ROLE);
  for (let attempt = 1; ; attempt++) {
    const action = await c.store.mustRead(name);
    if (action.spec.requestedBy !== caller.username)
      await c.access.authorize(caller, { verb: 'bypass', resource: 'nodeactions', name }, 'gatehouse:bypass');
    if (mark.past(action)) return { status: 200, body: actionView(action) };
    // A mark already there does not make an action markable: the same refusal as without it.
    const refusal = mark.refusal(action);
    if (refusal) throw new ApiError(409, refusal);
    if (mark.marked(action)) return { status: 200, body: actionView(action) };
    try {
      const patched = await c.store.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: mark.patch(action),
      });
      c.log.info({ action: name, by: caller.username }, `${mark.doing(name)} over HTTP`);
      return { status: 200, body: actionView(patched) };
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409 && attempt < 5) continue;
      throw c.store.writeFailure(error, mark.doing(name));
    }
  }
}
