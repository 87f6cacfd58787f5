// An action's decision with its Alertmanager silences: the reconciler's step after
// decide(), adding what the silence plan (src/silences/plan.ts) says to the decision —
// the plan never sees, nor rewrites, a decision itself.
import type { ObservedNodeAction } from '../api/node-action.ts';
import { planSilences, type SilenceInput } from '../silences/plan.ts';
import type { ActionDecision } from './decision.ts';

export function holdSilences(
  decision: ActionDecision,
  action: ObservedNodeAction,
  input: SilenceInput,
): ActionDecision {
  // The finalizer goes on first; silences wait for the pass after.
  if (decision.addFinalizer) return decision;
  const plan = planSilences(decision.status, action, input);
  if (!plan) return decision;
  const wake = plan.wakeAfterMs;
  const requeueAfterMs =
    wake === undefined
      ? decision.requeueAfterMs
      : decision.requeueAfterMs === undefined
        ? wake
        : Math.min(decision.requeueAfterMs, wake);
  return {
    ...decision,
    status: plan.status,
    effects: [...decision.effects, ...plan.effects],
    removeFinalizer: decision.removeFinalizer && plan.settled,
    ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}),
  };
}
