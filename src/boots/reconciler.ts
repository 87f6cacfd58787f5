// The boot reconciler: the imperative shell around decideBoot() (decide.ts). It observes
// the node, hook, Job and NodeAction caches, asks the core what to do for each node, and
// does it — one conditional write to the Node (record, taint, announcement), then the
// hook Jobs and webhook calls (through the HookRunner), then Events.
//
// Work-queue keys are node names. Only the leader acts; followers keep their caches warm
// and a new leader requeues every node. It starts only once every cache has synced: on a
// partial cache a NodePrereadyJob could be missing, and the taint come off too early.
//
// Which nodes: those labelled talos.dev/controller-instance=<instance> (the default
// instance: unlabelled nodes); besides, on any node, the boots that this controller's
// own actions announced (see docs/decisions.md).
import type { HookKindName, HookSpec } from '../api/hooks.ts';
import { INSTANCE_LABEL, HOOK_JOB_LABELS } from '../api/names.ts';
import type { ActionObject } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import { isTerminal } from '../api/phases.ts';
import { isRecordPending, type HookRunRecord } from '../hooks/plan.ts';
import type { HookRunner } from '../hooks/runner.ts';
import type { HookObject } from '../hooks/select.ts';
import type { EventRecorder } from '../kube/events.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import { ConditionalWrites, Reconciler, isConflict } from '../kube/reconciler.ts';
import type { RestClient } from '../kube/rest.ts';
import type { ReconcileResult, WorkQueue } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import { wantsReadinessFacts } from '../hooks/readiness.ts';
import { selectHooks } from '../hooks/select.ts';
import { decideBoot, type BootActionFacts, type NodeJob } from './decide.ts';
import { NodeReadinessReader } from './readiness-read.ts';
import { writeNode } from './node.ts';
import {
  BOOT_HOOK_KINDS,
  bootIDOf,
  isNodeReady,
  readBootAnnotations,
  type BootNodeObject,
} from './record.ts';

type HookKubeObject = KubeObject & { spec: HookSpec };

export interface BootReconcilerOptions {
  rest: RestClient;
  log: Logger;
  events: EventRecorder;
  nodes: Informer<KubeObject>;
  /** Hook informers by kind; the boot kinds are used. */
  hooks: ReadonlyMap<HookKindName, Informer<HookKubeObject>>;
  jobs: Informer<KubeObject>;
  /** This controller's NodeActions (its instance's). */
  actions: Informer<ActionObject>;
  runner: HookRunner;
  isLeader: () => boolean;
  instance?: string;
  concurrency?: number;
}

/** How long a read of another instance's action is trusted. */
const ACTION_READ_TTL_MS = 1000;

export class BootReconciler {
  readonly queue: WorkQueue;
  private readonly o: BootReconcilerOptions;
  private readonly log: Logger;
  private readonly loop: Reconciler;
  /** Action UID → the action (this instance's, from the cache). */
  private readonly actionsByUID = new Map<string, ActionObject>();
  /** Node name → keys (namespace/name) of its boot hook Jobs in the cache. */
  private readonly jobsByNode = new Map<string, Set<string>>();
  /** Our writes to Nodes, and the versions they replaced. */
  private readonly writes = new ConditionalWrites();
  /** Reads of actions not in the cache (another instance's), by name. */
  private readonly actionReads = new Map<string, { at: number; facts: ActionObject | undefined }>();
  /** The node's Pods and CSINode, read only while a readiness hook of the node waits. */
  private readonly readiness: NodeReadinessReader;

