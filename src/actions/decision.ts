// The value decide() returns, and the builder the phase handlers (phases/) make it with.
//
// A handler never assembles the decision itself: it says what happens through the
// builder's verbs — transition to a phase, end the action, wake again later, record an
// Event, ask for an effect, set a condition — and the builder keeps the status, the
// effects and the earliest wake-up consistent (every transition an Event, every slot
// given back an admission pass, every end stopping the runs it leaves).
//
// The verbs are arrow functions, so a handler may take them apart
// (`const { condition, transition } = b`); docs/troubleshooting.md's test reads the
// reasons from their call sites.
import type { BootAnnouncement } from '../api/boot-record.ts';
import type { NodeActionConditionType } from '../api/names.ts';
import type {
  NodeActionPhase,
  NodeActionSpec,
  NodeActionStatus,
  ObservedNodeAction,
} from '../api/node-action.ts';
import { holdsSlot, isTerminal, withPhaseEntered } from '../api/phases.ts';
import { isBootHookKind } from '../boots/record.ts';
import type { HookSubject } from '../hooks/job.ts';
import { isFinished, jobKey, stopRuns, type HookEffect, type HookRunRecord } from '../hooks/plan.ts';
import { setCondition } from '../kube/conditions.ts';
import type { SilenceEffect } from '../silences/plan.ts';
import { disruptionOf, keepsCordon } from './disruption.ts';
import { kindOf } from './kinds/index.ts';
import type { ActionInput, NodeFacts } from './observations.ts';
import { hookSubject } from './subject.ts';

export type EventEffect = {
  type: 'event';
  eventType: 'Normal' | 'Warning';
  reason: string;
  message: string;
};

export type ActionEffect =
  | HookEffect
  | EventEffect
  /** Run the admission pass: an action waits for a slot, or gave one back. */
  | { type: 'admission' }
  /**
   * Announce the action's coming boot on its node (talos.dev/next-boot) and, with
   * `taint`, put the preready taint on: before approval (src/boots).
   */
  | { type: 'announceBoot'; announcement: BootAnnouncement; taint: boolean }
  /** Cordon the node for this action and drain it as spec.drain says (repeatable). */
  | { type: 'drain' }
  /** A repeatable Talos step of a Managed action (src/talos/executor.ts). */
  | { type: 'talos'; step: 'prepare' | 'install' }
  /**
   * Ask the node whether a call recorded by a process that is gone reached it: its
   * events since it booted, for the sequence `call` starts (src/talos/plan.ts).
   */
  | { type: 'talos'; step: 'verify'; call: string }
  /**
   * The disruptive Talos call, made at most once: only while the action's status, read
   * afresh, still records this `callTime` (written before this effect is carried out).
   */
  | { type: 'talos'; step: 'call'; call: string; callTime: string }
  /**
   * MachineService.Rollback of an upgrade whose post-checks failed, made at most once:
   * only while the action's status, read afresh, still records this rollback `time`
   * without an outcome (written before this effect is carried out).
   */
  | { type: 'talos'; step: 'rollback'; time: string }
  /**
   * The commit of a TRY confirmed by checks (ApplyConfiguration NO_REBOOT of the same
   * configuration), made at most once: only while the action's status, read afresh,
   * still records this commit `time` without an outcome.
   */
  | { type: 'talos'; step: 'commit'; time: string }
  /**
   * Make these repeatable Talos steps again: the executor forgets what it knows of them,
   * and the next pass asks for them anew (an install failed on a dependency).
   */
  | { type: 'talosAgain'; steps: ('prepare' | 'install')[] }
  /**
   * Take the etcd snapshot an ActionPolicy asks for before approval (etcd-snapshot.ts),
   * unless this process has an attempt under way or done; `again`: forget a failed one first.
   */
  | {
      type: 'etcdSnapshot';
      again: boolean;
      policy: string;
      url: string;
      keep: number;
      name: string;
      deadline: string;
    }
  /** Lift the cordon this action made (talos.dev/cordoned-by). */
  | { type: 'uncordon' }
  /**
   * Keep node remediation off the node (the medik8s exclusion label, marked as this
   * action's), or take that off again once the action is over (src/actions/remediation.ts).
   */
  | { type: 'remediation'; op: 'pause' | 'resume' }
  /** Take, renew or give back the node's medik8s Lease for this action (medik8s-lease.ts). */
  | { type: 'medik8sLease'; op: 'take' | 'renew' | 'release' }
  /** Stop the executor's steps of this action that still run. */
  | { type: 'stopExecution'; reason: string }
  /** Hold (create or renew) or release an Alertmanager silence (src/silences/plan.ts). */
  | SilenceEffect;

