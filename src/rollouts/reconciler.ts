// The rollout reconciler: the imperative shell around decide() (decide.ts). It observes
// the rollouts, nodes, NodeActions and ActionPolicies caches, asks the core what to do
// for a rollout, creates the NodeActions it names (under names derived from the rollout
// and the node: a 409 is an action that exists, adopted only when this rollout made it),
// then writes the status conditionally on the resourceVersion it decided on, then Events.
//
// Work-queue keys are rollout names. Only the leader acts; it starts once every cache
// has synced, so a restarted controller sees every action its predecessor created.
import { API_VERSION } from '../api/common.ts';
import {
  BYPASS_GRANTED_BY_ANNOTATION,
  CORDONED_BY_ANNOTATION,
  INSTANCE_LABEL,
  QUARANTINED_LABEL,
  ROLLOUT_LABEL,
} from '../api/names.ts';
import type { ActionObject, NodeActionSpec } from '../api/node-action.ts';
import type { ObservedNodeRollout } from '../api/node-rollout.ts';
import { NODE_ACTIONS_PATH, NODE_ROLLOUTS_PATH } from '../api/paths.ts';
import { isTerminal } from '../api/phases.ts';
import type { ActionPolicy } from '../api/action-policy.ts';
import type { EventRecorder } from '../kube/events.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import { sameJSON } from '../canonical-json.ts';
import { ConditionalWrites, Reconciler, isConflict } from '../kube/reconciler.ts';
import type { RestClient } from '../kube/rest.ts';
import type { ReconcileResult, WorkQueue } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { ObservedCheck } from '../checks/runner.ts';
import { decide, planIsFresh } from './decide.ts';
import type { PlanDrainRead } from './plan-drain.ts';
import { readPlanDrain } from './plan-drain-read.ts';
import type { RolloutActionFacts, RolloutCheckFacts, RolloutNodeFacts } from './facts.ts';
import type { HistoryEntry } from './expected-duration.ts';
import { claimedRollout, notMadeBy, sortClaims, type Impostor } from './membership.ts';
import { rolloutLabelValue } from './naming.ts';
import type { NodeMark } from './quarantine.ts';
import { drainHoldWords } from '../actions/drain-hold.ts';

export type RolloutObject = ObservedNodeRollout & KubeObject;
type NodeObject = KubeObject & { status?: { nodeInfo?: { osImage?: string; kubeletVersion?: string } } };

export interface RolloutReconcilerOptions {
  rest: RestClient;
  log: Logger;
  events: EventRecorder;
  metrics: Metrics;
  rollouts: Informer<RolloutObject>;
  /** This controller's NodeActions (its instance's): the rollouts' own and the history. */
  actions: Informer<ActionObject>;
  nodes: Informer<KubeObject>;
  policies: Informer<ActionPolicy & KubeObject>;
  /** The ClusterHealthChecks, which a soak watches (gates.ts); absent: no check gates a soak. */
  checks?: Informer<ObservedCheck>;
  isLeader: () => boolean;
  instance?: string;
  /** The clock, for tests. */
  now?: () => Date;
}

function historyEntry(a: ActionObject): HistoryEntry {
  const admitted = a.status?.conditions?.find((c) => c.type === 'Admitted' && c.status === 'True');
  return {
    node: a.spec.nodeName,
    action: a.spec.action,
    phase: a.status?.phase,
    startTime: admitted?.lastTransitionTime ?? a.status?.startTime,
    completionTime: a.status?.completionTime,
  };
}

/** A ClusterHealthCheck as a soak weighs it: its verdict, and when it last changed. */
function checkFacts(c: ObservedCheck): RolloutCheckFacts {
  const changedAt = c.status?.conditions?.find((k) => k.type === 'Healthy')?.lastTransitionTime;
  return {
    name: c.metadata.name,
    spec: c.spec,
    healthy: c.status?.healthy,
    ...(changedAt ? { changedAt } : {}),
  };
}

/** An action as the rollout's core reads it: its phase, and whether its drain ran out of time. */
function actionFacts(a: ActionObject): RolloutActionFacts {
  const drained = a.status?.conditions?.find((c) => c.type === 'Drained');
  const timedOut = a.status?.phase === 'Failed' && drained?.reason === 'DrainTimedOut';
  const blockedBy = timedOut && a.status?.drain ? drainHoldWords(a.status.drain) : undefined;
  return {
    name: a.metadata.name,
    node: a.spec.nodeName,
    ...(a.status?.phase ? { phase: a.status.phase } : {}),
    ...(a.status?.message ? { message: a.status.message } : {}),
    ...(timedOut ? { drainTimedOut: true } : {}),
    ...(blockedBy ? { blockedBy } : {}),
    ...(a.status?.rollback ? { rolledBack: true } : {}),
  };
}

