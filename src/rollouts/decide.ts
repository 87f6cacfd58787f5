// The rollout's core: a pure function of the rollout, the nodes, the rollout's own
// NodeActions, the ActionPolicies, the finished actions (history) and the time. It says
// which NodeActions to create now and what the status is; the reconciler (reconciler.ts)
// only observes, calls it, and applies the plan.
//
// Each node goes through the rollout once: Pending → (Waiting) → Running (its NodeAction
// unfinished) → Succeeded | Failed, or Skipped (already at the target version) or
// Vanished (gone before it started). A node with an action, or remembered in the status
// with one, is never started again (invariant 9).
import type { ActionPolicySpec } from '../api/action-policy.ts';
import type { Action } from '../api/common.ts';
import type { RolloutConditionType } from '../api/names.ts';
import type { NodeActionPhase } from '../api/node-action.ts';
import {
  MAX_ROLLOUT_NODES,
  type NodeRolloutStatus,
  type ObservedNodeRollout,
  type RolloutCounts,
  type RolloutNode,
  type RolloutNodePhase,
} from '../api/node-rollout.ts';
import { setCondition, type Condition } from '../kube/conditions.ts';
import type { EventSpec } from '../kube/event-spec.ts';
import { matchesSelector } from '../kube/labels.ts';
import { isControlPlane, policyMatches } from '../policies/evaluate.ts';
import { activeFreeze, frozenMessage } from '../policies/freeze.ts';
import { upgradePathProblem } from '../talos/compatibility.ts';
import { windowState } from '../policies/window.ts';
import {
  compareTalosVersions,
  formatTalosVersion,
  installerVersion,
  parseTalosVersion,
  talosVersionFromOsImage,
} from '../talos/version.ts';
import { expectedDuration, roughDuration, type HistoryEntry } from './expected-duration.ts';
import type { Impostor } from './membership.ts';
import { rolloutActionName } from './naming.ts';

export interface RolloutNodeFacts {
  name: string;
  labels: Record<string, string>;
  /** status.nodeInfo.osImage: `Talos (v1.13.0)`. */
  osImage?: string;
  /** status.nodeInfo.kubeletVersion: `v1.35.2`. */
  kubeletVersion?: string;
}

/** One of the rollout's own NodeActions (made by it: membership.ts). */
export interface RolloutActionFacts {
  name: string;
  node: string;
  phase?: NodeActionPhase;
  message?: string;
}

export interface RolloutPolicyFacts {
  name: string;
  spec: ActionPolicySpec;
}

export interface RolloutInput {
  rollout: ObservedNodeRollout;
  nodes: readonly RolloutNodeFacts[];
  /** The rollout's NodeActions. */
  actions: readonly RolloutActionFacts[];
  /**
   * Names of actions the status remembers and that are confirmed gone from the API server
   * (not merely missing from a cache): only those may be reported as deleted.
   */
  deletedActions?: ReadonlySet<string>;
  /**
   * NodeActions that claim the rollout, or hold the name of one of its actions, without
   * being one it made (membership.ts): never counted; their node waits while they exist.
   */
  impostors?: readonly Impostor[];
  policies: readonly RolloutPolicyFacts[];
  history: readonly HistoryEntry[];
  now: Date;
}

/** A NodeAction to create: its name and spec are fixed by the rollout and the node. */
export interface ActionToCreate {
  name: string;
  node: string;
}

export interface RolloutPlan {
  create: ActionToCreate[];
  status: NodeRolloutStatus;
  events: EventSpec[];
  /** Reconcile again after this long (a window opening), if nothing else happens. */
  requeueAfterMs?: number;
}

interface Entry extends RolloutNode {
  /** Order: the stage (control-plane rank, group), then the name. */
  stage: string;
}

const FAILED_ACTION_PHASES: ReadonlySet<NodeActionPhase> = new Set(['Failed', 'Denied', 'Cancelled']);

/** The Talos version upgrade.image installs, if the rollout upgrades. */
export function targetVersion(rollout: ObservedNodeRollout): string | undefined {
  if (rollout.spec.action !== 'Upgrade' || !rollout.spec.upgrade) return undefined;
  const version = installerVersion(rollout.spec.upgrade.image);
  return version ? formatTalosVersion(version) : undefined;
}

