// The NodeAction reconciler's wiring: the imperative shell around decide() (decide.ts),
// planAdmissions() (admission.ts) and planRetention() (retention.ts), on the reconciler
// skeleton every gatehouse reconciler shares (src/kube/reconciler.ts). Its parts, one job
// each: reconciling one action (action-pass.ts, with its effects in action-effects.ts),
// the admission pass (admission-pass.ts), retention (retention-pass.ts); what they share
// is context.ts, their writes to NodeActions writes.ts. Here: which informer event queues
// which key.
//
// Work-queue keys: an action's name (a DNS subdomain), or one of two singletons:
// ADMISSION_KEY (every admission runs in this one key, so admissions never race each
// other) and RETENTION_KEY. Only the leader acts; followers return at once and keep
// their caches warm, and a new leader requeues everything.
import type { ActionObject } from '../api/node-action.ts';
import { HOOK_JOB_LABELS } from '../api/names.ts';
import { APPROVED_PHASES, holdsSlot, isTerminal } from '../api/phases.ts';
import { sameJSON } from '../canonical-json.ts';
import type { KubeObject } from '../kube/informer.ts';
import { Reconciler } from '../kube/reconciler.ts';
import type { WorkQueue } from '../kube/workqueue.ts';
import { SilenceLeases } from '../silences/leases.ts';
import { ActionPass } from './action-pass.ts';
import { AdmissionPass } from './admission-pass.ts';
import {
  ADMISSION_KEY,
  RETENTION_KEY,
  type ActionContext,
  type ActionReconcilerOptions,
  type PolicyObject,
} from './context.ts';
import { FreshEvaluations } from './fresh-evaluations.ts';
import { DEFAULT_RETENTION } from './retention.ts';
import { retentionPass } from './retention-pass.ts';
import { ActionWrites } from './writes.ts';

export type { ActionReconcilerOptions } from './context.ts';
export { ADMISSION_KEY, RETENTION_KEY } from './context.ts';

export class ActionReconciler {
  readonly queue: WorkQueue;
  private readonly c: ActionContext;
  private readonly loop: Reconciler;
  private readonly one: ActionPass;
  private readonly admission: AdmissionPass;
  private readonly uidToName = new Map<string, string>();

  constructor(options: ActionReconcilerOptions) {
    const o = { retention: DEFAULT_RETENTION, ...options };
    const silences =
      options.silences ?? new SilenceLeases({ log: options.log.child({ component: 'silences' }) });
    this.loop = new Reconciler({
      name: 'nodeactions',
      log: options.log,
      isLeader: options.isLeader,
      concurrency: options.concurrency ?? 4,
      // The admission pass is on every gate's path: it never waits behind slow reconciles.
      express: new Set([ADMISSION_KEY]),
      caches: () => [
        o.actions,
        ...(o.foreignActions ? [o.foreignActions] : []),
        o.policies,
        o.nodes,
        o.jobs,
        o.checkInformer,
        ...o.hooks.values(),
      ],
      keys: () => [...o.actions.list().map((a) => a.metadata.name), ADMISSION_KEY, RETENTION_KEY],
      // Another replica may take slots while this one follows: its next admission counts afresh.
      following: () => this.admission.forgetQuorum(),
      // What this replica knew of its silence calls may be stale after another led.
      leading: () => silences.forgetAll(),
      reconcile: (key) =>
        key === ADMISSION_KEY
          ? this.admission.run()
          : key === RETENTION_KEY
            ? retentionPass(this.c)
            : this.one.reconcile(key),
    });
    this.queue = this.loop.queue;
    const writes = new ActionWrites({
      rest: o.rest,
      actions: o.actions,
      ...(o.metrics ? { metrics: o.metrics } : {}),
      written: (rv) => this.admission.written(rv),
    });
    this.c = { o, log: o.log, queue: this.queue, writes, fresh: new FreshEvaluations(o.checks), silences };
    this.one = new ActionPass(this.c);
    this.admission = new AdmissionPass(this.c, this.one);
    this.wire();
  }

  /** Starts working once every cache is complete: deciding on a partial cache could skip a check or a hook. */
  async start(signal?: AbortSignal): Promise<void> {
    await this.loop.start(signal);
  }

  stop(): void {
    this.loop.stop();
    this.c.silences.stop();
  }

  /** Every action, the admission pass and retention: after a start or on becoming leader. */
  enqueueAll(): void {
    // Called on becoming leader: another may have taken slots since our last quorum read.
    this.admission.forgetQuorum();
    this.loop.enqueueAll();
  }

