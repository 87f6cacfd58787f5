// WaitingForNode: the action's work is under way; the node shows when it is done, as
// the action's kind says (descriptors.ts: completion).
import {
  compareTalosVersions,
  formatTalosVersion,
  installerVersion,
  talosVersionFromOsImage,
} from '../../talos/version.ts';
import type { DecisionBuilder } from '../decision.ts';
import { completionOf } from '../descriptors.ts';
import type { NodeFacts } from '../observations.ts';

/** A Managed upgrade whose node came back running another version than the installer's. */
function upgradeMissed(b: DecisionBuilder, n: NodeFacts): string | undefined {
  const { spec, status, nodeName } = b;
  if (spec.action !== 'Upgrade' || status.execution?.callTime === undefined) return undefined;
  const wanted = installerVersion(spec.upgrade?.image ?? '');
  const running = talosVersionFromOsImage(n.osImage);
  if (!wanted || !running || compareTalosVersions(wanted, running) === 0) return undefined;
  return `node ${nodeName} came back running Talos ${formatTalosVersion(running)}, not ${formatTalosVersion(wanted)}: the upgrade did not take (Talos boots the previous version when the new one fails)`;
}

export function waitingForNode(b: DecisionBuilder): void {
  const { spec, node, nodeName, status, condition, transition } = b;
  const completion = completionOf(spec, status.execution, node?.osImage);
  const rebooted = node !== undefined && node.bootID !== status.bootIDBefore;
  switch (completion) {
    case 'reboot':
      if (node && rebooted && node.ready) {
        const wrongVersion = upgradeMissed(b, node);
        if (wrongVersion) {
          b.end('Failed', wrongVersion);
          return;
        }
        status.bootIDAfter = node.bootID;
        const message = `node ${nodeName} is back and Ready with boot ID ${node.bootID ?? '?'}`;
        condition('NodeReturned', 'True', 'Rebooted', message);
        transition('RunningPostHooks', `${message}; running its boot hooks`);
      } else {
        b.say(
          !node
            ? `node ${nodeName} is gone; waiting for it to register again`
            : rebooted
              ? `node ${nodeName} rebooted (boot ID ${node.bootID ?? '?'}); waiting for it to be Ready`
              : `waiting for node ${nodeName} to reboot (boot ID still ${status.bootIDBefore ?? '?'})`,
        );
      }
      return;
    case 'down':
      if (!node || !node.ready || rebooted) {
        if (node?.bootID) status.bootIDAfter = node.bootID;
        transition(
          'Succeeded',
          !node
            ? `node ${nodeName} is gone`
            : rebooted && node.ready
              ? `node ${nodeName} was shut down and is back`
              : `node ${nodeName} is down`,
        );
      } else {
        b.say(`waiting for node ${nodeName} to go down`);
      }
      return;
    case 'mark':
      if (node?.ready) {
        status.bootIDAfter = node.bootID;
        condition('NodeReturned', 'True', 'Ready', `node ${nodeName} is Ready`);
        b.succeed(`configuration change done; node ${nodeName} is Ready`);
      } else {
        b.say(`waiting for node ${nodeName} to be Ready`);
      }
      return;
  }
}
