// The unplanned-disruption audit's shell around auditNode() (audit.ts): for each node of
// this controller instance, on every change of the Node, it reads the node's NodeActions
// (every instance's: any gatehouse action explains a boot) when something may need
// explaining, writes the audit record conditionally on the Node's version, and only
// then sends the Event and counts the disruption — so two replicas, or a restart,
// report each disruption once. Only the leader acts.
import { Counter, type Registry } from 'prom-client';
import { INSTANCE_LABEL } from '../api/names.ts';
import type { ObservedNodeAction } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import type { EventRecorder } from '../kube/events.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import { ConditionalWrites, Reconciler, isConflict } from '../kube/reconciler.ts';
import type { RestClient } from '../kube/rest.ts';
import type { ReconcileResult, WorkQueue } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import { AUDIT_ANNOTATION, auditNode, DISRUPTION_KINDS, readAuditRecord, type AuditAction } from './audit.ts';
import { bootIDOf, isNodeReady, type BootNodeObject } from './record.ts';

export interface AuditReconcilerOptions {
  rest: RestClient;
  log: Logger;
  events: EventRecorder;
  nodes: Informer<KubeObject>;
  registry: Registry;
  isLeader: () => boolean;
  instance?: string;
  /** How long a NotReady node without an action is tolerated before it is reported (default 2 minutes). */
  notReadyAfterMs?: number;
}

interface NodeView extends BootNodeObject {
  status?: {
    nodeInfo?: { bootID?: string; osImage?: string };
    conditions?: { type: string; status: string; lastTransitionTime?: string }[];
  };
}

export class AuditReconciler {
  readonly queue: WorkQueue;
  private readonly o: AuditReconcilerOptions;
  private readonly loop: Reconciler;
  /** Our writes to Nodes, and the versions they replaced. */
  private readonly writes = new ConditionalWrites();
  private readonly counter: Counter<'node' | 'kind'>;

  constructor(options: AuditReconcilerOptions) {
    this.o = options;
    this.counter =
      (options.registry.getSingleMetric('gatehouse_unplanned_disruptions_total') as
        Counter<'node' | 'kind'> | undefined) ??
      new Counter({
        name: 'gatehouse_unplanned_disruptions_total',
        help: 'Disruptions of a node that went around the gate: a boot (kind="boot"), a Talos version nobody asked for ("version-change") or a long NotReady ("not-ready") with no gatehouse action in flight.',
        labelNames: ['node', 'kind'],
        registers: [options.registry],
      });
    this.loop = new Reconciler({
      name: 'audit',
      log: options.log,
      isLeader: options.isLeader,
      concurrency: 2,
      caches: () => [options.nodes],
      keys: () => options.nodes.list().map((n) => n.metadata.name),
      reconcile: (key) => this.reconcile(key),
    });
    this.queue = this.loop.queue;
    options.nodes.on('add', (n) => this.queue.add(n.metadata.name));
    options.nodes.on('update', (_, n) => this.queue.add(n.metadata.name));
    options.nodes.on('delete', (n) => {
      this.writes.forget(n.metadata.name);
      for (const kind of DISRUPTION_KINDS) this.counter.remove({ node: n.metadata.name, kind });
    });
  }

  async start(signal?: AbortSignal): Promise<void> {
    await this.loop.start(signal);
  }

  stop(): void {
    this.loop.stop();
  }

  /** Every node: after a start or on becoming leader. */
  enqueueAll(): void {
    this.loop.enqueueAll();
  }

  private async actionsOn(node: string): Promise<AuditAction[]> {
    const list = await this.o.rest.request<{ items: ObservedNodeAction[] }>(NODE_ACTIONS_PATH, {
      query: { fieldSelector: `spec.nodeName=${node}` },
    });
    return list.items.map((a) => ({
      name: a.metadata.name,
      action: a.spec.action,
      phase: a.status?.phase,
      bootIDAfter: a.status?.bootIDAfter,
      image: a.spec.upgrade?.image,
    }));
  }

  private async reconcile(name: string): Promise<ReconcileResult | undefined> {
    const node: NodeView | undefined = this.o.nodes.get(name);
    if (!node || node.metadata.deletionTimestamp) return undefined;
    // Our own newer write has not reached the cache yet; its event brings the node back.
    if (this.writes.stale(node)) return { requeueAfterMs: 1000 };
    if ((node.metadata.labels?.[INSTANCE_LABEL] ?? undefined) !== this.o.instance) return undefined;
    // A series is born with the node's first disruption, not at 0 for every node and kind
    // (15,000 series beside 5,000 Nodes): the chart's alert sees a series born at 1.
    const record = readAuditRecord(node.metadata.annotations);
    const ready = isNodeReady(node);
    const osImage = node.status?.nodeInfo?.osImage ?? '';
    const bootID = bootIDOf(node);
    const notReadySince = ready
      ? undefined
      : node.status?.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime;
    const notReadyAfterMs = this.o.notReadyAfterMs ?? 120_000;
    const now = new Date();
    // Actions are read only when something may need explaining: a kwok or kubelet
    // heartbeat of a node long NotReady, and already reported, costs no request.
    const notReadyDue =
      notReadySince !== undefined &&
      record?.notReadyReported !== notReadySince &&
      now.getTime() - Date.parse(notReadySince) >= notReadyAfterMs;
    const mayNeed =
      record !== undefined && (bootID !== record.bootID || osImage !== record.osImage || notReadyDue);
    const decision = auditNode({
      now,
      node: { name, bootID, osImage, ready, notReadySince },
      record,
      actions: mayNeed ? await this.actionsOn(name) : [],
      notReadyAfterMs,
    });
    if (decision.record) {
      try {
        await this.o.rest.request(`/api/v1/nodes/${encodeURIComponent(name)}`, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: {
            metadata: {
              resourceVersion: node.metadata.resourceVersion,
              annotations: { [AUDIT_ANNOTATION]: JSON.stringify(decision.record) },
            },
          },
        });
        this.writes.replaced(node);
      } catch (error) {
        // The Node changed since it was read: decide again on the newer one.
        if (isConflict(error)) return { requeueAfterMs: 200 };
        throw error;
      }
    }
    for (const d of decision.disruptions) {
      this.counter.inc({ node: name, kind: d.kind });
      this.o.log.warn({ node: name, kind: d.kind }, d.event.message);
      await this.o.events.record({ ...node, apiVersion: 'v1', kind: 'Node' }, d.event);
    }
    return decision.requeueAfterMs !== undefined ? { requeueAfterMs: decision.requeueAfterMs } : undefined;
  }
}
