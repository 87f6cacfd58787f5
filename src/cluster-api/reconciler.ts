// The Cluster API mode's reconciler: the imperative shell around decideMachine()
// (decide.ts). It watches the Machines of one Cluster in the management cluster,
// through a kubeconfig Secret in the controller's namespace (src/kube/remote-client.ts;
// the Secret is read again every resync, and a changed one replaces the watch), and in
// this cluster the Nodes and NodeActions. For each Machine it asks the core what to do,
// then: adds or removes gatehouse's pre-drain hook (conditional on the Machine's
// resourceVersion and, for a removal, on the hook's value), creates the Machine's
// External Reset NodeAction (named after the Machine's UID: a restarted controller finds
// it), writes the MachineHeld condition on that action, and records Events on the Machine.
//
// Work-queue keys are `namespace/name` of Machines. Only the leader writes; it starts
// once the NodeAction and Node caches have synced, so it sees every action it made.
import { API_VERSION } from '../api/common.ts';
import {
  CLUSTER_NAME_LABEL,
  INSTANCE_LABEL,
  MACHINE_ANNOTATION,
  MACHINE_HELD_CONDITION,
  MACHINE_HOOK_OWNER,
  MACHINE_PRE_DRAIN_HOOK,
  MACHINE_SKIP_REMEDIATION_ANNOTATION,
  MACHINE_UID_LABEL,
  REMEDIATION_PAUSED_BY_ANNOTATION,
} from '../api/names.ts';
import { policyFacts, type PolicyObject } from '../actions/context.ts';
import { nodeFacts } from '../actions/observations.ts';
import { pausesRemediation, remediationPauseOff } from '../actions/remediation.ts';
import type { ActionObject, NodeActionSpec } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import { setCondition } from '../kube/conditions.ts';
import { EventRecorder } from '../kube/events.ts';
import { Informer, objectKey, type KubeObject } from '../kube/informer.ts';
import { remoteClient, type KubeconfigSecretRef, type RemoteClient } from '../kube/remote-client.ts';
import { ConditionalWrites, Reconciler, isConflict } from '../kube/reconciler.ts';
import type { RestClient } from '../kube/rest.ts';
import type { ReconcileResult, WorkQueue } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import { errorMessage, sleep } from '../wait.ts';
import {
  decideMachine,
  heldUpToDate,
  machineActionName,
  type MachineActionFacts,
  type MachinePlan,
} from './decide.ts';

/** The Cluster API version gatehouse reads Machines in. */
export const MACHINE_API_VERSION = 'cluster.x-k8s.io/v1beta2';

/** The fields of a Machine gatehouse reads (Cluster API v1beta2). */
export type MachineObject = KubeObject & { status?: { nodeRef?: { name?: string } } };

export interface ClusterApiOptions {
  /** The kubeconfig Secret of the management cluster, in the controller's namespace. */
  kubeconfigSecretRef: KubeconfigSecretRef;
  /** The Cluster (namespace and name) whose Machines are this cluster's Nodes. */
  cluster: { namespace: string; name: string };
  /** How often the Secret is read again (a rotated kubeconfig is used); default 30s. */
  resyncMs?: number;
}

export interface MachineReconcilerOptions extends ClusterApiOptions {
  /** This cluster's client (the workload cluster's). */
  rest: RestClient;
  log: Logger;
  /** The controller's namespace: where the kubeconfig Secret is. */
  namespace: string;
  /** This controller's NodeActions (its instance's). */
  actions: Informer<ActionObject>;
  nodes: Informer<KubeObject>;
  /** The ActionPolicies: one may turn the remediation pause off (pauseRemediation: false). */
  policies: Informer<PolicyObject>;
  isLeader: () => boolean;
  instance?: string;
  informerOptions?: { watchTimeoutSeconds?: number; idleTimeoutMs?: number };
}

