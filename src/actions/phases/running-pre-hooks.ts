// RunningPreHooks: the pre-action hooks of the action's kind that select its node, run
// in order (src/hooks/plan.ts); once every one succeeded, the action is approved.
import { bypassedRecords, planHookStage } from '../../hooks/plan.ts';
import { selectHooks } from '../../hooks/select.ts';
import type { DecisionBuilder } from '../decision.ts';
import { kindOf } from '../kinds/index.ts';
import { approve } from './approval.ts';
import { followStage } from './hook-stage.ts';
import { approvalAnswer, recordApprovals } from './person-approval.ts';

export function runningPreHooks(b: DecisionBuilder): void {
  const { input, spec, node, nodeName, now, status, condition } = b;
  if (!node) {
    b.end('Failed', `node ${nodeName} no longer exists`);
    return;
  }
  const preHookKind = kindOf(spec).preHookKind;
  const hooks = selectHooks(input.hooks, preHookKind, node.labels);
  if (spec.bypass?.hooks) {
    const reason = `bypassed by ${spec.requestedBy}: ${spec.bypass.reason ?? ''}`;
    const recorded = new Set(b.records().map((r) => r.uid));
    status.hooks = [
      ...b.records(),
      ...bypassedRecords(
        hooks.filter((h) => !recorded.has(h.metadata.uid)),
        now,
        reason,
      ),
    ];
    condition('PreHooksSucceeded', 'True', 'Bypassed', `pre-action hooks ${reason}`);
    approve(b, node);
    return;
  }
  const answer = approvalAnswer(b.action);
  const plan = planHookStage({
    now,
    subject: b.subject(node.bootID),
    hooks,
    kinds: [preHookKind],
    records: b.records(),
    jobs: input.jobs,
    webhooks: input.webhooks,
    ...(answer ? { approval: answer } : {}),
    requester: spec.requestedBy,
  });
  recordApprovals(b, plan, hooks);
  if (plan.refused) {
    // A person said no: the action is denied, as a policy would deny it, with their words.
    status.hooks = plan.records;
    b.effect(...plan.effects);
    condition('PreHooksSucceeded', 'False', 'ApprovalRefused', plan.message);
    b.end('Denied', `${plan.refused.for}: refused by ${plan.refused.by}: ${plan.refused.reason}`);
    return;
  }
  const words = {
    condition: 'PreHooksSucceeded',
    failed: 'pre-action hook failed',
    running: 'pre-action hooks',
  } as const;
  if (followStage(b, plan, words)) approve(b, node);
}
