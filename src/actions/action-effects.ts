// Carrying out a decision's effects about one action (decision.ts ActionEffect), once its
// status is written: Events, the admission pass, Alertmanager silences, the Managed steps
// (through the Talos executor), the announcement of the coming boot on the node, the
// uncordon, and hook Jobs and webhook calls (through the HookRunner). A step that must
// never be made twice — the Talos call, a hook attempt — is confirmed first against the
// action as the API server has it, not the cache.
import type { ActionObject, NodeActionStatus } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import { isTerminal } from '../api/phases.ts';
import { writeNode } from '../boots/node.ts';
import { readBootAnnotations } from '../boots/record.ts';
import type { HookEffect, HookRunRecord } from '../hooks/plan.ts';
import { isRecordPending } from '../hooks/plan.ts';
import { isConflict } from '../kube/reconciler.ts';
import type { Logger } from '../log.ts';
import { uncordonFor } from '../talos/drain.ts';
import { controlPlaneNodes } from '../talos/etcd-check.ts';
import { REMEDIATION_EXCLUDE_LABEL } from '../api/names.ts';
import { pauseRemediationFor, resumeRemediationFor } from './remediation-writes.ts';
import { holdMedik8sLease, releaseMedik8sLeaseFor } from './medik8s-lease-writes.ts';
import { ADMISSION_KEY, type ActionContext } from './context.ts';
import type { ActionEffect } from './decision.ts';
import { kindOf } from './kinds/index.ts';
import { nodeFacts } from './observations.ts';

export class ActionEffects {
  private readonly c: ActionContext;

  constructor(context: ActionContext) {
    this.c = context;
  }

