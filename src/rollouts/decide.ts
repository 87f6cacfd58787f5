// The rollout's core: a pure function of the rollout, the nodes, the rollout's own
// NodeActions, the ActionPolicies, the finished actions (history) and the time. It says
// which NodeActions to create now and what the status is; the reconciler (reconciler.ts)
// only observes, calls it, and applies the plan.
//
// Each node goes through the rollout once: Pending → (Waiting) → Running (its NodeAction
// unfinished) → Succeeded | Failed, or Skipped (already at the target version) or
// Vanished (gone before it started). A node with an action, or remembered in the status
// with one, is never started again (invariant 9).
import type { Action } from '../api/common.ts';
import { QUARANTINED_LABEL, type RolloutConditionType } from '../api/names.ts';
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
import { isControlPlane } from '../policies/evaluate.ts';
import { activeFreeze, frozenMessage } from '../policies/freeze.ts';
import { upgradePathProblem } from '../talos/compatibility.ts';
import { windowState } from '../policies/window.ts';
import { talosVersionFromOsImage } from '../talos/version.ts';
import { expectedDuration, roughDuration } from './expected-duration.ts';
import {
  atTarget,
  governingPolicies,
  governingWindows,
  isDone,
  poolOf,
  targetVersion,
  type Entry,
  type RolloutInput,
  type RolloutNodeFacts,
} from './facts.ts';
import { gateBefore, gateStanding, type GateStanding } from './gates.ts';
import { rolloutActionName, rolloutRetryName } from './naming.ts';
import {
  actionsByNode,
  applyQuarantineBudget,
  awaitsRetry,
  nodeMarks,
  undrained,
  undrainedOutcome,
  type NodeActions,
  type NodeMark,
} from './quarantine.ts';

import { planRollout } from './plan.ts';

/** A NodeAction to create: its name and spec are fixed by the rollout and the node. */
export interface ActionToCreate {
  name: string;
  node: string;
}

export interface RolloutPlan {
  create: ActionToCreate[];
  /** Quarantine labels and cordon hand-overs to write on Nodes, before the actions are created. */
  marks?: NodeMark[];
  status: NodeRolloutStatus;
  events: EventSpec[];
  /** Reconcile again after this long (a window opening), if nothing else happens. */
  requeueAfterMs?: number;
}

