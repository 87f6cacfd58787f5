// The dashboard's view model: a pure function of what the controller's caches and its
// check runner hold, so the page shows what the gate decides on (and unit tests pin it
// without a cluster). Every state is a word, never only a colour, and times are RFC 3339
// (the page formats them for the reader's locale).
import type { ActionPolicySpec } from '../api/action-policy.ts';
import { ACTIONS, type Action } from '../api/common.ts';
import type { HookKindName } from '../api/hooks.ts';
import type { NodeActionPhase, NodeActionStatus } from '../api/node-action.ts';
import { blockedCount, blockedSince, blockerWords } from '../actions/drain-hold.ts';
import type { ActionObject } from '../api/node-action.ts';
import { holdsSlot, isTerminal } from '../api/phases.ts';
import { isBootHookKind } from '../boots/record.ts';
import { probeTypeOf } from '../checks/probe.ts';
import type { CheckView } from '../checks/runner.ts';
import { checkGates } from '../checks/selection.ts';
import type { CheckState } from '../checks/state.ts';
import type { KubeObject } from '../kube/informer.ts';
import { matchesSelector, selectorToQuery } from '../kube/labels.ts';
import { rfc3339 } from '../kube/time.ts';
import { policyMatches, reportPolicy, type ActionRef, type NodeLabels } from '../policies/evaluate.ts';
import { windowState } from '../policies/window.ts';
import { forecastRow, type DrainForecastRow } from './forecast-view.ts';
import { nodeView, type NodeObject } from './node-view.ts';
import { enteredAt, mainPhases } from './phase-times.ts';
import { rolloutViews, type RolloutObject, type RolloutView } from './rollout-view.ts';
import type { NodeView } from './schemas.ts';

export { MAIN_PHASES } from './phase-times.ts';

export type PolicyObject = KubeObject & { spec: ActionPolicySpec };
export type NodeInput = KubeObject & NodeObject;

export interface DashboardInput {
  now: Date;
  /** The check runner's views: its latest state of every check it runs. */
  checks: readonly CheckView[];
  /** Undefined: this controller does not watch ActionPolicies (it runs without the gate). */
  policies: readonly PolicyObject[] | undefined;
  nodes: readonly NodeInput[];
  /** The NodeActions of this controller instance. */
  actions: readonly ActionObject[];
  instance?: string;
  /** How many finished actions are shown, newest first (default 50); the rest are counted. */
  finishedLimit?: number;
  /** The reader may not see actions: the view leaves them out (actionsHidden). */
  hideActions?: boolean;
  /** The NodeRollouts of this controller instance; undefined: it does not run rollouts. */
  rollouts?: readonly RolloutObject[];
}

export type CheckStateWord = 'Healthy' | 'Unhealthy' | 'Unknown';

export interface CheckRow {
  name: string;
  state: CheckStateWord;
  reason: string;
  message: string;
  probe: string;
  lastProbeTime: string | null;
  lastTransitionTime: string | null;
  gates: {
    /** The actions it gates (all of them when the check names none). */
    actions: Action[];
    allActions: boolean;
    /** The node selector in label-query syntax; null: every node. */
    nodeSelector: string | null;
    nodeCount: number;
    /** The first few matching nodes, by name. */
    nodes: string[];
  };
  /** Unfinished actions this check gates. */
  gatedActions: string[];
  /** Node-scoped: how many nodes are safe, and the unsafe ones (first 20) with what was found. */
  nodeResults?: {
    evaluated: number;
    safe: number;
    unsafe: number;
    unsafeNodes: { name: string; message: string }[];
  };
}

export interface PolicyRow {
  name: string;
  actions: Action[];
  allActions: boolean;
  nodeSelector: string | null;
  governedNodes: number;
  /** spec.maxConcurrent as written ("1" when absent). */
  maxConcurrent: string;
  /** maxConcurrent resolved against the governed nodes. */
  allowed: number;
  /** Actions holding a slot of this policy (admitted and unfinished). */
  inUse: number;
  holders: string[];
  window: {
    open: boolean;
    /** No windows: always open. */
    always: boolean;
    closesAt: string | null;
    nextStart: string | null;
    /** Each window in words: schedule, duration, time zone. */
    windows: string[];
    problems: string[];
  };
}

