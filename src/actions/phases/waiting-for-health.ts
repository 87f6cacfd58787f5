// WaitingForHealth: the health gate. The action passes on a fresh evaluation of every
// check that gates it on its node, all healthy, and — on a control-plane node it takes
// down — the etcd guard's fresh read (builtin:etcd, etcd-guard.ts); anything unknown
// holds it (fail closed).
import type { NodeActionStatus } from '../../api/node-action.ts';
import { checkGates } from '../../checks/selection.ts';
import type { CheckState } from '../../checks/state.ts';
import { isTerminal } from '../../api/phases.ts';
import { takesNodeAway } from '../completions.ts';
import type { DecisionBuilder } from '../decision.ts';
import {
  DEFAULT_DO_NOT_DISRUPT_MAX_MS,
  DO_NOT_DISRUPT_CHECK,
  bypassedHolders,
  judgeDoNotDisrupt,
  type DoNotDisruptHolder,
} from '../do-not-disrupt.ts';
import { ETCD_CHECK_NAME, etcdGuardApplies, guardEtcd } from '../etcd-guard.ts';

/** How often a held health gate asks for a fresh evaluation again (check status changes also wake it). */
export const HEALTH_RETRY_MS = 5000;

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

function checkResult(name: string, state: CheckState | undefined, at: Date, bypassed: boolean): CheckResult {
  const healthy = state?.healthy === true;
  const message =
    state === undefined
      ? 'unknown: the check no longer exists'
      : state.healthy === undefined
        ? `unknown: ${state.message}`
        : state.message;
  return {
    name,
    healthy,
    ...(bypassed ? { bypassed: true } : {}),
    probeTime: (state?.lastProbeTime ?? at).toISOString(),
    message: message.slice(0, 4096),
  };
}

function describeChecks(results: readonly CheckResult[]): string {
  const failing = results.filter((r) => !r.healthy);
  const shown = failing.slice(0, 5).map((r) => `${r.name} (${r.message})`);
  return `${shown.join('; ')}${failing.length > 5 ? `; and ${failing.length - 5} more` : ''}`;
}

/** How often a gate waiting on a checker Job looks whether its evaluation finished. */
export const EVALUATING_RETRY_MS = 1000;

function describeEvaluating(evaluating: NonNullable<DecisionBuilder['input']['evaluating']>): string {
  return evaluating
    .map((e) =>
      e.job
        ? `running checker Job ${e.job} (check ${e.check})`
        : `starting the checker Job of check ${e.check}`,
    )
    .join('; ');
}

/** Whether workload owners' do-not-disrupt holds this action: it takes its node away, and no policy ignores it. */
function doNotDisruptApplies(b: DecisionBuilder): boolean {
  const { spec, node, status, input } = b;
  if (!node || !takesNodeAway(spec, status.execution, node.osImage)) return false;
  return (
    (input.doNotDisruptCap?.ms ?? DEFAULT_DO_NOT_DISRUPT_MAX_MS) > 0 || status.doNotDisruptSince !== undefined
  );
}

/** The Pods read for this decision and the Node itself, as do-not-disrupt holders. */
function holdersOf(b: DecisionBuilder): DoNotDisruptHolder[] {
  const own = b.node?.doNotDisrupt;
  return [
    ...(b.input.doNotDisrupt?.pods ?? []),
    ...(own !== undefined ? [{ what: `Node ${b.nodeName}`, value: own }] : []),
  ];
}

/**
 * The do-not-disrupt holds of the node, judged on the Pods read for this decision: its
 * result for status.checks (undefined: nothing asks, nor did), and when to look again.
 */
function judgeHolds(b: DecisionBuilder): CheckResult[] {
  const { status, now, nodeName, input, event } = b;
  const cap = input.doNotDisruptCap ?? { ms: DEFAULT_DO_NOT_DISRUPT_MAX_MS, by: 'the default' };
  const readError = input.doNotDisrupt?.error;
  const j = judgeDoNotDisrupt({
    holders: holdersOf(b),
    ...(readError !== undefined ? { readError } : {}),
    status,
    cap,
    now,
    nodeName,
  });
  if (j.since !== undefined && status.doNotDisruptSince === undefined && j.result) {
    event('Normal', 'DoNotDisrupt', `${b.spec.action} of node ${nodeName} waits: ${j.result.message ?? ''}`);
  }
  if (j.since !== undefined) status.doNotDisruptSince = j.since;
  if (j.capped.length > 0) {
    event(
      'Warning',
      'DoNotDisruptExpired',
      `${b.spec.action} of node ${nodeName} goes on: ${j.result?.message ?? ''}`,
    );
  }
  if (j.nextEndMs !== undefined) b.wake(j.nextEndMs);
  return j.result ? [j.result] : [];
}

/** A bypass of the health checks passes do-not-disrupt too, recorded with what it passed. */
function bypassHolds(b: DecisionBuilder): CheckResult[] {
  const { spec, now, nodeName, event } = b;
  const passed = bypassedHolders(holdersOf(b));
  if (passed === undefined) return [];
  const message = `${passed} ask${passed.includes(',') || passed.includes(' more') ? '' : 's'} not to be disrupted: passed, health checks bypassed by ${spec.requestedBy}: ${spec.bypass?.reason ?? ''}`;
  event('Warning', 'DoNotDisruptBypassed', `${spec.action} of node ${nodeName}: ${message}`);
  return [
    {
      name: DO_NOT_DISRUPT_CHECK,
      healthy: false,
      bypassed: true,
      probeTime: now.toISOString(),
      message: message.slice(0, 4096),
    },
  ];
}