/**
 * Whether the node already runs the target: its osImage names the version the image's tag
 * names. (The schematic, i.e. the extensions, is not visible on the Node; see
 * docs/decisions.md.) Unknown either way: not at target, the upgrade is made.
 */
export function atTarget(node: RolloutNodeFacts, target: string | undefined): boolean {
  if (target === undefined) return false;
  const running = talosVersionFromOsImage(node.osImage);
  const wanted = parseTalosVersion(target);
  return running !== undefined && wanted !== undefined && compareTalosVersions(running, wanted) === 0;
}

function stageOf(
  rollout: ObservedNodeRollout,
  labels: Record<string, string> | undefined,
  cp: boolean,
): string {
  const last = (rollout.spec.order ?? 'controlPlaneLast') === 'controlPlaneLast';
  const rank = cp === last ? '1' : '0';
  const groupBy = rollout.spec.groupBy;
  const value = groupBy ? labels?.[groupBy] : undefined;
  // Nodes without the label go after every group: "\u{10FFFF}" sorts last.
  return `${rank}/${value ?? (groupBy ? '\u{10FFFF}' : '')}`;
}

function entryFor(
  input: RolloutInput,
  name: string,
  node: RolloutNodeFacts | undefined,
  action: RolloutActionFacts | undefined,
  remembered: RolloutNode | undefined,
  target: string | undefined,
): Entry {
  const { rollout } = input;
  const labels = node?.labels;
  const cp = node ? isControlPlane(labels) : remembered?.controlPlane === true;
  const groupBy = rollout.spec.groupBy;
  const group = groupBy ? (labels?.[groupBy] ?? (node ? undefined : remembered?.group)) : undefined;
  const base = {
    node: name,
    stage: stageOf(rollout, node ? labels : groupBy && group ? { [groupBy]: group } : {}, cp),
    controlPlane: cp,
    ...(group !== undefined ? { group: group.slice(0, 63) } : {}),
  };
  const phase = (p: RolloutNodePhase, message: string, extra: Partial<RolloutNode> = {}): Entry => ({
    ...base,
    phase: p,
    message: message.slice(0, 1024),
    ...extra,
  });
  if (action) {
    const actionFields = { action: action.name, ...(action.phase ? { actionPhase: action.phase } : {}) };
    if (action.phase === 'Succeeded') return phase('Succeeded', action.message ?? 'done', actionFields);
    if (action.phase && FAILED_ACTION_PHASES.has(action.phase))
      return phase('Failed', `${action.phase}: ${action.message ?? 'no message'}`, actionFields);
    return phase('Running', action.message ?? `NodeAction ${action.name} created`, actionFields);
  }
  if (remembered?.action) {
    // Started once: never again. A finished one keeps its record after its NodeAction is
    // garbage-collected; an unfinished one whose action is confirmed gone failed.
    const rememberedAction = { action: remembered.action };
    if (remembered.phase === 'Succeeded' || remembered.phase === 'Failed')
      return phase(remembered.phase, remembered.message ?? '', {
        ...rememberedAction,
        ...(remembered.actionPhase ? { actionPhase: remembered.actionPhase } : {}),
      });
    if (input.deletedActions?.has(remembered.action))
      return phase(
        'Failed',
        `its NodeAction ${remembered.action} was deleted before it finished (deleting an action cancels it)`,
        rememberedAction,
      );
    return phase(
      'Running',
      remembered.message ?? `NodeAction ${remembered.action} created`,
      rememberedAction,
    );
  }
  if (!node) {
    if (remembered?.phase === 'Skipped') return phase('Skipped', remembered.message ?? 'already at target');
    return phase('Vanished', 'the node went away before it was upgraded; not waited for');
  }
  if (atTarget(node, target)) return phase('Skipped', `already runs ${target ?? ''}`);
  return phase('Pending', 'not started yet');
}

function byOrder(a: Entry, b: Entry): number {
  return a.stage < b.stage ? -1 : a.stage > b.stage ? 1 : a.node < b.node ? -1 : a.node > b.node ? 1 : 0;
}

