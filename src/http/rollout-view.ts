// The dashboard's rollout view: for each NodeRollout, a node map (one tile per node,
// grouped by groupBy, with its state in words) and one swimlane per node along a time
// axis, each action drawn as segments of its phases, failures and holds marked, and the
// maintenance windows of the policies that govern its nodes. A pure function of the
// caches, like dashboard-view.ts; the page (dashboard/app.js) only draws it.
import type { ActionPolicySpec } from '../api/action-policy.ts';
import type { NodeActionPhase } from '../api/node-action.ts';
import type { ObservedNodeRollout, RolloutCounts, RolloutNode } from '../api/node-rollout.ts';
import { PHASES, isTerminal } from '../api/phases.ts';
import type { ActionObject } from '../api/node-action.ts';
import { blockedSince } from '../actions/drain-hold.ts';
import { readAuditRecord } from '../boots/audit.ts';
import type { KubeObject } from '../kube/informer.ts';
import { rfc3339 } from '../kube/time.ts';
import { policyMatches } from '../policies/evaluate.ts';
import { windowIntervals } from '../policies/window.ts';
import { phaseEntries } from './phase-times.ts';

export type RolloutObject = ObservedNodeRollout & KubeObject;

/**
 * A node's state on the node map: done (succeeded), skipped (already at the target),
 * running, waiting (held back by the rollout, e.g. for a window, or its action waiting
 * for its policies), failed, notYet (not started), vanished (the node went away),
 * quarantined (set aside undrained: cordoned, labelled, tried again at the end).
 */
export type TileState =
  'done' | 'skipped' | 'running' | 'waiting' | 'failed' | 'notYet' | 'vanished' | 'quarantined';

export const TILE_WORDS: Record<TileState, string> = {
  done: 'done',
  skipped: 'done: at target',
  running: 'running',
  waiting: 'waiting',
  failed: 'failed',
  notYet: 'not yet',
  vanished: 'gone',
  quarantined: 'set aside: undrainable',
};

export interface RolloutTile {
  node: string;
  state: TileState;
  /** The state in words, e.g. "running: WaitingForNode". */
  word: string;
  action: string | null;
  actionPhase: string | null;
  controlPlane: boolean;
  message: string;
}

export interface RolloutGroup {
  /** The groupBy label's value; null: nodes without the label, or no groupBy. */
  value: string | null;
  /** How the group is named on the page. */
  label: string;
  tiles: RolloutTile[];
}

/** One phase of an action drawn on its lane: from `start` to `end` (null: still in it). */
export interface PhaseSegment {
  phase: NodeActionPhase;
  /** The phase in words, e.g. "waiting for health". */
  label: string;
  start: string;
  end: string | null;
}

export interface LaneMark {
  kind: 'failed' | 'hold' | 'unplanned';
  /** A failure's time, or the start of a hold; null: now (held back now, since unknown). */
  time: string | null;
  /** The end of a hold; null: it holds now, or it is a point (a failure). */
  end: string | null;
  text: string;
}

export interface RolloutLane {
  node: string;
  action: string | null;
  segments: PhaseSegment[];
  marks: LaneMark[];
  /**
   * When the plan (status.plan) expects the node to go, while it has not started: drawn
   * dashed. Null: started, skipped, or no plan.
   */
  planned: { start: string; end: string; drain?: string } | null;
}

export interface WindowBand {
  policy: string;
  /** The rollout's nodes the policy governs (for the rollout's action). */
  nodes: string[];
  /** When its windows are open within the view's range; none: closed all along. */
  open: { start: string; end: string }[];
}

export interface RolloutView {
  name: string;
  action: string;
  target: string | null;
  /** Complete, Halted (with the reason in message), Paused, Progressing, Planned (a dry run), or New (not processed yet). */
  state: 'Complete' | 'Halted' | 'Paused' | 'Progressing' | 'Planned' | 'New';
  message: string;
  counts: RolloutCounts | null;
  groupBy: string | null;
  groups: RolloutGroup[];
  lanes: RolloutLane[];
  windows: WindowBand[];
  /** The nodes set aside because they could not be drained, with what blocked each. */
  quarantined: { node: string; blockedBy: string; since: string; retried: boolean }[];
  /**
   * The time axis: from the rollout's start to its completion; end null: to now (the
   * snapshot's generatedAt), so that a rollout that waits does not change every second.
   */
  range: { start: string; end: string | null };
}

export interface RolloutViewInput {
  now: Date;
  rollouts: readonly RolloutObject[];
  /** Every NodeAction of this controller instance, finished ones included. */
  actions: readonly ActionObject[];
  nodes: readonly {
    metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  }[];
  policies: readonly { metadata: { name: string; deletionTimestamp?: string }; spec: ActionPolicySpec }[];
  /** How many finished rollouts are shown, newest first (default 5). */
  finishedLimit?: number;
}

const HOUR_MS = 3_600_000;

export const PHASE_LABELS = Object.fromEntries(
  (Object.keys(PHASES) as NodeActionPhase[]).map((p) => [p, PHASES[p].label]),
) as Readonly<Record<NodeActionPhase, string>>;

