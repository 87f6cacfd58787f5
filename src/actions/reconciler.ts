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
import { APPROVED_PHASES, holdsSlot, isTerminal } from '../api/phases.ts';
import { writeNode } from '../boots/node.ts';
import { readBootAnnotations } from '../boots/record.ts';
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
import type { TalosExecutor } from '../talos/execution.ts';
import { errorMessage } from '../wait.ts';
import { actionRef, isCandidate, planAdmissions } from './admission.ts';
import { decide, type ActionEffect, type ActionInput, type CheckFacts, type NodeFacts } from './decide.ts';
import { DEFAULT_RETENTION, planRetention, type RetentionPolicy } from './retention.ts';
import { holdSilences } from './silences.ts';

/** The label selector of the actions an instance (or the default, unnamed one) reconciles. */
export function instanceSelector(instance: string | undefined): string {
  return instance ? `${INSTANCE_LABEL}=${instance}` : `!${INSTANCE_LABEL}`;
}

export const ADMISSION_KEY = '@admission';
export const RETENTION_KEY = '@retention';
const RETENTION_INTERVAL_MS = 10 * 60_000;

export type ActionObject = ObservedNodeAction & KubeObject;
type PolicyObject = ActionPolicy & KubeObject;
type HookKubeObject = KubeObject & { spec: HookSpec };

export interface ActionReconcilerOptions {
  rest: RestClient;
  log: Logger;
  events: EventRecorder;
  metrics?: Metrics;
  checks: CheckRunner;
  actions: Informer<ActionObject>;
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
  private readonly silences: SilenceLeases;
  private started = false;
  private leading = false;

  constructor(options: ActionReconcilerOptions) {
    this.o = { retention: DEFAULT_RETENTION, ...options };
    this.log = options.log;
    this.silences =
      options.silences ?? new SilenceLeases({ log: options.log.child({ component: 'silences' }) });
    this.queue = new WorkQueue({
      name: 'nodeactions',
      log: options.log,
      concurrency: options.concurrency ?? 4,
      reconcile: (key) => this.reconcile(key),
    });
    this.wire();
  }

  /** Starts working once every cache is complete: deciding on a partial cache could skip a check or a hook. */
  async start(signal?: AbortSignal): Promise<void> {
    const o = this.o;
    await Promise.all([
      o.actions.waitForSync(signal),
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
    if (!this.started) return;
    for (const a of this.o.actions.list()) this.queue.add(a.metadata.name);
    this.queue.add(ADMISSION_KEY);
    this.queue.add(RETENTION_KEY);
  }

  private wire(): void {
    const { actions, nodes, jobs, policies, checkInformer } = this.o;
    actions.on('add', (a) => {
      this.uidToName.set(a.metadata.uid, a.metadata.name);
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
      this.o.runner.forget(`action/${a.metadata.uid}/`);
      this.o.executor?.forget(a.metadata.uid);
      this.silences.forget(a.metadata.uid);
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

  private checkFacts(): CheckFacts[] {
    return this.o.checks.views().map((v) => ({ name: v.name, spec: v.spec, state: v.state }));
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
    const records = action.status?.hooks ?? [];
    const input: ActionInput = {
      now: new Date(),
      action,
      node: nodeFacts(this.o.nodes.get(action.spec.nodeName)),
      checks: this.checkFacts(),
      hooks: this.hookObjects(),
      jobs: await this.o.runner.jobFacts(records),
      webhooks: this.o.runner.webhookFacts(),
      ...(this.o.executor ? { execution: this.o.executor.facts(action.metadata.uid) } : {}),
    };
    let now = input.now;
    let decision = decide(input);
    if (decision.evaluateChecks) {
      const states = await this.o.checks.evaluateNow(decision.evaluateChecks);
      now = new Date();
      decision = decide({ ...input, now, fresh: { at: now, states } });
    }
    const nodeObject = this.o.nodes.get(action.spec.nodeName);
    decision = holdSilences(decision, action, {
      now,
      policies: this.policyFacts(),
      nodeLabels: nodeObject ? (nodeObject.metadata.labels ?? {}) : undefined,
      facts: this.silences.facts(action.metadata.uid),
    });
    if (!this.o.isLeader()) return undefined;

    if (decision.addFinalizer) {
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
      if (live.metadata.uid !== uid || live.metadata.deletionTimestamp || isTerminal(live.status?.phase))
        return false;
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
    this.o.metrics?.statusWrites.inc();
    return written;
  }

  private async patchFinalizers(action: ActionObject, finalizers: string[]): Promise<void> {
    try {
      await this.o.rest.request(`${NODE_ACTIONS_PATH}/${action.metadata.name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        // The resourceVersion makes the patch conditional: finalizers are a list.
        body: { metadata: { resourceVersion: action.metadata.resourceVersion, finalizers } },
      });
      if (action.metadata.resourceVersion)
        this.superseded.set(action.metadata.name, action.metadata.resourceVersion);
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
    let holders: ActionRef[];
    let requeueAfterMs: number | undefined;
    if (!this.o.actions.list().some(isCandidate)) {
      holders = this.o.actions
        .list()
        .filter((a) => holdsSlot(a.status?.phase))
        .map(actionRef);
    } else {
      // A quorum read, not the cache: the cache may not show an admission written a
      // moment ago, and counting from it could give one slot out twice.
      // Every instance's: another instance's action on a node keeps ours off it.
      const list = await this.o.rest.request<{ items: ActionObject[] }>(NODE_ACTIONS_PATH);
      const mine = (a: ActionObject) => a.metadata.labels?.[INSTANCE_LABEL] === this.o.instance;
      const plan = planAdmissions({
        now,
        actions: list.items.filter(mine),
        others: list.items.filter((a) => !mine(a)),
        nodes,
        policies: this.policyFacts(),
      });
      for (const { action, status } of plan.admit) {
        if (!this.o.isLeader()) return undefined;
        try {
          await this.writeStatus(action, status);
        } catch (error) {
          if (error instanceof KubeApiError && (error.code === 409 || error.code === 404)) {
            // It changed since the list (a deadline, a deletion): judge everyone again.
            return { requeueAfterMs: 0 };
          }
          throw error;
        }
        this.log.info(
          { action: action.metadata.name, node: action.spec.nodeName, message: status.message },
          'action admitted',
        );
        await this.o.events.record(action, {
          type: 'Normal',
          reason: 'WaitingForHealth',
          message: `${action.spec.action} of node ${action.spec.nodeName}: ${status.message ?? ''}`,
        });
        this.queue.add(action.metadata.name);
      }
      for (const { action, status } of plan.wait) {
        if (!this.o.isLeader()) return undefined;
        await this.writeStatus(action, status).catch((error: unknown) => {
          if (!(error instanceof KubeApiError && (error.code === 409 || error.code === 404))) throw error;
        });
      }
      holders = plan.holders;
      requeueAfterMs = plan.requeueAfterMs;
    }
    await this.writePolicyStatuses(holders, nodes, now);
    return requeueAfterMs !== undefined ? { requeueAfterMs } : undefined;
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