function machineFacts(m: MachineObject) {
  const annotations = m.metadata.annotations ?? {};
  const hook = annotations[MACHINE_PRE_DRAIN_HOOK];
  const pausedBy = annotations[REMEDIATION_PAUSED_BY_ANNOTATION];
  const nodeName = m.status?.nodeRef?.name;
  return {
    namespace: m.metadata.namespace ?? '',
    name: m.metadata.name,
    uid: m.metadata.uid ?? '',
    deleting: m.metadata.deletionTimestamp !== undefined,
    ...(hook !== undefined ? { hook } : {}),
    ...(nodeName ? { nodeName } : {}),
    ...(annotations[MACHINE_SKIP_REMEDIATION_ANNOTATION] !== undefined
      ? { skipRemediation: true as const }
      : {}),
    ...(pausedBy ? { pausedBy } : {}),
  };
}

/** `/metadata/annotations/<name>` as a JSON Pointer (RFC 6901: ~ and / escaped). */
function annotationPointer(name: string): string {
  return `/metadata/annotations/${name.replaceAll('~', '~0').replaceAll('/', '~1')}`;
}

const HOOK_POINTER = annotationPointer(MACHINE_PRE_DRAIN_HOOK);
const SKIP_POINTER = annotationPointer(MACHINE_SKIP_REMEDIATION_ANNOTATION);
const PAUSED_BY_POINTER = annotationPointer(REMEDIATION_PAUSED_BY_ANNOTATION);

export class MachineReconciler {
  readonly queue: WorkQueue;
  private readonly o: MachineReconcilerOptions;
  private readonly loop: Reconciler;
  /** The MachineHeld conditions written on actions. */
  private readonly writes = new ConditionalWrites();
  /** The management cluster's client and the Machine watch made with it. */
  private remote:
    { client: RemoteClient; machines: Informer<MachineObject>; events: EventRecorder } | undefined;
  /** This controller's user name, the requestedBy of the actions it makes. */
  private me = '';
  /** Actions this replica created that its cache may not show yet, by name. */
  private readonly created = new Map<string, ActionObject>();
  /** The last Event message recorded per Machine UID: one Event per change of what is said. */
  private readonly said = new Map<string, string>();
  private lastConnectError = '';
  private stopping: AbortController | undefined;

  constructor(options: MachineReconcilerOptions) {
    this.o = options;
    this.loop = new Reconciler({
      name: 'machines',
      log: options.log,
      isLeader: options.isLeader,
      concurrency: 2,
      caches: () => [options.actions, options.nodes],
      // Machines are known once the management cluster is reached (connectLoop).
      keys: () => this.remote?.machines.list().map(objectKey) ?? [],
      prepare: async (signal) => {
        this.me = await this.whoAmI(signal);
      },
      reconcile: (key) => this.reconcile(key),
    });
    this.queue = this.loop.queue;
    const onAction = (a: ActionObject) => {
      this.created.delete(a.metadata.name);
      const machine = a.metadata.annotations?.[MACHINE_ANNOTATION];
      if (machine && a.metadata.labels?.[MACHINE_UID_LABEL]) this.queue.add(machine);
      // Any action's phase may start or end the remediation pause of its node's Machine.
      for (const m of this.remote?.machines.list() ?? [])
        if (m.status?.nodeRef?.name === a.spec.nodeName) this.queue.add(objectKey(m));
    };
    options.actions.on('add', onAction);
    options.actions.on('update', (old, a) => {
      if (old.status?.phase !== a.status?.phase || old.status?.message !== a.status?.message) onAction(a);
    });
    options.actions.on('delete', (a) => {
      this.writes.forget(a.metadata.name);
      onAction(a);
    });
    options.nodes.on('delete', () => this.enqueueAll());
    options.nodes.on('add', () => this.enqueueAll());
  }

  /** The Machine watch's cache, once connected: for tests and readiness. */
  get machines(): Informer<MachineObject> | undefined {
    return this.remote?.machines;
  }

  async start(signal?: AbortSignal): Promise<void> {
    const stopping = new AbortController();
    this.stopping = stopping;
    const both = signal ? AbortSignal.any([signal, stopping.signal]) : stopping.signal;
    await this.loop.start(both);
    void this.connectLoop(both);
  }

  stop(): void {
    this.stopping?.abort(new Error('machine reconciler stopping'));
    this.loop.stop();
    void this.remote?.machines.stop();
  }

  enqueueAll(): void {
    this.loop.enqueueAll();
  }