const FAILED_ACTION_PHASES: ReadonlySet<NodeActionPhase> = new Set(['Failed', 'Denied', 'Cancelled']);

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
  own: NodeActions | undefined,
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
  const action = own?.retry ?? own?.first;
  if (action) {
    const first =
      own?.first?.name ?? remembered?.quarantine?.action ?? rolloutActionName(rollout.metadata.name, name);
    // A retry carries the record of why its node was set aside (rebuilt from the first
    // action if the status lost it).
    const aside = own?.retry
      ? (remembered?.quarantine ??
        (own.first ? undrainedOutcome(input, own.first, first, undefined, false)?.quarantine : undefined))
      : undefined;
    const actionFields = {
      action: action.name,
      ...(action.phase ? { actionPhase: action.phase } : {}),
      ...(aside ? { quarantine: aside } : {}),
      ...(action.rolledBack || remembered?.rolledBack ? { rolledBack: true } : {}),
    };
    if (action.phase === 'Succeeded') return phase('Succeeded', action.message ?? 'done', actionFields);
    // Failed once is failed: a node the status shows failed is never set aside after all.
    const undrainedNode =
      undrained(action) && remembered?.phase !== 'Failed'
        ? undrainedOutcome(input, action, first, remembered?.quarantine ?? aside, own?.retry !== undefined)
        : undefined;
    if (undrainedNode)
      return phase(undrainedNode.phase, undrainedNode.message ?? '', { ...actionFields, ...undrainedNode });
    if (action.phase && FAILED_ACTION_PHASES.has(action.phase))
      return phase('Failed', `${action.phase}: ${action.message ?? 'no message'}`, actionFields);
    return phase('Running', action.message ?? `NodeAction ${action.name} created`, actionFields);
  }
  // Set aside, or skipped as undrainable: as remembered once its action is gone.
  if (remembered?.action && (remembered.phase === 'Quarantined' || remembered.phase === 'Skipped'))
    return phase(remembered.phase, remembered.message ?? '', {
      action: remembered.action,
      ...(remembered.actionPhase ? { actionPhase: remembered.actionPhase } : {}),
      ...(remembered.quarantine ? { quarantine: remembered.quarantine } : {}),
    });
  if (remembered?.action) {
    // Started once: never again. A finished one keeps its record after its NodeAction is
    // garbage-collected; an unfinished one whose action is confirmed gone failed.
    const rememberedAction = { action: remembered.action };
    if (remembered.phase === 'Succeeded' || remembered.phase === 'Failed')
      return phase(remembered.phase, remembered.message ?? '', {
        ...rememberedAction,
        ...(remembered.actionPhase ? { actionPhase: remembered.actionPhase } : {}),
        ...(remembered.quarantine ? { quarantine: remembered.quarantine } : {}),
        ...(remembered.rolledBack ? { rolledBack: true } : {}),
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

function countsOf(entries: readonly Entry[]): RolloutCounts {
  const counts: RolloutCounts = { pending: 0, running: 0, succeeded: 0, failed: 0, skipped: 0, vanished: 0 };
  for (const e of entries) {
    if (e.phase === 'Pending' || e.phase === 'Waiting') counts.pending++;
    else if (e.phase === 'Running') counts.running++;
    else if (e.phase === 'Succeeded') counts.succeeded++;
    else if (e.phase === 'Failed') counts.failed++;
    else if (e.phase === 'Skipped') counts.skipped++;
    else if (e.phase === 'Quarantined') counts.quarantined = (counts.quarantined ?? 0) + 1;
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
  const matching = governingPolicies(input, node, action);
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
  const governing = governingWindows(matching, action);
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
    else if (e.phase === 'Quarantined')
      events.push({ type: 'Warning', reason: 'NodeQuarantined', message: `${e.node}: ${e.message ?? ''}` });
    else if (e.phase === 'Skipped' && e.action !== undefined)
      events.push({ type: 'Warning', reason: 'NodeSkipped', message: `${e.node}: ${e.message ?? ''}` });
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
  gates: GateStanding,
): { create: ActionToCreate[]; requeueAt: Date | undefined } {
  const create: ActionToCreate[] = [];
  let requeueAt: Date | undefined;
  const current = entries.find((e) => !isDone(e.phase))?.stage;
  const passed = new Set(gates.passedGates);
  for (const entry of entries) {
    if (slots <= 0 || current === undefined) break;
    if (entry.stage !== current || entry.phase !== 'Pending' || !gates.mayStart(entry)) continue;
    const node = nodes.get(entry.node);
    if (!node) continue;
    // A pause before this node: it, and every node after it, waits for a promotion.
    const pause = gateBefore(input, entry, node, passed);
    if (pause) {
      gates.gate = pause;
      entry.phase = 'Waiting';
      entry.message = pause.message;
      break;
    }
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
  if (current === undefined) {
    const retries = startRetries(input, entries, nodes, slots);
    create.push(...retries.create);
    if (retries.requeueAt && (!requeueAt || retries.requeueAt < requeueAt)) requeueAt = retries.requeueAt;
  }
  return { create, requeueAt };
}

/**
 * Once every node is done, the nodes set aside are tried once more, in order, as slots
 * and windows allow: under a second derived name, so never twice. A node an impostor
 * claims waits, as a first start would.
 */
function startRetries(
  input: RolloutInput,
  entries: Entry[],
  nodes: ReadonlyMap<string, RolloutNodeFacts>,
  slots: number,
): { create: ActionToCreate[]; requeueAt: Date | undefined } {
  const create: ActionToCreate[] = [];
  let requeueAt: Date | undefined;
  const claimed = new Set((input.impostors ?? []).map((i) => i.node));
  for (const entry of entries) {
    if (slots <= 0) break;
    const node = nodes.get(entry.node);
    if (!awaitsRetry(entry) || !node || claimed.has(entry.node)) continue;
    const fit = windowFit(input, node, poolOf(entries, entry), input.rollout.spec.action);
    if (!fit.fits) {
      if (fit.retryAt && (!requeueAt || fit.retryAt < requeueAt)) requeueAt = fit.retryAt;
      continue;
    }
    const name = rolloutRetryName(input.rollout.metadata.name, entry.node);
    create.push({ name, node: entry.node });
    entry.phase = 'Running';
    entry.action = name;
    entry.message =
      `set aside earlier (${entry.quarantine?.blockedBy ?? 'undrainable'}): tried again, NodeAction ${name} created`.slice(
        0,
        1024,
      );
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
  /** The gates (gates.ts): a canary or soak that failed halts; a soak or pause waits. */
  gates?: GateStanding;
}

/** The rollout's one-line message. */
function messageOf(entries: readonly Entry[], counts: RolloutCounts, standing: Standing): string {
  const waiting = entries.find((e) => e.phase === 'Waiting');
  if (standing.complete)
    return entries.length === 0
      ? 'no node matches spec.nodeSelector'
      : `complete: ${String(counts.succeeded)} done, ${String(counts.skipped)} skipped, ${String(counts.failed)} failed${counts.vanished ? `, ${String(counts.vanished)} vanished` : ''}${counts.quarantined ? `, ${String(counts.quarantined)} quarantined (cordoned and labelled ${QUARANTINED_LABEL}: they need a person)` : ''}`;
  if (standing.haltReason) return `halted: ${standing.haltReason}`;
  if (standing.paused) return `paused: ${String(counts.running)} running finish, none starts`;
  const gate = standing.gates?.gate;
  if (gate && counts.running === 0) return gate.message;
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
  const gateHalt = standing.gates?.halt?.reason;
  const haltedBy = tooMany
    ? 'TooManyNodes'
    : (gateHalt ?? (halted ? 'FailureBudgetExhausted' : blocked ? 'PreflightFailed' : undefined));
  const waitingAt = standing.gates?.gate && !gateHalt ? standing.gates.gate.kind : undefined;
  return conditionsOf(
    input.rollout.status?.conditions,
    {
      Progressing: {
        status: !complete && !haltReason && !paused && counts.running > 0,
        reason: complete
          ? 'Complete'
          : (haltedBy ??
            (paused
              ? 'Paused'
              : counts.running > 0
                ? 'NodesRunning'
                : waitingAt === 'Soak'
                  ? 'Soaking'
                  : waitingAt === 'PauseBefore'
                    ? 'PausedBefore'
                    : 'WaitingForWindow')),
        message: described,
      },
      Halted: {
        status: haltReason !== undefined || paused || waitingAt === 'PauseBefore',
        reason: haltedBy ?? (paused ? 'Paused' : waitingAt === 'PauseBefore' ? 'PausedBefore' : 'NotHalted'),
        message:
          haltReason ??
          (paused
            ? 'spec.paused is true'
            : waitingAt === 'PauseBefore'
              ? (standing.gates?.gate?.message ?? '')
              : ''),
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

/** The rollout's nodes in the order they go, each where it stands (impostors held). */
export function rolloutEntries(input: RolloutInput, nodes: ReadonlyMap<string, RolloutNodeFacts>): Entry[] {
  const remembered = new Map((input.rollout.status?.nodes ?? []).map((e) => [e.node, e]));
  const actions = actionsByNode(input);
  const target = targetVersion(input.rollout);
  const entries = [...membersOf(input, nodes)]
    .map((name) => entryFor(input, name, nodes.get(name), actions.get(name), remembered.get(name), target))
    .sort(byOrder);
  applyQuarantineBudget(input, entries);
  holdImpostors(input, entries);
  return entries;
}

export function decide(input: RolloutInput): RolloutPlan {
  const { rollout, now } = input;
  const spec = rollout.spec;
  const previous = rollout.status?.nodes ?? [];
  const nodes = new Map(input.nodes.map((n) => [n.name, n]));
  const target = targetVersion(rollout);
  const entries = rolloutEntries(input, nodes);

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
  if (spec.dryRun === true) return planOnly(input, entries, tooMany);
  const gates = gateStanding(input, entries, nodes);
  const { create, requeueAt } =
    !tooMany && !halted && !paused && !blocked && !gates.halt
      ? startNodes(input, entries, nodes, (spec.maxParallel ?? 1) - counts0.running, gates)
      : { create: [], requeueAt: undefined };

  const counts = countsOf(entries);
  const complete = !tooMany && entries.every((e) => isDone(e.phase) && !awaitsRetry(e));
  const haltReason = tooMany
    ? `the rollout selects ${String(entries.length)} nodes, more than the ${String(MAX_ROLLOUT_NODES)} one rollout can track: narrow spec.nodeSelector`
    : (gates.halt?.message ??
      (halted
        ? `${String(counts.failed)} node${counts.failed === 1 ? '' : 's'} failed, more than maxFailures (${String(maxFailures)}): first ${firstFailure?.node ?? '?'}: ${firstFailure?.message ?? ''}. Raise spec.maxFailures to go on`
        : blocked));
  const standing: Standing = { tooMany, halted, preflight: blocked, paused, complete, haltReason, gates };
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
  events.push(...gates.events);
  const gate = gates.gate;
  if (gate && !gate.failed && gate.id !== rollout.status?.gate?.id)
    events.push({
      type: 'Normal',
      reason: gate.kind === 'Soak' ? 'Soaking' : 'PausedBefore',
      message: gate.message,
    });

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
    ...(rollout.status?.plan ? { plan: rollout.status.plan } : {}),
    ...(gate && !complete ? { gate } : {}),
    ...(gates.passedGates.length ? { passedGates: gates.passedGates } : {}),
    ...(gates.promotions.length ? { promotions: gates.promotions } : {}),
  };
  const wakeMs = [
    requeueAt ? Math.max(1000, requeueAt.getTime() - now.getTime()) : undefined,
    gates.requeueAfterMs,
  ]
    .filter((ms): ms is number => ms !== undefined)
    .reduce<number | undefined>((a, b) => (a === undefined ? b : Math.min(a, b)), undefined);
  const marks = nodeMarks(input, entries, actionsByNode(input));
  return {
    create,
    status,
    events,
    ...(marks.length ? { marks } : {}),
    ...(wakeMs !== undefined ? { requeueAfterMs: wakeMs } : {}),
  };
}

/** How long a plan stands before the controller makes it again (nodes and history change). */
export const PLAN_REFRESH_MS = 5 * 60_000;

/** Whether a dry run's recorded plan stands (its spec unchanged, made less than PLAN_REFRESH_MS ago). */
export function planIsFresh(rollout: ObservedNodeRollout, now: Date): boolean {
  const previous = rollout.status?.plan;
  return (
    previous !== undefined &&
    rollout.status?.observedGeneration === rollout.metadata.generation &&
    now.getTime() - Date.parse(previous.time) < PLAN_REFRESH_MS
  );
}

/**
 * spec.dryRun: the plan, and nothing started. Made again when the spec changes or it is
 * older than PLAN_REFRESH_MS, not on every pass: each pass would be a status write.
 */
function planOnly(input: RolloutInput, entries: readonly Entry[], tooMany: boolean): RolloutPlan {
  const { rollout, now } = input;
  const generation = rollout.metadata.generation;
  const previous = rollout.status?.plan;
  const fresh = planIsFresh(rollout, now);
  const made = fresh && previous ? previous : planRollout(input, entries);
  const plan = tooMany
    ? {
        ...made,
        findings: [
          ...(made.findings ?? []).filter((f) => !f.startsWith('the rollout selects')),
          `the rollout selects ${String(entries.length)} nodes, more than the ${String(MAX_ROLLOUT_NODES)} one rollout can track`,
        ],
      }
    : made;
  const feasible = plan.feasible && !tooMany;
  const counts = countsOf(entries);
  const hours =
    plan.expectedSeconds !== undefined ? `, expected ${roughDuration(plan.expectedSeconds * 1000)}` : '';
  const message = `planned (spec.dryRun): ${String(plan.nodes.length)} nodes, ${String(counts.skipped)} skipped${hours}; ${feasible ? 'set spec.dryRun to false to start it' : `it cannot succeed: ${plan.findings?.join('; ') ?? ''}`}`;
  const conditions = conditionsOf(
    rollout.status?.conditions,
    {
      Progressing: { status: false, reason: 'Planned', message },
      Halted: { status: false, reason: 'Planned', message: 'a dry run starts no node' },
      Complete: { status: false, reason: 'Planned', message: 'a dry run starts no node' },
    },
    generation,
    now,
  );
  const events: EventSpec[] = fresh
    ? []
    : [{ type: feasible ? 'Normal' : 'Warning', reason: 'Planned', message: message.slice(0, 1024) }];
  const target = targetVersion(rollout);
  return {
    create: [],
    events,
    status: {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      ...(target !== undefined ? { targetVersion: target } : {}),
      counts,
      nodes: entries.slice(0, MAX_ROLLOUT_NODES).map(({ stage: _stage, ...e }) => e),
      conditions,
      message: message.slice(0, 4096),
      plan: { ...plan, feasible },
    },
    requeueAfterMs: PLAN_REFRESH_MS,
  };
}
