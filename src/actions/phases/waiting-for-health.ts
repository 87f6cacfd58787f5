// WaitingForHealth: the health gate. The action passes on a fresh evaluation of every
// check that gates it on its node, all healthy, and — on a control-plane node it takes
// down — the etcd guard's fresh read (builtin:etcd, etcd-guard.ts); anything unknown
// holds it (fail closed).
import type { NodeActionStatus } from '../../api/node-action.ts';
import { checkGates } from '../../checks/selection.ts';
import type { CheckState } from '../../checks/state.ts';
import { isTerminal } from '../../api/phases.ts';
import type { DecisionBuilder } from '../decision.ts';
import { DO_NOT_DISRUPT_CHECK } from '../do-not-disrupt.ts';
import { ETCD_CHECK_NAME, etcdGuardApplies, guardEtcd } from '../etcd-guard.ts';
import { MAINTAINERS_CHECK } from '../maintainers.ts';
import { classified } from './config-disruption.ts';
import {
  DRAIN_FORECAST_CHECK,
  bypassedDrainForecast,
  drainForecastApplies,
  drainForecastResults,
} from './drain-forecast-gate.ts';
import { bypassedNeighbourResults, neighbourResults, neighboursApply } from './neighbour-holds.ts';

/** The results the node's neighbours and the drain forecast give, beside the checks'. */
const NEIGHBOUR_CHECKS: ReadonlySet<string> = new Set([
  DO_NOT_DISRUPT_CHECK,
  MAINTAINERS_CHECK,
  DRAIN_FORECAST_CHECK,
]);

/** How often a held health gate asks for a fresh evaluation again (check status changes also wake it). */
export const HEALTH_RETRY_MS = 5000;

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

export function checkResult(
  name: string,
  state: CheckState | undefined,
  at: Date,
  bypassed: boolean,
): CheckResult {
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

export function describeChecks(results: readonly CheckResult[]): string {
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

/** Nothing gates the action on its node, and nobody else holds the node: on to its pre-action hooks. */
function noChecks(b: DecisionBuilder): void {
  const { spec, nodeName, condition, transition } = b;
  const none = `no health check gates ${spec.action} on ${nodeName}`;
  condition('HealthChecksPassed', 'True', 'NoChecks', none);
  transition('RunningPreHooks', `${none}; running pre-action hooks`);
}

export function waitingForHealth(b: DecisionBuilder): void {
  const { input, spec, node, nodeName, now, status, condition, transition } = b;
  if (!node) {
    b.end('Failed', `node ${nodeName} no longer exists`);
    return;
  }
  // What the action does to the node decides what gates it: its class first.
  if (!classified(b)) return;
  const gating = input.checks
    .filter((c) => checkGates(c.spec, spec.action, node.labels))
    .sort((a, b) => a.name.localeCompare(b.name));
  // The built-in etcd guard of a control-plane node (etcd-guard.ts), beside the checks.
  const etcdApplies = etcdGuardApplies(spec, node.labels, node.osImage, status);
  const neighbours = neighboursApply(b);
  const forecast = drainForecastApplies(b);
  if (spec.bypass?.healthChecks) {
    // What a bypass passes of the neighbours' holds is read first, for its record.
    if ((neighbours && !input.neighbours) || (forecast && !input.drainForecast)) {
      if (neighbours && !input.neighbours) b.readNeighbours();
      if (forecast && !input.drainForecast) b.forecastDrain();
      return;
    }
    const etcd = guardEtcd(b).result;
    status.checks = [
      ...gating.map((c) => checkResult(c.name, c.state, now, true)),
      ...(etcd ? [etcd] : []),
      ...(neighbours ? bypassedNeighbourResults(b) : []),
      ...(forecast ? bypassedDrainForecast(b) : []),
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
  if (gating.length === 0 && !etcdApplies && !neighbours) {
    status.checks = [];
    noChecks(b);
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
  if (
    (gating.length > 0 && !fresh) ||
    (etcdApplies && !input.etcd) ||
    (neighbours && !input.neighbours) ||
    (forecast && !input.drainForecast)
  ) {
    // Held on a recent evaluation: probe again after HEALTH_RETRY_MS, or at once when
    // a check's latest state differs from what the action was judged on. (Without
    // this, each write of the held status would bring a new evaluation at once.)
    const recorded = new Map(
      (status.checks ?? []).filter((c) => !NEIGHBOUR_CHECKS.has(c.name)).map((c) => [c.name, c]),
    );
    const holds = (status.checks ?? []).filter((c) => NEIGHBOUR_CHECKS.has(c.name) && !c.healthy);
    const judgedAt = Math.max(...[...recorded.values()].map((c) => Date.parse(c.probeTime ?? '') || 0));
    const unchanged =
      recorded.size === gating.length + (etcdApplies ? 1 : 0) &&
      (!etcdApplies || recorded.has(ETCD_CHECK_NAME)) &&
      gating.every((c) => recorded.get(c.name)?.healthy === (c.state.healthy === true));
    const heldAt = Math.max(0, ...holds.map((c) => Date.parse(c.probeTime ?? '') || 0));
    const age = now.getTime() - Math.max(judgedAt, heldAt);
    if ((recorded.size > 0 || holds.length > 0) && unchanged && age < HEALTH_RETRY_MS) {
      b.wake(HEALTH_RETRY_MS - age);
      return;
    }
    if (gating.length > 0) b.evaluate(gating.map((c) => c.name));
    if (etcdApplies) b.readEtcd();
    if (neighbours) b.readNeighbours();
    if (forecast) b.forecastDrain();
    return;
  }
  // Fail closed: a check the fresh evaluation did not cover counts as unknown.
  const results = fresh
    ? gating.map((c) => checkResult(c.name, fresh.states.get(c.name), fresh.at, false))
    : [];
  const etcd = etcdApplies ? guardEtcd(b) : undefined;
  if (etcd?.result) results.push(etcd.result);
  if (neighbours) results.push(...neighbourResults(b));
  if (forecast) results.push(...drainForecastResults(b));
  status.checks = results;
  if (isTerminal(status.phase)) return; // refused by the guard (a Reset etcd cannot spare)
  if (results.length === 0) {
    noChecks(b);
    return;
  }
  if (results.every((r) => r.healthy)) {
    const message = `${results.length} health check${results.length === 1 ? '' : 's'} healthy`;
    condition('HealthChecksPassed', 'True', 'Healthy', message);
    transition('RunningPreHooks', `${message}; running pre-action hooks`);
    return;
  }
  const failing = describeChecks(results);
  condition('HealthChecksPassed', 'False', 'Waiting', `waiting for ${failing}`);
  b.say(`waiting for health checks: ${failing}`);
  b.wake(HEALTH_RETRY_MS);
}