export interface HookRunRow {
  kind: HookKindName;
  namespace: string;
  name: string;
  attempt: number;
  phase: 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Bypassed';
  failurePolicy: 'Fail' | 'Ignore' | null;
  job: string | null;
  startTime: string | null;
  completionTime: string | null;
  message: string | null;
}

/**
 * One phase on the action's way: passed (with the time it entered it), where it is now,
 * skipped (not needed for this action), still ahead, not reached (it ended before), or
 * the end it came to (Failed, Denied, Cancelled).
 */
export type StepState = 'done' | 'current' | 'skipped' | 'upcoming' | 'notReached' | 'ended';

export interface TimelineStep {
  phase: NodeActionPhase;
  state: StepState;
  time: string | null;
  /** The current phase's message, or why the action ended. */
  note: string | null;
  /** Hook runs of this phase: pre-action hooks in RunningPreHooks, boot hooks in RunningPostHooks. */
  hooks: HookRunRow[];
}

export interface ActionRow {
  name: string;
  node: string;
  action: Action;
  phase: NodeActionPhase;
  finished: boolean;
  /** Deleted before it finished: being cancelled. */
  cancelling: boolean;
  execution: 'Managed' | 'External';
  requestedBy: string;
  bypass: { healthChecks: boolean; hooks: boolean; reason: string } | null;
  /** The action's parameter that matters to a reader, e.g. the image of an upgrade. */
  target: string | null;
  message: string;
  requestedAt: string | null;
  phaseTime: string | null;
  completionTime: string | null;
  timeline: TimelineStep[];
  /** notChecked: the etcd guard (builtin:etcd) could not read etcd (no talosconfig). */
  checks: {
    name: string;
    healthy: boolean;
    bypassed: boolean;
    notChecked: boolean;
    probeTime: string | null;
    message: string;
  }[];
  conditions: { type: string; status: string; reason: string; message: string; time: string }[];
  /**
   * What holds the drain (status.drain): the pods PodDisruptionBudgets refuse, longest
   * refused first, in words; `more` counts those the status does not list. Null: nothing.
   * Once the action is over: what held it when it ended.
   */
  drain: { since: string; blockers: DrainBlockerRow[]; more: number } | null;
  /** What a drain of the node would meet, forecast at the health gate (status.drainForecast); null: none made. */
  drainForecast: DrainForecastRow | null;
  /** A ConfigChange's disruption class (status.configDisruption); null: none decided. */
  configDisruption: { class: string; basis: string; paths: string[]; message: string } | null;
  /** The undo of the pre-action hooks (status.undo); null until the action ended unsuccessfully. */
  undo: { decisionTime: string; nodeDisrupted: boolean; reason: string; runs: HookRunRow[] } | null;
  bootIDBefore: string | null;
  bootIDAfter: string | null;
}

export interface DrainBlockerRow {
  namespace: string;
  pod: string;
  podDisruptionBudget: string | null;
  disruptionsAllowed: number | null;
  since: string;
  /** "rook-ceph-osd-2 blocked by PodDisruptionBudget rook-ceph/… (0 disruptions allowed)" */
  text: string;
}

export interface NodeRow extends NodeView {
  /** Unfinished actions on the node. */
  actions: string[];
}

export interface DashboardView {
  generatedAt: string;
  instance: string | null;
  summary: {
    checks: { total: number; healthy: number; unhealthy: number; unknown: number };
    actionsInProgress: number;
    actionsFinished: number;
  };
  checks: CheckRow[];
  /** Null: this controller does not watch ActionPolicies. */
  policies: PolicyRow[] | null;
  actions: ActionRow[];
  /** Finished actions left out (older than the newest shown). */
  actionsOmitted: number;
  /**
   * True when the reader may not see actions (GET /v1/actions needs list on nodeactions):
   * actions, requesters and bypass reasons are left out everywhere in the view.
   */
  actionsHidden: boolean;
  nodes: NodeRow[];
  /**
   * Each NodeRollout as a node map and swimlanes (rollout-view.ts): action data, so empty
   * when actionsHidden. Null: this controller does not run rollouts.
   */
  rollouts: RolloutView[] | null;
}

