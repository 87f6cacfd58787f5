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

/** A check's status as read from the API server (ClusterHealthCheckStatus, by shape). */
export interface ObservedStatus {
  observedGeneration?: number;
  healthy?: boolean | null;
  consecutiveFailures?: number;
  consecutiveSuccesses?: number;
  lastProbeTime?: string;
  lastTransitionTime?: string;
  message?: string;
  conditions?: { type: string; reason: string }[];
  nodes?: unknown;
}

const REASONS: readonly CheckReason[] = [
  'NotProbed',
  'ProbeSucceeded',
  'ProbeFailed',
  'ProbeError',
  'ProbeTimeout',
];

/**
 * What an earlier controller wrote for this generation of a Cluster-scoped check, as the
 * state it wrote: so that a restarted controller whose first probes find the same neither
 * rewrites the status nor records a transition that readers never saw. Undefined when the
 * status is of another generation, Node-scoped (per-node results), or not ours to read.
 */
export function writtenState(status: ObservedStatus | undefined, generation: number): CheckState | undefined {
  if (!status || status.observedGeneration !== generation || status.nodes != null) return undefined;
  const reason = status.conditions?.find((c) => c.type === 'Healthy')?.reason as CheckReason | undefined;
  if (reason === undefined || !REASONS.includes(reason) || typeof status.message !== 'string')
    return undefined;
  const time = (t: string | undefined) =>
    t === undefined || Number.isNaN(Date.parse(t)) ? undefined : new Date(t);
  const lastProbeTime = time(status.lastProbeTime);
  const lastTransitionTime = time(status.lastTransitionTime);
  return {
    healthy: status.healthy ?? undefined,
    reason,
    message: status.message,
    consecutiveFailures: status.consecutiveFailures ?? 0,
    consecutiveSuccesses: status.consecutiveSuccesses ?? 0,
    ...(lastProbeTime ? { lastProbeTime } : {}),
    ...(lastTransitionTime ? { lastTransitionTime } : {}),
  };
}
