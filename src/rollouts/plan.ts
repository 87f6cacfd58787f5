// A rollout's plan, before anything moves (spec.dryRun): the nodes in the order the
// rollout takes them (the same entries decide() walks), which are skipped and why, the
// policies and windows that govern each, its expected duration (as window fit expects
// it), when each can start at the earliest — its turn among maxParallel slots, its stage
// after the one before (and a soak), the canary first, a window it fits in, no freeze —
// and every preflight finding. A pure function, like decide(): the plan is what the
// rollout then does, because both read the same order and the same rules.
import type { Action } from '../api/common.ts';
import type { PlannedNode, RolloutPlanRecord } from '../api/node-rollout.ts';
import { parseDuration } from '../duration.ts';
import { matchesSelector } from '../kube/labels.ts';
import { activeFreeze } from '../policies/freeze.ts';
import { windowState } from '../policies/window.ts';
import { upgradePathProblem } from '../talos/compatibility.ts';
import { talosVersionFromOsImage } from '../talos/version.ts';
import {
  governingPolicies,
  governingWindows,
  poolOf,
  targetVersion,
  type Entry,
  type RolloutInput,
  type RolloutNodeFacts,
  type RolloutPolicyFacts,
} from './facts.ts';
import { expectedDuration } from './expected-duration.ts';
import { planDrains } from './plan-drain.ts';

/** How many window openings the plan looks through for a node before it gives up. */
const WINDOW_SEARCH_LIMIT = 400;

/** Whether the rollout pauses before this node (spec.pauseBefore). */
export function pausesBefore(
  input: RolloutInput,
  node: string,
  labels: Record<string, string> | undefined,
): boolean {
  const p = input.rollout.spec.pauseBefore;
  if (!p) return false;
  if (p.nodes?.includes(node)) return true;
  return p.nodeSelector !== undefined && labels !== undefined && matchesSelector(p.nodeSelector, labels);
}

/** The canary nodes: the first `canary.nodes` in order that are not already done or skipped. */
export function canaryNodes(input: RolloutInput, entries: readonly Entry[]): Set<string> {
  const n = input.rollout.spec.canary?.nodes ?? 0;
  return new Set(
    entries
      .filter((e) => e.phase !== 'Skipped' && e.phase !== 'Vanished')
      .slice(0, n)
      .map((e) => e.node),
  );
}

/**
 * The earliest time from `from` at which the node may start and finish within a window
 * of every governing policy, outside every freeze; undefined (with why) if none is found.
 */
function firstFit(
  matching: readonly RolloutPolicyFacts[],
  action: Action,
  from: Date,
  expectedMs: number,
): { at: Date } | { never: string } {
  const governing = governingWindows(matching, action);
  let t = from;
  for (let i = 0; i < WINDOW_SEARCH_LIMIT; i++) {
    const frozen = matching.map((p) => activeFreeze(p.spec.freezes, action, t)).find((f) => f !== undefined);
    if (frozen) {
      t = frozen.end;
      continue;
    }
    let moved = false;
    for (const policy of governing) {
      const state = windowState(policy.windows, t);
      if (state.problems.length && !state.open && !state.nextStart)
        return { never: `ActionPolicy ${policy.name}: ${state.problems.join('; ')}` };
      const fits = state.open && state.closesAt && state.closesAt.getTime() - t.getTime() >= expectedMs;
      if (fits) continue;
      if (!state.nextStart)
        return {
          never: `no window of ActionPolicy ${policy.name} is long enough for its expected ${Math.round(expectedMs / 60_000)}m`,
        };
      t = state.nextStart;
      moved = true;
      break;
    }
    if (!moved) return { at: t };
  }
  return { never: `no window found in ${String(WINDOW_SEARCH_LIMIT)} openings` };
}

/** A node's place in the plan, without its times. */
function plannedNode(
  input: RolloutInput,
  entry: Entry,
  position: number,
  node: RolloutNodeFacts | undefined,
  extra: { canary: boolean; target: string | undefined },
): PlannedNode {
  const action = input.rollout.spec.action;
  const matching = node ? governingPolicies(input, node, action) : [];
  const windowed = new Set(governingWindows(matching, action).map((w) => w.name));
  const problem =
    node && extra.target && entry.phase !== 'Skipped'
      ? upgradePathProblem(extra.target, talosVersionFromOsImage(node.osImage), node.kubeletVersion)
      : undefined;
  return {
    node: entry.node,
    position,
    ...(entry.group !== undefined ? { group: entry.group } : {}),
    controlPlane: entry.controlPlane === true,
    ...(extra.canary ? { canary: true } : {}),
    ...(pausesBefore(input, entry.node, node?.labels) ? { pauseBefore: true } : {}),
    ...(entry.phase === 'Skipped' || entry.phase === 'Vanished'
      ? { skip: entry.message ?? entry.phase }
      : {}),
    ...(matching.length
      ? { policies: matching.map((p) => `${p.name}${windowed.has(p.name) ? ' (windows)' : ''}`).slice(0, 32) }
      : {}),
    ...(problem ? { findings: [problem] } : {}),
  };
}

