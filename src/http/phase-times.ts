// When an action entered each of its phases: status.phaseHistory where the status has
// one, else what the status timestamps tell (statuses written before phaseHistory).
// Shared by the dashboard's action timeline and its rollout view.
import {
  NODE_ACTION_PHASES,
  type NodeActionPhase,
  type NodeActionSpec,
  type NodeActionStatus,
} from '../api/node-action.ts';
import { COMPLETIONS } from '../actions/completions.ts';
import { completionOf } from '../actions/kinds/index.ts';
import { isTerminal } from '../api/phases.ts';

/** The phases an action may go through on its way to Succeeded, in order. */
export const MAIN_PHASES: readonly NodeActionPhase[] = NODE_ACTION_PHASES.slice(
  0,
  NODE_ACTION_PHASES.indexOf('Succeeded') + 1,
);

/**
 * The phases of an action of this kind that goes all the way, in order: it waits for its
 * work in WaitingForNode, or (a Maintenance, held until released) in Held.
 */
export function mainPhases(spec: NodeActionSpec): readonly NodeActionPhase[] {
  const waitsIn = COMPLETIONS[completionOf(spec)].waitsIn;
  return MAIN_PHASES.filter((p) => (p !== 'WaitingForNode' && p !== 'Held') || p === waitsIn);
}

/**
 * When the action entered a phase, as the status timestamps record it, for a status
 * written before phaseHistory existed: each step the controller takes leaves a time behind: a condition that
 * turned True, or one of the status timestamps. Undefined: no trace of that phase.
 */
function inferredEntry(phase: NodeActionPhase, status: NodeActionStatus): string | undefined {
  const becameTrue = (type: string) =>
    status.conditions?.find((c) => c.type === type && c.status === 'True')?.lastTransitionTime;
  switch (phase) {
    case 'Pending':
      return status.startTime;
    case 'WaitingForHealth':
      return becameTrue('Admitted');
    case 'RunningPreHooks':
      return becameTrue('HealthChecksPassed');
    case 'Approved':
      return status.approvalTime;
    case 'Executing':
      // Only Managed execution through the Talos executor passes through Executing, and
      // only then is there an execution record; External execution goes to WaitingForNode.
      return status.execution ? status.executionTime : undefined;
    case 'WaitingForNode':
    case 'Held':
      return becameTrue('Executed');
    case 'RunningPostHooks':
      return status.conditions?.some((c) => c.type === 'PostHooksSucceeded')
        ? becameTrue('NodeReturned')
        : undefined;
    case 'Succeeded':
      return status.phase === 'Succeeded' ? status.completionTime : undefined;
    case 'Failed':
    case 'Denied':
    case 'Cancelled':
      return undefined;
    default:
      // A phase added to the API does not compile until it is inferred here.
      return phase satisfies never;
  }
}

/**
 * When the action (last) entered a phase: from its phaseHistory when it has one (a
 * phase not in it was not entered, or so long ago that the bounded history dropped it),
 * else inferred from the status timestamps. Undefined: no trace of that phase.
 */
export function enteredAt(phase: NodeActionPhase, status: NodeActionStatus): string | undefined {
  const history = status.phaseHistory;
  if (history && history.length > 0) return history.findLast((e) => e.phase === phase)?.since;
  return inferredEntry(phase, status);
}

export interface PhaseEntered {
  phase: NodeActionPhase;
  since: string;
}

/**
 * The phases the action entered, oldest first, with their times: its phaseHistory, or,
 * without one, every main phase the status timestamps show it entered, then the phase it
 * is in (at phaseTime, or completionTime for one that ended). Entries out of order in
 * time (clock skew between replicas) keep their order; the reader draws them as they are.
 */
export function phaseEntries(status: NodeActionStatus): PhaseEntered[] {
  if (status.phaseHistory && status.phaseHistory.length > 0) return status.phaseHistory;
  const phase = status.phase;
  if (phase === undefined) return [];
  const entries: PhaseEntered[] = [];
  const current = MAIN_PHASES.indexOf(phase);
  for (const [i, p] of MAIN_PHASES.entries()) {
    if (p === 'Succeeded' || (current >= 0 && i >= current)) break;
    const since = inferredEntry(p, status);
    if (since) entries.push({ phase: p, since });
  }
  const since = isTerminal(phase)
    ? status.completionTime
    : (status.phaseTime ?? inferredEntry(phase, status));
  if (since) entries.push({ phase, since });
  return entries;
}