export interface ActionDecision {
  status: NodeActionStatus;
  addFinalizer: boolean;
  removeFinalizer: boolean;
  /** Evaluate these checks afresh and decide again with the results (`fresh`). */
  evaluateChecks?: string[];
  /** Read etcd for the action's node and decide again with the result (`etcd`). */
  readEtcd?: boolean;
  /** Read the node's neighbours (do-not-disrupt Pods, NodeMaintenances), and decide again with them (`neighbours`). */
  readNeighbours?: boolean;
  /** Forecast the drain of the node, and decide again with it (`drainForecast`, drain-forecast.ts). */
  readDrainForecast?: boolean;
  /** Read a ConfigChange's configurations, and decide again with them (`configs`, phases/config-disruption.ts). */
  readConfigs?: boolean;
  effects: ActionEffect[];
  requeueAfterMs?: number;
}

/** Ends an action unsuccessfully. */
export type Ending = 'Failed' | 'Denied' | 'Cancelled';

/** One pass of decide() over one action: what it observed, and the decision it builds. */
export class DecisionBuilder {
  readonly input: ActionInput;
  readonly action: ObservedNodeAction;
  readonly spec: NodeActionSpec;
  readonly nodeName: string;
  readonly node: NodeFacts | undefined;
  readonly now: Date;
  /** The status being decided: a copy of the observed one, changed in place. */
  readonly status: NodeActionStatus;
  readonly effects: ActionEffect[] = [];
  private requeueAfterMs: number | undefined;
  private evaluateChecks: string[] | undefined;
  private etcdAsked = false;
  private podsAsked = false;
  private forecastAsked = false;
  private configsAsked = false;
  /**
   * Set when this pass ended the action (end()): whether the node may have been
   * disrupted, decided once, then (phases/undo.ts) recorded with what is undone.
   */
  ended: { disruption: string | undefined } | undefined;

  constructor(input: ActionInput) {
    this.input = input;
    this.action = input.action;
    this.spec = input.action.spec;
    this.nodeName = input.action.spec.nodeName;
    this.node = input.node;
    this.now = input.now;
    this.status = structuredClone(input.action.status ?? {});
  }

  /** Decide again in `ms` at the latest (the earliest of every wake asked for wins). */
  readonly wake = (ms: number | undefined): void => {
    if (ms === undefined) return;
    const m = Math.max(0, Math.ceil(ms));
    this.requeueAfterMs = this.requeueAfterMs === undefined ? m : Math.min(this.requeueAfterMs, m);
  };

  /** Evaluate these checks afresh, then decide again with the results. */
  readonly evaluate = (checks: string[]): void => {
    this.evaluateChecks = checks;
  };

  /** Read etcd for the action's node now, then decide again with the result (etcd-guard.ts). */
  readonly readEtcd = (): void => {
    this.etcdAsked = true;
  };

  /** Read the node's neighbours now, then decide again with them (neighbours.ts). */
  readonly readNeighbours = (): void => {
    this.podsAsked = true;
  };

  /** Forecast the drain of the node now, then decide again with it (drain-forecast.ts). */
  readonly forecastDrain = (): void => {
    this.forecastAsked = true;
  };

  /** Read a ConfigChange's configurations now, then decide again with them (phases/config-disruption.ts). */
  readonly readConfigs = (): void => {
    this.configsAsked = true;
  };

  /** Whether the decision waits on a fresh evaluation or read: the pass stops there. */
  get evaluating(): boolean {
    return (
      this.evaluateChecks !== undefined ||
      this.etcdAsked ||
      this.podsAsked ||
      this.forecastAsked ||
      this.configsAsked
    );
  }

  readonly effect = (...effects: ActionEffect[]): void => {
    this.effects.push(...effects);
  };

  readonly event = (eventType: 'Normal' | 'Warning', reason: string, message: string): void => {
    this.effects.push({ type: 'event', eventType, reason, message });
  };

  readonly condition = (
    type: NodeActionConditionType,
    value: 'True' | 'False' | 'Unknown',
    reason: string,
    message: string,
  ): void => {
    const generation = this.action.metadata.generation;
    this.status.conditions = setCondition(
      this.status.conditions,
      {
        type,
        status: value,
        reason,
        message,
        ...(generation !== undefined ? { observedGeneration: generation } : {}),
      },
      this.now,
    );
  };

  /** The status message, for a pass that stays in its phase. */
  readonly say = (message: string): void => {
    this.status.message = message;
  };

  readonly transition = (next: NodeActionPhase, message: string): void => {
    const { status, event } = this;
    const previous = status.phase;
    withPhaseEntered(status, next, this.now);
    status.message = message;
    // An approval is asked for only while the pre-action hooks run: past them, none is pending.
    if (next !== 'RunningPreHooks' && status.approval?.pending) delete status.approval.pending;
    if (isTerminal(next)) status.completionTime = this.now.toISOString();
    event(
      next === 'Failed' || next === 'Denied' || next === 'Cancelled' ? 'Warning' : 'Normal',
      next,
      `${this.spec.action} of node ${this.nodeName}: ${message}`,
    );
    // A slot given back, or an action that now waits for one: the admission pass runs.
    if (holdsSlot(previous) !== holdsSlot(next) || next === 'Pending')
      this.effects.push({ type: 'admission' });
  };

