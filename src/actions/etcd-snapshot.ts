// The etcd snapshot before approval (ActionPolicy spec.etcdSnapshot), as the decision
// core sees it: for an action the etcd guard judges (one that takes a control-plane node
// down or out), once its pre-action hooks are done and etcd spares the node, the Talos
// executor takes a snapshot (src/talos/etcd-snapshot-step.ts) and the action is approved
// only once it is recorded in status.etcdSnapshot — Managed or External alike: the
// snapshot comes before anyone may act. A failed attempt holds the action and is tried
// again every ETCD_SNAPSHOT_RETRY_MS; when etcdSnapshot.timeout has passed since the first
// attempt, the action fails (fail closed), naming the last failure. bypass.healthChecks
// goes without one, recorded (phase Bypassed, a Warning Event).
//
// Pure: the attempt is an effect (`etcdSnapshot`), its outcome comes back as the executor's
// facts (ActionInput.execution.snapshot), which live in memory: a restarted controller
// finds the status saying Taking with no attempt of its own, and begins another.
import type { NodeActionSpec } from '../api/node-action.ts';
import { formatDuration, parseDuration } from '../duration.ts';
import { governingPolicies, type PolicyFacts } from '../policies/evaluate.ts';
import type { DecisionBuilder } from './decision.ts';
import { etcdGuardApplies } from './etcd-guard.ts';
import type { ChosenSnapshotPolicy } from './observations.ts';

/** How long after a failed attempt the next one begins. */
export const ETCD_SNAPSHOT_RETRY_MS = 10_000;
export const ETCD_SNAPSHOT_DEFAULT_TIMEOUT = '5m';
export const ETCD_SNAPSHOT_DEFAULT_KEEP = 5;

export function etcdSnapshotPolicy(
  policies: readonly PolicyFacts[],
  spec: Pick<NodeActionSpec, 'action' | 'nodeName'>,
  labels: Record<string, string>,
): ChosenSnapshotPolicy | undefined {
  const p = governingPolicies(policies, spec, labels).find((g) => g.spec.etcdSnapshot !== undefined);
  return p?.spec.etcdSnapshot ? { policy: p.name, spec: p.spec.etcdSnapshot } : undefined;
}

/** The object name of a snapshot begun at `at`: its time first (UTC, to the second), so that names sort by age. */
export function snapshotName(action: string, at: Date): string {
  const stamp = at
    .toISOString()
    .replace(/\.\d{3}Z$/, 'Z')
    .replace(/[-:]/g, '');
  return `etcd-${stamp}-${action}.db`;
}

function chosenFor(b: DecisionBuilder): ChosenSnapshotPolicy | undefined {
  const chosen = b.input.etcdSnapshot;
  if (!chosen || !b.node) return undefined;
  return etcdGuardApplies(b.spec, b.node.labels, b.node.osImage, b.status) ? chosen : undefined;
}

/**
 * Records what this process's attempt came to, whatever else holds the action meanwhile
 * (the etcd guard may): a stored snapshot must be in the status as soon as it is known.
 */
export function recordEtcdSnapshot(b: DecisionBuilder): void {
  const { spec, status, now, nodeName, event } = b;
  const recorded = status.etcdSnapshot;
  const facts = b.input.execution?.snapshot;
  if (recorded?.phase !== 'Taking' || !facts || facts.state === 'running') return;
  const on = `${spec.action} of node ${nodeName}`;
  if (facts.state === 'succeeded' && facts.snapshot) {
    const s = facts.snapshot;
    status.etcdSnapshot = {
      ...recorded,
      phase: 'Taken',
      time: now.toISOString(),
      name: s.name,
      url: s.url,
      member: s.member,
      size: s.size,
      sha256: s.sha256,
      raftIndex: s.raftIndex,
      ...(s.pruned.length > 0 ? { pruned: s.pruned } : {}),
      message: facts.message.slice(0, 4096),
    };
    event('Normal', 'EtcdSnapshotTaken', `${on}: etcd snapshot ${facts.message}`);
    return;
  }
  status.etcdSnapshot = {
    ...recorded,
    phase: 'Failed',
    time: now.toISOString(),
    message: facts.message.slice(0, 4096),
  };
  event('Warning', 'EtcdSnapshotFailed', `${on}: etcd snapshot attempt failed: ${facts.message}`);
}

/** Why this controller cannot take a snapshot at all, if it cannot. */
function noTaker(b: DecisionBuilder): string | undefined {
  if (!b.input.execution) return 'this controller performs no actions, so it takes no etcd snapshot';
  if (b.input.noTalos)
    return 'this controller has no talosconfig, so it cannot take an etcd snapshot (give it one: --talosconfig, or the in-cluster one)';
  return undefined;
}

