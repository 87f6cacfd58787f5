// The rollout reconciler: the imperative shell around decide() (decide.ts). It observes
// the rollouts, nodes, NodeActions and ActionPolicies caches, asks the core what to do
// for a rollout, creates the NodeActions it names (under names derived from the rollout
// and the node: a 409 is an action that exists, adopted only when this rollout owns it),
// then writes the status conditionally on the resourceVersion it decided on, then Events.
//
// Work-queue keys are rollout names. Only the leader acts; it starts once every cache
// has synced, so a restarted controller sees every action its predecessor created.
import { API_VERSION } from '../api/common.ts';
import { INSTANCE_LABEL, ROLLOUT_LABEL } from '../api/names.ts';
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
import { decide, type RolloutActionFacts, type RolloutNodeFacts } from './decide.ts';
import type { HistoryEntry } from './expected-duration.ts';
import { rolloutLabelValue } from './naming.ts';

export type RolloutObject = ObservedNodeRollout & KubeObject;
type OwnedMetadata = { ownerReferences?: { uid: string; kind?: string; name?: string }[] };
type NodeObject = KubeObject & { status?: { nodeInfo?: { osImage?: string } } };

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
  isLeader: () => boolean;
  instance?: string;
  /** The clock, for tests. */
  now?: () => Date;
}

