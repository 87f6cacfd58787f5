// What each action does to its node, in one table the compiler checks: adding an action
// kind to the API (src/api/common.ts ACTIONS) fails to compile here until every fact
// about it is written down, and every place that needs one reads it from this table.
import type { Action } from '../api/common.ts';
import type { HookKindName } from '../api/hooks.ts';
import type { ExecutionRecord, NodeActionSpec } from '../api/node-action.ts';
import {
  autoNeverReboots,
  planConfigChange,
  planReboot,
  planReset,
  planShutdown,
  planUpgrade,
  type TalosPlanner,
} from '../talos/plan.ts';

/** How the controller knows an action has done its work to the node. */
export type Completion =
  /** The node boots again: a new boot ID, then Ready; then the boot hooks run. */
  | 'reboot'
  /** The node goes down: NotReady, gone, or (powered on again) a new boot ID. */
  | 'down'
  /** The requester's executed mark alone, once the node is Ready. */
  | 'mark';

export interface ActionDescriptor {
  /** The hook kind that runs before the action. */
  preHookKind: HookKindName;
  /**
   * How the action finishes. `execution` is the record of a Managed action's Talos call:
   * once Talos answered, what it does is known rather than guessed.
   */
  completion: (spec: NodeActionSpec, execution?: ExecutionRecord, osImage?: string) => Completion;
  /**
   * Whether the action takes its node (running `osImage`) down or out, or may: a Managed
   * action then cordons and drains it before its Talos call (spec.drain.enabled aside),
   * and on a control-plane node the etcd guard holds it (src/actions/etcd-guard.ts).
   */
  disrupts: (spec: NodeActionSpec, osImage?: string) => boolean;
  /**
   * The Talos steps of a Managed action on a node running `osImage` (src/talos/executor.ts).
   * Absent: the action has no Talos call, and is always followed like an External one.
   */
  talos?: TalosPlanner;
}

/**
 * Whether a ConfigChange reboots the node, or may (Auto, except on Talos ≥ 1.14 where
 * AUTO never reboots): Staged applies on a boot the change does not cause, Try and
 * NoReboot apply live.
 */
function configReboots(spec: NodeActionSpec, osImage?: string): boolean {
  const mode = spec.configChange?.mode ?? 'Auto';
  return mode === 'Reboot' || (mode === 'Auto' && !autoNeverReboots(spec, osImage));
}

export const ACTION_DESCRIPTORS: Record<Action, ActionDescriptor> = {
  // Talos upgrades always reboot into the new image, staged ones included.
  Upgrade: {
    preHookKind: 'PreUpgradeJob',
    completion: () => 'reboot',
    disrupts: () => true,
    talos: planUpgrade,
  },
  Reboot: {
    preHookKind: 'PreRebootJob',
    completion: () => 'reboot',
    disrupts: () => true,
    talos: planReboot,
  },
  Shutdown: {
    preHookKind: 'PreShutdownJob',
    completion: () => 'down',
    disrupts: () => true,
    talos: planShutdown,
  },
  Reset: {
    preHookKind: 'PreResetJob',
    // A Talos reset never deletes the Node object: it is done once the node goes down
    // (gatehouse resets without Talos's `reboot`), or comes back with a new boot ID when
    // whoever performed it (External) asked for the reboot.
    completion: () => 'down',
    disrupts: () => true,
    talos: planReset,
  },
  ConfigChange: {
    // A configuration change that reboots is, to the node's workloads, a reboot; one
    // that does not still restarts services and may reconfigure the network, so the
    // same preparation (e.g. noout) is the safe choice. See docs/decisions.md.
    preHookKind: 'PreRebootJob',
    // Auto (Managed only) may reboot: until the Talos executor reports what Talos
    // decided, it is followed as a change that reboots.
    completion: (spec, execution, osImage) => {
      if (execution?.reboots !== undefined) return execution.reboots ? 'reboot' : 'mark';
      return configReboots(spec, osImage) ? 'reboot' : 'mark';
    },
    // Drained when it reboots or may (Auto before Talos 1.14), not when applied live or staged.
    disrupts: configReboots,
    talos: planConfigChange,
  },
};

/** The hook kind that runs before each action. */
export const PRE_HOOK_KIND: Record<Action, HookKindName> = {
  Upgrade: ACTION_DESCRIPTORS.Upgrade.preHookKind,
  Reboot: ACTION_DESCRIPTORS.Reboot.preHookKind,
  Shutdown: ACTION_DESCRIPTORS.Shutdown.preHookKind,
  Reset: ACTION_DESCRIPTORS.Reset.preHookKind,
  ConfigChange: ACTION_DESCRIPTORS.ConfigChange.preHookKind,
};

/** How the action finishes (see ActionDescriptor.completion). */
export function completionOf(
  spec: NodeActionSpec,
  execution?: ExecutionRecord,
  osImage?: string,
): Completion {
  return ACTION_DESCRIPTORS[spec.action].completion(spec, execution, osImage);
}

/**
 * Whether a Managed action cordons and drains the node (running `osImage`) before its
 * Talos call: unless spec.drain.enabled is false, for everything that takes the node's
 * workloads down — a ConfigChange too when it reboots or may (Auto before Talos 1.14),
 * but not one applied live (NoReboot, Try) or staged for a boot it does not cause.
 */
export function drainsBeforeCall(spec: NodeActionSpec, osImage?: string): boolean {
  if (spec.drain?.enabled === false) return false;
  return ACTION_DESCRIPTORS[spec.action].disrupts(spec, osImage);
}

/** What an action whose work is under way waits for, in words for its status. */
export function waitingMessage(completion: Completion): string {
  switch (completion) {
    case 'reboot':
      return 'waiting for the node to come back with a new boot ID';
    case 'down':
      return 'waiting for the node to go down';
    case 'mark':
      return 'waiting for the node to be Ready';
  }
}
