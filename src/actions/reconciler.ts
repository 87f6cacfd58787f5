// The NodeAction reconciler: the imperative shell around decide() (decide.ts),
// planAdmissions() (admission.ts) and planRetention() (retention.ts). It observes the
// informers' caches, asks the core what to do, and does it: status writes (always
// conditional on the resourceVersion decided upon), finalizers, Events, hook Jobs and
// webhook calls (through the HookRunner), ActionPolicy status, garbage collection.
//
// Work-queue keys: an action's name (a DNS subdomain), or one of two singletons:
// ADMISSION_KEY (every admission runs in this one key, so admissions never race each
// other) and RETENTION_KEY. Only the leader acts; followers return at once and keep
// their caches warm, and a new leader requeues everything.
import type { ActionPolicy } from '../api/action-policy.ts';
import type { HookKindName, HookSpec } from '../api/hooks.ts';
import {
  NODE_ACTION_FINALIZER,
  HOOK_JOB_LABELS,
  CORDONED_BY_ANNOTATION,
  INSTANCE_LABEL,
  POLICY_VALID_CONDITION,
} from '../api/names.ts';
import type { NodeActionStatus, ObservedNodeAction } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH, ACTION_POLICIES_PATH } from '../api/paths.ts';
import { APPROVED_PHASES, UNFINISHED_FIELD_SELECTOR, holdsSlot, isTerminal } from '../api/phases.ts';
import { writeNode } from '../boots/node.ts';
import { readBootAnnotations } from '../boots/record.ts';
import { unknownState } from '../checks/state.ts';
import type { CheckRunner } from '../checks/runner.ts';
import type { HookEffect, HookRunRecord } from '../hooks/plan.ts';
import { isRecordPending } from '../hooks/plan.ts';
import type { HookRunner } from '../hooks/runner.ts';
import type { HookObject } from '../hooks/select.ts';
import { setCondition } from '../kube/conditions.ts';
import type { EventRecorder } from '../kube/events.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { WorkQueue, type ReconcileResult } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { reportPolicy, type ActionRef, type NodeLabels, type PolicyFacts } from '../policies/evaluate.ts';
import { SilenceLeases } from '../silences/leases.ts';
import { uncordonFor } from '../talos/drain.ts';
import type { EtcdCheck } from '../talos/etcd-check.ts';
import { NO_TALOSCONFIG } from '../talos/etcd-check.ts';
import type { EtcdCheckState } from '../talos/etcd-health.ts';
import type { TalosExecutor } from '../talos/execution.ts';
import { errorMessage } from '../wait.ts';
import type { TurnLease, TurnSection } from '../kube/turn-lease.ts';
import {
  afterWrite,
  cacheShowsEverySlot,
  foreignUnfinished,
  parseResourceVersion,
  type AdmissionReadState,
} from './admission-read.ts';
import { actionRef, isCandidate, planAdmissions } from './admission.ts';
import { checkGates } from '../checks/selection.ts';
import {
  decide,
  type ActionDecision,
  type ActionEffect,
  type ActionInput,
  type CheckFacts,
  type FreshChecks,
  type NodeFacts,
} from './decide.ts';
import { etcdAway } from './etcd-guard.ts';
import { FreshEvaluations } from './fresh-evaluations.ts';
import { enterTurn, etcdWaitsForTurn, waitingForTurn } from './instance-turn.ts';
import { DEFAULT_RETENTION, planRetention, type RetentionPolicy } from './retention.ts';
import { holdSilences } from './silences.ts';

/** The label selector of the actions an instance (or the default, unnamed one) reconciles. */
export function instanceSelector(instance: string | undefined): string {
  return instance ? `${INSTANCE_LABEL}=${instance}` : `!${INSTANCE_LABEL}`;
}

/** Every action instanceSelector(instance) leaves out: those of the other controller instances. */
export function foreignInstanceSelector(instance: string | undefined): string {
  return instance ? `${INSTANCE_LABEL}!=${instance}` : INSTANCE_LABEL;
}

/** What the admission pass reads of another instance's action: who, where, and whether it holds a slot. */
export function slimForeignAction(a: ActionObject): ActionObject {
  const { name, uid, resourceVersion, labels, creationTimestamp, deletionTimestamp } = a.metadata;
  return {
    metadata: {
      name,
      uid,
      ...(resourceVersion !== undefined ? { resourceVersion } : {}),
      ...(labels ? { labels } : {}),
      ...(creationTimestamp !== undefined ? { creationTimestamp } : {}),
      ...(deletionTimestamp !== undefined ? { deletionTimestamp } : {}),
    },
    spec: { nodeName: a.spec.nodeName, action: a.spec.action },
    ...(a.status?.phase !== undefined ? { status: { phase: a.status.phase } } : {}),
  } as ActionObject;
}

export const ADMISSION_KEY = '@admission';

/** How long a gate waits inline for checker Jobs before saying, in the status, that it waits on them. */
const CHECKER_JOB_SETTLE_MS = 1000;

/** A new action, set up by its reconciler (the finalizer) and with no status yet: its first status is the admission pass's. */
function isNew(action: ActionObject): boolean {
  return (
    action.status?.phase === undefined &&
    action.metadata.deletionTimestamp === undefined &&
    (action.metadata.finalizers ?? []).includes(NODE_ACTION_FINALIZER)
  );
}

export const RETENTION_KEY = '@retention';
const RETENTION_INTERVAL_MS = 10 * 60_000;
/**
 * How long an admission pass waits for an admitted action's fresh evaluation (begun
 * beside its list) before writing the admission alone: a slow probe must not hold up
 * every other admission.
 */
const FOLD_WAIT_MS = 250;

export type ActionObject = ObservedNodeAction & KubeObject;
type UnfinishedList = { items: ActionObject[]; metadata?: { resourceVersion?: string } };
type PolicyObject = ActionPolicy & KubeObject;
type HookKubeObject = KubeObject & { spec: HookSpec };

