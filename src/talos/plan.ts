// Which Talos steps a Managed action has on a node (see executor.ts for the steps), one
// planner per action kind: pure, so that the decision core (src/actions/descriptors.ts)
// chooses them and the executor only makes them.
import type { NodeActionSpec } from '../api/node-action.ts';
import { appliesWithoutReboot, hasLifecycleUpgrade, talosVersionFromOsImage } from './version.ts';

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

/**
 * Whether a ConfigChange in mode Reboot is applied NO_REBOOT and followed by a Reboot
 * of its own (Talos ≥ 1.14.0-alpha.2, where REBOOT exists in maintenance mode only),
 * rather than applied in mode REBOOT. An unknown version keeps the one-call flow: the
 * node's answer then says whether REBOOT exists.
 */
export function applyThenReboot(spec: NodeActionSpec, osImage: string | undefined): boolean {
  if (spec.action !== 'ConfigChange' || (spec.configChange?.mode ?? 'Auto') !== 'Reboot') return false;
  const version = talosVersionFromOsImage(osImage);
  return version !== undefined && appliesWithoutReboot(version);
}

/**
 * Whether a ConfigChange in mode Auto cannot reboot the node: Talos ≥ 1.14.0-alpha.2,
 * where AUTO never reboots. An unknown version may (Talos ≤ 1.13 decides per change).
 */
export function autoNeverReboots(spec: NodeActionSpec, osImage: string | undefined): boolean {
  if (spec.action !== 'ConfigChange' || (spec.configChange?.mode ?? 'Auto') !== 'Auto') return false;
  const version = talosVersionFromOsImage(osImage);
  return version !== undefined && appliesWithoutReboot(version);
}

/**
 * The sequence a disruptive call starts on the node, as its events name it
 * (MachineService.Events): what shows that the call reached the node, while the node is
 * still in the boot it was made in. Undefined: the call may start none (a configuration
 * applied live), so nothing on the node can tell.
 */
export function callSequence(call: string): string | undefined {
  switch (call) {
    case 'MachineService.Reboot':
      return 'reboot';
    case 'MachineService.Shutdown':
      return 'shutdown';
    case 'MachineService.Reset':
      return 'reset';
    case 'MachineService.Upgrade':
      return 'upgrade';
    default:
      return undefined;
  }
}

/** A single call, nothing to prepare or install. */
function callOnly(call: string): TalosPlanner {
  return () => ({ prepare: undefined, install: undefined, call });
}

export const planReboot: TalosPlanner = callOnly('MachineService.Reboot');
export const planShutdown: TalosPlanner = callOnly('MachineService.Shutdown');
export const planReset: TalosPlanner = callOnly('MachineService.Reset');

export const planConfigChange: TalosPlanner = (spec, osImage) => {
  const ref = spec.configChange?.configSecretRef;
  const prepare = `read the machine configuration from Secret ${ref?.name ?? '(none)'}`;
  return applyThenReboot(spec, osImage)
    ? { prepare, install: 'apply the machine configuration without a reboot', call: 'MachineService.Reboot' }
    : { prepare, install: undefined, call: 'MachineService.ApplyConfiguration' };
};

export const planUpgrade: TalosPlanner = (spec, osImage) => {
  const image = spec.upgrade?.image ?? '';
  return lifecycleUpgrade(spec, osImage)
    ? { prepare: `pull ${image}`, install: `install ${image}`, call: 'MachineService.Reboot' }
    : // Talos before 1.13: the node pulls, installs and reboots by itself.
      { prepare: undefined, install: undefined, call: 'MachineService.Upgrade' };
};