/** Whether a node's phase is final for the rollout. */
export function isDone(phase: RolloutNodePhase): boolean {
  return phase === 'Succeeded' || phase === 'Failed' || phase === 'Skipped' || phase === 'Vanished';
}

function countsOf(entries: readonly Entry[]): RolloutCounts {
  const counts: RolloutCounts = { pending: 0, running: 0, succeeded: 0, failed: 0, skipped: 0, vanished: 0 };
  for (const e of entries) {
    if (e.phase === 'Pending' || e.phase === 'Waiting') counts.pending++;
    else if (e.phase === 'Running') counts.running++;
    else if (e.phase === 'Succeeded') counts.succeeded++;
    else if (e.phase === 'Failed') counts.failed++;
    else if (e.phase === 'Skipped') counts.skipped++;
    else counts.vanished++;
  }
  return counts;
}

interface WindowVerdict {
  fits: boolean;
  message?: string;
  /** When to look again (the next window opening). */
  retryAt?: Date;
}

/**
 * Window fit: the node starts only if, under every policy with windows that governs it,
 * a window is open and its expected duration fits in what is left of it.
 */
export function windowFit(
  input: RolloutInput,
  node: RolloutNodeFacts,
  pool: ReadonlySet<string>,
  action: Action,
): WindowVerdict {
  const matching = input.policies.filter((p) =>
    policyMatches(p.spec, { name: '', node: node.name, action }, node.labels),
  );
  // A freeze holds the node whatever the windows say; the rollout looks again when it ends.
  for (const policy of matching) {
    const frozen = activeFreeze(policy.spec.freezes, action, input.now);
    if (frozen)
      return {
        fits: false,
        message: `${frozenMessage(policy.name, frozen)}: ${node.name} not started`,
        retryAt: frozen.end,
      };
  }
  // Each policy's own windows, and those of its per-kind limits for this action.
  const governing = matching.flatMap((p) =>
    [
      p.spec.windows,
      ...(p.spec.perAction ?? []).filter((l) => l.actions.includes(action)).map((l) => l.windows),
    ]
      .filter((w) => (w?.length ?? 0) > 0)
      .map((windows) => ({ name: p.name, windows })),
  );
  if (governing.length === 0) return { fits: true };
  let expected: ReturnType<typeof expectedDuration> | undefined;
  for (const policy of governing) {
    const state = windowState(policy.windows, input.now);
    if (!state.open || !state.closesAt) {
      return {
        fits: false,
        message: `waiting for the next window of ActionPolicy ${policy.name}${state.nextStart ? ` (opens at ${state.nextStart.toISOString()})` : ''}: ${node.name} not started${state.problems.length ? `; ${state.problems.join('; ')} (InvalidWindow)` : ''}`,
        ...(state.nextStart ? { retryAt: state.nextStart } : {}),
      };
    }
    expected ??= expectedDuration(node.name, pool, action, input.history);
    const left = state.closesAt.getTime() - input.now.getTime();
    if (expected.ms > left) {
      return {
        fits: false,
        message: `waiting for the next window: ${node.name} needs ${roughDuration(expected.ms)}, ${roughDuration(left).slice(1)} left (ActionPolicy ${policy.name}; expected from ${expected.basis === 'default' ? 'the default, no history yet' : `the median of ${String(expected.samples)} ${expected.basis === 'node' ? 'of its own' : 'of its pool’s'} last successful ${action}s`})`,
        ...(state.nextStart ? { retryAt: state.nextStart } : {}),
      };
    }
  }
  return { fits: true };
}

function poolOf(entries: readonly Entry[], entry: Entry): Set<string> {
  return new Set(
    entries
      .filter((e) => e.controlPlane === entry.controlPlane && e.group === entry.group)
      .map((e) => e.node),
  );
}

function conditionsOf(
  previous: readonly Condition[] | undefined,
  states: Record<RolloutConditionType, { status: boolean; reason: string; message: string }>,
  generation: number | undefined,
  now: Date,
): Condition[] {
  let conditions = [...(previous ?? [])];
  for (const [type, s] of Object.entries(states)) {
    conditions = setCondition(
      conditions,
      {
        type,
        status: s.status ? 'True' : 'False',
        reason: s.reason,
        message: s.message,
        ...(generation !== undefined ? { observedGeneration: generation } : {}),
      },
      now,
    );
  }
  return conditions;
}

