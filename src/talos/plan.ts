// Which Talos steps a Managed action has on a node (see executor.ts for the steps), one
// planner per action kind: pure, so that the decision core (src/actions/descriptors.ts)
// chooses them and the executor only makes them.
import type { NodeActionSpec } from '../api/node-action.ts';
import {
  appliesWithoutReboot,
  formatTalosVersion,
  hasForceReboot,
  hasLifecycleUpgrade,
  hasSystemVolumeLabels,
  talosVersionFromOsImage,
  type TalosVersionNumber,
} from './version.ts';

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
 * Whether the action's call takes the node down (reboots it, halts it, resets it), so
 * that a control-plane node first hands etcd leadership over: everything but a
 * ConfigChange that cannot reboot — NoReboot, Try, Staged, and Auto on Talos ≥ 1.14
 * (where AUTO never reboots). An Auto change on an unknown version may reboot.
 */
export function takesNodeDown(spec: NodeActionSpec, osImage: string | undefined): boolean {
  if (spec.action !== 'ConfigChange') return true;
  const mode = spec.configChange?.mode ?? 'Auto';
  return mode === 'Reboot' || (mode === 'Auto' && !autoNeverReboots(spec, osImage));
}

/**
 * The sequence a disruptive call starts on the node, as its events name it
 * (MachineService.Events; Talos's runtime.Sequence names): what shows that the call
 * reached the node, while the node is still in the boot it was made in. A staged legacy
 * upgrade is a sequence of its own, `stageUpgrade`; a configuration applied in mode
 * REBOOT (Talos ≤ 1.13) starts a `reboot`. Undefined: the call may start none (a
 * configuration applied live), so nothing on the node can tell.
 */
export function callSequence(call: string, spec: NodeActionSpec): string | undefined {
  switch (call) {
    case 'MachineService.Reboot':
      return 'reboot';
    case 'MachineService.Shutdown':
      return 'shutdown';
    case 'MachineService.Reset':
      return 'reset';
    case 'MachineService.Upgrade':
      return spec.upgrade?.stage ? 'stageUpgrade' : 'upgrade';
    case 'MachineService.ApplyConfiguration':
      return spec.configChange?.mode === 'Reboot' ? 'reboot' : undefined;
    default:
      return undefined;
  }
}

/** The system partitions a SystemData reset wipes before Talos 1.14.0-beta.1. */
const SYSTEM_DATA = ['STATE', 'EPHEMERAL'];
/** From Talos 1.14.0-beta.1 also these, which it may put on partitions of their own. */
const SYSTEM_VOLUMES = ['ETCD', 'CRI', 'KUBELET', 'LOG'];

/** What gatehouse asks of MachineService.Reset, and what that wipes, in words. */
export interface ResetRequestPlan {
  wipeMode: 'all' | 'system-disk' | 'user-disks';
  userDisksToWipe: string[];
  systemPartitionsToWipe: { label: string; wipe: boolean }[];
  /** Exactly what is wiped, for the action's status. */
  wipes: string;
}

/**
 * The Reset request for the action on a node running `osImage` (Talos's semantics:
 * docs/concepts.md). Throws, with a message for the action's status, when it cannot be
 * made: UserDisks without disks (Talos would wipe nothing), SystemData on a node whose
 * version is unknown (which labels exist depends on it).
 */
export function resetRequest(spec: NodeActionSpec, osImage: string | undefined): ResetRequestPlan {
  const mode = spec.reset?.wipeMode ?? 'All';
  const disks = spec.reset?.userDisks ?? [];
  const listed = disks.length > 0 ? ` and user disk(s) ${disks.join(', ')}` : '';
  switch (mode) {
    case 'All':
      return {
        wipeMode: 'all',
        userDisksToWipe: disks,
        systemPartitionsToWipe: [],
        wipes: `the system disk${listed}${disks.length === 0 ? ' (no user disk: none was listed in spec.reset.userDisks)' : ''}`,
      };
    case 'SystemDisk':
      return {
        wipeMode: 'system-disk',
        userDisksToWipe: [],
        systemPartitionsToWipe: [],
        wipes: 'the system disk',
      };
    case 'UserDisks':
      if (disks.length === 0)
        throw new Error(
          'a Reset with wipeMode UserDisks needs spec.reset.userDisks: Talos wipes only the user disks it is given, so it would wipe nothing',
        );
      return {
        wipeMode: 'user-disks',
        userDisksToWipe: disks,
        systemPartitionsToWipe: [],
        wipes: `user disk(s) ${disks.join(', ')}; Talos and its data stay`,
      };
    case 'SystemData': {
      const version = talosVersionFromOsImage(osImage);
      if (!version)
        throw new Error(
          `cannot tell the Talos version of node ${spec.nodeName} from its osImage "${String(osImage)}": which system partitions a SystemData reset names depends on it`,
        );
      const labels = systemDataLabels(version);
      return {
        wipeMode: 'system-disk',
        userDisksToWipe: [],
        systemPartitionsToWipe: labels.map((label) => ({ label, wipe: true })),
        wipes: `the system partitions ${labels.join(', ')}; Talos stays installed and the node comes back in maintenance mode`,
      };
    }
  }
}

/** The system partitions a SystemData reset names on `version` (ETCD, CRI, KUBELET, LOG from 1.14.0-beta.1). */
export function systemDataLabels(version: TalosVersionNumber): string[] {
  return hasSystemVolumeLabels(version) ? [...SYSTEM_DATA, ...SYSTEM_VOLUMES] : SYSTEM_DATA;
}

/**
 * The reboot mode sent: FORCE only when spec.reboot.mode says Force (never implied, not
 * even under bypass), and only on Talos ≥ 1.12, where it exists.
 */
export function rebootMode(
  spec: NodeActionSpec,
  osImage: string | undefined,
): 'default' | 'powercycle' | 'force' {
  const mode = spec.action === 'Reboot' ? (spec.reboot?.mode ?? 'Default') : 'Default';
  if (mode === 'PowerCycle') return 'powercycle';
  if (mode !== 'Force') return 'default';
  const version = talosVersionFromOsImage(osImage);
  if (!version || !hasForceReboot(version))
    throw new Error(
      `reboot mode Force exists from Talos 1.12; node ${spec.nodeName} runs ${version ? formatTalosVersion(version) : `an unknown version (osImage "${String(osImage)}")`}: ask for Default or PowerCycle`,
    );
  return 'force';
}

/** A single call, nothing to prepare or install. */
function callOnly(call: string): TalosPlanner {
  return () => ({ prepare: undefined, install: undefined, call });
}

export const planReboot: TalosPlanner = (spec, osImage) => {
  rebootMode(spec, osImage); // refuses Force where Talos lacks it, before anything is done
  return callOnly('MachineService.Reboot')(spec, osImage);
};
export const planShutdown: TalosPlanner = callOnly('MachineService.Shutdown');
export const planReset: TalosPlanner = (spec, osImage) => {
  resetRequest(spec, osImage); // refuses what cannot be asked, before anything is done
  return callOnly('MachineService.Reset')(spec, osImage);
};

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
