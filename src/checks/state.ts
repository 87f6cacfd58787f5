// The life of one check, as a pure function of its probe results: Kubernetes probe
// semantics (success and failure thresholds) with one difference that makes the gate
// fail closed — a check that has never been probed is unknown, and unknown is not
// healthy. The first failure of an unknown check makes it unhealthy at once.
import type { ProbeResult } from './probe.ts';

export type CheckReason = 'NotProbed' | 'ProbeSucceeded' | 'ProbeFailed' | 'ProbeError' | 'ProbeTimeout';

export interface Outcome extends ProbeResult {
  reason: Exclude<CheckReason, 'NotProbed'>;
}

export interface CheckState {
  /** undefined: never probed since the check (or its spec) appeared. */
  healthy: boolean | undefined;
  reason: CheckReason;
  message: string;
  consecutiveSuccesses: number;
  consecutiveFailures: number;
  lastProbeTime?: Date;
  lastTransitionTime?: Date;
}

export interface Thresholds {
  successThreshold: number;
  failureThreshold: number;
}

export function unknownState(now?: Date): CheckState {
  return {
    healthy: undefined,
    reason: 'NotProbed',
    message: 'not probed yet',
    consecutiveSuccesses: 0,
    consecutiveFailures: 0,
    ...(now ? { lastTransitionTime: now } : {}),
  };
}

export function applyOutcome(
  state: CheckState,
  outcome: Outcome,
  thresholds: Thresholds,
  now: Date,
): CheckState {
  const consecutiveSuccesses = outcome.healthy ? state.consecutiveSuccesses + 1 : 0;
  const consecutiveFailures = outcome.healthy ? 0 : state.consecutiveFailures + 1;
  let healthy = state.healthy;
  if (outcome.healthy && consecutiveSuccesses >= thresholds.successThreshold) healthy = true;
  if (!outcome.healthy && (healthy === undefined || consecutiveFailures >= thresholds.failureThreshold))
    healthy = false;
  // While a threshold holds the state, the message says so rather than hide the finding.
  let message = outcome.message;
  if (healthy !== outcome.healthy) {
    message = outcome.healthy
      ? `${outcome.message} (success ${String(consecutiveSuccesses)}/${String(thresholds.successThreshold)} before healthy)`
      : `${outcome.message} (failure ${String(consecutiveFailures)}/${String(thresholds.failureThreshold)} before unhealthy)`;
  }
  const transitioned = healthy !== state.healthy;
  return {
    healthy,
    reason: healthy === undefined ? 'NotProbed' : outcome.reason,
    message,
    consecutiveSuccesses,
    consecutiveFailures,
    lastProbeTime: now,
    ...(transitioned
      ? { lastTransitionTime: now }
      : state.lastTransitionTime
        ? { lastTransitionTime: state.lastTransitionTime }
        : {}),
  };
}

/** Whether a status write is due: something a reader acts on changed, not just the probe time. */
export function significantlyChanged(a: CheckState, b: CheckState, thresholds: Thresholds): boolean {
  const progress = (s: CheckState) =>
    s.healthy
      ? Math.min(s.consecutiveFailures, thresholds.failureThreshold)
      : Math.min(s.consecutiveSuccesses, thresholds.successThreshold);
  return (
    a.healthy !== b.healthy || a.reason !== b.reason || a.message !== b.message || progress(a) !== progress(b)
  );
}