export interface ActionReconcilerOptions {
  rest: RestClient;
  log: Logger;
  events: EventRecorder;
  metrics?: Metrics;
  checks: CheckRunner;
  actions: Informer<ActionObject>;
  /**
   * Every other controller instance's actions (the complement of `actions`' selector):
   * with it, the admission pass counts from the caches once they show every slot
   * (admission-read.ts); without it, every pass makes a quorum read.
   */
  foreignActions?: Informer<ActionObject>;
  policies: Informer<PolicyObject>;
  nodes: Informer<KubeObject>;
  hooks: ReadonlyMap<HookKindName, Informer<HookKubeObject>>;
  jobs: Informer<KubeObject>;
  checkInformer: Informer<KubeObject>;
  runner: HookRunner;
  /** The Talos executor (Managed execution); without it, Managed actions are followed like External ones. */
  executor?: TalosExecutor;
  isLeader: () => boolean;
  instance?: string;
  retention?: RetentionPolicy;
  concurrency?: number;
  /** Makes the Alertmanager silence calls; one of its own by default. */
  silences?: SilenceLeases;
  /** Reads etcd for the etcd guard (src/talos/etcd-check.ts); without it, etcd is never checked. */
  etcd?: EtcdCheck;
  /**
   * The turn every controller instance takes to admit and to approve control-plane
   * actions (src/kube/turn-lease.ts). Without it the reconciler acts as if alone.
   */
  turn?: TurnLease;
  /** See ControllerOptions.controlPlaneAcrossInstances (default true). */
  controlPlaneAcrossInstances?: boolean;
}

/** The etcd guard's lock and turn, held from its read to the write of the decision made on it. */
interface EtcdHold {
  release(): void;
  /** Whether the turn the read was made under is still ours: false, and the decision is not written. */
  valid(): boolean;
}

interface NodeObject extends KubeObject {
  status?: {
    nodeInfo?: { bootID?: string; osImage?: string };
    conditions?: { type: string; status: string }[];
  };
}

export function nodeFacts(node: KubeObject | undefined): NodeFacts | undefined {
  if (!node) return undefined;
  const n = node as NodeObject;
  const cordonedBy = n.metadata.annotations?.[CORDONED_BY_ANNOTATION];
  const boot = readBootAnnotations(n);
  return {
    name: n.metadata.name,
    labels: n.metadata.labels ?? {},
    bootID: n.status?.nodeInfo?.bootID || undefined,
    ready: n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    ...(n.status?.nodeInfo?.osImage ? { osImage: n.status.nodeInfo.osImage } : {}),
    ...(cordonedBy ? { cordonedBy } : {}),
    ...(boot.prereadyTaint ? { prereadyTaint: true } : {}),
    ...(boot.announcement ? { announcement: boot.announcement } : {}),
    ...(boot.record ? { boot: boot.record } : {}),
  };
}

/** JSON equality that ignores key order and undefined members. */
export function sameJSON(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(value: unknown): string {
  return JSON.stringify(value, (_, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([x], [y]) => x.localeCompare(y)),
        )
      : v,
  );
}

export class ActionReconciler {
  readonly queue: WorkQueue;
  private readonly o: ActionReconcilerOptions & { retention: RetentionPolicy };
  private readonly log: Logger;
  /** Action name → the resourceVersion our last write replaced: a cache still showing it is stale. */
  private readonly superseded = new Map<string, string>();
  private readonly uidToName = new Map<string, string>();
  /** Whether the API server filters NodeActions by phase (see listUnfinished). */
  private fieldSelectors = true;
  private readonly silences: SilenceLeases;
  private readonly fresh: FreshEvaluations;
  /**
   * Held from the etcd guard's read to the status write of the decision made on it: two
   * control-plane actions judged at once would each see the other not yet approved.
   */
  private etcdTurn: Promise<void> = Promise.resolve();
  private started = false;
  private leading = false;
  /** What the admission pass knows of the caches' completeness (admission-read.ts). */
  private admissionRead: AdmissionReadState = {};
  /** Other instances' unfinished actions as the last quorum read showed them (admission-read.ts). */
  private foreignAtQuorum: { items: ActionObject[]; resourceVersion?: string } = { items: [] };
  /** Actions whose etcd guard waits for the turn: looked at again when it comes. */
  private readonly turnWaiters = new Set<string>();
  /** Bumped whenever leadership may have changed hands: a quorum read begun before does not count. */
  private leadership = 0;

  constructor(options: ActionReconcilerOptions) {
    this.o = { retention: DEFAULT_RETENTION, ...options };
    this.log = options.log;
    this.silences =
      options.silences ?? new SilenceLeases({ log: options.log.child({ component: 'silences' }) });
    this.fresh = new FreshEvaluations(options.checks);
    this.queue = new WorkQueue({
      name: 'nodeactions',
      log: options.log,
      concurrency: options.concurrency ?? 4,
      // The admission pass is on every gate's path: it never waits behind slow reconciles.
      express: new Set([ADMISSION_KEY]),
      reconcile: (key) => this.reconcile(key),
    });
    this.wire();
  }

  /** Starts working once every cache is complete: deciding on a partial cache could skip a check or a hook. */
  async start(signal?: AbortSignal): Promise<void> {
    const o = this.o;
    await Promise.all([
      o.actions.waitForSync(signal),
      ...(o.foreignActions ? [o.foreignActions.waitForSync(signal)] : []),
      o.policies.waitForSync(signal),
      o.nodes.waitForSync(signal),
      o.jobs.waitForSync(signal),
      o.checkInformer.waitForSync(signal),
      ...[...o.hooks.values()].map((i) => i.waitForSync(signal)),
    ]);
    this.started = true;
    this.queue.start();
    this.enqueueAll();
  }

  stop(): void {
    this.queue.stop();
    this.silences.stop();
  }

  /** Every action, the admission pass and retention: after a start or on becoming leader. */
  enqueueAll(): void {
    // Called on becoming leader: another may have taken slots since our last quorum read.
    this.forgetQuorum();
    if (!this.started) return;
    for (const a of this.o.actions.list()) this.queue.add(a.metadata.name);
    this.queue.add(ADMISSION_KEY);
    this.queue.add(RETENTION_KEY);
  }

