// ConfigChange: a new machine configuration applied, with or without a reboot (its mode).
import type { NodeActionSpec } from '../../api/node-action.ts';
import { autoNeverReboots, configChangeSteps } from '../../talos/plan.ts';
import { THROUGH_TALOS, type ActionKind } from './kind.ts';

/**
 * Whether a ConfigChange reboots the node, or may (Auto, except on Talos ≥ 1.14 where
 * AUTO never reboots): Staged applies on a boot the change does not cause, Try and
 * NoReboot apply live.
 */
function reboots(spec: NodeActionSpec, osImage?: string): boolean {
  const mode = spec.configChange?.mode ?? 'Auto';
  return mode === 'Reboot' || (mode === 'Auto' && !autoNeverReboots(spec, osImage));
}

export const configChange: ActionKind = {
  // A configuration change that reboots is, to the node's workloads, a reboot; one that
  // does not still restarts services and may reconfigure the network, so the same
  // preparation (e.g. noout) is the safe choice. See docs/decisions.md.
  preHookKind: 'PreRebootJob',
  managed: { by: 'talos', steps: configChangeSteps },
  // Drained when it reboots or may (Auto before Talos 1.14), not when applied live or staged.
  noDrain: (spec, osImage) => {
    if (reboots(spec, osImage)) return undefined;
    const mode = spec.configChange?.mode ?? 'Auto';
    return mode === 'Auto'
      ? `a ConfigChange in mode Auto does not reboot a node on ${osImage ?? 'this Talos'} (from Talos 1.14, AUTO never reboots)`
      : `a ConfigChange in mode ${mode} does not reboot the node`;
  },
  etcdGuard: reboots,
  etcdMember: () => 'down',
  cordonAtEnd: 'lift',
  // Auto (Managed only) may reboot: until the Talos executor reports what Talos
  // decided, it is followed as a change that reboots.
  completion: (spec, execution, osImage) => {
    if (execution?.reboots !== undefined) return execution.reboots ? 'reboot' : 'mark';
    return reboots(spec, osImage) ? 'reboot' : 'mark';
  },
  words: {
    perform: 'apply the configuration change to',
    managed: THROUGH_TALOS,
    done: 'configuration change done',
  },
};
