// Which Talos steps a Managed action has on a node, as typed calls the executor makes
// (executor.ts) without knowing which kind of action asked for them: one planner per
// action kind, pure, so that the decision core chooses the steps (each action kind's
// descriptor, src/actions/kinds/) and the executor only performs them.
import { parseDuration } from '../duration.ts';
import type { NodeActionSpec } from '../api/node-action.ts';
import type { ApplyMode, WipeMode } from './client.ts';
import {
  appliesWithoutReboot,
  formatTalosVersion,
  hasForceReboot,
  hasLifecycleUpgrade,
  hasSystemVolumeLabels,
  talosVersionFromOsImage,
  type TalosVersionNumber,
} from './version.ts';

/** A ConfigChange's Secret: the node's full machine configuration, in the controller's namespace. */
export interface ConfigSecret {
  name: string;
  key?: string;
}

/** The repeatable step before the drain: what can fail without having disturbed any workload. */
export type PrepareStep =
  /** ImageService.Pull of the installer image into the node's system containerd (Talos ≥ 1.13). */
  | { type: 'pull'; image: string }
  /** Reading the machine configuration a ConfigChange applies. */
  | { type: 'readConfig'; secret: ConfigSecret | undefined };

/** The repeatable step after the drain. */
export type InstallStep =
  /** LifecycleService.Upgrade: the pulled image installed to the boot disk (runs after the next reboot). */
  | { type: 'installImage'; image: string }
  /** ApplyConfiguration NO_REBOOT ahead of a Reboot of its own (Talos ≥ 1.14 refuses REBOOT). */
  | { type: 'applyConfig'; secret: ConfigSecret | undefined };

/** The one call that disrupts the node, made at most once. */
export type TalosCall =
  | {
      method: 'MachineService.Reboot';
      /** FORCE only when spec.reboot.mode names it (rebootMode()). */
      mode: 'default' | 'powercycle' | 'force';
      /** What the reboot completes: an upgrade installed before it, or a configuration applied without one. */
      completes?: { upgrade: string } | { configuration: true };
    }
  | { method: 'MachineService.Shutdown'; force: false }
  | ({ method: 'MachineService.Reset'; graceful: boolean } & ResetRequestPlan)
  /** Talos before 1.13: the node pulls, installs and reboots by itself. */
  | { method: 'MachineService.Upgrade'; image: string; stage: boolean; version: string }
  | {
      method: 'MachineService.ApplyConfiguration';
      mode: ApplyMode;
      secret: ConfigSecret | undefined;
      /** A TRY confirmed by checks: Talos's timeout, the confirm window. */
      tryTimeoutMs?: number;
    }
  /** The node's etcd member leaves the cluster for good; the node keeps running. */
  | { method: 'MachineService.EtcdLeaveCluster' };

/** The steps of one action on one node (see the top of executor.ts). */
export interface TalosSteps {
  prepare?: PrepareStep;
  install?: InstallStep;
  call: TalosCall;
}

/**
 * The steps of an action on a node running `osImage`. Throws, with a message for the
 * action's status, when they cannot be chosen (an upgrade of a node whose Talos version
 * is unknown).
 */
export type TalosStepsPlanner = (spec: NodeActionSpec, osImage: string | undefined) => TalosSteps;

/** The steps in words, as the action's status and Events say them. */
export interface TalosPlan {
  /** What the repeatable step before the drain does, if there is one. */
  prepare: string | undefined;
  /** What the repeatable step after the drain does, if there is one. */
  install: string | undefined;
  /** The disruptive call, e.g. `MachineService.Reboot`. */
  call: string;
}

export type TalosPlanner = (spec: NodeActionSpec, osImage: string | undefined) => TalosPlan;

/** A step in words: "pull IMAGE", "install IMAGE", … */
export function describeStep(step: PrepareStep | InstallStep): string {
  switch (step.type) {
    case 'pull':
      return `pull ${step.image}`;
    case 'readConfig':
      return `read the machine configuration from Secret ${step.secret?.name ?? '(none)'}`;
    case 'installImage':
      return `install ${step.image}`;
    case 'applyConfig':
      return 'apply the machine configuration without a reboot';
  }
}

/** The steps in words. */
export function talosPlan(steps: TalosSteps): TalosPlan {
  return {
    prepare: steps.prepare && describeStep(steps.prepare),
    install: steps.install && describeStep(steps.install),
    call: steps.call.method,
  };
}

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

