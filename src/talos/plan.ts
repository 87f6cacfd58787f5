// Which Talos steps a Managed action has on a node (see executor.ts for the steps), one
// planner per action kind: pure, so that the decision core (src/actions/descriptors.ts)
// chooses them and the executor only makes them.
import type { NodeActionSpec } from '../api/node-action.ts';
import { hasLifecycleUpgrade, talosVersionFromOsImage } from './version.ts';

/** The steps of one action on one node (see the top of executor.ts). */
export interface TalosPlan {
  /** What the repeatable step before the drain does, if there is one. */
  prepare: string | undefined;
  /** What the repeatable step after the drain does, if there is one. */
  install: string | undefined;
  /** The disruptive call, e.g. `MachineService.Reboot`. */
  call: string;
}

/**
 * The steps of an action on a node running `osImage`. Throws, with a message for the
 * action's status, when they cannot be chosen (an upgrade of a node whose Talos version
 * is unknown).
 */
export type TalosPlanner = (spec: NodeActionSpec, osImage: string | undefined) => TalosPlan;

/** Whether the node's Talos upgrades through ImageService.Pull + LifecycleService.Upgrade. */
export function lifecycleUpgrade(spec: NodeActionSpec, osImage: string | undefined): boolean {
  const version = talosVersionFromOsImage(osImage);
  if (!version)
    throw new Error(
      `cannot tell the Talos version of node ${spec.nodeName} from its osImage "${String(osImage)}" (expected "Talos (vX.Y.Z)")`,
    );
  return hasLifecycleUpgrade(version);
}

/** A single call, nothing to prepare or install. */
function callOnly(call: string): TalosPlanner {
  return () => ({ prepare: undefined, install: undefined, call });
}

export const planReboot: TalosPlanner = callOnly('MachineService.Reboot');
export const planShutdown: TalosPlanner = callOnly('MachineService.Shutdown');
export const planReset: TalosPlanner = callOnly('MachineService.Reset');

export const planConfigChange: TalosPlanner = (spec) => {
  const ref = spec.configChange?.configSecretRef;
  return {
    prepare: `read the machine configuration from Secret ${ref?.name ?? '(none)'}`,
    install: undefined,
    call: 'MachineService.ApplyConfiguration',
  };
};

export const planUpgrade: TalosPlanner = (spec, osImage) => {
  const image = spec.upgrade?.image ?? '';
  return lifecycleUpgrade(spec, osImage)
    ? { prepare: `pull ${image}`, install: `install ${image}`, call: 'MachineService.Reboot' }
    : // Talos before 1.13: the node pulls, installs and reboots by itself.
      { prepare: undefined, install: undefined, call: 'MachineService.Upgrade' };
};
