// RunningPostHooks: the boot reconciler (src/boots) runs the boot hooks of every boot,
// and records them on the node by boot ID; the action waits for the record of the boot
// it caused, and shows that boot's runs beside its own.
import { bootOutcome } from '../../boots/record.ts';
import { selectHooks } from '../../hooks/select.ts';
import type { DecisionBuilder } from '../decision.ts';

export function runningPostHooks(b: DecisionBuilder): void {
  const { input, node, nodeName, status, condition } = b;
  if (!node) {
    b.end('Failed', `node ${nodeName} disappeared while its boot hooks ran`);
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
    b.succeed(`node ${nodeName} is back with boot ID ${bootID ?? '?'}; ${outcome.message}`);
  } else {
    condition('PostHooksSucceeded', 'Unknown', outcome.state, outcome.message);
    b.say(`boot hooks: ${outcome.message}`);
  }
}