  private wire(): void {
    const { actions, nodes, jobs, policies, checkInformer } = this.o;
    actions.on('add', (a) => {
      this.uidToName.set(a.metadata.uid, a.metadata.name);
      // A new action: its health gate's evaluation starts now, beside its first writes.
      if (a.status?.phase === undefined && this.started && this.o.isLeader()) this.beginEvaluation(a);
      this.queue.add(a.metadata.name);
      if (!isTerminal(a.status?.phase)) this.queue.add(ADMISSION_KEY);
    });
    actions.on('update', (old, a) => {
      this.uidToName.set(a.metadata.uid, a.metadata.name);
      this.queue.add(a.metadata.name);
      const before = old.status?.phase;
      const after = a.status?.phase;
      if (before !== after && (after === 'Pending' || holdsSlot(before) !== holdsSlot(after))) {
        this.queue.add(ADMISSION_KEY);
      }
      if (before !== after && after !== undefined) this.o.metrics?.actionTransitions.inc({ phase: after });
      // A newly finished action may push an older one of its node out of the kept few.
      if (isTerminal(after) && !isTerminal(before)) this.queue.add(RETENTION_KEY);
    });
    actions.on('delete', (a) => {
      this.uidToName.delete(a.metadata.uid);
      this.superseded.delete(a.metadata.name);
      this.fresh.forget(a.metadata.uid);
      this.o.runner.forget(`action/${a.metadata.uid}/`);
      this.o.executor?.forget(a.metadata.uid);
      this.silences.forget(a.metadata.uid);
      if (holdsSlot(a.status?.phase)) this.queue.add(ADMISSION_KEY);
    });
    // The turn (src/kube/turn.ts): another instance may have admitted or approved while it
    // was not ours, so what was read before it came counts for nothing.
    this.o.turn?.on('acquired', () => {
      this.forgetQuorum();
      this.queue.add(ADMISSION_KEY);
      for (const name of this.turnWaiters) this.queue.add(name);
      this.turnWaiters.clear();
    });
    this.o.turn?.on('lost', () => this.forgetQuorum());
    // Another instance's action that takes or frees a node: ours waiting for it look again.
    const foreign = this.o.foreignActions;
    foreign?.on('update', (old, a) => {
      if (holdsSlot(old.status?.phase) !== holdsSlot(a.status?.phase)) this.queue.add(ADMISSION_KEY);
    });
    foreign?.on('delete', (a) => {
      if (holdsSlot(a.status?.phase)) this.queue.add(ADMISSION_KEY);
    });
    const onNode = (old: KubeObject | undefined, node: KubeObject) => {
      for (const a of actions.list()) {
        if (a.spec.nodeName === node.metadata.name && !isTerminal(a.status?.phase))
          this.queue.add(a.metadata.name);
      }
      if (!old || !sameJSON(old.metadata.labels, node.metadata.labels)) this.queue.add(ADMISSION_KEY);
    };
    nodes.on('add', (n) => onNode(undefined, n));
    nodes.on('update', (old, n) => onNode(old, n));
    nodes.on('delete', (n) => onNode(undefined, n));
    const onJob = (job: KubeObject) => {
      const uid = job.metadata.labels?.[HOOK_JOB_LABELS.actionUID];
      const name = uid ? this.uidToName.get(uid) : undefined;
      if (name) this.queue.add(name);
    };
    jobs.on('add', onJob);
    jobs.on('update', (_, j) => onJob(j));
    jobs.on('delete', onJob);
    const onHook = () => {
      for (const a of actions.list()) {
        const phase = a.status?.phase;
        if (phase === 'RunningPreHooks' || phase === 'RunningPostHooks') this.queue.add(a.metadata.name);
      }
    };
    for (const informer of this.o.hooks.values()) {
      informer.on('add', onHook);
      informer.on('update', (old, h) => {
        if (old.metadata.generation !== h.metadata.generation) onHook();
      });
      informer.on('delete', onHook);
    }
    // A check's status changed: actions held at the health gate look again.
    checkInformer.on('update', () => {
      for (const a of actions.list())
        if (a.status?.phase === 'WaitingForHealth') this.queue.add(a.metadata.name);
    });
    // A policy that asks for silences, or no longer does: approved actions look again.
    const onSilencePolicy = (...changed: PolicyObject[]) => {
      if (!changed.some((p) => p.spec.alertmanagerSilence)) return;
      for (const a of actions.list()) {
        const phase = a.status?.phase;
        if (phase !== undefined && APPROVED_PHASES.has(phase)) this.queue.add(a.metadata.name);
      }
    };
    policies.on('add', (p) => {
      this.queue.add(ADMISSION_KEY);
      onSilencePolicy(p);
    });
    policies.on('update', (old, p) => {
      if (old.metadata.generation === p.metadata.generation) return;
      this.queue.add(ADMISSION_KEY);
      onSilencePolicy(old, p);
    });
    policies.on('delete', (p) => {
      this.queue.add(ADMISSION_KEY);
      onSilencePolicy(p);
    });
  }

  private async reconcile(key: string): Promise<ReconcileResult | undefined> {
    if (!this.o.isLeader()) {
      this.leading = false;
      this.forgetQuorum();
      return undefined;
    }
    if (!this.leading) {
      // What this replica knew of its silence calls may be stale after another led.
      this.silences.forgetAll();
      this.leading = true;
    }
    if (key === ADMISSION_KEY) return this.admission();
    if (key === RETENTION_KEY) return this.retention();
    return this.reconcileAction(key);
  }

  // ---------------------------------------------------------------------------------
  // One action.

  /** The checks as the runner has them; a Node-scoped one's state is its state for `node`. */
  private checkFacts(node?: string): CheckFacts[] {
    return this.o.checks.views().map((v) => ({
      name: v.name,
      spec: v.spec,
      state: (node !== undefined && v.nodeState?.(node)) || (v.nodeState ? unknownState() : v.state),
    }));
  }