const NAMES_SHOWN = 8;

export function checkStateWord(state: CheckState): CheckStateWord {
  return state.healthy === undefined ? 'Unknown' : state.healthy ? 'Healthy' : 'Unhealthy';
}

function phaseOf(action: ActionObject): NodeActionPhase {
  return action.status?.phase ?? 'Pending';
}

function byName(a: { metadata: { name: string } }, b: { metadata: { name: string } }): number {
  return a.metadata.name.localeCompare(b.metadata.name);
}

function actionList(actions: readonly Action[] | undefined): { actions: Action[]; allActions: boolean } {
  const listed = actions ?? [];
  return listed.length === 0
    ? { actions: [...ACTIONS], allActions: true }
    : { actions: ACTIONS.filter((a) => listed.includes(a)), allActions: false };
}

function checkRow(
  view: CheckView,
  nodes: readonly NodeInput[],
  labels: NodeLabels,
  unfinished: readonly ActionObject[],
): CheckRow {
  const { state, spec } = view;
  const matching = nodes.filter((n) => matchesSelector(spec.nodeSelector, n.metadata.labels ?? {}));
  return {
    name: view.name,
    state: checkStateWord(state),
    reason: state.reason,
    message: state.message,
    probe: probeTypeOf(spec),
    lastProbeTime: state.lastProbeTime ? rfc3339(state.lastProbeTime) : null,
    lastTransitionTime: state.lastTransitionTime ? rfc3339(state.lastTransitionTime) : null,
    gates: {
      ...actionList(spec.actions),
      nodeSelector: selectorToQuery(spec.nodeSelector) ?? null,
      nodeCount: matching.length,
      nodes: matching.slice(0, NAMES_SHOWN).map((n) => n.metadata.name),
    },
    gatedActions: unfinished
      .filter((a) => checkGates(spec, a.spec.action, labels.get(a.spec.nodeName) ?? {}))
      .map((a) => a.metadata.name),
    ...(view.nodes
      ? {
          nodeResults: {
            evaluated: view.nodes.evaluated,
            safe: view.nodes.safe,
            unsafe: view.nodes.unsafe,
            unsafeNodes: view.nodes.unsafeNodes.map((n) => ({ name: n.name, message: n.message })),
          },
        }
      : {}),
  };
}

function describeWindow(w: { schedule: string; duration: string; timeZone?: string }): string {
  return `${w.schedule} for ${w.duration} (${w.timeZone ?? 'UTC'})`;
}

function policyRow(
  policy: PolicyObject,
  holders: readonly ActionRef[],
  labels: NodeLabels,
  now: Date,
): PolicyRow {
  const { spec } = policy;
  // The figures are the gate's own (src/policies); only the holders' names are listed here,
  // by the same rule: a holder whose node is gone counts against every policy.
  const report = reportPolicy(spec, holders, labels, now);
  const window = windowState(spec.windows, now);
  const using = holders.filter((h) => {
    const nodeLabels = labels.get(h.node);
    return nodeLabels === undefined || policyMatches(spec, h, nodeLabels);
  });
  return {
    name: policy.metadata.name,
    ...actionList(spec.actions),
    nodeSelector: selectorToQuery(spec.nodeSelector) ?? null,
    governedNodes: report.matchingNodes,
    maxConcurrent: spec.maxConcurrent === undefined ? '1' : String(spec.maxConcurrent),
    allowed: report.allowedConcurrent,
    inUse: report.activeActions,
    holders: using.map((h) => h.name),
    window: {
      open: report.windowOpen,
      always: (spec.windows ?? []).length === 0,
      closesAt: window.closesAt ? rfc3339(window.closesAt) : null,
      nextStart: report.nextWindowStart ? rfc3339(report.nextWindowStart) : null,
      windows: (spec.windows ?? []).map(describeWindow),
      problems: report.problems,
    },
  };
}