/**
 * Events for the nodes whose phase the stored status does not show yet. From the stored
 * status, not from what this pass created: a pass whose status write lost a conflict
 * leaves its transitions to the next pass, which reports them.
 */
function eventsOf(previous: readonly RolloutNode[], next: readonly Entry[]): EventSpec[] {
  const before = new Map(previous.map((e) => [e.node, e.phase]));
  const events: EventSpec[] = [];
  for (const e of next) {
    const was = before.get(e.node);
    if (was === e.phase) continue;
    if (e.phase === 'Running')
      events.push({
        type: 'Normal',
        reason: 'NodeStarted',
        message: `${e.node}: NodeAction ${e.action ?? ''}`,
      });
    else if (e.phase === 'Succeeded')
      events.push({ type: 'Normal', reason: 'NodeSucceeded', message: `${e.node}: ${e.message ?? 'done'}` });
    else if (e.phase === 'Failed')
      events.push({ type: 'Warning', reason: 'NodeFailed', message: `${e.node}: ${e.message ?? 'failed'}` });
    else if (e.phase === 'Vanished' && was !== undefined)
      events.push({ type: 'Warning', reason: 'NodeVanished', message: `${e.node}: ${e.message ?? ''}` });
  }
  return events;
}

/**
 * The rollout's members: the nodes selected now, and every node the rollout already acted
 * on or skipped (a node that stops matching after it started is still reported). A
 * remembered node that is neither selected nor started drops out only while it exists;
 * one that vanished before it started stays, reported as Vanished.
 */
function membersOf(input: RolloutInput, nodes: ReadonlyMap<string, RolloutNodeFacts>): Set<string> {
  const previous = input.rollout.status?.nodes ?? [];
  const members = new Set<string>();
  for (const n of input.nodes)
    if (matchesSelector(input.rollout.spec.nodeSelector, n.labels)) members.add(n.name);
  for (const a of input.actions) members.add(a.node);
  for (const e of previous)
    if (e.action || (e.phase !== 'Pending' && e.phase !== 'Waiting')) members.add(e.node);
  for (const e of previous)
    if (!nodes.has(e.node) && (e.phase === 'Pending' || e.phase === 'Waiting')) members.add(e.node);
  return members;
}

/**
 * A node an impostor claims is held, whatever else: the rollout neither counts it nor
 * starts an action of its own beside it (one action per node), until it is gone.
 */
function holdImpostors(input: RolloutInput, entries: Entry[]): void {
  const impostorOn = new Map((input.impostors ?? []).map((i) => [i.node, i]));
  for (const entry of entries) {
    const impostor = impostorOn.get(entry.node);
    if (!impostor || entry.phase !== 'Pending') continue;
    entry.phase = 'Waiting';
    entry.message = `NodeAction ${impostor.name} is not one this rollout made (${impostor.why}): not counted; ${entry.node} waits until it is gone`;
  }
}

/**
 * Starts what the free slots allow, in order, within the current stage (the first with a
 * node not done: nothing of a later stage starts); a node outside its window waits.
 * Returns the actions to create and when a window opens next.
 */
function startNodes(
  input: RolloutInput,
  entries: Entry[],
  nodes: ReadonlyMap<string, RolloutNodeFacts>,
  slots: number,
): { create: ActionToCreate[]; requeueAt: Date | undefined } {
  const create: ActionToCreate[] = [];
  let requeueAt: Date | undefined;
  const current = entries.find((e) => !isDone(e.phase))?.stage;
  for (const entry of entries) {
    if (slots <= 0 || current === undefined) break;
    if (entry.stage !== current || entry.phase !== 'Pending') continue;
    const node = nodes.get(entry.node);
    if (!node) continue;
    const name = rolloutActionName(input.rollout.metadata.name, entry.node);
    const fit = windowFit(input, node, poolOf(entries, entry), input.rollout.spec.action);
    if (!fit.fits) {
      entry.phase = 'Waiting';
      entry.message = fit.message ?? 'waiting for a window';
      if (fit.retryAt && (!requeueAt || fit.retryAt < requeueAt)) requeueAt = fit.retryAt;
      continue;
    }
    create.push({ name, node: entry.node });
    entry.phase = 'Running';
    entry.action = name;
    entry.message = `NodeAction ${name} created`;
    slots--;
  }
  return { create, requeueAt };
}

