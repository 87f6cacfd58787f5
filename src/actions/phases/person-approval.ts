// The action's side of approval hooks (src/hooks/approval.ts): the answer its annotations
// carry, and what the status says about them — the approval it waits for now (which the
// admission policy judges an answer against) and every decision taken, recorded like a
// bypass, each with an Event.
import type { ApprovalAnswer } from '../../hooks/approval.ts';
import { approversText, refOf } from '../../hooks/approval.ts';
import type { StagePlan } from '../../hooks/plan.ts';
import type { HookObject } from '../../hooks/select.ts';
import {
  APPROVAL_ANNOTATION,
  APPROVAL_BY_ANNOTATION,
  APPROVAL_FOR_ANNOTATION,
  APPROVAL_REASON_ANNOTATION,
} from '../../api/names.ts';
import type { ObservedNodeAction } from '../../api/node-action.ts';
import { parseDuration } from '../../duration.ts';
import { selectHooks } from '../../hooks/select.ts';
import type { DecisionBuilder } from '../decision.ts';
import { kindOf } from '../kinds/index.ts';
import type { ActionInput } from '../observations.ts';

/** The most decisions status.approval keeps (the CRD's bound): the oldest go first. */
const DECISIONS_KEPT = 32;

/** The answer the action's annotations carry, if they carry a whole one. */
export function approvalAnswer(action: Pick<ObservedNodeAction, 'metadata'>): ApprovalAnswer | undefined {
  const a = action.metadata.annotations ?? {};
  const decision = a[APPROVAL_ANNOTATION];
  const by = a[APPROVAL_BY_ANNOTATION]?.trim();
  const hook = a[APPROVAL_FOR_ANNOTATION]?.trim();
  const reason = a[APPROVAL_REASON_ANNOTATION]?.trim();
  if ((decision !== 'Approve' && decision !== 'Refuse') || !by || !hook || !reason) return undefined;
  return { decision, by, reason, for: hook };
}

/**
 * Records what the stage's approval hooks came to on this pass: each answer taken (a
 * decision and an Event), and the approval the action waits for now, if any.
 */
export function recordApprovals(b: DecisionBuilder, plan: StagePlan, hooks: readonly HookObject[]): void {
  const { status, now, event } = b;
  const time = now.toISOString();
  const approval = { ...status.approval };
  for (const answer of plan.answered) {
    const decision = answer.decision === 'Approve' ? ('Approved' as const) : ('Refused' as const);
    approval.decisions = [
      ...(approval.decisions ?? []),
      { hook: answer.for, decision, by: answer.by, reason: answer.reason, time },
    ].slice(-DECISIONS_KEPT);
    if (decision === 'Approved')
      event('Normal', 'ApprovalGranted', `${answer.for}: approved by ${answer.by}: ${answer.reason}`);
    else event('Warning', 'ApprovalRefused', `${answer.for}: refused by ${answer.by}: ${answer.reason}`);
  }
  const waiting = hooks.find((h) => {
    if (!h.spec.approval) return false;
    const ref = refOf(h);
    const run = plan.records.find(
      (r) => r.kind === h.kind && r.namespace === h.metadata.namespace && r.name === h.metadata.name,
    );
    return run?.phase === 'Running' && !plan.answered.some((a) => a.for === ref);
  });
  if (!waiting) delete approval.pending;
  else if (approval.pending?.hook !== refOf(waiting)) {
    const spec = waiting.spec.approval ?? {};
    approval.pending = {
      hook: refOf(waiting),
      ...(spec.message ? { message: spec.message } : {}),
      ...(spec.approvers?.groups?.length ? { groups: spec.approvers.groups } : {}),
      ...(spec.approvers?.users?.length ? { users: spec.approvers.users } : {}),
      allowSelfApproval: spec.allowSelfApproval ?? false,
      since: time,
    };
    event(
      'Normal',
      'ApprovalRequested',
      `${refOf(waiting)} waits for approval by ${approversText(waiting)}${spec.message ? `: ${spec.message}` : ''}`,
    );
  }
  if (approval.pending || approval.decisions?.length) status.approval = approval;
  else delete status.approval;
}

/**
 * How much longer the pre-action hooks may run because people are asked: the timeouts of
 * the approval hooks that select the node. A person on call may take hours, which the
 * stage's own deadline (deadlines.runningPreHooks, 1h by default) would not wait for;
 * each approval hook's timeout still bounds its own wait.
 */
export function approvalAllowance(input: Pick<ActionInput, 'action' | 'hooks' | 'node'>): number {
  if (!input.node) return 0;
  return selectHooks(input.hooks, kindOf(input.action.spec).preHookKind, input.node.labels)
    .filter((h) => h.spec.approval)
    .reduce((sum, h) => sum + parseDuration(h.spec.timeout ?? '15m'), 0);
}