  /** Who this controller is (SelfSubjectReview), asked until the API server answers. */
  private async whoAmI(signal: AbortSignal | undefined): Promise<string> {
    for (;;) {
      try {
        const review = await this.o.rest.request<{ status?: { userInfo?: { username?: string } } }>(
          '/apis/authentication.k8s.io/v1/selfsubjectreviews',
          {
            method: 'POST',
            body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
            ...(signal ? { signal } : {}),
          },
        );
        const name = review.status?.userInfo?.username;
        if (name) return name;
      } catch (error) {
        if (signal?.aborted) throw error;
        this.o.log.warn(
          { err: errorMessage(error) },
          'Cluster API mode: cannot learn who this controller is',
        );
      }
      await sleep(2000, signal);
    }
  }

  /** Reads the kubeconfig Secret every resync; a new client (a changed Secret) replaces the watch. */
  private async connectLoop(signal: AbortSignal): Promise<void> {
    const { cluster } = this.o;
    // A function, so that the compiler does not assume the signal cannot change mid-loop.
    const stopped = () => signal.aborted;
    while (!stopped()) {
      try {
        const client = await remoteClient(this.o.rest, this.o.namespace, this.o.kubeconfigSecretRef, signal);
        if (client.rest !== this.remote?.client.rest) {
          await this.remote?.machines.stop();
          const machines = new Informer<MachineObject>({
            rest: client.rest,
            log: this.o.log,
            path: `/apis/${MACHINE_API_VERSION}/namespaces/${encodeURIComponent(cluster.namespace)}/machines`,
            labelSelector: `${CLUSTER_NAME_LABEL}=${cluster.name}`,
            ...this.o.informerOptions,
          });
          machines.on('add', (m) => this.queue.add(objectKey(m)));
          machines.on('update', (_, m) => this.queue.add(objectKey(m)));
          machines.on('delete', (m) => {
            if (m.metadata.uid) this.said.delete(m.metadata.uid);
          });
          this.remote = { client, machines, events: new EventRecorder(client.rest, this.o.log) };
          machines.start();
          this.o.log.info(
            { cluster: `${cluster.namespace}/${cluster.name}`, where: client.where },
            'Cluster API mode: watching the Machines of the cluster',
          );
        }
        this.lastConnectError = '';
      } catch (error) {
        if (stopped()) break;
        const message = errorMessage(error);
        if (message !== this.lastConnectError)
          this.o.log.warn({ err: message }, 'Cluster API mode: cannot reach the management cluster');
        this.lastConnectError = message;
      }
      await sleep(this.o.resyncMs ?? 30_000, signal).catch(() => undefined);
      this.enqueueAll();
    }
  }

  /** The Machine's Node: in the cache, else asked of the API server (a cache can lag). */
  private async nodeState(name: string): Promise<'present' | 'gone'> {
    if (this.o.nodes.get(name)) return 'present';
    try {
      await this.o.rest.request(`/api/v1/nodes/${encodeURIComponent(name)}`);
      return 'present';
    } catch (error) {
      if (isConflict(error, [404])) return 'gone';
      throw error;
    }
  }

  /** The action named after the Machine: cached, just created, or read (one another instance may own). */
  private async actionOf(name: string): Promise<ActionObject | undefined> {
    const known = this.o.actions.get(name) ?? this.created.get(name);
    if (known) return known;
    try {
      return await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
    } catch (error) {
      if (isConflict(error, [404])) return undefined;
      throw error;
    }
  }