/**
 * The upgrade-path preflight: the nodes still to start that cannot upgrade to the target
 * (Talos's compatibility tables: the host too old or too new, Kubernetes outside the
 * target's range), in words; undefined when every one can. A rollout that cannot succeed
 * starts no node, rather than fail at the first one.
 */
function preflight(
  entries: readonly Entry[],
  nodes: ReadonlyMap<string, RolloutNodeFacts>,
  target: string | undefined,
): string | undefined {
  if (target === undefined) return undefined;
  const problems = entries.flatMap((e) => {
    if (e.phase !== 'Pending' && e.phase !== 'Waiting') return [];
    const node = nodes.get(e.node);
    if (!node) return [];
    const problem = upgradePathProblem(target, talosVersionFromOsImage(node.osImage), node.kubeletVersion);
    return problem ? [`${e.node}: ${problem}`] : [];
  });
  if (problems.length === 0) return undefined;
  const shown = problems.slice(0, 10).join('; ');
  return `preflight: ${String(problems.length)} node${problems.length === 1 ? '' : 's'} cannot upgrade to ${target}: ${shown}${problems.length > 10 ? `; and ${String(problems.length - 10)} more` : ''}. Fix them, or take them out of spec.nodeSelector`;
}

/** Why the rollout is halted, or whether it goes on. */
interface Standing {
  tooMany: boolean;
  halted: boolean;
  /** The preflight's finding (the rollout then starts no node). */
  preflight: string | undefined;
  paused: boolean;
  complete: boolean;
  haltReason: string | undefined;
}

/** The rollout's one-line message. */
function messageOf(entries: readonly Entry[], counts: RolloutCounts, standing: Standing): string {
  const waiting = entries.find((e) => e.phase === 'Waiting');
  if (standing.complete)
    return entries.length === 0
      ? 'no node matches spec.nodeSelector'
      : `complete: ${String(counts.succeeded)} done, ${String(counts.skipped)} skipped, ${String(counts.failed)} failed${counts.vanished ? `, ${String(counts.vanished)} vanished` : ''}`;
  if (standing.haltReason) return `halted: ${standing.haltReason}`;
  if (standing.paused) return `paused: ${String(counts.running)} running finish, none starts`;
  if (waiting && counts.running === 0) return waiting.message ?? 'waiting';
  return `${String(counts.running)} running, ${String(counts.pending)} to go${waiting ? `; ${waiting.message ?? ''}` : ''}`;
}

/** Progressing, Halted and Complete as the standing says. */
function rolloutConditions(
  input: RolloutInput,
  counts: RolloutCounts,
  standing: Standing,
  described: string,
  message: string,
): NodeRolloutStatus['conditions'] {
  const { tooMany, halted, paused, complete, haltReason, preflight: blocked } = standing;
  const haltedBy = tooMany
    ? 'TooManyNodes'
    : halted
      ? 'FailureBudgetExhausted'
      : blocked
        ? 'PreflightFailed'
        : undefined;
  return conditionsOf(
    input.rollout.status?.conditions,
    {
      Progressing: {
        status: !complete && !haltReason && !paused && counts.running > 0,
        reason: complete
          ? 'Complete'
          : (haltedBy ?? (paused ? 'Paused' : counts.running > 0 ? 'NodesRunning' : 'WaitingForWindow')),
        message: described,
      },
      Halted: {
        status: haltReason !== undefined || paused,
        reason: haltedBy ?? (paused ? 'Paused' : 'NotHalted'),
        message: haltReason ?? (paused ? 'spec.paused is true' : ''),
      },
      Complete: {
        status: complete,
        reason: complete ? 'AllNodesDone' : 'NodesRemaining',
        message: complete ? message : `${String(counts.pending + counts.running)} nodes not done`,
      },
    },
    input.rollout.metadata.generation,
    input.now,
  );
}