function condition(rollout: RolloutObject, type: string): boolean {
  return rollout.status?.conditions?.some((c) => c.type === type && c.status === 'True') === true;
}

function rolloutState(rollout: RolloutObject): RolloutView['state'] {
  if (!rollout.status) return 'New';
  if (condition(rollout, 'Complete')) return 'Complete';
  if (rollout.spec.dryRun) return 'Planned';
  if (rollout.spec.paused) return 'Paused';
  if (condition(rollout, 'Halted')) return 'Halted';
  return 'Progressing';
}

function tileState(entry: RolloutNode): TileState {
  switch (entry.phase) {
    case 'Succeeded':
      return 'done';
    case 'Skipped':
      return 'skipped';
    case 'Failed':
      return 'failed';
    case 'Waiting':
      return 'waiting';
    case 'Vanished':
      return 'vanished';
    case 'Quarantined':
      return 'quarantined';
    case 'Running':
      // An action the rollout started that its policies hold back: a hold, not progress.
      return entry.actionPhase === 'Pending' ? 'waiting' : 'running';
    default:
      return 'notYet';
  }
}

function tile(entry: RolloutNode): RolloutTile {
  const state = tileState(entry);
  const phase =
    entry.actionPhase && !isTerminal(entry.actionPhase as NodeActionPhase) ? entry.actionPhase : '';
  return {
    node: entry.node,
    state,
    word: phase ? `${TILE_WORDS[state]}: ${phase}` : TILE_WORDS[state],
    action: entry.action ?? null,
    actionPhase: entry.actionPhase ?? null,
    controlPlane: entry.controlPlane === true,
    message: entry.message ?? '',
  };
}

function groups(rollout: RolloutObject, entries: readonly RolloutNode[]): RolloutGroup[] {
  const groupBy = rollout.spec.groupBy;
  const out: RolloutGroup[] = [];
  // The status lists nodes in the order they go: groups appear in that order too.
  for (const entry of entries) {
    const value = groupBy ? (entry.group ?? null) : null;
    let group = out.find((g) => g.value === value);
    if (!group) {
      group = {
        value,
        label: !groupBy ? 'all nodes' : value === null ? `without ${groupBy}` : `${groupBy}=${value}`,
        tiles: [],
      };
      out.push(group);
    }
    group.tiles.push(tile(entry));
  }
  return out;
}

function lane(
  entry: RolloutNode,
  action: ActionObject | undefined,
  node: { metadata: { annotations?: Record<string, string> } } | undefined,
): RolloutLane {
  const status = action?.status ?? {};
  const entries = action ? phaseEntries(status) : [];
  const segments: PhaseSegment[] = [];
  const marks: LaneMark[] = [];
  entries.forEach((e, i) => {
    if (isTerminal(e.phase)) return;
    const next = entries[i + 1];
    segments.push({
      phase: e.phase,
      label: PHASE_LABELS[e.phase],
      start: e.since,
      end: next ? next.since : isTerminal(status.phase) ? (status.completionTime ?? null) : null,
    });
  });
  const phase = status.phase;
  if (phase === 'Failed' || phase === 'Denied' || phase === 'Cancelled') {
    const time = status.completionTime ?? entries.at(-1)?.since;
    if (time) marks.push({ kind: 'failed', time, end: null, text: `${phase}: ${status.message ?? ''}` });
  }
  const drain = blockedSince(status.drain);
  if (drain !== undefined) {
    const ended = isTerminal(phase) || phase === 'WaitingForNode' || phase === 'RunningPostHooks';
    marks.push({
      kind: 'hold',
      time: drain,
      end: ended ? (segments.find((s) => s.phase === 'Executing')?.end ?? null) : null,
      text: 'drain held: PodDisruptionBudgets refuse evictions',
    });
  }
  if (entry.phase === 'Waiting')
    marks.push({ kind: 'hold', time: null, end: null, text: entry.message ?? 'held back' });
  // What went around the gate on this node, while the rollout ran (the audit's last finding).
  const unplanned = readAuditRecord(node?.metadata.annotations)?.last;
  const started = entries[0]?.since;
  if (unplanned && started !== undefined && unplanned.at >= started)
    marks.push({
      kind: 'unplanned',
      time: unplanned.at,
      end: null,
      text: `unplanned ${unplanned.kind}: no gatehouse action explains it`,
    });
  return { node: entry.node, action: entry.action ?? null, segments, marks, planned: null };
}

/** The plan's times for the lanes not started yet. */
function withPlan(lanes: RolloutLane[], plan: NonNullable<RolloutObject['status']>['plan']): void {
  if (!plan) return;
  const byNode = new Map(plan.nodes.map((p) => [p.node, p]));
  for (const l of lanes) {
    const p = byNode.get(l.node);
    if (l.segments.length === 0 && p?.start && p.end)
      l.planned = {
        start: p.start,
        end: p.end,
        // What its drain would meet now (the plan's forecast), said on its planned bar.
        ...(p.drain
          ? {
              drain: `drain would meet ${String(p.drain.pods)} pod${p.drain.pods === 1 ? '' : 's'}: ${p.drain.words?.join('; ') ?? ''}`,
            }
          : {}),
      };
  }
}

