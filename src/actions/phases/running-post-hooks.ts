// RunningPostHooks: the boot reconciler (src/boots) runs the boot hooks of every boot,
// and records them on the node by boot ID; the action waits for the record of the boot
// it caused, and shows that boot's runs beside its own. A Maintenance released without
// its node having booted runs the node's NodeReadyJobs itself, as for a returned node.
// Then the post-checks (post-checks.ts), which may roll an upgrade back.
import { bootOutcome } from '../../boots/record.ts';
import { planHookStage } from '../../hooks/plan.ts';
import { selectHooks } from '../../hooks/select.ts';
import type { DecisionBuilder } from '../decision.ts';
import { followStage } from './hook-stage.ts';
import { postChecksPassed } from './post-checks.ts';

export function runningPostHooks(b: DecisionBuilder): void {
  const { input, node, nodeName, status, condition } = b;
  if (!node) {
    b.end('Failed', `node ${nodeName} disappeared while its boot hooks ran`);
    return;
  }
  if (b.runsReadyHooks()) {
    runReadyHooks(b, node);
    return;
  }
  // Rolled back: the node reboots into its previous version; the rollback is followed.
  if (status.rollback) {
    postChecksPassed(b);
    return;
  }
  const bootID = status.bootIDAfter;
  const outcome = bootOutcome(
    node.boot,
    bootID,
    selectHooks(input.hooks, 'NodePrereadyJob', node.labels),
    selectHooks(input.hooks, 'NodeReadyJob', node.labels),
  );
  if (outcome.state !== 'Succeeded' && node.bootID !== bootID) {
    b.end(
      'Failed',
      `node ${nodeName} booted again (boot ID ${node.bootID ?? '?'}) before the boot hooks of boot ${bootID ?? '?'} were done`,
    );
    return;
  }
  if (outcome.state !== 'Waiting') status.hooks = [...b.ownRecords(), ...outcome.runs];
  if (outcome.state === 'Failed') {
    condition('PostHooksSucceeded', 'False', 'HookFailed', outcome.message);
    b.end('Failed', `boot hook failed: ${outcome.message}`);
  } else if (outcome.state === 'Succeeded') {
    condition('PostHooksSucceeded', 'True', 'Succeeded', outcome.message);
    // Then the post-checks (spec.postChecks), which may hold, fail or roll back.
    if (!postChecksPassed(b)) return;
    b.succeed(`node ${nodeName} is back with boot ID ${bootID ?? '?'}; ${outcome.message}`);
  } else {
    condition('PostHooksSucceeded', 'Unknown', outcome.state, outcome.message);
    b.say(`boot hooks: ${outcome.message}`);
  }
}

/** The node's NodeReadyJobs, run by the action once its node is Ready (a released Maintenance). */
function runReadyHooks(b: DecisionBuilder, node: NonNullable<DecisionBuilder['node']>): void {
  const { input, nodeName, now, status, condition } = b;
  if (node.bootID !== status.bootIDAfter) {
    b.end(
      'Failed',
      `node ${nodeName} booted (boot ID ${node.bootID ?? '?'}) while its NodeReadyJobs ran after the maintenance`,
    );
    return;
  }
  if (!node.ready) {
    condition('PostHooksSucceeded', 'Unknown', 'Waiting', `waiting for node ${nodeName} to be Ready`);
    b.say(`released; waiting for node ${nodeName} to be Ready before its NodeReadyJobs`);
    return;
  }
  const plan = planHookStage({
    now,
    subject: b.subject(node.bootID),
    hooks: selectHooks(input.hooks, 'NodeReadyJob', node.labels),
    kinds: ['NodeReadyJob'],
    records: b.records(),
    jobs: input.jobs,
    webhooks: input.webhooks,
  });
  const words = {
    condition: 'PostHooksSucceeded',
    failed: 'NodeReadyJob failed',
    running: 'NodeReadyJobs',
  } as const;
  if (followStage(b, plan, words)) b.succeed(`maintenance of node ${nodeName} done; ${plan.message}`);
}
