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
import type { NodeActionSpec, ObservedNodeAction } from '../api/node-action.ts';
import type { NodeRolloutStatus, ObservedNodeRollout } from '../api/node-rollout.ts';
import { NODE_ACTIONS_PATH, NODE_ROLLOUTS_PATH } from '../api/paths.ts';
import { isTerminal } from '../api/phases.ts';
import type { ActionPolicy } from '../api/action-policy.ts';
import type { EventRecorder } from '../kube/events.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { WorkQueue, type ReconcileResult } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { decide, type RolloutActionFacts, type RolloutNodeFacts } from './decide.ts';
import type { HistoryEntry } from './expected-duration.ts';
import { rolloutLabelValue } from './naming.ts';

export type RolloutObject = ObservedNodeRollout & KubeObject;
type ActionObject = ObservedNodeAction & KubeObject;
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
  private started = false;
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
    this.queue = new WorkQueue({
      name: 'rollouts',
      log: options.log,
      concurrency: 2,
      reconcile: (key) => this.reconcile(key),
    });
    this.wire();
  }

  async start(signal?: AbortSignal): Promise<void> {
    const o = this.o;
    await Promise.all([
      o.rollouts.waitForSync(signal),
      o.actions.waitForSync(signal),
      o.nodes.waitForSync(signal),
      o.policies.waitForSync(signal),
    ]);
    this.started = true;
    this.queue.start();
    this.enqueueAll();
  }

  stop(): void {
    this.queue.stop();
  }

  enqueueAll(): void {
    if (!this.started) return;
    for (const r of this.o.rollouts.list()) this.queue.add(r.metadata.name);
  }

  private wire(): void {
    const { rollouts, actions, nodes, policies } = this.o;
    rollouts.on('add', (r) => this.queue.add(r.metadata.name));
    rollouts.on('update', (_, r) => this.queue.add(r.metadata.name));
    rollouts.on('delete', (r) => {
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
        if (error instanceof KubeApiError && error.code === 404) deleted.add(entry.action);
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
      if (!(error instanceof KubeApiError && error.code === 409)) throw error;
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
    if (!this.o.isLeader()) return undefined;
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
    if (statusChanged(rollout.status, plan.status)) {
      try {
        await this.o.rest.request(`${NODE_ROLLOUTS_PATH}/${name}/status`, {
          method: 'PUT',
          body: { ...rollout, status: plan.status },
        });
        this.o.metrics.statusWrites.inc();
      } catch (error) {
        // A newer rollout (or a write of ours the cache has not shown yet): decide again on it.
        if (error instanceof KubeApiError && error.code === 409) return { requeueAfterMs: 200 };
        throw error;
      }
    }
    for (const event of plan.events) void this.o.events.record(rollout, event);
    for (const event of plan.events) this.o.log.info({ rollout: name, reason: event.reason }, event.message);
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : undefined;
  }
}

/** Whether the decided status differs from the stored one beyond the clock. */
function statusChanged(before: NodeRolloutStatus | undefined, after: NodeRolloutStatus): boolean {
  return canonical(before ?? {}) !== canonical(after);
}

/** JSON with sorted keys: the API server hands a custom resource back with its keys sorted. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  );
}