/**
 * The merge patch a mark needs on the Node as cached, or undefined when it carries it:
 * the label only ever removed when it names this rollout; the cordon passed on or lifted
 * only while talos.dev/cordoned-by names one of the actions the plan expects.
 */
export function markPatch(node: KubeObject, mark: NodeMark, value: string): object | undefined {
  const labels: Record<string, string | null> = {};
  const current = node.metadata.labels?.[QUARANTINED_LABEL];
  if (mark.labelled && current !== value) labels[QUARANTINED_LABEL] = value;
  if (!mark.labelled && current === value) labels[QUARANTINED_LABEL] = null;
  const by = node.metadata.annotations?.[CORDONED_BY_ANNOTATION];
  const cordon = mark.cordon && by !== undefined && mark.cordon.from.includes(by) ? mark.cordon : undefined;
  if (Object.keys(labels).length === 0 && !cordon) return undefined;
  return {
    metadata: {
      resourceVersion: node.metadata.resourceVersion,
      ...(Object.keys(labels).length ? { labels } : {}),
      ...(cordon ? { annotations: { [CORDONED_BY_ANNOTATION]: cordon.to } } : {}),
    },
    ...(cordon?.to === null ? { spec: { unschedulable: false } } : {}),
  };
}

/** The least time between two status writes of one rollout. */
export const STATUS_WRITE_INTERVAL_MS = 1000;

/** How often a rollout looks again at the names it found taken, while one is. */
const SQUATTER_RECHECK_MS = 30_000;

export class RolloutReconciler {
  readonly queue: WorkQueue;
  private readonly o: RolloutReconcilerOptions;
  private readonly loop: Reconciler;
  private readonly writes = new ConditionalWrites();
  /**
   * Actions this replica created that its cache may not show yet, by name: counted as
   * the rollout's until the cache has them, so a reconcile in between never exceeds
   * maxParallel nor asks for one twice.
   */
  private readonly created = new Map<string, ActionObject>();
  /**
   * Names taken by NodeActions this rollout did not make (a 409 on create), by rollout
   * UID, with why: the node waits while one is there.
   */
  private readonly foreign = new Map<string, Map<string, Impostor>>();
  /** When each rollout's status was last written by this replica (STATUS_WRITE_INTERVAL_MS). */
  private readonly lastWrite = new Map<string, number>();
  /** The impostors each rollout (by UID) has reported in a Warning: one Event each per process. */
  private readonly reported = new Map<string, Set<string>>();

  constructor(options: RolloutReconcilerOptions) {
    this.o = options;
    // Every action its predecessor created is in the cache before a rollout is decided.
    this.loop = new Reconciler({
      name: 'rollouts',
      log: options.log,
      isLeader: options.isLeader,
      concurrency: 2,
      caches: () => [options.rollouts, options.actions, options.nodes, options.policies],
      keys: () => options.rollouts.list().map((r) => r.metadata.name),
      reconcile: (key) => this.reconcile(key),
    });
    this.queue = this.loop.queue;
    this.wire();
  }

  async start(signal?: AbortSignal): Promise<void> {
    await this.loop.start(signal);
  }

  stop(): void {
    this.loop.stop();
  }

  enqueueAll(): void {
    this.loop.enqueueAll();
  }

