// The health gate's holds that come from the node's neighbours rather than from checks:
// workload owners' do-not-disrupt (../do-not-disrupt.ts) and other maintainers
// (../maintainers.ts), both judged on one read of the node's neighbours made for the
// gate (../neighbours-read.ts), both only for an action that takes its node away.
import type { NodeActionStatus } from '../../api/node-action.ts';
import { takesNodeAway } from '../completions.ts';
import type { DecisionBuilder } from '../decision.ts';
import {
  DEFAULT_DO_NOT_DISRUPT_MAX_MS,
  DO_NOT_DISRUPT_CHECK,
  bypassedHolders,
  judgeDoNotDisrupt,
  type DoNotDisruptHolder,
} from '../do-not-disrupt.ts';
import { drainsBeforeCall, kindOf } from '../kinds/index.ts';
import {
  MAINTAINERS_CHECK,
  judgeMaintainers,
  otherMaintainers,
  type MaintainersInput,
} from '../maintainers.ts';

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

/**
 * Whether the gate reads the node's neighbours: the action takes its node away, or
 * restarts every pod on it (a ConfigChange classified CRIRestart: ActionKind.restartsPods).
 */
export function neighboursApply(b: DecisionBuilder): boolean {
  const { spec, node, status } = b;
  return (
    node !== undefined &&
    (takesNodeAway(spec, status.execution, node.osImage) ||
      kindOf(spec).restartsPods?.(spec, node.osImage, status) === true)
  );
}

/** The Pods read for this decision and the Node itself, as do-not-disrupt holders. */
function holdersOf(b: DecisionBuilder): DoNotDisruptHolder[] {
  const own = b.node?.doNotDisrupt;
  return [
    ...(b.input.neighbours?.pods ?? []),
    ...(own !== undefined ? [{ what: `Node ${b.nodeName}`, value: own }] : []),
  ];
}

/**
 * The do-not-disrupt holds of the node, judged on the read made for this decision: its
 * result for status.checks (none: nothing asks, nor did), and when to look again.
 */
function judgeHolds(b: DecisionBuilder): CheckResult[] {
  const { status, now, nodeName, input, event } = b;
  const cap = input.doNotDisruptCap ?? { ms: DEFAULT_DO_NOT_DISRUPT_MAX_MS, by: 'the default' };
  const readError = input.neighbours?.error;
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

/** What the other-maintainers rule judges, as this decision sees the node. */
export function maintainersInput(b: DecisionBuilder): MaintainersInput {
  const { node, spec, nodeName, status, now, input, action } = b;
  const recorded = status.checks?.find((c) => c.name === MAINTAINERS_CHECK);
  return {
    nodeName,
    maintenances: input.neighbours?.maintenances ?? [],
    ...(input.neighbours?.lease ? { lease: input.neighbours.lease } : {}),
    ...(input.neighbours?.error !== undefined ? { readError: input.neighbours.error } : {}),
    foreignCordon: node?.unschedulable === true && node.cordonedBy !== action.metadata.name,
    drainsItself:
      (spec.execution ?? 'Managed') === 'Managed' && drainsBeforeCall(spec, node?.osImage, status),
    allowForeignCordon: input.allowForeignCordon === true,
    ...(recorded ? { recorded } : {}),
    now,
  };
}

/** The results of the node's neighbours for status.checks, judged on the read made for this decision. */
export function neighbourResults(b: DecisionBuilder): CheckResult[] {
  const maintainers = judgeMaintainers(maintainersInput(b));
  const cap = b.input.doNotDisruptCap?.ms ?? DEFAULT_DO_NOT_DISRUPT_MAX_MS;
  const dnd = cap > 0 || b.status.doNotDisruptSince !== undefined || b.input.neighbours?.error !== undefined;
  return [...(dnd ? judgeHolds(b) : []), ...(maintainers ? [maintainers] : [])];
}

/** A bypass of the health checks passes the neighbours' holds too, recorded with what it passed. */
export function bypassedNeighbourResults(b: DecisionBuilder): CheckResult[] {
  const { spec, now, nodeName, event } = b;
  const by = `health checks bypassed by ${spec.requestedBy}: ${spec.bypass?.reason ?? ''}`;
  const results: CheckResult[] = [];
  const record = (name: string, message: string): void => {
    results.push({
      name,
      healthy: false,
      bypassed: true,
      probeTime: now.toISOString(),
      message: message.slice(0, 4096),
    });
  };
  const passed = bypassedHolders(holdersOf(b));
  if (passed !== undefined) {
    const message = `${passed} ask${passed.includes(',') || passed.includes(' more') ? '' : 's'} not to be disrupted: passed, ${by}`;
    event('Warning', 'DoNotDisruptBypassed', `${spec.action} of node ${nodeName}: ${message}`);
    record(DO_NOT_DISRUPT_CHECK, message);
  }
  const others = otherMaintainers(maintainersInput(b));
  if (others.length > 0) record(MAINTAINERS_CHECK, `${others.join('; ')}: passed, ${by}`);
  return results;
}