function hookRunRow(record: NonNullable<NodeActionStatus['hooks']>[number]): HookRunRow {
  return {
    kind: record.kind,
    namespace: record.namespace,
    name: record.name,
    attempt: record.attempt,
    phase: record.phase,
    failurePolicy: record.failurePolicy ?? null,
    job: record.jobName ?? null,
    startTime: record.startTime ?? null,
    completionTime: record.completionTime ?? null,
    message: record.message ?? null,
  };
}

export function actionTimeline(action: ActionObject): TimelineStep[] {
  const status = action.status ?? {};
  const phase = phaseOf(action);
  const runs = (status.hooks ?? []).map(hookRunRow);
  const hooksOf = (p: NodeActionPhase): HookRunRow[] =>
    p === 'RunningPreHooks'
      ? runs.filter((r) => !isBootHookKind(r.kind))
      : p === 'RunningPostHooks'
        ? runs.filter((r) => isBootHookKind(r.kind))
        : [];
  const step = (p: NodeActionPhase, state: StepState, time: string | undefined, note?: string) => ({
    phase: p,
    state,
    time: time ?? null,
    note: note ?? null,
    hooks: hooksOf(p),
  });

  const phases = mainPhases(action.spec);
  if (!isTerminal(phase) || phase === 'Succeeded') {
    const current = phases.indexOf(phase);
    return phases.map((p, i) => {
      if (i === current) {
        return phase === 'Succeeded'
          ? step(p, 'done', status.completionTime, status.message)
          : step(
              p,
              'current',
              status.phaseTime ?? enteredAt(p, status),
              status.message ??
                (status.phase === undefined ? 'not yet picked up by the controller' : undefined),
            );
      }
      if (i > current) return step(p, 'upcoming', undefined);
      const time = enteredAt(p, status);
      return step(p, time ? 'done' : 'skipped', time);
    });
  }
  // Failed, Denied or Cancelled: the phases it left a trace of, then how it ended.
  const times = phases.map((p) => (p === 'Succeeded' ? undefined : enteredAt(p, status)));
  const reached = times.reduce((last, time, i) => (time ? i : last), -1);
  return [
    ...phases.map((p, i) => {
      const time = times[i];
      if (i > reached) return step(p, 'notReached', undefined);
      return step(p, time ? 'done' : 'skipped', time);
    }),
    step(phase, 'ended', status.completionTime, status.message),
  ];
}

function target(action: ActionObject): string | null {
  const spec = action.spec;
  if (spec.upgrade) return `to ${spec.upgrade.image}`;
  if (spec.configChange) return `mode ${spec.configChange.mode ?? 'Auto'}`;
  if (spec.reset)
    return `wipe ${spec.reset.wipeMode ?? 'All'}${spec.reset.userDisks?.length ? ` (${spec.reset.userDisks.join(', ')})` : ''}`;
  return null;
}

export function actionRow(action: ActionObject): ActionRow {
  const { spec } = action;
  const status = action.status ?? {};
  const phase = phaseOf(action);
  const bypass = spec.bypass;
  return {
    name: action.metadata.name,
    node: spec.nodeName,
    action: spec.action,
    phase,
    finished: isTerminal(phase),
    cancelling: action.metadata.deletionTimestamp !== undefined && !isTerminal(phase),
    execution: spec.execution ?? 'Managed',
    requestedBy: spec.requestedBy,
    bypass:
      bypass?.healthChecks || bypass?.hooks
        ? {
            healthChecks: bypass.healthChecks === true,
            hooks: bypass.hooks === true,
            reason: bypass.reason ?? '',
          }
        : null,
    target: target(action),
    message: status.message ?? '',
    requestedAt: action.metadata.creationTimestamp ?? null,
    phaseTime: status.phaseTime ?? null,
    completionTime: status.completionTime ?? null,
    timeline: actionTimeline(action),
    checks: (status.checks ?? []).map((c) => ({
      name: c.name,
      healthy: c.healthy,
      bypassed: c.bypassed === true,
      notChecked: c.notChecked === true,
      probeTime: c.probeTime ?? null,
      message: c.message ?? '',
    })),
    conditions: (status.conditions ?? []).map((c) => ({
      type: c.type,
      status: c.status,
      reason: c.reason,
      message: c.message,
      time: c.lastTransitionTime,
    })),
    drain: drainRow(status.drain),
    drainForecast: forecastRow(status.drainForecast),
    configDisruption: status.configDisruption
      ? {
          class: status.configDisruption.class,
          basis: status.configDisruption.basis,
          paths: status.configDisruption.paths ?? [],
          message: status.configDisruption.message,
        }
      : null,
    undo: status.undo
      ? {
          decisionTime: status.undo.decisionTime,
          nodeDisrupted: status.undo.nodeDisrupted,
          reason: status.undo.reason,
          runs: (status.undo.runs ?? []).map(hookRunRow),
        }
      : null,
    bootIDBefore: status.bootIDBefore ?? null,
    bootIDAfter: status.bootIDAfter ?? null,
  };
}