  private wire(): void {
    const { rollouts, actions, nodes, policies } = this.o;
    rollouts.on('add', (r) => this.queue.add(r.metadata.name));
    rollouts.on('update', (_, r) => this.queue.add(r.metadata.name));
    rollouts.on('delete', (r) => {
      this.writes.forget(r.metadata.name);
      this.lastWrite.delete(r.metadata.name);
      this.foreign.delete(r.metadata.uid);
      this.reported.delete(r.metadata.uid);
      this.o.metrics.forgetRollout(r.metadata.name);
    });
    const onAction = (a: ActionObject) => {
      this.created.delete(a.metadata.name);
      const owner = claimedRollout(a);
      if (owner) this.queue.add(owner.name);
      // An action squatting a rollout's action name claims nothing: found by its name.
      for (const [uid, squatters] of this.foreign) {
        if (!squatters.has(a.metadata.name)) continue;
        const rollout = this.o.rollouts.list().find((r) => r.metadata.uid === uid);
        if (rollout) this.queue.add(rollout.metadata.name);
      }
    };
    actions.on('add', onAction);
    actions.on('update', (old, a) => {
      if (old.status?.phase !== a.status?.phase || old.status?.message !== a.status?.message) onAction(a);
    });
    actions.on('delete', onAction);
    // A node that appears, goes, or changes labels or version may change any rollout.
    // A soaking rollout halts as soon as a check it watches is no longer healthy.
    this.o.checks?.on('update', (old, c) => {
      if (old.status?.healthy === c.status?.healthy) return;
      for (const r of rollouts.list()) if (r.status?.gate?.kind === 'Soak') this.queue.add(r.metadata.name);
    });
    nodes.on('add', () => this.enqueueAll());
    nodes.on('delete', () => this.enqueueAll());
    nodes.on('update', (old, n) => {
      const osImage = (x: KubeObject) => (x as NodeObject).status?.nodeInfo?.osImage;
      const kubelet = (x: KubeObject) => (x as NodeObject).status?.nodeInfo?.kubeletVersion;
      if (
        JSON.stringify(old.metadata.labels) !== JSON.stringify(n.metadata.labels) ||
        osImage(old) !== osImage(n) ||
        kubelet(old) !== kubelet(n)
      )
        this.enqueueAll();
    });
    policies.on('add', () => this.enqueueAll());
    policies.on('update', () => this.enqueueAll());
    policies.on('delete', () => this.enqueueAll());
  }

  /** The actions that claim the rollout, split into its own and impostors (membership.ts). */
  private claims(rollout: RolloutObject): { own: ActionObject[]; impostors: Impostor[] } {
    const claiming = new Map<string, ActionObject>();
    for (const a of this.created.values()) claiming.set(a.metadata.name, a);
    for (const a of this.o.actions.list()) claiming.set(a.metadata.name, a);
    return sortClaims(rollout, claiming.values());
  }