  /**
   * The action of this controller that keeps remediation off the node now (approved,
   * unfinished, taking the node away; no governing policy turning the pause off), if any.
   */
  private pausing(nodeName: string | undefined): string | undefined {
    if (nodeName === undefined) return undefined;
    const node = nodeFacts(this.o.nodes.get(nodeName));
    const labels = node?.labels ?? {};
    const policies = policyFacts(this.o.policies);
    const action = this.o.actions
      .list()
      .filter(
        (a) =>
          a.spec.nodeName === nodeName &&
          a.metadata.deletionTimestamp === undefined &&
          pausesRemediation(a.spec, a.status ?? {}, node?.osImage) &&
          remediationPauseOff(policies, a.spec, labels) === undefined,
      )
      .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))[0];
    return action?.metadata.name;
  }

  /**
   * The action the Machine's mark names, when it still keeps remediation off the node
   * though this cache does not say so (another instance's action, or one just approved);
   * else what this controller's cache found.
   */
  private async stillPausing(
    marked: string | undefined,
    found: string | undefined,
  ): Promise<string | undefined> {
    if (marked === undefined || marked === found) return found;
    const a = await this.actionOf(marked);
    if (!a || a.metadata.deletionTimestamp !== undefined) return found;
    const osImage = nodeFacts(this.o.nodes.get(a.spec.nodeName))?.osImage;
    return pausesRemediation(a.spec, a.status ?? {}, osImage) ? marked : found;
  }

  private isOurs(a: ActionObject, machine: MachineObject): boolean {
    return (
      a.metadata.labels?.[MACHINE_UID_LABEL] === machine.metadata.uid &&
      (a.metadata.labels?.[INSTANCE_LABEL] ?? '') === (this.o.instance ?? '') &&
      a.spec.action === 'Reset' &&
      a.spec.nodeName === machine.status?.nodeRef?.name &&
      a.spec.requestedBy === this.me &&
      a.spec.bypass === undefined
    );
  }

  private actionBody(machine: MachineObject, name: string, node: string): Record<string, unknown> {
    const spec: NodeActionSpec = {
      nodeName: node,
      action: 'Reset',
      execution: 'External',
      requestedBy: this.me,
    };
    return {
      apiVersion: API_VERSION,
      kind: 'NodeAction',
      metadata: {
        name,
        labels: {
          [MACHINE_UID_LABEL]: machine.metadata.uid,
          ...(this.o.instance ? { [INSTANCE_LABEL]: this.o.instance } : {}),
        },
        annotations: { [MACHINE_ANNOTATION]: objectKey(machine) },
      },
      spec,
    };
  }

  private async reconcile(key: string): Promise<ReconcileResult | undefined> {
    if (!this.remote) return undefined;
    const { machines, client, events } = this.remote;
    const machine = machines.get(key);
    if (!machine?.metadata.uid) return undefined;
    const facts = machineFacts(machine);
    const deletingOurs = facts.deleting && facts.hook === MACHINE_HOOK_OWNER;
    const node = deletingOurs && facts.nodeName ? await this.nodeState(facts.nodeName) : undefined;
    const stored = deletingOurs ? await this.actionOf(machineActionName(facts.uid)) : undefined;
    const action: MachineActionFacts | undefined = stored && {
      name: stored.metadata.name,
      ours: this.isOurs(stored, machine),
      ...(stored.status?.phase ? { phase: stored.status.phase } : {}),
      ...(stored.status?.message ? { message: stored.status.message } : {}),
      ...heldOf(stored),
    };
    const pausing = await this.stillPausing(facts.pausedBy, this.pausing(facts.nodeName));
    const plan = decideMachine({
      machine: facts,
      ...(node ? { node } : {}),
      ...(action ? { action } : {}),
      ...(pausing !== undefined ? { pausing } : {}),
    });
    if (!this.o.isLeader()) return undefined;
    return this.apply(machine, client.rest, events, plan, stored);
  }

  private async apply(
    machine: MachineObject,
    remote: RestClient,
    events: EventRecorder,
    plan: MachinePlan,
    action: ActionObject | undefined,
  ): Promise<ReconcileResult | undefined> {
    const path = `/apis/${MACHINE_API_VERSION}/namespaces/${encodeURIComponent(machine.metadata.namespace ?? '')}/machines/${encodeURIComponent(machine.metadata.name)}`;
    const log = this.o.log.child({ machine: objectKey(machine) });
    try {
      if (plan.annotate) {
        // On the version decided upon: a Machine whose deletion began since is decided again.
        await remote.request(path, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: {
            metadata: {
              resourceVersion: machine.metadata.resourceVersion,
              annotations: { [MACHINE_PRE_DRAIN_HOOK]: MACHINE_HOOK_OWNER },
            },
          },
        });
        log.info('Cluster API mode: added the pre-drain hook');
      }
      if (plan.create) {
        const created = await this.o.rest.request<ActionObject>(NODE_ACTIONS_PATH, {
          method: 'POST',
          body: this.actionBody(machine, plan.create.name, plan.create.node),
        });
        if (!this.o.actions.get(created.metadata.name)) this.created.set(created.metadata.name, created);
        log.info(
          { action: plan.create.name, node: plan.create.node },
          'Cluster API mode: created a Reset NodeAction',
        );
      }
      if (plan.held && action && !heldUpToDate(heldOf(action).held, plan.held)) {
        const status = action.status ?? {};
        await this.writes.status(this.o.rest, `${NODE_ACTIONS_PATH}/${action.metadata.name}`, action, {
          ...status,
          conditions: setCondition(
            status.conditions,
            { type: MACHINE_HELD_CONDITION, ...plan.held },
            new Date(),
          ),
        });
      }
      if (plan.event && this.said.get(machine.metadata.uid ?? '') !== plan.event.message) {
        await events.record({ ...machine, apiVersion: MACHINE_API_VERSION, kind: 'Machine' }, plan.event);
        this.said.set(machine.metadata.uid ?? '', plan.event.message);
        log.info({ event: plan.event.reason }, plan.event.message);
      }
      if (plan.remediation) await this.applyRemediation(machine, remote, plan.remediation, log);
      if (plan.release) {
        // Only gatehouse's own hook, on the version decided upon.
        await remote.request(path, {
          method: 'PATCH',
          contentType: 'application/json-patch+json',
          body: [
            { op: 'test', path: '/metadata/resourceVersion', value: machine.metadata.resourceVersion },
            { op: 'test', path: HOOK_POINTER, value: MACHINE_HOOK_OWNER },
            { op: 'remove', path: HOOK_POINTER },
          ],
        });
        log.info('Cluster API mode: removed the pre-drain hook');
      }
    } catch (error) {
      // Something changed since the decision (409, a failed test: 422), or the Machine
      // is gone (404): decide again on what is there now.
      if (isConflict(error, [404, 409, 422])) return { requeueAfterMs: 200 };
      throw error;
    }
    return undefined;
  }

  /**
   * Puts the skip-remediation annotation on with its mark, or takes off the pair marked
   * for `by` — on the version decided upon, the removal only while the mark still names it.
   */
  private async applyRemediation(
    machine: MachineObject,
    remote: RestClient,
    change: NonNullable<MachinePlan['remediation']>,
    log: Logger,
  ): Promise<void> {
    const path = `/apis/${MACHINE_API_VERSION}/namespaces/${encodeURIComponent(machine.metadata.namespace ?? '')}/machines/${encodeURIComponent(machine.metadata.name)}`;
    const version = {
      op: 'test',
      path: '/metadata/resourceVersion',
      value: machine.metadata.resourceVersion,
    };
    if (change.op === 'pause') {
      const annotations = machine.metadata.annotations === undefined;
      await remote.request(path, {
        method: 'PATCH',
        contentType: 'application/json-patch+json',
        body: [
          version,
          ...(annotations ? [{ op: 'add', path: '/metadata/annotations', value: {} }] : []),
          { op: 'add', path: SKIP_POINTER, value: '' },
          { op: 'add', path: PAUSED_BY_POINTER, value: change.by },
        ],
      });
      log.info(
        { action: change.by },
        'Cluster API mode: paused remediation of the Machine (skip-remediation)',
      );
      return;
    }
    const skip = machine.metadata.annotations?.[MACHINE_SKIP_REMEDIATION_ANNOTATION] !== undefined;
    await remote.request(path, {
      method: 'PATCH',
      contentType: 'application/json-patch+json',
      body: [
        version,
        { op: 'test', path: PAUSED_BY_POINTER, value: change.by },
        { op: 'remove', path: PAUSED_BY_POINTER },
        ...(skip ? [{ op: 'remove', path: SKIP_POINTER }] : []),
      ],
    });
    log.info({ action: change.by }, 'Cluster API mode: resumed remediation of the Machine');
  }
}

/** The action's MachineHeld condition, as the core reads it. */
function heldOf(a: ActionObject): Pick<MachineActionFacts, 'held'> {
  const c = a.status?.conditions?.find((x) => x.type === MACHINE_HELD_CONDITION);
  return c && (c.status === 'True' || c.status === 'False')
    ? { held: { status: c.status, reason: c.reason, message: c.message } }
    : {};
}