/**
 * Whether the call takes the node (running `osImage`) down: then a control-plane node
 * hands etcd leadership over first, so that the cluster does not wait for an election
 * on a leader that is gone. A configuration applied in a mode that cannot reboot is
 * spared, and so is AUTO on Talos ≥ 1.14, where it never reboots (an unknown version may).
 */
export function takesNodeDown(call: TalosCall, osImage: string | undefined): boolean {
  if (call.method !== 'MachineService.ApplyConfiguration') return true;
  if (call.mode === 'reboot') return true;
  if (call.mode !== 'auto') return false;
  const version = talosVersionFromOsImage(osImage);
  return version === undefined || !appliesWithoutReboot(version);
}

/** The system partitions a SystemData reset wipes before Talos 1.14.0-beta.1. */
const SYSTEM_DATA = ['STATE', 'EPHEMERAL'];
/** From Talos 1.14.0-beta.1 also these, which it may put on partitions of their own. */
const SYSTEM_VOLUMES = ['ETCD', 'CRI', 'KUBELET', 'LOG'];

/** What gatehouse asks of MachineService.Reset, and what that wipes, in words. */
export interface ResetRequestPlan {
  wipeMode: WipeMode;
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
  const mode = spec.reboot?.mode ?? 'Default';
  if (mode === 'PowerCycle') return 'powercycle';
  if (mode !== 'Force') return 'default';
  const version = talosVersionFromOsImage(osImage);
  if (!version || !hasForceReboot(version))
    throw new Error(
      `reboot mode Force exists from Talos 1.12; node ${spec.nodeName} runs ${version ? formatTalosVersion(version) : `an unknown version (osImage "${String(osImage)}")`}: ask for Default or PowerCycle`,
    );
  return 'force';
}

const APPLY: Record<string, ApplyMode> = {
  Auto: 'auto',
  NoReboot: 'no-reboot',
  Reboot: 'reboot',
  Staged: 'staged',
  Try: 'try',
};

export const rebootSteps: TalosStepsPlanner = (spec, osImage) => ({
  call: { method: 'MachineService.Reboot', mode: rebootMode(spec, osImage) },
});

export const shutdownSteps: TalosStepsPlanner = () => ({
  call: { method: 'MachineService.Shutdown', force: false },
});

export const etcdLeaveSteps: TalosStepsPlanner = () => ({
  call: { method: 'MachineService.EtcdLeaveCluster' },
});

export const resetSteps: TalosStepsPlanner = (spec, osImage) => ({
  call: {
    method: 'MachineService.Reset',
    graceful: spec.reset?.graceful ?? true,
    ...resetRequest(spec, osImage),
  },
});

export const configChangeSteps: TalosStepsPlanner = (spec, osImage) => {
  const ref = spec.configChange?.configSecretRef;
  const secret: ConfigSecret | undefined = ref && { name: ref.name, ...(ref.key ? { key: ref.key } : {}) };
  const prepare: PrepareStep = { type: 'readConfig', secret };
  return applyThenReboot(spec, osImage)
    ? {
        prepare,
        install: { type: 'applyConfig', secret },
        call: { method: 'MachineService.Reboot', mode: 'default', completes: { configuration: true } },
      }
    : {
        prepare,
        call: {
          method: 'MachineService.ApplyConfiguration',
          mode: APPLY[spec.configChange?.mode ?? 'Auto'] ?? 'auto',
          secret,
          ...(spec.configChange?.confirm
            ? { tryTimeoutMs: parseDuration(spec.configChange.confirm.window ?? '2m') }
            : {}),
        },
      };
};

export const upgradeSteps: TalosStepsPlanner = (spec, osImage) => {
  const image = spec.upgrade?.image ?? '';
  if (lifecycleUpgrade(spec, osImage))
    return {
      prepare: { type: 'pull', image },
      install: { type: 'installImage', image },
      call: { method: 'MachineService.Reboot', mode: 'default', completes: { upgrade: image } },
    };
  // Talos before 1.13: the node pulls, installs and reboots by itself.
  const version = talosVersionFromOsImage(osImage);
  return {
    call: {
      method: 'MachineService.Upgrade',
      image,
      stage: spec.upgrade?.stage ?? false,
      version: version ? formatTalosVersion(version) : '?',
    },
  };
};

/** The steps in words of an Upgrade (for tests and the CLI's explanations). */
export const planUpgrade: TalosPlanner = (spec, osImage) => talosPlan(upgradeSteps(spec, osImage));
/** The steps in words of a ConfigChange. */
export const planConfigChange: TalosPlanner = (spec, osImage) => talosPlan(configChangeSteps(spec, osImage));
