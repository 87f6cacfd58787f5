// How long an action may stay in each phase (spec.deadlines), and what it was doing.
import type { NodeActionPhase, NodeActionSpec } from '../../api/node-action.ts';
import { parseDuration } from '../../duration.ts';

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

/**
 * The deadline of a phase, plus `extraMs`: the health gate's is longer by the cap of a
 * workload owner's do-not-disrupt once one held the action (do-not-disrupt.ts), which it
 * may wait for on top of its checks.
 */
export function phaseDeadlineMs(
  spec: NodeActionSpec,
  phase: NodeActionPhase,
  extraMs = 0,
): number | undefined {
  const deadline = PHASE_DEADLINES[phase];
  if (!deadline) return undefined;
  const value = (spec.deadlines as Record<string, string | undefined> | undefined)?.[deadline.field];
  return parseDuration(value ?? deadline.default) + extraMs;
}
