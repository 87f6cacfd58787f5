// What the phases of a NodeAction mean to everyone who reads one: the controller, the
// HTTP API, the dashboard and the CLI.
import {
  PHASE_HISTORY_LIMIT,
  type NodeActionPhase,
  type NodeActionStatus,
  type PhaseEntry,
} from './node-action.ts';

/** What a phase means to everyone who reads it. */
export interface PhaseMeaning {
  /** Where the action is, in a few words for views (the CLI, the dashboard). */
  label: string;
  /** Nothing more happens. */
  terminal: boolean;
  /**
   * Approved (past its health checks and pre-hooks) and not finished: what invariant 3
   * counts. A requester may act, a Cluster API Machine may go.
   */
  approved: boolean;
  /**
   * Holding a slot of its policies' budgets: from admission (leaving Pending) to the end.
   * Wider than `approved` on purpose: pre-hooks prepare a node for disruption (noout), so
   * they count against the budget too.
   */
  slot: boolean;
  /**
   * The node is being taken down, or is down or out, because of the action: a control-plane
   * node's etcd member counts as away for every other action's etcd guard.
   */
  nodeAway: boolean;
  /** The action's work has been seen done on the node (External: marking it now changes nothing). */
  performed: boolean;
  /**
   * The action now waits for a person, its own work done (Held: the node is out until
   * someone releases it): the CLI that asked for it stops following here, successfully.
   */
  handsOver: boolean;
}

/**
 * Every phase's meaning, in one table the compiler checks: a phase added to the API
 * (NODE_ACTION_PHASES) does not compile until it says what it means here.
 */
export const PHASES: { readonly [P in NodeActionPhase]: PhaseMeaning } = {
  Pending: {
    label: 'waiting for policies',
    terminal: false,
    approved: false,
    slot: false,
    nodeAway: false,
    performed: false,
    handsOver: false,
  },
  WaitingForHealth: {
    label: 'waiting for health',
    terminal: false,
    approved: false,
    slot: true,
    nodeAway: false,
    performed: false,
    handsOver: false,
  },
  RunningPreHooks: {
    label: 'pre-hooks',
    terminal: false,
    approved: false,
    slot: true,
    nodeAway: false,
    performed: false,
    handsOver: false,
  },
  Approved: {
    label: 'approved',
    terminal: false,
    approved: true,
    slot: true,
    nodeAway: true,
    performed: false,
    handsOver: false,
  },
  Executing: {
    label: 'executing',
    terminal: false,
    approved: true,
    slot: true,
    nodeAway: true,
    performed: false,
    handsOver: false,
  },
  WaitingForNode: {
    label: 'waiting for node',
    terminal: false,
    approved: true,
    slot: true,
    nodeAway: true,
    performed: true,
    handsOver: false,
  },
  Held: {
    label: 'held for maintenance',
    terminal: false,
    approved: true,
    slot: true,
    // The work the node is out for (hardware, hypervisor) may well power it off.
    nodeAway: true,
    performed: true,
    handsOver: true,
  },
  RunningPostHooks: {
    label: 'post-hooks',
    terminal: false,
    approved: true,
    slot: true,
    nodeAway: false,
    performed: true,
    handsOver: false,
  },
  Succeeded: {
    label: 'succeeded',
    terminal: true,
    approved: false,
    slot: false,
    nodeAway: false,
    performed: true,
    handsOver: false,
  },
  Failed: {
    label: 'failed',
    terminal: true,
    approved: false,
    slot: false,
    nodeAway: false,
    performed: false,
    handsOver: false,
  },
  Denied: {
    label: 'denied',
    terminal: true,
    approved: false,
    slot: false,
    nodeAway: false,
    performed: false,
    handsOver: false,
  },
  Cancelled: {
    label: 'cancelled',
    terminal: true,
    approved: false,
    slot: false,
    nodeAway: false,
    performed: false,
    handsOver: false,
  },
};

function phasesWhere(test: (meaning: PhaseMeaning) => boolean): ReadonlySet<NodeActionPhase> {
  return new Set((Object.keys(PHASES) as NodeActionPhase[]).filter((p) => test(PHASES[p])));
}

/** Phases after which nothing more happens. */
export const TERMINAL_PHASES = phasesWhere((m) => m.terminal);

/** Phases in which an action is approved and not finished: what invariant 3 counts. */
export const APPROVED_PHASES = phasesWhere((m) => m.approved);

/** Phases in which an action holds a slot of its policies' budgets (PhaseMeaning.slot). */
export const SLOT_PHASES = phasesWhere((m) => m.slot);

/** Approved, or succeeded: the action got through the gate. */
export const APPROVED_OR_SUCCEEDED: ReadonlySet<NodeActionPhase> = new Set([...APPROVED_PHASES, 'Succeeded']);

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
