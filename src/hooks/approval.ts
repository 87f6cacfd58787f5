// An approval hook's attempt: it waits for a person's answer, carried by the action's
// talos.dev/approval annotations (src/api/names.ts). The admission policy lets only an
// approver the pending approval names write them; the controller checks again what it
// can know itself (which hook the answer is for, that a requester does not approve their
// own action unless the hook allows it), so that an answer written past a missing
// admission policy still cannot approve itself.
import { approvalHookRef } from '../api/hooks.ts';
import type { HookObject } from './select.ts';

/** A person's answer, as the action's annotations carry it. */
export interface ApprovalAnswer {
  decision: 'Approve' | 'Refuse';
  by: string;
  reason: string;
  /** The hook it answers, Kind/namespace/name. */
  for: string;
}

/** What an attempt of an approval hook becomes on this pass. */
export type ApprovalStep =
  | { state: 'approved'; message: string; answer: ApprovalAnswer }
  | { state: 'refused'; message: string; answer: ApprovalAnswer }
  | { state: 'waiting'; message: string };

/** The hook's reference in the approval annotations and status.approval. */
export function refOf(hook: HookObject): string {
  return approvalHookRef({ kind: hook.kind, namespace: hook.metadata.namespace, name: hook.metadata.name });
}

/** Who may approve, in words: "a holder of the verb approve in group storage-oncall". */
export function approversText(hook: HookObject): string {
  const approvers = hook.spec.approval?.approvers;
  const named = [
    ...(approvers?.groups ?? []).map((g) => `group ${g}`),
    ...(approvers?.users ?? []).map((u) => `user ${u}`),
  ];
  return `a holder of the verb approve${named.length ? ` who is ${named.join(' or ')}` : ''}`;
}

/**
 * Where an approval hook's attempt stands, given the answer the action carries (if any)
 * and who requested the action.
 */
export function approvalStep(
  hook: HookObject,
  answer: ApprovalAnswer | undefined,
  requester: string | undefined,
): ApprovalStep {
  const approval = hook.spec.approval;
  const asked = approval?.message ? `${approval.message}; ` : '';
  const waiting = `waiting for approval by ${approversText(hook)} (${asked}gatehouse approve <action> --reason ...)`;
  if (!answer || answer.for !== refOf(hook)) return { state: 'waiting', message: waiting };
  if (answer.decision === 'Refuse')
    return { state: 'refused', message: `refused by ${answer.by}: ${answer.reason}`, answer };
  if (answer.by === requester && !(approval?.allowSelfApproval ?? false))
    return {
      state: 'waiting',
      message: `${answer.by} requested this action and may not approve it (allowSelfApproval is false): ${waiting}`,
    };
  return { state: 'approved', message: `approved by ${answer.by}: ${answer.reason}`, answer };
}