export function decide(input: RolloutInput): RolloutPlan {
  const { rollout, now } = input;
  const spec = rollout.spec;
  const previous = rollout.status?.nodes ?? [];
  const remembered = new Map(previous.map((e) => [e.node, e]));
  const nodes = new Map(input.nodes.map((n) => [n.name, n]));
  const actions = new Map(input.actions.map((a) => [a.node, a]));
  const target = targetVersion(rollout);

  const entries = [...membersOf(input, nodes)]
    .map((name) => entryFor(input, name, nodes.get(name), actions.get(name), remembered.get(name), target))
    .sort(byOrder);
  holdImpostors(input, entries);

  const notes: string[] = [];
  const counts0 = countsOf(entries);
  const maxFailures = spec.maxFailures ?? 0;
  const tooMany = entries.length > MAX_ROLLOUT_NODES;
  const halted = counts0.failed > maxFailures;
  const paused = spec.paused === true;
  const firstFailure = entries.find((e) => e.phase === 'Failed');

  if (!tooMany && !halted && !paused && target === undefined && spec.action === 'Upgrade') {
    notes.push(
      `upgrade.image ${spec.upgrade?.image ?? ''} has no version tag: nodes are upgraded without skipping`,
    );
  }
  const blocked = tooMany || halted ? undefined : preflight(entries, nodes, target);
  const { create, requeueAt } =
    !tooMany && !halted && !paused && !blocked
      ? startNodes(input, entries, nodes, (spec.maxParallel ?? 1) - counts0.running)
      : { create: [], requeueAt: undefined };

  const counts = countsOf(entries);
  const complete = !tooMany && entries.every((e) => isDone(e.phase));
  const haltReason = tooMany
    ? `the rollout selects ${String(entries.length)} nodes, more than the ${String(MAX_ROLLOUT_NODES)} one rollout can track: narrow spec.nodeSelector`
    : halted
      ? `${String(counts.failed)} node${counts.failed === 1 ? '' : 's'} failed, more than maxFailures (${String(maxFailures)}): first ${firstFailure?.node ?? '?'}: ${firstFailure?.message ?? ''}. Raise spec.maxFailures to go on`
      : blocked;
  const standing: Standing = { tooMany, halted, preflight: blocked, paused, complete, haltReason };
  const message = messageOf(entries, counts, standing);
  const described = notes.length ? `${message}; ${notes.join('; ')}` : message;
  const conditions = rolloutConditions(input, counts, standing, described, message);

  const events = eventsOf(previous, entries);
  const wasHalted =
    rollout.status?.conditions?.find((c) => c.type === 'Halted')?.reason === 'FailureBudgetExhausted';
  if (halted && !wasHalted)
    events.push({ type: 'Warning', reason: 'Halted', message: haltReason ?? 'halted' });
  const wasBlocked =
    rollout.status?.conditions?.find((c) => c.type === 'Halted')?.reason === 'PreflightFailed';
  if (blocked && !wasBlocked) events.push({ type: 'Warning', reason: 'PreflightFailed', message: blocked });
  const wasComplete = rollout.status?.conditions?.find((c) => c.type === 'Complete')?.status === 'True';
  if (complete && !wasComplete) events.push({ type: 'Normal', reason: 'Completed', message });

  const generation = rollout.metadata.generation;
  const status: NodeRolloutStatus = {
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    ...(target !== undefined ? { targetVersion: target } : {}),
    counts,
    nodes: entries.slice(0, MAX_ROLLOUT_NODES).map(({ stage: _stage, ...e }) => e),
    startTime: rollout.status?.startTime ?? now.toISOString(),
    ...(complete ? { completionTime: rollout.status?.completionTime ?? now.toISOString() } : {}),
    conditions,
    message: described.slice(0, 4096),
  };
  return {
    create,
    status,
    events,
    ...(requeueAt ? { requeueAfterMs: Math.max(1000, requeueAt.getTime() - now.getTime()) } : {}),
  };
}