  private wire(): void {
    const { o, queue } = this.c;
    const { actions, nodes, jobs, policies, checkInformer } = o;
    actions.on('add', (a) => {
      this.uidToName.set(a.metadata.uid, a.metadata.name);
      // A new action: its health gate's evaluation starts now, beside its first writes.
      if (a.status?.phase === undefined && this.loop.isStarted && o.isLeader()) this.one.beginEvaluation(a);
      queue.add(a.metadata.name);
      if (!isTerminal(a.status?.phase)) queue.add(ADMISSION_KEY);
    });
    actions.on('update', (old, a) => {
      this.uidToName.set(a.metadata.uid, a.metadata.name);
      queue.add(a.metadata.name);
      const before = old.status?.phase;
      const after = a.status?.phase;
      if (before !== after && (after === 'Pending' || holdsSlot(before) !== holdsSlot(after))) {
        queue.add(ADMISSION_KEY);
      }
      if (before !== after && after !== undefined) o.metrics?.actionTransitions.inc({ phase: after });
      // A newly finished action may push an older one of its node out of the kept few.
      if (isTerminal(after) && !isTerminal(before)) queue.add(RETENTION_KEY);
    });
    actions.on('delete', (a) => this.forget(a));
    // The turn (src/kube/turn.ts, instance-turn.ts): another instance may have admitted or
    // approved while it was not ours, so what was read before it came counts for nothing.
    o.turn?.on('acquired', () => {
      this.admission.forgetQuorum();
      queue.add(ADMISSION_KEY);
      for (const name of this.one.takeTurnWaiters()) queue.add(name);
    });
    o.turn?.on('lost', () => this.admission.forgetQuorum());
    // Another instance's action that takes or frees a node: ours waiting for it look again.
    const foreign = o.foreignActions;
    foreign?.on('update', (old, a) => {
      if (holdsSlot(old.status?.phase) !== holdsSlot(a.status?.phase)) queue.add(ADMISSION_KEY);
    });
    foreign?.on('delete', (a) => {
      if (holdsSlot(a.status?.phase)) queue.add(ADMISSION_KEY);
    });
    const onNode = (old: KubeObject | undefined, node: KubeObject) => {
      for (const a of actions.list()) {
        if (a.spec.nodeName === node.metadata.name && !isTerminal(a.status?.phase))
          queue.add(a.metadata.name);
      }
      if (!old || !sameJSON(old.metadata.labels, node.metadata.labels)) queue.add(ADMISSION_KEY);
    };
    nodes.on('add', (n) => onNode(undefined, n));
    nodes.on('update', (old, n) => onNode(old, n));
    nodes.on('delete', (n) => onNode(undefined, n));
    const onJob = (job: KubeObject) => {
      const uid = job.metadata.labels?.[HOOK_JOB_LABELS.actionUID];
      const name = uid ? this.uidToName.get(uid) : undefined;
      if (name) queue.add(name);
    };
    jobs.on('add', onJob);
    jobs.on('update', (_, j) => onJob(j));
    jobs.on('delete', onJob);
    const onHook = () => {
      for (const a of actions.list()) {
        const phase = a.status?.phase;
        if (phase === 'RunningPreHooks' || phase === 'RunningPostHooks') queue.add(a.metadata.name);
      }
    };
    for (const informer of o.hooks.values()) {
      informer.on('add', onHook);
      informer.on('update', (old, h) => {
        if (old.metadata.generation !== h.metadata.generation) onHook();
      });
      informer.on('delete', onHook);
    }
    // A check's status changed: actions held at the health gate look again.
    checkInformer.on('update', () => {
      for (const a of actions.list()) if (a.status?.phase === 'WaitingForHealth') queue.add(a.metadata.name);
    });
    this.wirePolicies(policies);
  }

  /** A deleted action: everything remembered about it goes; a slot it held is free. */
  private forget(a: ActionObject): void {
    const { o, queue, writes, fresh, silences } = this.c;
    this.uidToName.delete(a.metadata.uid);
    writes.forget(a.metadata.name);
    fresh.forget(a.metadata.uid);
    o.runner.forget(`action/${a.metadata.uid}/`);
    o.executor?.forget(a.metadata.uid);
    silences.forget(a.metadata.uid);
    if (holdsSlot(a.status?.phase)) queue.add(ADMISSION_KEY);
  }

  private wirePolicies(policies: ActionReconcilerOptions['policies']): void {
    const { o, queue } = this.c;
    // A policy that asks for silences, or no longer does: approved actions look again.
    const onSilencePolicy = (...changed: PolicyObject[]) => {
      if (!changed.some((p) => p.spec.alertmanagerSilence)) return;
      for (const a of o.actions.list()) {
        const phase = a.status?.phase;
        if (phase !== undefined && APPROVED_PHASES.has(phase)) queue.add(a.metadata.name);
      }
    };
    policies.on('add', (p) => {
      queue.add(ADMISSION_KEY);
      onSilencePolicy(p);
    });
    policies.on('update', (old, p) => {
      if (old.metadata.generation === p.metadata.generation) return;
      queue.add(ADMISSION_KEY);
      onSilencePolicy(old, p);
    });
    policies.on('delete', (p) => {
      queue.add(ADMISSION_KEY);
      onSilencePolicy(p);
    });
  }
}