/** Asks for an attempt now: recorded as Taking before the executor begins it. */
function attempt(b: DecisionBuilder, chosen: ChosenSnapshotPolicy, deadline: number, again: boolean): void {
  const { status, now, action } = b;
  const recorded = status.etcdSnapshot;
  const attempts = (recorded?.attempts ?? 0) + 1;
  status.etcdSnapshot = {
    phase: 'Taking',
    policy: chosen.policy,
    startTime: recorded?.startTime ?? now.toISOString(),
    attempts,
    ...(recorded?.message !== undefined && recorded.phase === 'Failed'
      ? { message: `attempt ${String(attempts)}; the last one failed: ${recorded.message}`.slice(0, 4096) }
      : {}),
  };
  b.effect({
    type: 'etcdSnapshot',
    again,
    policy: chosen.policy,
    url: chosen.spec.http.url,
    keep: chosen.spec.keep ?? ETCD_SNAPSHOT_DEFAULT_KEEP,
    name: snapshotName(action.metadata.name, now),
    deadline: new Date(deadline).toISOString(),
  });
  b.say(
    `pre-action hooks done; taking the etcd snapshot ActionPolicy ${chosen.policy} asks for before approval`,
  );
  b.wake(deadline - now.getTime());
}

/**
 * Whether the action may be approved as far as its etcd snapshot goes: none is asked for,
 * one is recorded (or bypassed). Otherwise it holds — while an attempt runs, or until the
 * next one after a failure — or, past etcdSnapshot.timeout, fails.
 */
export function etcdSnapshotTaken(b: DecisionBuilder): boolean {
  const { spec, status, now, nodeName, event } = b;
  const chosen = chosenFor(b);
  if (!chosen) return true;
  const recorded = status.etcdSnapshot;
  if (recorded?.phase === 'Taken' || recorded?.phase === 'Bypassed') return true;
  if (spec.bypass?.healthChecks) {
    const message = `no etcd snapshot taken, though ActionPolicy ${chosen.policy} asks for one: health checks bypassed by ${spec.requestedBy}: ${spec.bypass.reason ?? ''}`;
    status.etcdSnapshot = {
      phase: 'Bypassed',
      policy: chosen.policy,
      startTime: recorded?.startTime ?? now.toISOString(),
      ...(recorded?.attempts !== undefined ? { attempts: recorded.attempts } : {}),
      message: message.slice(0, 4096),
    };
    event('Warning', 'EtcdSnapshotBypassed', `${spec.action} of node ${nodeName}: ${message}`);
    return true;
  }
  const timeout = chosen.spec.timeout ?? ETCD_SNAPSHOT_DEFAULT_TIMEOUT;
  const deadline = Date.parse(recorded?.startTime ?? now.toISOString()) + parseDuration(timeout);
  const cannot = noTaker(b);
  if (now.getTime() >= deadline) {
    const last = cannot ?? recorded?.message ?? 'no attempt finished';
    b.end(
      'Failed',
      `no etcd snapshot within etcdSnapshot.timeout (${formatDuration(parseDuration(timeout))}) of ActionPolicy ${chosen.policy}: ${last}; fix that and create the action again, or bypass.healthChecks with a reason to go without a snapshot`,
    );
    return false;
  }
  if (cannot) {
    status.etcdSnapshot = {
      phase: 'Failed',
      policy: chosen.policy,
      startTime: recorded?.startTime ?? now.toISOString(),
      attempts: recorded?.attempts ?? 0,
      time: recorded?.time ?? now.toISOString(),
      message: cannot,
    };
    b.say(
      `pre-action hooks done; waiting for the etcd snapshot ActionPolicy ${chosen.policy} asks for: ${cannot}`,
    );
    b.wake(deadline - now.getTime());
    return false;
  }
  const facts = b.input.execution?.snapshot;
  if (recorded?.phase === 'Taking') {
    if (facts?.state === 'running') {
      b.say(
        `pre-action hooks done; taking the etcd snapshot ActionPolicy ${chosen.policy} asks for: ${facts.message}`,
      );
      b.wake(deadline - now.getTime());
    } else attempt(b, chosen, deadline, false); // none of this process's: begin (again, after a restart)
    return false;
  }
  if (recorded?.phase === 'Failed') {
    const wait = Date.parse(recorded.time ?? '') + ETCD_SNAPSHOT_RETRY_MS - now.getTime();
    if (wait > 0) {
      b.say(
        `pre-action hooks done; held: the etcd snapshot ActionPolicy ${chosen.policy} asks for failed (${recorded.message ?? ''}); trying again in ${formatDuration(wait)}, until ${new Date(deadline).toISOString()}`,
      );
      b.wake(Math.min(wait, deadline - now.getTime()));
      return false;
    }
    attempt(b, chosen, deadline, true);
    return false;
  }
  attempt(b, chosen, deadline, false);
  return false;
}