/** The drain forecast of each planned node (plan-drain.ts) set on it; the plan's finding about them. */
function drainFindings(input: RolloutInput, planned: PlannedNode[]): string[] {
  const read = input.planDrain;
  if (!read) return [];
  if ('error' in read) return [`the drain forecast could not be made: ${read.error}`];
  const { drains, finding } = planDrains(planned, read.facts);
  for (const p of planned) {
    const drain = drains.get(p.node);
    if (drain) p.drain = drain;
  }
  return finding ? [finding] : [];
}

/** Slots of maxParallel, each free from a time: a node takes the earliest. */
class Slots {
  private readonly free: number[];
  constructor(n: number, from: number) {
    this.free = Array.from({ length: Math.max(1, n) }, () => from);
  }
  earliest(): number {
    return Math.min(...this.free);
  }
  /** The earliest slot is taken (a node starts no earlier than it frees) until `end`. */
  take(end: number): void {
    this.free[this.free.indexOf(this.earliest())] = end;
  }
}

/**
 * The plan of the rollout. Times assume every node takes its expected duration and every
 * pause is promoted at once (said in the findings); a node that can never start makes the
 * plan infeasible, as does any preflight finding.
 */
export function planRollout(input: RolloutInput, entries: readonly Entry[]): RolloutPlanRecord {
  const { rollout, now } = input;
  const spec = rollout.spec;
  const nodes = new Map(input.nodes.map((n) => [n.name, n]));
  const target = targetVersion(rollout);
  const canary = canaryNodes(input, entries);
  const canarySoakMs = spec.canary ? parseDuration(spec.canary.soak ?? '1h') : 0;
  const stageSoakMs = spec.soakBetweenGroups ? parseDuration(spec.soakBetweenGroups) : 0;
  const slots = new Slots(spec.maxParallel ?? 1, now.getTime());
  const findings: string[] = [];
  const planned: PlannedNode[] = [];
  let canaryEnd = now.getTime();
  let afterCanary: number | undefined;
  let stage: string | undefined;
  let stageStart = now.getTime();
  let stageEnd = now.getTime();
  let end = now.getTime();
  for (const [i, entry] of entries.entries()) {
    const node = nodes.get(entry.node);
    const p = plannedNode(input, entry, i + 1, node, { canary: canary.has(entry.node), target });
    planned.push(p);
    if (p.skip !== undefined || !node) continue;
    if (entry.stage !== stage) {
      // A stage starts once the one before is done, and soaked.
      if (stage !== undefined) stageStart = stageEnd + stageSoakMs;
      stage = entry.stage;
    }
    if (!p.canary && spec.canary) afterCanary ??= canaryEnd + canarySoakMs;
    const expected = expectedDuration(entry.node, poolOf(entries, entry), spec.action, input.history);
    const from = Math.max(slots.earliest(), stageStart, p.canary ? 0 : (afterCanary ?? 0));
    const fit = firstFit(
      governingPolicies(input, node, spec.action),
      spec.action,
      new Date(from),
      expected.ms,
    );
    p.expectedSeconds = Math.round(expected.ms / 1000);
    p.basis = expected.basis;
    if ('never' in fit) {
      p.findings = [...(p.findings ?? []), `never starts: ${fit.never}`];
      continue;
    }
    const start = fit.at.getTime();
    const finish = start + expected.ms;
    slots.take(finish);
    p.start = new Date(start).toISOString();
    p.end = new Date(finish).toISOString();
    stageEnd = Math.max(stageEnd, finish);
    end = Math.max(end, finish);
    if (p.canary) canaryEnd = Math.max(canaryEnd, finish);
  }
  if (planned.some((p) => p.pauseBefore))
    findings.push(
      `the rollout pauses before ${planned
        .filter((p) => p.pauseBefore)
        .map((p) => p.node)
        .slice(0, 10)
        .join(', ')} until promoted: the times after assume a promotion at once`,
    );
  if (!target && spec.action === 'Upgrade')
    findings.push(`upgrade.image ${spec.upgrade?.image ?? ''} has no version tag: nothing is skipped`);
  findings.push(...drainFindings(input, planned));
  const stopping = planned.filter((p) => p.findings?.length);
  if (stopping.length)
    findings.push(
      `${String(stopping.length)} node${stopping.length === 1 ? '' : 's'} cannot go: ${stopping
        .slice(0, 10)
        .map((p) => `${p.node}: ${p.findings?.join('; ') ?? ''}`)
        .join('; ')}`,
    );
  return {
    time: now.toISOString(),
    feasible: stopping.length === 0,
    ...(stopping.length === 0
      ? {
          expectedEnd: new Date(end).toISOString(),
          expectedSeconds: Math.round((end - now.getTime()) / 1000),
        }
      : {}),
    ...(findings.length ? { findings: findings.map((f) => f.slice(0, 1024)) } : {}),
    nodes: planned,
  };
}