  /**
   * The remembered actions the cache does not show, read from the API server: only an
   * action confirmed gone (404) is reported as deleted; one found is the rollout's if it
   * made it, and otherwise an impostor under the name of one it made (which is gone: a
   * failure, never a success). A cache that lags never makes the rollout forget a node.
   */
  private async confirmRemembered(
    rollout: RolloutObject,
    owned: ActionObject[],
    impostors: Impostor[],
  ): Promise<{ found: ActionObject[]; deleted: Set<string> }> {
    const have = new Set(owned.map((a) => a.metadata.name));
    const found: ActionObject[] = [];
    const deleted = new Set<string>();
    for (const entry of rollout.status?.nodes ?? []) {
      if (!entry.action || have.has(entry.action)) continue;
      if (entry.phase !== 'Running') continue;
      try {
        const action = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${entry.action}`);
        const why = notMadeBy(rollout, action);
        if (why === undefined) found.push(action);
        else {
          deleted.add(entry.action);
          if (!impostors.some((i) => i.uid === action.metadata.uid))
            impostors.push({
              name: action.metadata.name,
              uid: action.metadata.uid,
              node: action.spec.nodeName,
              why,
            });
        }
      } catch (error) {
        if (isConflict(error, [404])) deleted.add(entry.action);
        else throw error;
      }
    }
    return { found, deleted };
  }

  private actionBody(rollout: RolloutObject, name: string, node: string): Record<string, unknown> {
    const s = rollout.spec;
    // The action's bypass is the rollout's; who granted it goes in an annotation the
    // admission policy keeps to the controller (an action's spec has no such field).
    const { grantedBy, ...bypass } = s.bypass ?? {};
    const bypassing = bypass.healthChecks === true || bypass.hooks === true;
    const spec: NodeActionSpec = {
      nodeName: node,
      action: s.action,
      ...(s.upgrade ? { upgrade: s.upgrade } : {}),
      ...(s.reboot ? { reboot: s.reboot } : {}),
      ...(s.execution ? { execution: s.execution } : {}),
      // Under Quarantine, a drain that times out leaves the node cordoned for the rollout.
      ...(s.onDrainTimeout === 'Quarantine' && (s.execution ?? 'Managed') === 'Managed'
        ? { drain: { ...s.drain, onTimeout: 'KeepCordoned' as const } }
        : s.drain
          ? { drain: s.drain }
          : {}),
      ...(s.postChecks ? { postChecks: s.postChecks } : {}),
      ...(s.onPostCheckFailure ? { onPostCheckFailure: s.onPostCheckFailure } : {}),
      ...(s.bypass ? { bypass } : {}),
      ...(s.deadlines ? { deadlines: s.deadlines } : {}),
      requestedBy: s.requestedBy,
    };
    return {
      apiVersion: API_VERSION,
      kind: 'NodeAction',
      metadata: {
        name,
        labels: {
          [ROLLOUT_LABEL]: rolloutLabelValue(rollout.metadata.name),
          ...(this.o.instance ? { [INSTANCE_LABEL]: this.o.instance } : {}),
        },
        ...(bypassing ? { annotations: { [BYPASS_GRANTED_BY_ANNOTATION]: grantedBy ?? s.requestedBy } } : {}),
        ownerReferences: [
          {
            apiVersion: API_VERSION,
            kind: 'NodeRollout',
            name: rollout.metadata.name,
            uid: rollout.metadata.uid,
            controller: true,
          },
        ],
      },
      spec,
    };
  }

  /**
   * Creates one action; a 409 adopts it when this rollout made it, and marks the name
   * foreign otherwise (false: the plan that asked for it is wrong about that node).
   */
  private async createAction(rollout: RolloutObject, name: string, node: string): Promise<boolean> {
    try {
      const created = await this.o.rest.request<ActionObject>(NODE_ACTIONS_PATH, {
        method: 'POST',
        body: this.actionBody(rollout, name, node),
      });
      if (!this.o.actions.get(name)) this.created.set(name, created);
      this.o.log.info({ rollout: rollout.metadata.name, node, action: name }, 'rollout created a NodeAction');
      return true;
    } catch (error) {
      if (!isConflict(error, [409])) throw error;
      const existing = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      const why = notMadeBy(rollout, existing);
      if (why === undefined) {
        if (!this.o.actions.get(name)) this.created.set(name, existing);
        return true;
      }
      const squatters = this.foreign.get(rollout.metadata.uid) ?? new Map<string, Impostor>();
      squatters.set(name, { name, uid: existing.metadata.uid, node, why });
      this.foreign.set(rollout.metadata.uid, squatters);
      return false;
    }
  }

  /**
   * The names this rollout found taken by actions it did not make, still taken: one that
   * is gone (404) or replaced by one this rollout made frees its node.
   */
  private async squatters(rollout: RolloutObject): Promise<Impostor[]> {
    const squatters = this.foreign.get(rollout.metadata.uid);
    if (!squatters) return [];
    for (const [name, squatter] of squatters) {
      try {
        const now = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
        if (notMadeBy(rollout, now) === undefined) squatters.delete(name);
        else squatter.uid = now.metadata.uid;
      } catch (error) {
        if (!isConflict(error, [404])) throw error;
        squatters.delete(name);
      }
    }
    return [...squatters.values()];
  }

  /** A Warning for each impostor the rollout has not reported yet (in this process). */
  private reportImpostors(rollout: RolloutObject, impostors: readonly Impostor[]): void {
    const reported = this.reported.get(rollout.metadata.uid) ?? new Set<string>();
    this.reported.set(rollout.metadata.uid, reported);
    for (const i of impostors) {
      if (reported.has(i.uid)) continue;
      reported.add(i.uid);
      const message = `NodeAction ${i.name} (node ${i.node}) is not one this rollout made: ${i.why}. It is not counted for the node, which waits until it is gone; delete it if nobody should act on ${i.node}`;
      void this.o.events.record(rollout, { type: 'Warning', reason: 'ImpostorAction', message });
      this.o.log.warn(
        { rollout: rollout.metadata.name, action: i.name, node: i.node, why: i.why },
        'a NodeAction claims this rollout',
      );
    }
  }

  /**
   * Writes the marks the plan asks for on the Nodes that do not carry them yet
   * (quarantine.ts): the label, and a cordon passed on or lifted only while it is still
   * marked as the plan expects. Conditional on the Node read; false on a conflict.
   */
  private async markNodes(rollout: RolloutObject, marks: readonly NodeMark[]): Promise<boolean> {
    const value = rolloutLabelValue(rollout.metadata.name);
    for (const mark of marks) {
      const node = this.o.nodes.get(mark.node);
      if (!node) continue;
      const patch = markPatch(node, mark, value);
      if (!patch) continue;
      if (!this.o.isLeader()) return false;
      try {
        await this.o.rest.request(`/api/v1/nodes/${encodeURIComponent(mark.node)}`, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: patch,
        });
      } catch (error) {
        if (isConflict(error, [409])) return false;
        if (isConflict(error, [404])) continue;
        throw error;
      }
      this.o.log.info({ rollout: rollout.metadata.name, node: mark.node, mark }, 'rollout marked a node');
    }
    return true;
  }

  /**
   * A dry run about to be planned (again) whose nodes drain: the drain forecast's facts,
   * read once for the whole plan (plan-drain-read.ts). Undefined otherwise.
   */
  private async planDrain(rollout: RolloutObject, now: Date): Promise<PlanDrainRead | undefined> {
    const s = rollout.spec;
    if (s.dryRun !== true || planIsFresh(rollout, now)) return undefined;
    if ((s.execution ?? 'Managed') !== 'Managed' || s.drain?.enabled === false) return undefined;
    return readPlanDrain(this.o.rest, this.o.nodes.list(), s.drain?.podSelector);
  }

  private async reconcile(name: string): Promise<ReconcileResult | undefined> {
    const rollout = this.o.rollouts.get(name);
    if (!rollout || rollout.metadata.deletionTimestamp) return undefined;
    const { own: owned, impostors } = this.claims(rollout);
    const { found, deleted } = await this.confirmRemembered(rollout, owned, impostors);
    const squatters = await this.squatters(rollout);
    this.reportImpostors(rollout, [...impostors, ...squatters]);
    const actions = [...owned, ...found].map(actionFacts);
    const nodes: RolloutNodeFacts[] = this.o.nodes.list().map((n) => {
      const { osImage, kubeletVersion } = (n as NodeObject).status?.nodeInfo ?? {};
      return {
        name: n.metadata.name,
        labels: n.metadata.labels ?? {},
        ...(osImage ? { osImage } : {}),
        ...(kubeletVersion ? { kubeletVersion } : {}),
      };
    });
    const now = this.o.now?.() ?? new Date();
    const planDrain = await this.planDrain(rollout, now);
    const plan = decide({
      ...(planDrain ? { planDrain } : {}),
      rollout,
      nodes,
      actions,
      deletedActions: deleted,
      impostors: [...impostors, ...squatters],
      policies: this.o.policies.list().map((p) => ({ name: p.metadata.name, spec: p.spec })),
      // Only a soak weighs the checks: other rollouts do not copy a thousand of them each pass.
      ...(rollout.spec.canary || rollout.spec.soakBetweenGroups
        ? { checks: (this.o.checks?.list() ?? []).map(checkFacts) }
        : {}),
      history: this.o.actions
        .list()
        .filter((a) => isTerminal(a.status?.phase))
        .map(historyEntry),
      now,
    });
    // The nodes' marks before the actions: a retry must find the cordon handed to it.
    if (plan.marks?.length && !(await this.markNodes(rollout, plan.marks))) return { requeueAfterMs: 200 };
    // Actions first, then the status that names them: a crash in between leaves actions
    // the next pass finds by what they are (membership.ts); never a status naming an
    // action that does not exist.
    let squatted = false;
    for (const c of plan.create) {
      if (!this.o.isLeader()) return undefined;
      if (!(await this.createAction(rollout, c.name, c.node))) squatted = true;
    }
    // The plan counted on an action a squatter holds the name of: its status would
    // remember the squatter as the node's action. Decide again, knowing of it.
    if (squatted) return { requeueAfterMs: 0 };
    this.o.metrics.observeRollout(rollout.metadata.name, plan.status.counts);
    // The clock aside, an unchanged status is not written again.
    if (!sameJSON(rollout.status ?? {}, plan.status)) {
      // At most one write per rollout per STATUS_WRITE_INTERVAL_MS: each carries every
      // node's entry, and a thousand nodes changing one by one would otherwise write the
      // whole list a thousand times. The pass is decided again then (actions it created
      // are known meanwhile: `created`); its Events wait for the write, as they follow the
      // stored status.
      const wait = (this.lastWrite.get(name) ?? 0) + STATUS_WRITE_INTERVAL_MS - Date.now();
      if (wait > 0) return { requeueAfterMs: wait };
      try {
        await this.writes.status(this.o.rest, `${NODE_ROLLOUTS_PATH}/${name}`, rollout, plan.status);
        this.lastWrite.set(name, Date.now());
        this.o.metrics.statusWrites.inc();
      } catch (error) {
        // A newer rollout (or a write of ours the cache has not shown yet): decide again on it.
        if (isConflict(error, [409])) return { requeueAfterMs: 200 };
        throw error;
      }
    }
    for (const event of plan.events) void this.o.events.record(rollout, event);
    for (const event of plan.events) this.o.log.info({ rollout: name, reason: event.reason }, event.message);
    // A squatter of another controller instance sends this one no event when it goes.
    const requeueAfterMs = squatters.length
      ? Math.min(plan.requeueAfterMs ?? SQUATTER_RECHECK_MS, SQUATTER_RECHECK_MS)
      : plan.requeueAfterMs;
    return requeueAfterMs !== undefined ? { requeueAfterMs } : undefined;
  }
}
