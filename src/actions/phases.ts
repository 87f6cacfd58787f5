// What the phases of a NodeAction mean, and what each action does to its node.
import type { Action } from '../api/common.ts';
import type { HookKindName } from '../api/hooks.ts';
import type { ExecutionRecord, NodeActionPhase, NodeActionSpec } from '../api/node-action.ts';

/** Phases after which nothing more happens. */
export const TERMINAL_PHASES: ReadonlySet<NodeActionPhase> = new Set([
  'Succeeded',
  'Failed',
  'Denied',
  'Cancelled',
]);

/** Phases in which an action is approved and not finished: what invariant 3 counts. */
export const APPROVED_PHASES: ReadonlySet<NodeActionPhase> = new Set([
  'Approved',
  'Executing',
  'WaitingForNode',
  'RunningPostHooks',
]);

/**
 * Phases in which an action holds a slot of its policies' budgets: from admission
 * (leaving Pending) to the end. Wider than APPROVED_PHASES on purpose: pre-hooks
 * prepare a node for disruption (noout), so they count against the budget too.
 */
export const SLOT_PHASES: ReadonlySet<NodeActionPhase> = new Set([
  'WaitingForHealth',
  'RunningPreHooks',
  ...APPROVED_PHASES,
]);

export function isTerminal(phase: NodeActionPhase | undefined): boolean {
  return phase !== undefined && TERMINAL_PHASES.has(phase);
}

export function holdsSlot(phase: NodeActionPhase | undefined): boolean {
  return phase !== undefined && SLOT_PHASES.has(phase);
}

/** The hook kind that runs before an action. */
export const PRE_HOOK_KIND: Record<Action, HookKindName> = {
  Upgrade: 'PreUpgradeJob',
  Reboot: 'PreRebootJob',
  Shutdown: 'PreShutdownJob',
  Reset: 'PreResetJob',
  // A configuration change that reboots is, to the node's workloads, a reboot; one
  // that does not still restarts services and may reconfigure the network, so the
  // same preparation (e.g. noout) is the safe choice. See docs/decisions.md.
  ConfigChange: 'PreRebootJob',
};

/** How the controller knows an action has done its work to the node. */
export type Completion =
  /** The node boots again: a new boot ID, then Ready; then the boot hooks run. */
  | 'reboot'
  /** The node goes down: NotReady, gone, or (powered on again) a new boot ID. */
  | 'down'
  /** The Node object is deleted. */
  | 'removed'
  /** The requester's executed mark alone, once the node is Ready. */
  | 'mark';

/**
 * How the action finishes. `execution` is the record of a Managed action's Talos call:
 * once Talos answered a ConfigChange, whether it reboots is known rather than guessed.
 */
export function completionOf(spec: NodeActionSpec, execution?: ExecutionRecord): Completion {
  if (spec.action === 'ConfigChange' && execution?.reboots !== undefined)
    return execution.reboots ? 'reboot' : 'mark';
  switch (spec.action) {
    case 'Reboot':
    case 'Upgrade':
      // Talos upgrades always reboot into the new image, staged ones included.
      return 'reboot';
    case 'Shutdown':
      return 'down';
    case 'Reset':
      return 'removed';
    case 'ConfigChange': {
      const mode = spec.configChange?.mode ?? 'Auto';
      // Staged applies on the next boot, which the change does not cause; Try applies
      // live. Auto (Managed only) may reboot: until the Talos executor reports what Talos
      // decided, it is followed as a change that reboots.
      return mode === 'Reboot' || mode === 'Auto' ? 'reboot' : 'mark';
    }
  }
}

/**
 * Whether a Managed action cordons and drains the node before its Talos call: unless
 * spec.drain.enabled is false, for everything that takes the node's workloads down — a
 * ConfigChange too when it reboots or may (Auto), but not one applied live (NoReboot,
 * Try) or staged for a boot it does not cause.
 */
export function drainsBeforeCall(spec: NodeActionSpec): boolean {
  if (spec.drain?.enabled === false) return false;
  if (spec.action !== 'ConfigChange') return true;
  const mode = spec.configChange?.mode ?? 'Auto';
  return mode === 'Reboot' || mode === 'Auto';
}

/** The deadline field and default of each phase that has one. */
export const PHASE_DEADLINES: Partial<
  Record<NodeActionPhase, { field: string; default: string; what: string }>
> = {
  Pending: { field: 'pending', default: '24h', what: 'waiting for its policies to allow it' },
  WaitingForHealth: {
    field: 'waitingForHealth',
    default: '30m',
    what: 'waiting for its health checks to pass',
  },
  RunningPreHooks: { field: 'runningPreHooks', default: '1h', what: 'running its pre-action hooks' },
  Approved: { field: 'approved', default: '1h', what: 'approved without being executed' },
  Executing: { field: 'executing', default: '30m', what: 'executing' },
  WaitingForNode: { field: 'waitingForNode', default: '30m', what: 'waiting for the node' },
  RunningPostHooks: { field: 'runningPostHooks', default: '1h', what: 'running the boot hooks of the node' },
};