  private hookObjects(): HookObject[] {
    const hooks: HookObject[] = [];
    for (const [kind, informer] of this.o.hooks) {
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

  private async reconcileAction(name: string): Promise<ReconcileResult | undefined> {
    const action = this.o.actions.get(name);
    if (!action) return undefined;
    const rv = action.metadata.resourceVersion;
    if (rv !== undefined && this.superseded.get(name) === rv) {
      // Our own newer write has not reached the cache yet; its event will bring us back.
      return { requeueAfterMs: 1000 };
    }
    this.superseded.delete(name);
    const log = this.log.child({ action: name, node: action.spec.nodeName });
    let hold: EtcdHold | undefined;
    try {
      const decision = await this.decideFor(action, false, (h) => (hold = h));
      if (!this.o.isLeader()) return undefined;
      // Decided on an etcd read made under a turn that is gone: another instance may have
      // approved since. Decide again.
      if (hold && !hold.valid()) return { requeueAfterMs: 0 };
      if (isNew(action) && decision.status.phase === 'Pending') {
        // Recorded as requested by the admission pass, in the same write as its admission
        // when its policies allow it at once: one write instead of two.
        this.queue.add(ADMISSION_KEY);
        return undefined;
      }
      return await this.commit(action, decision, log);
    } finally {
      hold?.release();
    }
  }

  /** Waits for the etcd guard's turn (see etcdTurn); the caller releases it. */
  private async etcdLock(): Promise<() => void> {
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const before = this.etcdTurn;
    this.etcdTurn = before.then(() => mine);
    await before;
    return release;
  }

  /**
   * The etcd guard's lock, and the turn (instance-turn.ts): held from its read to the
   * write of the decision made on it, so that no approval of this instance or another
   * is written between. Without the turn, `turn` is undefined and it has been asked for.
   */
  private async etcdHold(action: ActionObject): Promise<EtcdHold & { turn: TurnSection | undefined }> {
    const unlock = await this.etcdLock();
    const turn = enterTurn(this.o.turn);
    if (!turn) this.turnWaiters.add(action.metadata.name);
    return {
      turn,
      valid: () => turn?.valid() ?? true,
      release: () => {
        turn?.release();
        unlock();
      },
    };
  }

  /**
   * The etcd guard's read for the action (etcd-guard.ts), counting as down the members
   * of nodes whose disruptive action is approved — from a quorum read of every
   * instance's actions, made under the turn, not the cache, which may not show an
   * approval just written.
   */
  private async readEtcd(action: ActionObject, turn: TurnSection | undefined): Promise<EtcdCheckState> {
    if (!turn) return etcdWaitsForTurn(this.o.turn);
    if (!this.o.etcd)
      return { at: new Date(), checked: false, healthy: false, spareable: true, message: NO_TALOSCONFIG };
    const list = await this.o.rest.request<{ items: ActionObject[] }>(NODE_ACTIONS_PATH);
    return this.o.etcd.check(action.spec.nodeName, etcdAway(list.items, action));
  }

  /** The checks that gate the action on its node, as the cache has them; undefined without a node. */
  private gatingChecks(action: ActionObject): string[] | undefined {
    const node = this.o.nodes.get(action.spec.nodeName);
    if (!node || action.spec.bypass?.healthChecks) return undefined;
    const labels = node.metadata.labels ?? {};
    return this.checkFacts()
      .filter((c) => checkGates(c.spec, action.spec.action, labels))
      .map((c) => c.name);
  }

  /** Begins the fresh evaluation the action's health gate will ask for (fresh-evaluations.ts). */
  private beginEvaluation(action: ActionObject): void {
    if (action.metadata.deletionTimestamp) return;
    const names = this.gatingChecks(action);
    if (names && names.length > 0) this.fresh.begin(action.metadata.uid, names, action.spec.nodeName);
  }

  /**
   * When these checks include `job` probes whose fresh evaluation takes longer than
   * CHECKER_JOB_SETTLE_MS: the evaluation is left under way (the action is queued again
   * when it finishes) and what it waits on is returned, for the action's status to say.
   * Undefined: evaluate (or take the finished evaluation) now.
   */
  private async awaitCheckerJobs(
    action: ActionObject,
    checks: readonly string[],
  ): Promise<{ check: string; job?: string }[] | undefined> {
    const jobChecks = checks.filter((name) => this.o.checks.view(name)?.spec.job !== undefined);
    if (jobChecks.length === 0) return undefined;
    const { uid, name } = action.metadata;
    const node = action.spec.nodeName;
    this.fresh.begin(uid, checks, node);
    await this.fresh.settle(uid, CHECKER_JOB_SETTLE_MS);
    if (this.fresh.finished(uid)) return undefined;
    void this.fresh.done(uid).then(() => this.queue.add(name));
    return jobChecks.map((check) => {
      const job = this.o.checks.runningJob(check, node);
      return job ? { check, job } : { check };
    });
  }

  /** A fresh evaluation of these checks for the action: the one begun ahead of the gate, or one now. */
  private async evaluate(uid: string, names: string[], node: string): Promise<FreshChecks> {
    const begun = this.fresh.take(uid, names);
    if (begun) return begun;
    const states = await this.o.checks.evaluateNow(names, node);
    return { at: new Date(), states };
  }

  /**
   * decide() on what the caches show of the action, with a fresh evaluation when it asks
   * (with `begunOnly`, only one already begun: otherwise the decision is left asking), then
   * its silences.
   */
  private async decideFor(
    action: ActionObject,
    begunOnly = false,
    /** Takes the etcd guard's hold, when it was taken, to release it after the write (else released here). */
    holdEtcd?: (hold: EtcdHold) => void,
  ): Promise<ActionDecision> {
    const records = [...(action.status?.hooks ?? []), ...(action.status?.undo?.runs ?? [])];
    const input: ActionInput = {
      now: new Date(),
      action,
      node: nodeFacts(this.o.nodes.get(action.spec.nodeName)),
      checks: this.checkFacts(action.spec.nodeName),
      hooks: this.hookObjects(),
      jobs: await this.o.runner.jobFacts(records),
      webhooks: this.o.runner.webhookFacts(),
      ...(this.o.executor ? { execution: this.o.executor.facts(action.metadata.uid) } : {}),
    };
    let now = input.now;
    let decision = decide(input);
    let begun: Promise<FreshChecks> | undefined;
    if (begunOnly) {
      if (decision.readEtcd) return decision;
      if (decision.evaluateChecks) {
        begun = this.fresh.take(action.metadata.uid, decision.evaluateChecks);
        if (!begun) return decision;
      }
    }
    // A fresh evaluation, an etcd read, or both (in parallel), then decide again; the
    // approval may ask for a read of its own after the health gate's, hence the rounds.
    let fresh: FreshChecks | undefined;
    let etcd: EtcdCheckState | undefined;
    let hold: (EtcdHold & { turn: TurnSection | undefined }) | undefined;
    try {
      for (let round = 0; round < 3 && (decision.evaluateChecks || decision.readEtcd); round++) {
        const checks = decision.evaluateChecks;
        const evaluating =
          checks && !begun && !begunOnly ? await this.awaitCheckerJobs(action, checks) : undefined;
        if (evaluating) {
          now = new Date();
          decision = decide({ ...input, now, evaluating });
          break;
        }
        if (decision.readEtcd) hold ??= await this.etcdHold(action);
        [fresh, etcd] = await Promise.all([
          checks
            ? (begun ?? this.evaluate(action.metadata.uid, checks, action.spec.nodeName))
            : Promise.resolve(fresh),
          decision.readEtcd && hold ? this.readEtcd(action, hold.turn) : Promise.resolve(etcd),
        ]);
        begun = undefined;
        now = new Date();
        decision = decide({ ...input, now, ...(fresh ? { fresh } : {}), ...(etcd ? { etcd } : {}) });
      }
    } finally {
      // Held on to the status write when the caller takes it; else released now.
      if (hold && holdEtcd) holdEtcd(hold);
      else hold?.release();
    }
    const nodeObject = this.o.nodes.get(action.spec.nodeName);
    return holdSilences(decision, action, {
      now,
      policies: this.policyFacts(),
      nodeLabels: nodeObject ? (nodeObject.metadata.labels ?? {}) : undefined,
      facts: this.silences.facts(action.metadata.uid),
    });
  }

  /** Carries out a decision about the action as observed: its status written (conditionally), then its effects. */
  private async commit(
    action: ActionObject,
    decision: ActionDecision,
    log: Logger,
  ): Promise<ReconcileResult | undefined> {
    if (decision.addFinalizer) {
      // The written object enters the cache at once (applyWritten), which brings the next pass.
      await this.patchFinalizers(action, [...(action.metadata.finalizers ?? []), NODE_ACTION_FINALIZER]);
      return undefined;
    }
    let current: ActionObject = action;
    if (!sameJSON(decision.status, action.status ?? {})) {
      try {
        current = await this.writeStatus(action, decision.status);
      } catch (error) {
        if (error instanceof KubeApiError && (error.code === 409 || error.code === 404)) {
          // Someone wrote in between (or it is gone): decide again on what is there now.
          log.debug({ err: error.message }, 'status write conflicted; deciding again');
          return { requeueAfterMs: 250 };
        }
        throw error;
      }
      const phase = decision.status.phase;
      if (phase !== action.status?.phase)
        log.info({ phase, message: decision.status.message }, 'action phase changed');
    }
    await this.apply(decision.effects, current, log);
    if (decision.removeFinalizer) {
      await this.patchFinalizers(
        current,
        (current.metadata.finalizers ?? []).filter((f) => f !== NODE_ACTION_FINALIZER),
      );
    }
    return decision.requeueAfterMs !== undefined ? { requeueAfterMs: decision.requeueAfterMs } : undefined;
  }

  private async apply(effects: readonly ActionEffect[], action: ActionObject, log: Logger): Promise<void> {
    const events = effects.flatMap((e) => (e.type === 'event' ? [e] : []));
    for (const e of events) {
      await this.o.events.record(action, { type: e.eventType, reason: e.reason, message: e.message });
    }
    if (effects.some((e) => e.type === 'admission')) this.queue.add(ADMISSION_KEY);
    const name = action.metadata.name;
    for (const e of effects) {
      if (e.type !== 'silence' || !this.o.isLeader()) continue;
      this.silences.start(
        {
          op: e.op,
          url: e.url,
          nodeLabel: e.nodeLabel,
          node: action.spec.nodeName,
          action: { name, uid: action.metadata.uid },
          ...(e.op === 'hold' ? { notAfter: new Date(e.notAfter) } : {}),
        },
        () => this.queue.add(name),
        log,
      );
    }
    await this.applyExecution(effects, action, log);
    for (const e of effects) if (e.type === 'announceBoot') await this.announceBoot(e, action, log);
    const hookEffects = effects.flatMap((e): HookEffect[] =>
      e.type === 'createJob' || e.type === 'deleteJob' || e.type === 'callWebhook' || e.type === 'hookRun'
        ? [e]
        : [],
    );
    if (hookEffects.length === 0) return;
    await this.o.runner.execute(
      hookEffects,
      {
        confirm: (record) => this.confirmPending(name, action.metadata.uid, record),
        onChange: () => this.queue.add(name),
      },
      log,
    );
  }

  /**
   * Announces the action's coming boot on its node, with the preready taint if asked
   * (src/boots): one write, conditional on the node version in the cache. A conflict is
   * left to the next pass, which the node's change brings.
   */
  private async announceBoot(
    effect: Extract<ActionEffect, { type: 'announceBoot' }>,
    action: ActionObject,
    log: Logger,
  ): Promise<void> {
    if (!this.o.isLeader()) return;
    const node = this.o.nodes.get(action.spec.nodeName);
    if (!node) return;
    try {
      const written = await writeNode(this.o.rest, node, {
        announcement: effect.announcement,
        ...(effect.taint ? { taint: true } : {}),
      });
      if (!written) return;
    } catch (error) {
      if (error instanceof KubeApiError && (error.code === 409 || error.code === 404)) {
        log.debug({ err: error.message }, 'could not announce the boot yet; trying again');
        return;
      }
      throw error;
    }
    log.info({ taint: effect.taint }, 'announced the coming boot on the node');
    if (effect.taint && !readBootAnnotations(node).prereadyTaint) {
      await this.o.events.record(
        { ...node, apiVersion: 'v1', kind: 'Node' },
        {
          type: 'Normal',
          reason: 'PrereadyTainted',
          message: `talos.dev/preready:NoSchedule put on before NodeAction ${action.metadata.name} (${action.spec.action}) is approved: the node comes back tainted until its NodePrereadyJobs succeed`,
        },
      );
    }
  }

  /** Managed execution's effects, carried out by the Talos executor (src/talos/execution.ts). */
  private async applyExecution(
    effects: readonly ActionEffect[],
    action: ActionObject,
    log: Logger,
  ): Promise<void> {
    const executor = this.o.executor;
    const name = action.metadata.name;
    const uid = action.metadata.uid;
    const onChange = () => this.queue.add(name);
    for (const e of effects) {
      switch (e.type) {
        case 'uncordon':
          // Plain Kubernetes, with or without an executor (one may have cordoned before a restart).
          await this.uncordon(action, log);
          break;
        case 'stopExecution':
          executor?.stop(uid, e.reason);
          break;
        case 'drain':
          executor?.start('drain', { action, onChange }, log);
          break;
        case 'talos':
          if (e.step === 'call') {
            const callTime = e.callTime;
            executor?.start(
              'call',
              { action, onChange, confirm: () => this.confirmCall(name, uid, callTime) },
              log,
            );
          } else {
            executor?.start(e.step, { action, onChange }, log);
          }
          break;
        default:
          break;
      }
    }
  }

  /** Lifts the cordon the action made, if the node still carries it; an Event says so. */
  private async uncordon(action: ActionObject, log: Logger): Promise<void> {
    if (!this.o.isLeader()) return;
    const node = action.spec.nodeName;
    try {
      if (!(await uncordonFor(this.o.rest, node, action.metadata.name))) return;
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404) return;
      throw error;
    }
    log.info('uncordoned the node');
    await this.o.events.record(action, {
      type: 'Normal',
      reason: 'Uncordoned',
      message: `${action.spec.action} of node ${node}: uncordoned the node`,
    });
  }

  /**
   * Whether the action, read from the API server (not the cache), still records this
   * Talos call as about to be made, unfinished and not deleted: the last check before
   * a call that must never be made twice.
   */
  private async confirmCall(name: string, uid: string, callTime: string): Promise<boolean> {
    try {
      const live = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      return (
        live.metadata.uid === uid &&
        !live.metadata.deletionTimestamp &&
        live.status?.phase === 'Executing' &&
        live.status.execution?.callTime === callTime &&
        live.status.execution.callResult === undefined
      );
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404) return false;
      throw error;
    }
  }