function earliest(times: (string | undefined)[]): number | undefined {
  const ms = times.map((t) => (t ? Date.parse(t) : NaN)).filter((t) => Number.isFinite(t));
  return ms.length ? Math.min(...ms) : undefined;
}

export function rolloutView(input: RolloutViewInput, rollout: RolloutObject): RolloutView {
  const { now } = input;
  const status = rollout.status ?? {};
  const entries = status.nodes ?? [];
  const actions = new Map(input.actions.map((a) => [a.metadata.name, a]));
  const nodes = new Map(input.nodes.map((n) => [n.metadata.name, n]));
  const lanes = entries.map((e) => lane(e, e.action ? actions.get(e.action) : undefined, nodes.get(e.node)));
  withPlan(lanes, status.plan);
  // A dry run is drawn over its plan: from when it was made to when it is expected to end.
  const dryRun = rollout.spec.dryRun === true && status.plan !== undefined;
  const startMs =
    earliest([
      status.startTime,
      rollout.metadata.creationTimestamp,
      ...lanes.flatMap((l) => l.segments.map((s) => s.start)),
    ]) ?? now.getTime();
  const complete = condition(rollout, 'Complete') && status.completionTime !== undefined;
  const start = new Date(startMs);
  // Complete: to its completion, or to the last thing drawn if that came later (the
  // rollout's time is whole seconds, its actions' are not).
  const drawnUntil = lanes.flatMap((l) => [
    ...l.segments.map((s) => s.end ?? ''),
    ...l.marks.map((m) => m.end ?? m.time ?? ''),
  ]);
  const planEnd = dryRun && status.plan?.expectedEnd ? new Date(status.plan.expectedEnd) : undefined;
  const end = planEnd
    ? planEnd
    : complete
      ? new Date(
          Math.max(
            startMs,
            Date.parse(status.completionTime ?? ''),
            ...drawnUntil.map((t) => Date.parse(t) || 0),
          ),
        )
      : undefined;
  // Windows to the full hour after the one that ends the range (still going: now's): the
  // page clips them to what it draws, and they change once an hour, not every snapshot.
  const windowsEnd = new Date((Math.floor((end ?? now).getTime() / HOUR_MS) + 2) * HOUR_MS);

  const labels = new Map(input.nodes.map((n) => [n.metadata.name, n.metadata.labels ?? {}]));
  const windows: WindowBand[] = [];
  for (const policy of input.policies) {
    if (policy.metadata.deletionTimestamp || (policy.spec.windows ?? []).length === 0) continue;
    const governed = entries
      .map((e) => e.node)
      .filter((node) => {
        const l = labels.get(node);
        return (
          l !== undefined && policyMatches(policy.spec, { name: '', node, action: rollout.spec.action }, l)
        );
      });
    if (governed.length === 0) continue;
    windows.push({
      policy: policy.metadata.name,
      nodes: governed,
      open: windowIntervals(policy.spec.windows, start, windowsEnd).map((w) => ({
        start: rfc3339(w.start),
        end: rfc3339(w.end),
      })),
    });
  }
  windows.sort((a, b) => a.policy.localeCompare(b.policy));

  return {
    name: rollout.metadata.name,
    action: rollout.spec.action,
    target: rollout.spec.upgrade
      ? `to ${status.targetVersion ?? rollout.spec.upgrade.image}`
      : rollout.spec.action === 'Reboot'
        ? 'each node once'
        : null,
    state: rolloutState(rollout),
    message: status.message ?? '',
    counts: status.counts ?? null,
    groupBy: rollout.spec.groupBy ?? null,
    groups: groups(rollout, entries),
    lanes,
    windows,
    quarantined: entries.flatMap((e) =>
      e.phase === 'Quarantined' && e.quarantine
        ? [
            {
              node: e.node,
              blockedBy: e.quarantine.blockedBy,
              since: e.quarantine.since,
              retried: e.quarantine.retried === true,
            },
          ]
        : [],
    ),
    // The end to the millisecond: an action's times have them, and the drawing must hold them.
    range: { start: rfc3339(start), end: end ? end.toISOString() : null },
  };
}

/** Unfinished rollouts oldest first, then the most recent finished ones. */
export function rolloutViews(input: RolloutViewInput): RolloutView[] {
  const live = input.rollouts.filter((r) => !r.metadata.deletionTimestamp);
  const done = (r: RolloutObject) => condition(r, 'Complete');
  const created = (r: RolloutObject) => r.metadata.creationTimestamp ?? '';
  const unfinished = live
    .filter((r) => !done(r))
    .sort((a, b) => created(a).localeCompare(created(b)) || a.metadata.name.localeCompare(b.metadata.name));
  const finished = live
    .filter(done)
    .sort((a, b) => (b.status?.completionTime ?? '').localeCompare(a.status?.completionTime ?? ''))
    .slice(0, input.finishedLimit ?? 5);
  return [...unfinished, ...finished].map((r) => rolloutView(input, r));
}
