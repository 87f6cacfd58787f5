// What the phases of a NodeAction mean to everyone who reads one: the controller, the
// HTTP API, the dashboard and the CLI.
import {
  PHASE_HISTORY_LIMIT,
  type NodeActionPhase,
  type NodeActionStatus,
  type PhaseEntry,
} from './node-action.ts';

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

/**
 * A field selector for the actions not finished (the CRD declares status.phase
 * selectable): what the admission pass needs, without the finished ones kept for history.
 */
export const UNFINISHED_FIELD_SELECTOR = [...TERMINAL_PHASES].map((p) => `status.phase!=${p}`).join(',');

export function isTerminal(phase: NodeActionPhase | undefined): boolean {
  return phase !== undefined && TERMINAL_PHASES.has(phase);
}

export function holdsSlot(phase: NodeActionPhase | undefined): boolean {
  return phase !== undefined && SLOT_PHASES.has(phase);
}

/**
 * The status with `phase` entered at `since`: phase and phaseTime set, and the entry
 * appended to phaseHistory, which keeps the last PHASE_HISTORY_LIMIT entries. Changes
 * `status` in place (the caller's copy, written with the phase in one status write).
 *
 * @example withPhaseEntered(status, 'Approved', now) // status.phaseHistory ends with {phase: 'Approved', since}
 */
export function withPhaseEntered(
  status: NodeActionStatus,
  phase: NodeActionPhase,
  since: Date,
): NodeActionStatus {
  const time = since.toISOString();
  status.phase = phase;
  status.phaseTime = time;
  const entry: PhaseEntry = { phase, since: time };
  status.phaseHistory = [...(status.phaseHistory ?? []), entry].slice(-PHASE_HISTORY_LIMIT);
  return status;
}