  /** Whether the record of this attempt is persisted and unfinished, read from the API server (not the cache). */
  private async confirmPending(name: string, uid: string, record: HookRunRecord): Promise<boolean> {
    try {
      const live = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      if (live.metadata.uid !== uid) return false;
      // An undo run (src/actions/phases/undo.ts) belongs to an ended action, deleted or
      // not; its Job name is its own, so only its record can match it.
      const undo = live.status?.undo?.runs ?? [];
      if (undo.some((r) => r.jobName === record.jobName) && isRecordPending(undo, record)) return true;
      if (live.metadata.deletionTimestamp || isTerminal(live.status?.phase)) return false;
      return isRecordPending(live.status?.hooks ?? [], record);
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404) return false;
      throw error;
    }
  }

  private async writeStatus(action: ActionObject, status: NodeActionStatus): Promise<ActionObject> {
    const written = await this.o.rest.request<ActionObject>(
      `${NODE_ACTIONS_PATH}/${action.metadata.name}/status`,
      {
        method: 'PUT',
        body: { ...action, status },
      },
    );
    if (action.metadata.resourceVersion)
      this.superseded.set(action.metadata.name, action.metadata.resourceVersion);
    this.admissionRead = afterWrite(this.admissionRead, written.metadata.resourceVersion);
    this.o.actions.applyWritten(action.metadata.resourceVersion, written);
    this.o.metrics?.statusWrites.inc();
    return written;
  }

  private async patchFinalizers(action: ActionObject, finalizers: string[]): Promise<void> {
    try {
      const written = await this.o.rest.request<ActionObject>(
        `${NODE_ACTIONS_PATH}/${action.metadata.name}`,
        {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          // The resourceVersion makes the patch conditional: finalizers are a list.
          body: { metadata: { resourceVersion: action.metadata.resourceVersion, finalizers } },
        },
      );
      if (action.metadata.resourceVersion)
        this.superseded.set(action.metadata.name, action.metadata.resourceVersion);
      this.admissionRead = afterWrite(this.admissionRead, written.metadata.resourceVersion);
      this.o.actions.applyWritten(action.metadata.resourceVersion, written);
    } catch (error) {
      if (error instanceof KubeApiError && (error.code === 409 || error.code === 404)) return;
      throw error;
    }
  }

  // ---------------------------------------------------------------------------------
  // Admission: the one place actions take slots.

  private nodeLabels(): NodeLabels {
    return new Map(this.o.nodes.list().map((n) => [n.metadata.name, n.metadata.labels ?? {}]));
  }

  private policyFacts(): PolicyFacts[] {
    return this.o.policies
      .list()
      .filter((p) => !p.metadata.deletionTimestamp)
      .map((p) => ({ name: p.metadata.name, spec: p.spec }));
  }

  private async admission(): Promise<ReconcileResult | undefined> {
    const now = new Date();
    const nodes = this.nodeLabels();
    if (!this.o.actions.list().some((a) => isCandidate(a) || isNew(a))) {
      const holders = this.o.actions
        .list()
        .filter((a) => holdsSlot(a.status?.phase))
        .map(actionRef);
      await this.writePolicyStatuses(holders, nodes, now);
      return undefined;
    }
    // The cache foretells whom this pass will admit: their health gates' evaluations
    // begin now, beside the list, so that the admission can carry the gate's verdict.
    const foretold = planAdmissions({
      now,
      actions: this.o.actions
        .list()
        .map((a) => (isNew(a) ? { ...a, status: { ...a.status, phase: 'Pending' as const } } : a)),
      nodes,
      policies: this.policyFacts(),
    });
    for (const { action } of foretold.admit) this.beginEvaluation(action);
    // Admissions of every instance take turns (instance-turn.ts): without the turn, the
    // pass only tells its actions what they wait for, from the caches.
    const turn = enterTurn(this.o.turn);
    try {
      return await this.admitUnderTurn(now, nodes, turn);
    } finally {
      turn?.release();
    }
  }

  /**
   * The admission pass proper, under the turn (`turn` defined) or without it (nothing is
   * admitted; the actions it would admit are told they wait for their turn).
   */
  private async admitUnderTurn(
    now: Date,
    nodes: NodeLabels,
    turn: TurnSection | undefined,
  ): Promise<ReconcileResult | undefined> {
    // Every instance's unfinished actions: another instance's action on a node keeps
    // ours off it. From the caches when they show every slot taken (admission-read.ts),
    // else a quorum read: a cache that missed an admission written a moment ago could
    // give one slot out twice.
    const list = turn
      ? (this.unfinishedFromCaches() ?? (await this.listUnfinished()))
      : this.cachedUnfinished();
    const mine = (a: ActionObject) => a.metadata.labels?.[INSTANCE_LABEL] === this.o.instance;
    // New actions enter the pass as their own decision records them: requested, Pending.
    const requested = new Map<string, ActionDecision>();
    const listed: ActionObject[] = [];
    for (const a of list.items.filter(mine)) {
      const decision = isNew(a) ? await this.decideFor(a, true) : undefined;
      if (decision?.status.phase !== 'Pending') {
        listed.push(a);
        continue;
      }
      requested.set(a.metadata.name, decision);
      listed.push({ ...a, status: decision.status });
    }
    const planned = planAdmissions({
      now,
      actions: listed,
      others: list.items.filter((a) => !mine(a)),
      ...(this.o.controlPlaneAcrossInstances === false ? { controlPlaneElsewhere: false } : {}),
      nodes,
      policies: this.policyFacts(),
    });
    const plan = turn ? planned : waitingForTurn(planned, this.o.turn);
    // Leading, and the turn still ours: lost since the read (renewals failing), another
    // instance may be admitting, and this pass's read counts for nothing.
    const ours = () => this.o.isLeader() && turn?.valid() === true;
    const lost = () => {
      this.forgetQuorum();
      return this.o.isLeader() ? { requeueAfterMs: 0 } : undefined;
    };
    for (const { action, status } of plan.admit) {
      if (!ours()) return lost();
      const admitted = { ...(action as ActionObject), status };
      const log = this.log.child({ action: action.metadata.name, node: action.spec.nodeName });
      const onward = await this.decideOnward(admitted);
      if (!ours()) return lost();
      let written: ActionObject;
      try {
        // One write, conditional on the listed version: the slot, and (when it could be
        // decided at once) the action's way on from it — up to its approval.
        written = await this.writeStatus(action, onward?.status ?? status);
      } catch (error) {
        if (error instanceof KubeApiError && (error.code === 409 || error.code === 404)) {
          // It changed since the list (a deadline, a deletion): judge everyone again,
          // from a quorum read (a cache behind the write would only conflict again).
          this.forgetQuorum();
          return { requeueAfterMs: 0 };
        }
        throw error;
      }
      await this.recorded(requested, written, log);
      this.log.info(
        { action: action.metadata.name, node: action.spec.nodeName, message: status.message },
        'action admitted',
      );
      await this.o.events.record(action, {
        type: 'Normal',
        reason: 'WaitingForHealth',
        message: `${action.spec.action} of node ${action.spec.nodeName}: ${status.message ?? ''}`,
      });
      if (onward) {
        if (onward.status.phase !== status.phase)
          log.info({ phase: onward.status.phase, message: onward.status.message }, 'action phase changed');
        await this.apply(onward.effects, written, log);
        if (onward.requeueAfterMs !== undefined)
          this.queue.addAfter(action.metadata.name, onward.requeueAfterMs);
      }
      this.queue.add(action.metadata.name);
    }
    const waiting = [
      ...plan.wait,
      // New, and neither admitted nor told why not (planAdmissions leaves out what its
      // reconciler is to deny): recorded as requested all the same.
      ...listed.flatMap((action) =>
        requested.has(action.metadata.name) &&
        !plan.admit.some((u) => u.action.metadata.name === action.metadata.name) &&
        !plan.wait.some((u) => u.action.metadata.name === action.metadata.name)
          ? [{ action, status: action.status ?? {} }]
          : [],
      ),
    ];
    for (const { action, status } of waiting) {
      if (!this.o.isLeader()) return undefined;
      const log = this.log.child({ action: action.metadata.name, node: action.spec.nodeName });
      try {
        await this.recorded(requested, await this.writeStatus(action, status), log);
      } catch (error) {
        if (!(error instanceof KubeApiError && (error.code === 409 || error.code === 404))) throw error;
      }
    }
    await this.writePolicyStatuses(plan.holders, nodes, now);
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : undefined;
  }

  /**
   * Every instance's unfinished actions, by a quorum read filtered on the server: the
   * finished ones kept for history would make each admission slower as they pile up.
   * An API server older than selectable CRD fields (Kubernetes 1.31) refuses the
   * selector; then the whole list is read and filtered here, from then on.
   */
  private forgetQuorum(): void {
    this.leadership++;
    this.admissionRead = { ...this.admissionRead, quorum: undefined };
  }

  private async listUnfinished(): Promise<{ items: ActionObject[] }> {
    const leadership = this.leadership;
    const list = await this.readUnfinished();
    if (this.o.isLeader() && leadership === this.leadership) {
      this.admissionRead = {
        ...this.admissionRead,
        quorum: parseResourceVersion(list.metadata?.resourceVersion),
      };
      this.foreignAtQuorum = {
        items: list.items.filter((a) => a.metadata.labels?.[INSTANCE_LABEL] !== this.o.instance),
        ...(list.metadata?.resourceVersion !== undefined
          ? { resourceVersion: list.metadata.resourceVersion }
          : {}),
      };
    }
    this.o.metrics?.admissionReads.inc({ source: 'quorum' });
    return list;
  }

  /**
   * Every instance's unfinished actions from the caches, when they show every slot taken
   * (ours: admission-read.ts; other instances': the last quorum read, made under the
   * turn we still hold, as their informer updates it); else undefined.
   */
  private unfinishedFromCaches(): { items: ActionObject[] } | undefined {
    const foreign = this.o.foreignActions;
    if (!foreign || !cacheShowsEverySlot(this.admissionRead, this.o.actions.watchedVersion)) return undefined;
    this.o.metrics?.admissionReads.inc({ source: 'cache' });
    const theirs = foreignUnfinished(
      this.foreignAtQuorum,
      { items: foreign.list(), ...(foreign.watchedVersion ? { watched: foreign.watchedVersion } : {}) },
      (a) => isTerminal(a.status?.phase),
    );
    return { items: [...this.o.actions.list().filter((a) => !isTerminal(a.status?.phase)), ...theirs] };
  }

  /** Every instance's unfinished actions as the caches show them: for messages only, never to admit. */
  private cachedUnfinished(): { items: ActionObject[] } {
    const all = [...this.o.actions.list(), ...(this.o.foreignActions?.list() ?? [])];
    return { items: all.filter((a) => !isTerminal(a.status?.phase)) };
  }

  private async readUnfinished(): Promise<UnfinishedList> {
    if (this.fieldSelectors) {
      try {
        return await this.o.rest.request<UnfinishedList>(
          `${NODE_ACTIONS_PATH}?fieldSelector=${encodeURIComponent(UNFINISHED_FIELD_SELECTOR)}`,
        );
      } catch (error) {
        if (!(error instanceof KubeApiError && error.code === 400)) throw error;
        this.log.warn(
          { error: error.message },
          'the API server cannot select NodeActions by phase (Kubernetes before 1.31, or an older CRD): listing them all',
        );
        this.fieldSelectors = false;
      }
    }
    const all = await this.o.rest.request<UnfinishedList>(NODE_ACTIONS_PATH);
    return { ...all, items: all.items.filter((a) => !isTerminal(a.status?.phase)) };
  }

  /** The effects (Events) of a new action's being recorded as requested, once that is written. */
  private async recorded(
    requested: ReadonlyMap<string, ActionDecision>,
    written: ActionObject,
    log: Logger,
  ): Promise<void> {
    const decision = requested.get(written.metadata.name);
    if (!decision) return;
    log.info({ phase: 'Pending' }, 'action phase changed');
    await this.apply(
      decision.effects.filter((e) => e.type !== 'admission'),
      written,
      log,
    );
  }

  /**
   * The decision an action just admitted goes on to, taken with its admission (one
   * write): only when its health gate's evaluation, begun ahead, is done or nearly
   * (FOLD_WAIT_MS) and the decision approves it.
   * Undefined: the admission is written alone, and the action's own pass goes on.
   */
  private async decideOnward(admitted: ActionObject): Promise<ActionDecision | undefined> {
    const uid = admitted.metadata.uid;
    const gating = this.gatingChecks(admitted);
    if (gating && gating.length > 0) {
      await this.fresh.settle(uid, FOLD_WAIT_MS);
      if (!this.fresh.finished(uid)) return undefined;
    }
    const decision = await this.decideFor(admitted, true);
    // Only all the way to the approval, which the requester waits for: an action held at
    // its health gate or on its pre-hooks waits seconds anyway, and is written phase by
    // phase as before.
    if (decision.status.phase !== 'Approved' || decision.addFinalizer || decision.removeFinalizer)
      return undefined;
    return decision;
  }

  private async writePolicyStatuses(
    holders: readonly ActionRef[],
    nodes: NodeLabels,
    now: Date,
  ): Promise<void> {
    for (const policy of this.o.policies.list()) {
      // Every instance obeys every policy, but reports only on its own: a policy's status
      // counts one instance's actions, and two instances would overwrite each other.
      if (policy.metadata.labels?.[INSTANCE_LABEL] !== this.o.instance) continue;
      const report = reportPolicy(policy.spec, holders, nodes, now);
      const generation = policy.metadata.generation;
      const valid = report.problems.length === 0;
      const status = {
        ...(generation !== undefined ? { observedGeneration: generation } : {}),
        matchingNodes: report.matchingNodes,
        allowedConcurrent: report.allowedConcurrent,
        activeActions: report.activeActions,
        windowOpen: report.windowOpen,
        ...(report.nextWindowStart
          ? { nextWindowStart: report.nextWindowStart.toISOString().replace(/\.\d{3}Z$/, 'Z') }
          : {}),
        conditions: setCondition(
          policy.status?.conditions,
          {
            type: POLICY_VALID_CONDITION,
            status: valid ? 'True' : 'False',
            reason: valid ? 'Valid' : 'InvalidWindow',
            message: valid
              ? 'the policy can be applied'
              : `windows that never open: ${report.problems.join('; ')}`,
            ...(generation !== undefined ? { observedGeneration: generation } : {}),
          },
          now,
        ),
      };
      if (sameJSON(status, policy.status ?? {})) continue;
      if (!this.o.isLeader()) return;
      await this.o.rest
        .request(`${ACTION_POLICIES_PATH}/${policy.metadata.name}/status`, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: { status: { nextWindowStart: null, ...status } },
        })
        .catch((error: unknown) => {
          this.log.warn(
            { policy: policy.metadata.name, err: errorMessage(error) },
            'could not write policy status',
          );
        });
    }
  }

  // ---------------------------------------------------------------------------------
  // Retention.

  private async retention(): Promise<ReconcileResult> {
    const plan = planRetention(this.o.actions.list(), new Date(), this.o.retention);
    for (const action of plan.expired) {
      if (!this.o.isLeader()) break;
      try {
        await this.o.rest.request(`${NODE_ACTIONS_PATH}/${action.metadata.name}`, {
          method: 'DELETE',
          body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid: action.metadata.uid } },
        });
        this.log.info(
          { action: action.metadata.name, node: action.spec.nodeName, phase: action.status?.phase },
          'deleted a finished action past its retention',
        );
      } catch (error) {
        if (!(error instanceof KubeApiError && (error.code === 404 || error.code === 409))) throw error;
      }
    }
    return { requeueAfterMs: Math.min(plan.nextExpiryMs ?? RETENTION_INTERVAL_MS, RETENTION_INTERVAL_MS) };
  }
}