export function waitingForHealth(b: DecisionBuilder): void {
  const { input, spec, node, nodeName, now, status, condition, transition } = b;
  if (!node) {
    b.end('Failed', `node ${nodeName} no longer exists`);
    return;
  }
  const gating = input.checks
    .filter((c) => checkGates(c.spec, spec.action, node.labels))
    .sort((a, b) => a.name.localeCompare(b.name));
  // The built-in etcd guard of a control-plane node (etcd-guard.ts), beside the checks.
  const etcdApplies = etcdGuardApplies(spec, node.labels, node.osImage);
  const dndApplies = doNotDisruptApplies(b);
  if (spec.bypass?.healthChecks) {
    // The Pods a bypass passes are read first, for its record.
    if (dndApplies && !input.doNotDisrupt) {
      b.readDoNotDisrupt();
      return;
    }
    const etcd = guardEtcd(b).result;
    status.checks = [
      ...gating.map((c) => checkResult(c.name, c.state, now, true)),
      ...(etcd ? [etcd] : []),
      ...(dndApplies ? bypassHolds(b) : []),
    ];
    condition(
      'HealthChecksPassed',
      'True',
      'Bypassed',
      `health checks bypassed by ${spec.requestedBy}: ${spec.bypass.reason ?? ''}`,
    );
    transition('RunningPreHooks', 'health checks bypassed; running pre-action hooks');
    return;
  }
  if (gating.length === 0 && !etcdApplies && !dndApplies) {
    status.checks = [];
    condition(
      'HealthChecksPassed',
      'True',
      'NoChecks',
      `no health check gates ${spec.action} on ${nodeName}`,
    );
    transition(
      'RunningPreHooks',
      `no health check gates ${spec.action} on ${nodeName}; running pre-action hooks`,
    );
    return;
  }
  const fresh = input.fresh;
  if (!fresh && input.evaluating && input.evaluating.length > 0) {
    // A checker Job takes a while: say what the gate waits for, and look again soon.
    const waiting = describeEvaluating(input.evaluating);
    condition('HealthChecksPassed', 'Unknown', 'Evaluating', waiting);
    b.say(`waiting for health checks: ${waiting}`);
    b.wake(EVALUATING_RETRY_MS);
    return;
  }
  if ((gating.length > 0 && !fresh) || (etcdApplies && !input.etcd) || (dndApplies && !input.doNotDisrupt)) {
    // Held on a recent evaluation: probe again after HEALTH_RETRY_MS, or at once when
    // a check's latest state differs from what the action was judged on. (Without
    // this, each write of the held status would bring a new evaluation at once.)
    const recorded = new Map(
      (status.checks ?? []).filter((c) => c.name !== DO_NOT_DISRUPT_CHECK).map((c) => [c.name, c]),
    );
    const holds = status.checks?.find((c) => c.name === DO_NOT_DISRUPT_CHECK);
    const judgedAt = Math.max(...[...recorded.values()].map((c) => Date.parse(c.probeTime ?? '') || 0));
    const unchanged =
      recorded.size === gating.length + (etcdApplies ? 1 : 0) &&
      (!etcdApplies || recorded.has(ETCD_CHECK_NAME)) &&
      gating.every((c) => recorded.get(c.name)?.healthy === (c.state.healthy === true)) &&
      (!dndApplies || holds?.healthy === false);
    const age = now.getTime() - Math.max(judgedAt, Date.parse(holds?.probeTime ?? '') || 0);
    if ((recorded.size > 0 || holds) && unchanged && age < HEALTH_RETRY_MS) {
      b.wake(HEALTH_RETRY_MS - age);
      return;
    }
    if (gating.length > 0) b.evaluate(gating.map((c) => c.name));
    if (etcdApplies) b.readEtcd();
    if (dndApplies) b.readDoNotDisrupt();
    return;
  }
  // Fail closed: a check the fresh evaluation did not cover counts as unknown.
  const results = fresh
    ? gating.map((c) => checkResult(c.name, fresh.states.get(c.name), fresh.at, false))
    : [];
  const etcd = etcdApplies ? guardEtcd(b) : undefined;
  if (etcd?.result) results.push(etcd.result);
  if (dndApplies) results.push(...judgeHolds(b));
  status.checks = results;
  if (isTerminal(status.phase)) return; // refused by the guard (a Reset etcd cannot spare)
  if (results.every((r) => r.healthy)) {
    const message =
      results.length === 0
        ? `nothing on node ${nodeName} asks not to be disrupted`
        : `${results.length} health check${results.length === 1 ? '' : 's'} healthy`;
    condition('HealthChecksPassed', 'True', 'Healthy', message);
    transition('RunningPreHooks', `${message}; running pre-action hooks`);
    return;
  }
  const failing = describeChecks(results);
  condition('HealthChecksPassed', 'False', 'Waiting', `waiting for ${failing}`);
  b.say(`waiting for health checks: ${failing}`);
  b.wake(HEALTH_RETRY_MS);
}
