// POST /v1/actions/{name}/approve: a person's answer to the approval hook an action
// waits for (status.approval.pending): Approve lets the action go on, Refuse ends it
// Denied. The caller holds the verb approve, is one of the approvers the pending approval
// names, and — unless it allows it — is not the requester approving their own action:
// the admission policy's rules, answered here first, since this API writes as the
// controller (exempt from them). The answer is recorded with the caller's name.
import type { Static } from 'typebox';
import Type from 'typebox';
import { StringEnum } from '../../api/common.ts';
import {
  APPROVAL_ANNOTATION,
  APPROVAL_BY_ANNOTATION,
  APPROVAL_FOR_ANNOTATION,
  APPROVAL_REASON_ANNOTATION,
} from '../../api/names.ts';
import { hasVisibleWords, type ActionObject } from '../../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../../api/paths.ts';
import { isTerminal } from '../../api/phases.ts';
import type { Caller } from '../auth.ts';
import { KubeApiError } from '../../kube/rest.ts';
import { ApiError } from '../api-error.ts';
import { readJson } from '../body.ts';
import type { Reply, Request } from '../router.ts';
import { validator } from '../validation.ts';
import type { ActionsContext } from './context.ts';
import { actionView, phaseOf } from './view.ts';

export const ApprovalRequest = Type.Object(
  {
    decision: Type.Optional(
      StringEnum(['Approve', 'Refuse'], {
        description: 'Approve (the default) or Refuse: a refusal ends the action Denied with your reason.',
      }),
    ),
    reason: Type.String({
      description: 'Why, in your words: recorded with your name in the status and an Event.',
      minLength: 1,
      maxLength: 1024,
    }),
  },
  { description: "A person's answer to the approval an action waits for.", additionalProperties: false },
);
export type ApprovalRequest = Static<typeof ApprovalRequest>;

const validate = validator<ApprovalRequest>(ApprovalRequest as never, 'the request body');

/** The merge patch that answers, conditional on the version judged. */
export function approvalPatch(
  action: ActionObject,
  answer: { decision: 'Approve' | 'Refuse'; by: string; reason: string; hook: string },
): Record<string, unknown> {
  return {
    metadata: {
      resourceVersion: action.metadata.resourceVersion,
      annotations: {
        [APPROVAL_ANNOTATION]: answer.decision,
        [APPROVAL_BY_ANNOTATION]: answer.by,
        [APPROVAL_REASON_ANNOTATION]: answer.reason,
        [APPROVAL_FOR_ANNOTATION]: answer.hook,
      },
    },
  };
}

/**
 * Why `caller` may not give this answer to the action now, with the HTTP status, or
 * undefined: the same rules as the admission policy, from the action as read.
 */
export function approvalRefusal(
  action: ActionObject,
  caller: Pick<Caller, 'username' | 'groups'>,
  decision: 'Approve' | 'Refuse',
): { status: 403 | 409; message: string } | undefined {
  const name = action.metadata.name;
  const phase = phaseOf(action);
  if (isTerminal(phase))
    return {
      status: 409,
      message: `NodeAction ${name} has already ended (${phase}): there is nothing to approve`,
    };
  if (action.metadata.deletionTimestamp)
    return { status: 409, message: `NodeAction ${name} is being cancelled: there is nothing to approve` };
  const pending = action.status?.approval?.pending;
  if (!pending)
    return {
      status: 409,
      message: `NodeAction ${name} waits for no approval (phase ${phase}): an approval is given while an approval hook waits for one`,
    };
  const named = [...(pending.groups ?? []), ...(pending.users ?? [])].length > 0;
  const member =
    (pending.groups ?? []).some((g) => caller.groups.includes(g)) ||
    (pending.users ?? []).includes(caller.username);
  if (named && !member)
    return {
      status: 403,
      message: `${caller.username} is not among the approvers of ${pending.hook}: groups ${(pending.groups ?? []).join(', ') || 'none'}, users ${(pending.users ?? []).join(', ') || 'none'}`,
    };
  if (decision === 'Approve' && action.spec.requestedBy === caller.username && !pending.allowSelfApproval)
    return {
      status: 403,
      message: `${caller.username} requested NodeAction ${name} and may not approve it: ${pending.hook} asks for a second person (allowSelfApproval is false)`,
    };
  return undefined;
}

export async function approveAction(c: ActionsContext, req: Request): Promise<Reply> {
  const caller = await c.access.caller(req);
  const name = req.params.name ?? '';
  const body = validate(await readJson(req.raw, c.access.limits.bodyBytes));
  const decision = body.decision ?? 'Approve';
  if (!hasVisibleWords(body.reason))
    throw new ApiError(
      422,
      'reason must say why, in words (at least three letters): it is recorded with your name',
    );
  await c.access.authorize(caller, { verb: 'approve', resource: 'nodeactions', name }, 'gatehouse:approve');
  for (let attempt = 1; ; attempt++) {
    const action = await c.store.mustRead(name);
    const refusal = approvalRefusal(action, caller, decision);
    if (refusal) throw new ApiError(refusal.status, refusal.message);
    const hook = action.status?.approval?.pending?.hook ?? '';
    try {
      const patched = await c.store.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: approvalPatch(action, { decision, by: caller.username, reason: body.reason.trim(), hook }),
      });
      c.log.info({ action: name, by: caller.username, decision, hook }, 'approval answered over HTTP');
      return { status: 200, body: actionView(patched) };
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409 && attempt < 5) continue;
      throw c.store.writeFailure(error, `answer the approval of NodeAction ${name}`);
    }
  }
}
