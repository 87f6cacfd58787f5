// A stage of hooks an action runs itself (its pre-action hooks; the NodeReadyJobs of a
// released Maintenance), one pass at a time: the plan's records and effects taken, its
// outcome written as the stage's condition, and the action moved on, ended or told.
import type { StagePlan } from '../../hooks/plan.ts';
import type { DecisionBuilder } from '../decision.ts';

export interface StageWords {
  condition: 'PreHooksSucceeded' | 'PostHooksSucceeded';
  /** How a failure ends the action: "pre-action hook failed". */
  failed: string;
  /** How the status says the stage is under way: "pre-action hooks". */
  running: string;
}

/** Takes the stage's plan; true once every hook of it succeeded (the caller moves on). */
export function followStage(b: DecisionBuilder, plan: StagePlan, words: StageWords): boolean {
  const { status, condition } = b;
  status.hooks = plan.records;
  b.effect(...plan.effects);
  b.wake(plan.requeueAfterMs);
  if (plan.outcome === 'Succeeded') {
    condition(words.condition, 'True', 'Succeeded', plan.message);
    return true;
  }
  if (plan.outcome === 'Failed') {
    condition(words.condition, 'False', 'HookFailed', plan.message);
    b.end('Failed', `${words.failed}: ${plan.message}`);
  } else {
    condition(words.condition, 'Unknown', 'Running', plan.message);
    b.say(`${words.running}: ${plan.message}`);
  }
  return false;
}