  async apply(effects: readonly ActionEffect[], action: ActionObject, log: Logger): Promise<void> {
    const { o, queue, silences } = this.c;
    const events = effects.flatMap((e) => (e.type === 'event' ? [e] : []));
    for (const e of events) {
      await o.events.record(action, { type: e.eventType, reason: e.reason, message: e.message });
    }
    if (effects.some((e) => e.type === 'admission')) queue.add(ADMISSION_KEY);
    const name = action.metadata.name;
    for (const e of effects) {
      if (e.type !== 'silence' || !o.isLeader()) continue;
      silences.start(
        {
          op: e.op,
          url: e.url,
          nodeLabel: e.nodeLabel,
          node: action.spec.nodeName,
          action: { name, uid: action.metadata.uid },
          ...(e.op === 'hold' ? { notAfter: new Date(e.notAfter) } : {}),
        },
        () => queue.add(name),
        log,
      );
    }
    // Before the Managed steps: remediation is off before the node is taken down.
    for (const e of effects) if (e.type === 'remediation') await this.remediation(e.op, action, log);
    for (const e of effects) if (e.type === 'medik8sLease') await this.medik8sLease(e.op, action, log);
    await this.applyExecution(effects, action, log);
    for (const e of effects) if (e.type === 'announceBoot') await this.announceBoot(e, action, log);
    const hookEffects = effects.flatMap((e): HookEffect[] =>
      e.type === 'createJob' || e.type === 'deleteJob' || e.type === 'callWebhook' || e.type === 'hookRun'
        ? [e]
        : [],
    );
    if (hookEffects.length === 0) return;
    await o.runner.execute(
      hookEffects,
      {
        confirm: (record) => this.confirmPending(name, action.metadata.uid, record),
        onChange: () => queue.add(name),
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
    const { o } = this.c;
    if (!o.isLeader()) return;
    const node = o.nodes.get(action.spec.nodeName);
    if (!node) return;
    try {
      const written = await writeNode(o.rest, node, {
        announcement: effect.announcement,
        ...(effect.taint ? { taint: true } : {}),
      });
      if (!written) return;
    } catch (error) {
      if (isConflict(error)) {
        log.debug({ err: error.message }, 'could not announce the boot yet; trying again');
        return;
      }
      throw error;
    }
    log.info({ taint: effect.taint }, 'announced the coming boot on the node');
    if (effect.taint && !readBootAnnotations(node).prereadyTaint) {
      await o.events.record(
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
    const executor = this.c.o.executor;
    const name = action.metadata.name;
    const uid = action.metadata.uid;
    const onChange = () => this.c.queue.add(name);
    // The steps as the action's kind plans them on its node's Talos version (the executor
    // knows nothing of kinds); planned again when a step starts, as decide() planned them.
    const talos = () => {
      const performer = kindOf(action.spec).managed;
      if (performer.by !== 'talos') throw new Error(`a ${action.spec.action} makes no Talos call`);
      const osImage = nodeFacts(this.c.o.nodes.get(action.spec.nodeName))?.osImage;
      return performer.steps(action.spec, osImage);
    };
    for (const e of effects) {
      switch (e.type) {
        case 'uncordon':
          // Plain Kubernetes, with or without an executor (one may have cordoned before a restart).
          await this.uncordon(action, log);
          break;
        case 'stopExecution':
          executor?.stop(uid, e.reason);
          break;
        case 'talosAgain':
          executor?.again(uid, e.steps);
          onChange();
          break;
        case 'drain':
          executor?.start('drain', { action, onChange }, log);
          break;
        case 'etcdSnapshot': {
          // The executor's step (src/talos/etcd-snapshot-step.ts), through the control-plane Nodes the cache has.
          const { type: _type, again, ...snapshot } = e;
          if (again) executor?.again(uid, ['snapshot']);
          const controlPlanes = controlPlaneNodes(this.c.o.nodes.list());
          executor?.start('snapshot', { action, onChange, snapshot: { ...snapshot, controlPlanes } }, log);
          break;
        }
        case 'talos':
          if (e.step === 'call') {
            const callTime = e.callTime;
            executor?.start(
              'call',
              { action, onChange, talos, confirm: () => this.confirmCall(name, uid, callTime) },
              log,
            );
          } else if (e.step === 'rollback') {
            const time = e.time;
            executor?.start(
              'rollback',
              { action, onChange, talos, confirm: () => this.confirmRollback(name, uid, time) },
              log,
            );
          } else if (e.step === 'commit') {
            const time = e.time;
            executor?.start(
              'commit',
              { action, onChange, talos, confirm: () => this.confirmCommit(name, uid, time) },
              log,
            );
          } else {
            executor?.start(e.step, { action, onChange, talos }, log);
          }
          break;
        default:
          break;
      }
    }
  }

  /** Lifts the cordon the action made, if the node still carries it; an Event says so. */
  /** The remediation pause on the action's node, put on or taken off (remediation.ts). */
  private async remediation(op: 'pause' | 'resume', action: ActionObject, log: Logger): Promise<void> {
    const { o } = this.c;
    if (!o.isLeader()) return;
    const node = action.spec.nodeName;
    // Decided on the cache: an action that has ended meanwhile gets no pause left behind.
    if (op === 'pause' && !(await this.unfinished(action.metadata.name, action.metadata.uid))) return;
    const write = op === 'pause' ? pauseRemediationFor : resumeRemediationFor;
    try {
      if (!(await write(o.rest, node, action.metadata.name))) return;
    } catch (error) {
      if (isConflict(error, [404])) return;
      throw error;
    }
    log.info({ op }, op === 'pause' ? 'paused remediation of the node' : 'resumed remediation of the node');
    await o.events.record(action, {
      type: 'Normal',
      reason: op === 'pause' ? 'RemediationPaused' : 'RemediationResumed',
      message:
        op === 'pause'
          ? `${action.spec.action} of node ${node}: ${REMEDIATION_EXCLUDE_LABEL} set until the action ends, so that node remediation does not take the node for dead meanwhile`
          : `${action.spec.action} of node ${node}: ${REMEDIATION_EXCLUDE_LABEL} taken off again`,
    });
  }

  /**
   * The node's medik8s Lease, taken, renewed or given back for the action (medik8s-lease.ts).
   * Refused (no right to write Leases in medik8s-leases) or held by another operator: a
   * Warning, once per action and outcome; the action goes on, as it did without medik8s.
   */
  private async medik8sLease(
    op: 'take' | 'renew' | 'release',
    action: ActionObject,
    log: Logger,
  ): Promise<void> {
    const { o } = this.c;
    if (!o.isLeader()) return;
    const node = action.spec.nodeName;
    const name = action.metadata.name;
    try {
      if (op === 'release') {
        if (await releaseMedik8sLeaseFor(o.rest, node, name))
          log.info('gave the medik8s Lease of the node back');
        return;
      }
      // Decided on the cache: an action that has ended meanwhile takes no Lease.
      if (!(await this.unfinished(name, action.metadata.uid))) return;
      const outcome = await holdMedik8sLease(o.rest, node, name);
      if (outcome === 'held') {
        if (op === 'take') {
          log.info('took the medik8s Lease of the node');
          await o.events.record(action, {
            type: 'Normal',
            reason: 'MaintenanceLeaseTaken',
            message: `${action.spec.action} of node ${node}: holding the Lease medik8s operators share for the node until the action ends, so that they wait for it`,
          });
        }
        return;
      }
      if (this.firstTime(action, 'held'))
        await o.events.record(action, {
          type: 'Warning',
          reason: 'MaintenanceLeaseHeld',
          message: `${action.spec.action} of node ${node}: the node's medik8s Lease is held by another operator; gatehouse goes on without it`,
        });
    } catch (error) {
      if (isConflict(error, [404, 409, 412])) return; // decided again on the next pass
      if (this.firstTime(action, 'refused'))
        await o.events.record(action, {
          type: 'Warning',
          reason: 'MaintenanceLeaseRefused',
          message: `${action.spec.action} of node ${node}: could not ${op} the node's medik8s Lease (${error instanceof Error ? error.message : String(error)}); gatehouse goes on without it — grant the controller create, update and delete on leases in the medik8s-leases namespace`,
        });
    }
  }

  private readonly warned = new Set<string>();

  /** Whether this is the first such Warning for the action (a retry every renewal would flood the Events). */
  private firstTime(action: ActionObject, what: string): boolean {
    const key = `${action.metadata.uid}/${what}`;
    if (this.warned.has(key)) return false;
    if (this.warned.size >= 10_000) this.warned.clear(); // bounded: a long run forgets old actions
    this.warned.add(key);
    return true;
  }

  /** Whether the action, read from the API server, is still this one and unfinished. */
  private async unfinished(name: string, uid: string): Promise<boolean> {
    try {
      const live = await this.c.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      return live.metadata.uid === uid && !live.metadata.deletionTimestamp && !isTerminal(live.status?.phase);
    } catch (error) {
      if (isConflict(error, [404])) return false;
      throw error;
    }
  }

  private async uncordon(action: ActionObject, log: Logger): Promise<void> {
    const { o } = this.c;
    if (!o.isLeader()) return;
    const node = action.spec.nodeName;
    try {
      if (!(await uncordonFor(o.rest, node, action.metadata.name))) return;
    } catch (error) {
      if (isConflict(error, [404])) return;
      throw error;
    }
    log.info('uncordoned the node');
    await o.events.record(action, {
      type: 'Normal',
      reason: 'Uncordoned',
      message: `${action.spec.action} of node ${node}: uncordoned the node`,
    });
  }

  /**
   * Whether the action, read from the API server (not the cache), is still the one decided
   * on (same uid, not deleted) and its status still `records` the Talos call as about to be
   * made, without an outcome: the last check before a call that must never be made twice.
   */
  private async stillRecords(
    name: string,
    uid: string,
    records: (status: NodeActionStatus) => boolean,
  ): Promise<boolean> {
    try {
      const live = await this.c.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      return (
        live.metadata.uid === uid &&
        !live.metadata.deletionTimestamp &&
        live.status !== undefined &&
        records(live.status)
      );
    } catch (error) {
      if (isConflict(error, [404])) return false;
      throw error;
    }
  }

  /** The disruptive call recorded at `callTime`, still Executing. */
  private confirmCall(name: string, uid: string, callTime: string): Promise<boolean> {
    return this.stillRecords(
      name,
      uid,
      (s) =>
        s.phase === 'Executing' && s.execution?.callTime === callTime && s.execution.callResult === undefined,
    );
  }

  /** The rollback decided at `time` (post-checks.ts), still RunningPostHooks. */
  private confirmRollback(name: string, uid: string, time: string): Promise<boolean> {
    return this.stillRecords(
      name,
      uid,
      (s) =>
        s.phase === 'RunningPostHooks' && s.rollback?.time === time && s.rollback.callResult === undefined,
    );
  }

  /** The commit of a TRY decided at `time` (try-confirm.ts), before the window ends. */
  private confirmCommit(name: string, uid: string, time: string): Promise<boolean> {
    return this.stillRecords(
      name,
      uid,
      (s) =>
        s.phase === 'WaitingForNode' &&
        s.tryConfirm?.commitTime === time &&
        s.tryConfirm.commitResult === undefined &&
        Date.parse(s.tryConfirm.until) > Date.now(),
    );
  }

  /** Whether the record of this attempt is persisted and unfinished, read from the API server (not the cache). */
  private async confirmPending(name: string, uid: string, record: HookRunRecord): Promise<boolean> {
    try {
      const live = await this.c.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      if (live.metadata.uid !== uid) return false;
      // An undo run (src/actions/phases/undo.ts) belongs to an ended action, deleted or
      // not; its Job name is its own, so only its record can match it.
      const undo = live.status?.undo?.runs ?? [];
      if (undo.some((r) => r.jobName === record.jobName) && isRecordPending(undo, record)) return true;
      if (live.metadata.deletionTimestamp || isTerminal(live.status?.phase)) return false;
      return isRecordPending(live.status?.hooks ?? [], record);
    } catch (error) {
      if (isConflict(error, [404])) return false;
      throw error;
    }
  }
}
