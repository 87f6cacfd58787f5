// The drain forecast at the health gate (../drain-forecast.ts): made for an action that
// drains its node, recorded in status.drainForecast whatever the policies say, with a
// Warning Event when a Pod would hold the drain or has nowhere to go. Under an
// ActionPolicy with drainForecast: Block it is also a hold beside the checks
// (builtin:drain-forecast in status.checks), naming those Pods; it fails closed when the
// forecast could not be made. A bypass of the health checks passes it, on the record.
import type { NodeActionSpec, NodeActionStatus } from '../../api/node-action.ts';
import { governingPolicies, type PolicyFacts } from '../../policies/evaluate.ts';
import type { DecisionBuilder } from '../decision.ts';
import { blockingWords, forecastBlocks, forecastRecord } from '../drain-forecast-record.ts';
import { drainsBeforeCall } from '../kinds/index.ts';
import { neighboursApply } from './neighbour-holds.ts';

export const DRAIN_FORECAST_CHECK = 'builtin:drain-forecast';

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

/** The governing ActionPolicy that says drainForecast: Block (the first by name); undefined: Warn. */
export function drainForecastBlockedBy(
  policies: readonly PolicyFacts[],
  spec: Pick<NodeActionSpec, 'action' | 'nodeName'>,
  labels: Record<string, string>,
): string | undefined {
  return governingPolicies(policies, spec, labels)
    .filter((p) => p.spec.drainForecast === 'Block')
    .map((p) => p.name)
    .sort()[0];
}

/**
 * Whether the gate forecasts the drain: the action takes its node away and its kind drains
 * it (Managed: the controller does; External: whoever performs it, or the node going down).
 */
export function drainForecastApplies(b: DecisionBuilder): boolean {
  return neighboursApply(b) && drainsBeforeCall(b.spec, b.node?.osImage, b.status);
}

/** The forecast made for this decision, recorded; a Warning when what would hold the drain changed. */
function record(b: DecisionBuilder): NonNullable<NodeActionStatus['drainForecast']> | undefined {
  const { input, status, spec, nodeName, event } = b;
  if (!input.drainForecast) return undefined;
  const before = status.drainForecast;
  const now = forecastRecord(input.drainForecast);
  status.drainForecast = now;
  const named = blockingWords(now);
  const changed = !before || JSON.stringify(blockingWords(before)) !== JSON.stringify(named);
  if (forecastBlocks(now) && changed)
    event('Warning', 'DrainForecast', `${spec.action} of node ${nodeName}: ${now.message}`);
  return now;
}

function result(b: DecisionBuilder, healthy: boolean, message: string, bypassed = false): CheckResult {
  return {
    name: DRAIN_FORECAST_CHECK,
    healthy,
    ...(bypassed ? { bypassed: true } : {}),
    probeTime: (b.input.drainForecast?.at ?? b.now).toISOString(),
    message: message.slice(0, 4096),
  };
}

/** What the forecast made for this decision holds: nothing under Warn; under Block, its result for status.checks. */
export function drainForecastResults(b: DecisionBuilder): CheckResult[] {
  const made = record(b);
  const by = b.input.drainForecastBlock;
  if (!made || by === undefined) return [];
  if (b.input.drainForecast?.error !== undefined)
    return [
      result(b, false, `${made.message}: ActionPolicy ${by} blocks on the drain forecast, so the gate waits`),
    ];
  if (!forecastBlocks(made))
    return [result(b, true, `nothing would hold the drain of node ${b.nodeName}: ${made.message}`)];
  const named = blockingWords(made);
  const more = made.blockedByPDB + made.fitsNowhere - named.length;
  const list = `${named.join('; ')}${more > 0 ? `; and ${String(more)} more` : ''}`;
  return [
    result(
      b,
      false,
      `the drain of node ${b.nodeName} would meet ${list} (drainForecast: Block in ActionPolicy ${by})`,
    ),
  ];
}

/** A bypass of the health checks passes the forecast's hold, recorded with the Pods it passed. */
export function bypassedDrainForecast(b: DecisionBuilder): CheckResult[] {
  const made = record(b);
  const by = b.input.drainForecastBlock;
  if (!made || by === undefined || !forecastBlocks(made)) return [];
  const { spec, nodeName, event } = b;
  const message = `${blockingWords(made).join('; ')}: passed, health checks bypassed by ${spec.requestedBy}: ${spec.bypass?.reason ?? ''}`;
  event('Warning', 'DrainForecastBypassed', `${spec.action} of node ${nodeName}: ${message}`);
  return [result(b, false, message, true)];
}