  /** Ends the action unsuccessfully, stopping every unfinished hook run. */
  readonly end = (phase: Ending, why: string): void => {
    const { node, nodeName, status } = this;
    const disruption = disruptionOf(this.action, status, node);
    this.ended = { disruption };
    // A cordon protects a node about to be disrupted. One that never was is as it was and
    // gets its cordon lifted (phases/undo.ts); after a disruption, like kubectl drain, the
    // cordon stays: the node's state needs a look before workloads come back.
    const cordoned = node?.cordonedBy === this.action.metadata.name;
    const message = !cordoned
      ? why
      : disruption === undefined && keepsCordon(this.action, status)
        ? `${why}; node ${nodeName} stays cordoned (spec.drain.onTimeout: KeepCordoned)`
        : disruption === undefined
          ? `${why}; uncordoning node ${nodeName}, cordoned for this action, which ended before anything was done to it`
          : `${why}; node ${nodeName} stays cordoned (kubectl uncordon ${nodeName} once it is fine)`;
    // Boot hook runs shown here are the boot's (src/boots), which goes on without the action.
    const stopped = stopRuns(
      this.ownRecords(),
      this.subject(node?.bootID ?? status.bootIDBefore),
      this.now,
      `stopped: the action ${phase === 'Cancelled' ? 'was cancelled' : 'failed'}`,
    );
    if (stopped.records.length)
      status.hooks = [...stopped.records, ...this.records().filter((r) => isBootHookKind(r.kind))];
    this.effects.push(...stopped.effects);
    this.transition(phase, message);
  };

  /**
   * Ends a finished action, lifting its own cordon first when its kind lifts it at the end
   * (ActionKind.cordonAtEnd: not after a Shutdown or a Reset).
   */
  readonly succeed = (message: string): void => {
    if (kindOf(this.spec).cordonAtEnd === 'lift' && this.node?.cordonedBy === this.action.metadata.name) {
      this.effects.push({ type: 'uncordon' });
      this.status.message = `${message}; uncordoning node ${this.nodeName}`;
      this.wake(2000);
      return;
    }
    this.transition('Succeeded', message);
  };

  /** The action's hook runs as recorded in the status being decided. */
  records(): HookRunRecord[] {
    return this.status.hooks ?? [];
  }

  /** The runs of the action's own hooks, without the boot's shown beside them. */
  ownRecords(): HookRunRecord[] {
    const readyHooks = this.runsReadyHooks();
    return this.records().filter((r) => !isBootHookKind(r.kind) || (readyHooks && r.kind === 'NodeReadyJob'));
  }

  /**
   * Whether the action runs its node's NodeReadyJobs itself: one held until released
   * (a Maintenance) during which its node did not boot, so that no boot's hooks follow.
   */
  runsReadyHooks(): boolean {
    const { status } = this;
    return (
      kindOf(this.spec).completion(this.spec, status.execution) === 'release' &&
      status.bootIDAfter !== undefined &&
      status.bootIDAfter === status.bootIDBefore
    );
  }

  /** Who the action's hook runs are for, about the given boot of its node. */
  subject(bootID: string | undefined): HookSubject {
    return hookSubject(this.action, bootID, this.status);
  }

  /**
   * Stops what still runs for a finished action: the executor's steps, and the hook Jobs
   * (a delete lost to a crash is issued again). True once nothing runs any more.
   */
  cleanUp(): boolean {
    const running = Object.values(this.input.execution ?? {}).filter((f) => f.state === 'running');
    if (running.length > 0)
      this.effects.push({ type: 'stopExecution', reason: `the action is ${this.status.phase ?? 'over'}` });
    const live = this.ownRecords().filter((r) => {
      if (r.jobName === undefined) return false;
      const facts = this.input.jobs.get(jobKey(r.namespace, r.jobName));
      return (
        facts !== undefined && !facts.deleting && facts.phase !== 'Succeeded' && facts.phase !== 'Failed'
      );
    });
    const deleting = new Set(
      this.effects.flatMap((e) => (e.type === 'deleteJob' ? [jobKey(e.namespace, e.name)] : [])),
    );
    for (const r of live) {
      if (isFinished(r) && r.jobName && !deleting.has(jobKey(r.namespace, r.jobName))) {
        this.effects.push({
          type: 'deleteJob',
          namespace: r.namespace,
          name: r.jobName,
          reason: 'the action is over',
        });
      }
    }
    if (live.length) this.wake(2000);
    return live.length === 0;
  }

  build(extra: Partial<ActionDecision> = {}): ActionDecision {
    return {
      status: this.status,
      addFinalizer: false,
      removeFinalizer: false,
      effects: this.effects,
      ...(this.requeueAfterMs !== undefined ? { requeueAfterMs: this.requeueAfterMs } : {}),
      ...(this.evaluateChecks ? { evaluateChecks: this.evaluateChecks } : {}),
      ...(this.etcdAsked ? { readEtcd: true } : {}),
      ...(this.podsAsked ? { readNeighbours: true } : {}),
      ...(this.forecastAsked ? { readDrainForecast: true } : {}),
      ...(this.configsAsked ? { readConfigs: true } : {}),
      ...extra,
    };
  }
}
