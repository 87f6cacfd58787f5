// RunningPreHooks: the pre-action hooks of the action's kind that select its node, run
// in order (src/hooks/plan.ts); once every one succeeded, the action is approved.
import { bypassedRecords, planHookStage } from '../../hooks/plan.ts';
import { selectHooks } from '../../hooks/select.ts';
import type { DecisionBuilder } from '../decision.ts';
import { kindOf } from '../kinds/index.ts';
import { approve } from './approval.ts';
import { followStage } from './hook-stage.ts';

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
  const plan = planHookStage({
    now,
    subject: b.subject(node.bootID),
    hooks,
    kinds: [preHookKind],
    records: b.records(),
    jobs: input.jobs,
    webhooks: input.webhooks,
  });
  const words = {
    condition: 'PreHooksSucceeded',
    failed: 'pre-action hook failed',
    running: 'pre-action hooks',
  } as const;
  if (followStage(b, plan, words)) approve(b, node);
}