  constructor(options: BootReconcilerOptions) {
    this.o = options;
    this.log = options.log;
    this.readiness = new NodeReadinessReader(options.rest);
    // A partial cache could miss a NodePrereadyJob, and the taint come off too early.
    this.loop = new Reconciler({
      name: 'boots',
      log: options.log,
      isLeader: options.isLeader,
      concurrency: options.concurrency ?? 4,
      caches: () => [options.nodes, options.jobs, options.actions, ...this.bootHookInformers()],
      keys: () => options.nodes.list().map((n) => n.metadata.name),
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

  /** Every node: after a start or on becoming leader. */
  enqueueAll(): void {
    this.loop.enqueueAll();
  }

  private bootHookInformers(): Informer<HookKubeObject>[] {
    return [...this.o.hooks].filter(([kind]) => BOOT_HOOK_KINDS.has(kind)).map(([, i]) => i);
  }

  private wire(): void {
    const { nodes, jobs, actions } = this.o;
    nodes.on('add', (n) => this.queue.add(n.metadata.name));
    nodes.on('update', (_, n) => this.queue.add(n.metadata.name));
    nodes.on('delete', (n) => {
      this.writes.forget(n.metadata.name);
      this.jobsByNode.delete(n.metadata.name);
      this.readiness.forget(n.metadata.name);
      this.o.runner.forget(`boot/${n.metadata.name}/`);
    });
    const onHook = () => {
      for (const n of nodes.list()) this.queue.add(n.metadata.name);
    };
    for (const informer of this.bootHookInformers()) {
      informer.on('add', onHook);
      informer.on('update', (old, h) => {
        if (old.metadata.generation !== h.metadata.generation) onHook();
      });
      informer.on('delete', onHook);
    }
    const nodeOfJob = (job: KubeObject): string | undefined => {
      const kind = job.metadata.labels?.[HOOK_JOB_LABELS.hookKind] as HookKindName | undefined;
      if (!kind || !BOOT_HOOK_KINDS.has(kind)) return undefined;
      return job.metadata.labels?.[HOOK_JOB_LABELS.node] ?? job.metadata.annotations?.['talos.dev/node'];
    };
    const indexJob = (job: KubeObject, present: boolean) => {
      const node = nodeOfJob(job);
      if (!node) return;
      const key = `${job.metadata.namespace ?? ''}/${job.metadata.name}`;
      const set = this.jobsByNode.get(node) ?? new Set<string>();
      if (present) set.add(key);
      else set.delete(key);
      if (set.size) this.jobsByNode.set(node, set);
      else this.jobsByNode.delete(node);
      this.queue.add(node);
    };
    jobs.on('add', (j) => indexJob(j, true));
    jobs.on('update', (_, j) => indexJob(j, true));
    jobs.on('delete', (j) => indexJob(j, false));
    actions.on('add', (a) => {
      this.actionsByUID.set(a.metadata.uid, a);
      this.queue.add(a.spec.nodeName);
    });
    actions.on('update', (old, a) => {
      this.actionsByUID.set(a.metadata.uid, a);
      if (old.status?.phase !== a.status?.phase || old.status?.bootIDAfter !== a.status?.bootIDAfter)
        this.queue.add(a.spec.nodeName);
    });
    actions.on('delete', (a) => {
      this.actionsByUID.delete(a.metadata.uid);
      this.queue.add(a.spec.nodeName);
    });
  }

  private hookObjects(): HookObject[] {
    const hooks: HookObject[] = [];
    for (const [kind, informer] of this.o.hooks) {
      if (!BOOT_HOOK_KINDS.has(kind)) continue;
      for (const h of informer.list()) {
        if (h.metadata.deletionTimestamp || !h.metadata.namespace || !h.metadata.uid) continue;
        hooks.push({
          kind,
          metadata: {
            name: h.metadata.name,
            namespace: h.metadata.namespace,
            uid: h.metadata.uid,
            ...(h.metadata.generation !== undefined ? { generation: h.metadata.generation } : {}),
          },
          spec: h.spec,
        });
      }
    }
    return hooks;
  }

  /** The action, from the cache (this instance's) or, for another instance's, read from the API server. */
  private async actionFacts(ref: { name: string; uid: string }): Promise<BootActionFacts | undefined> {
    const cached = this.actionsByUID.get(ref.uid);
    const facts = (a: ActionObject): BootActionFacts => ({
      ...(a.status?.phase ? { phase: a.status.phase } : {}),
      ...(a.status?.bootIDAfter ? { bootIDAfter: a.status.bootIDAfter } : {}),
    });
    if (cached) return facts(cached);
    const read = this.actionReads.get(ref.name);
    let action: ActionObject | undefined;
    if (read && Date.now() - read.at < ACTION_READ_TTL_MS) {
      action = read.facts;
    } else {
      try {
        action = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${ref.name}`);
      } catch (error) {
        if (!isConflict(error, [404])) throw error;
      }
      this.actionReads.set(ref.name, { at: Date.now(), facts: action });
      for (const [name, r] of this.actionReads) if (Date.now() - r.at > 60_000) this.actionReads.delete(name);
    }
    return action && action.metadata.uid === ref.uid ? facts(action) : undefined;
  }

  private nodeJobs(name: string): NodeJob[] {
    const jobs: NodeJob[] = [];
    for (const key of this.jobsByNode.get(name) ?? []) {
      const job = this.o.jobs.get(key);
      if (!job) continue;
      jobs.push({
        namespace: job.metadata.namespace ?? '',
        name: job.metadata.name,
        bootID: job.metadata.labels?.[HOOK_JOB_LABELS.bootID],
        deleting: job.metadata.deletionTimestamp !== undefined,
      });
    }
    return jobs;
  }

  private async reconcile(name: string): Promise<ReconcileResult | undefined> {
    const node = this.o.nodes.get(name);
    if (!node?.metadata.uid || node.metadata.deletionTimestamp) return undefined;
    // Our own newer write has not reached the cache yet; its event will bring us back.
    if (this.writes.stale(node)) return { requeueAfterMs: 1000 };
    const seen = readBootAnnotations(node);
    const log = this.log.child({ node: name, bootID: bootIDOf(node) });
    if (seen.invalid.length)
      log.warn({ annotations: seen.invalid }, 'ignoring node annotations that are not valid boot records');

    // Whose node this is: the instance its label names; else only our own actions' boots.
    const own = node.metadata.labels?.[INSTANCE_LABEL] === this.o.instance;
    const named = [
      ...(seen.announcement ? [seen.announcement.action] : []),
      ...(seen.record?.action ? [seen.record.action] : []),
    ];
    // Our action's announcement (to keep or release), or the boot our unfinished action caused.
    const ours = named
      .filter((a) => {
        const mine = this.actionsByUID.get(a.uid);
        return mine && (a === seen.announcement?.action || !isTerminal(mine.status?.phase));
      })
      .map((a) => a.uid);
    if (!own && ours.length === 0) return undefined;

    const actions = new Map<string, BootActionFacts>();
    for (const ref of named) {
      const facts = await this.actionFacts(ref);
      if (facts) actions.set(ref.uid, facts);
    }
    const record = seen.record?.bootID === bootIDOf(node) ? seen.record : undefined;
    const runs = record ? [...record.preready.runs, ...record.ready.runs] : [];
    const hooks = this.hookObjects();
    const prereadyHooks = selectHooks(hooks, 'NodePrereadyJob', node.metadata.labels ?? {});
    // Read only by the leader, while the node is Ready (the NodePrereadyJobs wait for that)
    // and a readiness hook waits.
    const readiness =
      this.o.isLeader() &&
      isNodeReady(node) &&
      record?.preready.phase !== 'Failed' &&
      wantsReadinessFacts(prereadyHooks, record?.preready.runs ?? [])
        ? await this.readiness.read(name)
        : undefined;
    if (!readiness) this.readiness.forget(name);
    const decision = decideBoot({
      now: new Date(),
      node: {
        name,
        uid: node.metadata.uid,
        labels: node.metadata.labels ?? {},
        bootID: bootIDOf(node),
        ready: isNodeReady(node),
        tainted: seen.prereadyTaint,
        ...(seen.record ? { record: seen.record } : {}),
        ...(seen.announcement ? { announcement: seen.announcement } : {}),
      },
      hooks,
      jobs: await this.o.runner.jobFacts(runs),
      webhooks: this.o.runner.webhookFacts(),
      actions,
      nodeJobs: this.nodeJobs(name),
      ...(own ? {} : { onlyActions: new Set(ours) }),
      ...(readiness ? { readiness } : {}),
    });
    if (!this.o.isLeader()) return undefined;

    const change = decision.change;
    if (change) {
      try {
        const written = await writeNode(this.o.rest, node, change);
        if (written) this.writes.replaced(node);
      } catch (error) {
        if (isConflict(error)) {
          log.debug({ err: error.message }, 'node write conflicted; deciding again');
          return { requeueAfterMs: 250 };
        }
        throw error;
      }
      // Webhook results of an earlier boot are of no use any more.
      if (change.record && seen.record && change.record.bootID !== seen.record.bootID)
        this.o.runner.forget(`boot/${name}/${seen.record.bootID}/`);
      if (change.taint !== undefined || change.record?.preready.phase !== seen.record?.preready.phase)
        log.info({ taint: change.taint, message: decision.message }, 'boot hooks');
    }
    const about = { ...node, apiVersion: 'v1', kind: 'Node' };
    for (const event of decision.events) await this.o.events.record(about, event);
    const bootID = change?.record?.bootID ?? record?.bootID;
    if (decision.effects.length) {
      await this.o.runner.execute(
        decision.effects,
        {
          confirm: (r) => this.confirmPending(name, node.metadata.uid ?? '', bootID, r),
          confirmEarlierBoot: (earlier) => this.confirmEarlierBoot(name, node.metadata.uid ?? '', earlier),
          onChange: () => this.queue.add(name),
        },
        log,
      );
    }
    return decision.requeueAfterMs !== undefined ? { requeueAfterMs: decision.requeueAfterMs } : undefined;
  }

  /** Whether the node (read from the API server, not the cache) booted since `earlier`, or is gone. */
  private async confirmEarlierBoot(name: string, uid: string, earlier: string): Promise<boolean> {
    try {
      const live = await this.o.rest.request<BootNodeObject>(`/api/v1/nodes/${name}`);
      if (live.metadata.uid !== uid) return true;
      return bootIDOf(live) !== earlier;
    } catch (error) {
      if (isConflict(error, [404])) return true;
      throw error;
    }
  }

  /** Whether the node's record (read from the API server, not the cache) holds this attempt, unfinished, for this boot. */
  private async confirmPending(
    name: string,
    uid: string,
    bootID: string | undefined,
    run: HookRunRecord,
  ): Promise<boolean> {
    try {
      const live = await this.o.rest.request<BootNodeObject>(`/api/v1/nodes/${name}`);
      if (live.metadata.uid !== uid || live.metadata.deletionTimestamp) return false;
      const record = readBootAnnotations(live).record;
      if (!record || record.bootID !== bootID || bootIDOf(live) !== bootID) return false;
      return isRecordPending([...record.preready.runs, ...record.ready.runs], run);
    } catch (error) {
      if (isConflict(error, [404])) return false;
      throw error;
    }
  }
}