function drainRow(record: NodeActionStatus['drain']): ActionRow['drain'] {
  const since = blockedSince(record);
  if (!record || since === undefined) return null;
  const blockers = (record.blockers ?? []).map((b) => ({
    namespace: b.namespace,
    pod: b.pod,
    podDisruptionBudget: b.podDisruptionBudget ?? null,
    disruptionsAllowed: b.disruptionsAllowed ?? null,
    since: b.since,
    text: blockerWords(b),
  }));
  return { since, blockers, more: blockedCount(record) - blockers.length };
}

/** Unfinished actions oldest first, then finished ones newest first. */
function actionOrder(a: ActionObject, b: ActionObject): number {
  const aDone = isTerminal(phaseOf(a));
  const bDone = isTerminal(phaseOf(b));
  if (aDone !== bDone) return aDone ? 1 : -1;
  if (aDone) {
    const byEnd = (b.status?.completionTime ?? '').localeCompare(a.status?.completionTime ?? '');
    if (byEnd) return byEnd;
  }
  return (
    (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') || byName(a, b)
  );
}

export function dashboardView(input: DashboardInput): DashboardView {
  const { now } = input;
  const nodes = [...input.nodes].sort(byName);
  const labels: NodeLabels = new Map(nodes.map((n) => [n.metadata.name, n.metadata.labels ?? {}]));
  const actions = input.hideActions ? [] : [...input.actions].sort(actionOrder);
  const unfinished = actions.filter((a) => !isTerminal(phaseOf(a)));
  const finished = actions.length - unfinished.length;
  const shownFinished = Math.min(finished, input.finishedLimit ?? 50);
  const holders: ActionRef[] = actions
    .filter((a) => holdsSlot(a.status?.phase))
    .map((a) => ({ name: a.metadata.name, node: a.spec.nodeName, action: a.spec.action }));

  const checks = input.checks.map((v) => checkRow(v, nodes, labels, unfinished));
  const count = (word: CheckStateWord) => checks.filter((c) => c.state === word).length;
  return {
    generatedAt: rfc3339(now),
    instance: input.instance ?? null,
    summary: {
      checks: {
        total: checks.length,
        healthy: count('Healthy'),
        unhealthy: count('Unhealthy'),
        unknown: count('Unknown'),
      },
      actionsInProgress: unfinished.length,
      actionsFinished: finished,
    },
    checks,
    policies:
      input.policies === undefined
        ? null
        : input.policies
            .filter((p) => !p.metadata.deletionTimestamp)
            .sort(byName)
            .map((p) => policyRow(p, holders, labels, now)),
    actions: actions.slice(0, unfinished.length + shownFinished).map(actionRow),
    actionsOmitted: finished - shownFinished,
    actionsHidden: input.hideActions === true,
    nodes: nodes.map((n) => ({
      ...nodeView(n.metadata.name, n),
      actions: unfinished.filter((a) => a.spec.nodeName === n.metadata.name).map((a) => a.metadata.name),
    })),
    rollouts:
      input.rollouts === undefined
        ? null
        : input.hideActions
          ? []
          : rolloutViews({
              now,
              rollouts: input.rollouts,
              actions,
              nodes,
              policies: input.policies ?? [],
            }),
  };
}