/** The rollout an action belongs to, by its controller ownerReference. */
function ownerOf(action: KubeObject): { uid: string; name: string } | undefined {
  const ref = (action.metadata as OwnedMetadata).ownerReferences?.find((r) => r.kind === 'NodeRollout');
  return ref?.name ? { uid: ref.uid, name: ref.name } : undefined;
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
  /** Names taken by NodeActions no rollout of this UID owns (a 409 on create), by rollout UID. */
  private readonly foreign = new Map<string, Set<string>>();

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
      this.foreign.delete(r.metadata.uid);
      this.o.metrics.forgetRollout(r.metadata.name);
    });
    const onAction = (a: ActionObject) => {
      this.created.delete(a.metadata.name);
      const owner = ownerOf(a);
      if (owner) this.queue.add(owner.name);
    };
    actions.on('add', onAction);
    actions.on('update', (old, a) => {
      if (old.status?.phase !== a.status?.phase || old.status?.message !== a.status?.message) onAction(a);
    });
    actions.on('delete', onAction);
    // A node that appears, goes, or changes labels or version may change any rollout.
    nodes.on('add', () => this.enqueueAll());
    nodes.on('delete', () => this.enqueueAll());
    nodes.on('update', (old, n) => {
      const osImage = (x: KubeObject) => (x as NodeObject).status?.nodeInfo?.osImage;
      if (
        JSON.stringify(old.metadata.labels) !== JSON.stringify(n.metadata.labels) ||
        osImage(old) !== osImage(n)
      )
        this.enqueueAll();
    });
    policies.on('add', () => this.enqueueAll());
    policies.on('update', () => this.enqueueAll());
    policies.on('delete', () => this.enqueueAll());
  }

  private ownedActions(rollout: RolloutObject): ActionObject[] {
    const owned = new Map<string, ActionObject>();
    for (const a of this.created.values())
      if (ownerOf(a)?.uid === rollout.metadata.uid) owned.set(a.metadata.name, a);
    for (const a of this.o.actions.list())
      if (ownerOf(a)?.uid === rollout.metadata.uid) owned.set(a.metadata.name, a);
    return [...owned.values()];
  }

  /**
   * The remembered actions the cache does not show, read from the API server: only an
   * action confirmed gone (404) is reported as deleted; one found is the rollout's if it
   * owns it. A cache that lags never makes the rollout forget a node.
   */
  private async confirmRemembered(
    rollout: RolloutObject,
    owned: ActionObject[],
  ): Promise<{ found: ActionObject[]; deleted: Set<string> }> {
    const have = new Set(owned.map((a) => a.metadata.name));
    const found: ActionObject[] = [];
    const deleted = new Set<string>();
    for (const entry of rollout.status?.nodes ?? []) {
      if (!entry.action || have.has(entry.action)) continue;
      if (entry.phase === 'Succeeded' || entry.phase === 'Failed') continue;
      try {
        const action = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${entry.action}`);
        if (ownerOf(action)?.uid === rollout.metadata.uid) found.push(action);
        else deleted.add(entry.action);
      } catch (error) {
        if (isConflict(error, [404])) deleted.add(entry.action);
        else throw error;
      }
    }
    return { found, deleted };
  }

  private actionBody(rollout: RolloutObject, name: string, node: string): Record<string, unknown> {
    const s = rollout.spec;
    const spec: NodeActionSpec = {
      nodeName: node,
      action: s.action,
      ...(s.upgrade ? { upgrade: s.upgrade } : {}),
      ...(s.reboot ? { reboot: s.reboot } : {}),
      ...(s.execution ? { execution: s.execution } : {}),
      ...(s.drain ? { drain: s.drain } : {}),
      ...(s.bypass ? { bypass: s.bypass } : {}),
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

  /** Creates one action; a 409 adopts it when this rollout owns it, and marks the name foreign otherwise. */
  private async createAction(rollout: RolloutObject, name: string, node: string): Promise<void> {
    try {
      const created = await this.o.rest.request<ActionObject>(NODE_ACTIONS_PATH, {
        method: 'POST',
        body: this.actionBody(rollout, name, node),
      });
      if (!this.o.actions.get(name)) this.created.set(name, created);
      this.o.log.info({ rollout: rollout.metadata.name, node, action: name }, 'rollout created a NodeAction');
    } catch (error) {
      if (!isConflict(error, [409])) throw error;
      const existing = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      if (ownerOf(existing)?.uid === rollout.metadata.uid) {
        if (!this.o.actions.get(name)) this.created.set(name, existing);
        return;
      }
      const set = this.foreign.get(rollout.metadata.uid) ?? new Set<string>();
      set.add(name);
      this.foreign.set(rollout.metadata.uid, set);
      this.queue.add(rollout.metadata.name);
    }
  }

  private async reconcile(name: string): Promise<ReconcileResult | undefined> {
    const rollout = this.o.rollouts.get(name);
    if (!rollout || rollout.metadata.deletionTimestamp) return undefined;
    const owned = this.ownedActions(rollout);
    const { found, deleted } = await this.confirmRemembered(rollout, owned);
    const actions: RolloutActionFacts[] = [...owned, ...found].map((a) => ({
      name: a.metadata.name,
      node: a.spec.nodeName,
      ...(a.status?.phase ? { phase: a.status.phase } : {}),
      ...(a.status?.message ? { message: a.status.message } : {}),
    }));
    const nodes: RolloutNodeFacts[] = this.o.nodes.list().map((n) => {
      const osImage = (n as NodeObject).status?.nodeInfo?.osImage;
      return { name: n.metadata.name, labels: n.metadata.labels ?? {}, ...(osImage ? { osImage } : {}) };
    });
    const now = this.o.now?.() ?? new Date();
    const plan = decide({
      rollout,
      nodes,
      actions,
      deletedActions: deleted,
      foreignNames: this.foreign.get(rollout.metadata.uid) ?? new Set(),
      policies: this.o.policies.list().map((p) => ({ name: p.metadata.name, spec: p.spec })),
      history: this.o.actions
        .list()
        .filter((a) => isTerminal(a.status?.phase))
        .map(historyEntry),
      now,
    });
    // Actions first, then the status that names them: a crash in between leaves actions
    // the next pass finds by owner; never a status naming an action that does not exist.
    for (const c of plan.create) {
      if (!this.o.isLeader()) return undefined;
      await this.createAction(rollout, c.name, c.node);
    }
    this.o.metrics.observeRollout(rollout.metadata.name, plan.status.counts);
    // The clock aside, an unchanged status is not written again.
    if (!sameJSON(rollout.status ?? {}, plan.status)) {
      try {
        await this.writes.status(this.o.rest, `${NODE_ROLLOUTS_PATH}/${name}`, rollout, plan.status);
        this.o.metrics.statusWrites.inc();
      } catch (error) {
        // A newer rollout (or a write of ours the cache has not shown yet): decide again on it.
        if (isConflict(error, [409])) return { requeueAfterMs: 200 };
        throw error;
      }
    }
    for (const event of plan.events) void this.o.events.record(rollout, event);
    for (const event of plan.events) this.o.log.info({ rollout: name, reason: event.reason }, event.message);
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : undefined;
  }
}
