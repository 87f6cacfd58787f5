// The boot hooks of one node, as a pure function of what the controller observes: the
// node (boot ID, Ready, the preready taint, the boot record and the announcement on it),
// the hooks, their Jobs and webhook calls, the actions named on the node, and the time.
// It returns the node change to write (the record, the taint, the announcement — one
// conditional write, so the taint and the record that justifies its removal change
// together), then the effects to perform once that write succeeded.
//
// For each boot (status.nodeInfo.bootID):
//   the preready taint is on while some NodePrereadyJob selects the node and
//     - its NodePrereadyJobs are not recorded as done for this boot, or
//     - the node is NotReady, or
//     - an action announced that it is about to make the node boot again;
//   the NodePrereadyJobs run once the node is Ready; the taint comes off in the write
//   that records them all done; then, with the node Ready and untainted, the NodeReadyJobs.
// A boot an action caused (announced) waits for that action to see the node return
// before its hooks start, so that the action's record reads in order.
import type { BootAction, BootAnnouncement, BootRecord, BootStage } from '../api/boot-record.ts';
import type { HookKindName } from '../api/hooks.ts';
import type { NodeActionPhase } from '../api/node-action.ts';
import { APPROVED_OR_SUCCEEDED } from '../api/phases.ts';
import type { HookSubject, JobFacts } from '../hooks/job.ts';
import {
  jobKey,
  planHookStage,
  stopRuns,
  type HookEffect,
  type StagePlan,
  type WebhookFacts,
} from '../hooks/plan.ts';
import type { NodeReadinessFacts } from '../hooks/readiness.ts';
import { selectHooks, type HookObject } from '../hooks/select.ts';
import type { EventSpec } from '../kube/event-spec.ts';
import { emptyStage, stageDone } from './record.ts';

/** What the boot decision needs to know about the node. */
export interface BootNodeFacts {
  name: string;
  uid: string;
  labels: Record<string, string>;
  /** Undefined: the node has not reported a boot ID. */
  bootID: string | undefined;
  ready: boolean;
  /** The node carries the preready taint. */
  tainted: boolean;
  record?: BootRecord;
  announcement?: BootAnnouncement;
}

/** What is known of an action named by the announcement or the record. */
export interface BootActionFacts {
  phase?: NodeActionPhase;
  bootIDAfter?: string;
}

/** A boot hook Job of this node seen by the controller (label talos.dev/boot-id). */
export interface NodeJob {
  namespace: string;
  name: string;
  bootID: string | undefined;
  deleting: boolean;
}

export interface BootInput {
  now: Date;
  node: BootNodeFacts;
  /** The hooks (any kind: the boot kinds that select the node are picked here). */
  hooks: readonly HookObject[];
  /** Observed Jobs of the record's runs, by jobKey(). */
  jobs: ReadonlyMap<string, JobFacts>;
  webhooks: ReadonlyMap<string, WebhookFacts>;
  /** The actions named by the announcement and the record, by UID; a UID missing here is gone. */
  actions: ReadonlyMap<string, BootActionFacts>;
  /** This node's boot hook Jobs, for deleting those of earlier boots. */
  nodeJobs: readonly NodeJob[];
  /** The node's Pods and CSINode, read while a NodePrereadyJob with readiness waits on them. */
  readiness?: NodeReadinessFacts;
  /**
   * Set when the controller works on this node only for its own actions (a controller
   * instance on a node that is not its own): only the boots these actions caused are
   * handled, and the taint is otherwise left as it is.
   */
  onlyActions?: ReadonlySet<string>;
}

export interface NodeChange {
  /** The boot record to write. */
  record?: BootRecord;
  removeAnnouncement?: boolean;
  /** Whether the node must carry the preready taint (only set when that changes). */
  taint?: boolean;
}

export interface BootDecision {
  /** Written first, conditionally on the node version decided upon; then the effects. */
  change?: NodeChange;
  effects: HookEffect[];
  events: EventSpec[];
  /** What the node's boot hooks are doing, in words (for logs). */
  message: string;
  requeueAfterMs?: number;
}

/** How often a boot waiting on an action looks again (actions of other instances are not watched). */
export const ACTION_POLL_MS = 2000;

const ENDED: ReadonlySet<NodeActionPhase | undefined> = new Set(['Failed', 'Cancelled', 'Denied']);
const APPROVED_OR_LATER: ReadonlySet<NodeActionPhase | undefined> = APPROVED_OR_SUCCEEDED;

/** Who the runs of a boot are for: the node and boot, the action that caused it if any. */
export function bootSubject(node: { name: string; uid: string }, record: BootRecord): HookSubject {
  return {
    node: node.name,
    bootID: record.bootID,
    ...(record.action ? { action: { ...record.action } } : {}),
    // The Node owns them: they go with it, and not with an action that is deleted while
    // they run (the boot still needs them).
    owner: { apiVersion: 'v1', kind: 'Node', name: node.name, uid: node.uid },
  };
}

function plural(n: number, word: string): string {
  return `${String(n)} ${word}${n === 1 ? '' : 's'}`;
}

function stageAfter(
  previous: BootStage,
  plan: StagePlan,
  hooks: readonly HookObject[],
  now: Date,
): BootStage {
  const phase = plan.outcome;
  return {
    phase,
    hooks: hooks.map((h) => h.metadata.uid),
    runs: plan.records,
    message: plan.message,
    time: phase === previous.phase && previous.time ? previous.time : now.toISOString(),
  };
}

/** Jobs of earlier boots (including any a crash left behind) are of no use any more: their deletes. */
function sweepEarlierBoots(input: BootInput, bootID: string, effects: readonly HookEffect[]): HookEffect[] {
  const deleting = new Set(
    effects.flatMap((e) => (e.type === 'deleteJob' ? [jobKey(e.namespace, e.name)] : [])),
  );
  const sweep: HookEffect[] = [];
  for (const job of input.nodeJobs) {
    if (job.bootID === undefined || job.bootID === bootID || job.deleting) continue;
    if (deleting.has(jobKey(job.namespace, job.name))) continue;
    sweep.push({
      type: 'deleteJob',
      namespace: job.namespace,
      name: job.name,
      reason: `a boot hook Job of an earlier boot (${job.bootID}) of node ${input.node.name}`,
      earlierBoot: job.bootID,
    });
  }
  return sweep;
}

/**
 * The record of the current boot: the one on the node, or a new one (attributed to the
 * action that caused the boot, if known) whose earlier runs stop, their Jobs deleted.
 */
function currentRecord(
  input: BootInput,
  bootID: string,
  attribution: BootAction | undefined,
  effects: HookEffect[],
): BootRecord {
  const { node, now } = input;
  if (node.record && node.record.bootID === bootID) return structuredClone(node.record);
  const record: BootRecord = {
    bootID,
    ...(attribution ? { action: attribution } : {}),
    preready: emptyStage(),
    ready: emptyStage(),
  };
  const old = node.record;
  if (old) {
    const reason = `stopped: node ${node.name} booted again (boot ID ${bootID})`;
    for (const stage of [old.preready, old.ready]) {
      effects.push(...stopRuns(stage.runs, bootSubject(node, old), now, reason).effects);
    }
  }
  return record;
}

/** Why a node that NodePrereadyJobs guard must carry the taint now; undefined: it need not. */
function whyTainted(
  node: BootNodeFacts,
  record: BootRecord,
  prereadyDone: boolean,
  announcement: BootAnnouncement | undefined,
): string | undefined {
  if (!prereadyDone)
    return record.preready.phase === 'Failed'
      ? `a NodePrereadyJob failed for boot ${record.bootID}`
      : `the NodePrereadyJobs of boot ${record.bootID} are not done`;
  if (!node.ready) return 'the node is NotReady';
  if (announcement) return `NodeAction ${announcement.action.name} is about to make the node boot again`;
  return undefined;
}

function sameRecord(a: BootRecord | undefined, b: BootRecord | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** What the announcement on the node means for its current boot. */
interface AnnouncementReading {
  /** The announcing action is about to make the node boot again. */
  announced: boolean;
  /** The announcement has served (the boot came) or lapsed: it comes off. */
  removeAnnouncement: boolean;
  /** The action that caused the current boot, for a boot not recorded yet. */
  attribution?: BootAction;
  /** Booted while the announcing action was not approved yet: whose boot it is is not known yet. */
  undetermined: boolean;
}

/** The announcement: an action is about to make the node boot, or did. */
function readAnnouncement(input: BootInput): AnnouncementReading {
  const { node } = input;
  const announcement = node.announcement;
  const bootID = node.bootID;
  const reading: AnnouncementReading = { announced: false, removeAnnouncement: false, undetermined: false };
  if (!announcement || bootID === undefined) return reading;
  const facts = input.actions.get(announcement.action.uid);
  if (announcement.bootID !== bootID) {
    if (facts && !ENDED.has(facts.phase) && !APPROVED_OR_LATER.has(facts.phase)) {
      // Booted before the action was approved (seen so, at least): not its boot. The
      // action announces again for this boot; until then the taint stays.
      reading.undetermined = true;
    } else {
      reading.removeAnnouncement = true;
      if (facts && APPROVED_OR_LATER.has(facts.phase) && node.record?.bootID !== bootID)
        reading.attribution = announcement.action;
    }
  } else if (!facts || ENDED.has(facts.phase)) {
    // The action ended (or is gone) without the node booting: the announcement lapses.
    // One that succeeded (a Shutdown: the node is down) stands until the node boots.
    reading.removeAnnouncement = true;
  } else {
    reading.announced = true;
  }
  return reading;
}

/**
 * What one pass decides, as it is built: the node change, the effects, the Events and
 * when to look again. The handlers below add to it; `finish` is the decision.
 */
class BootDecisionBuilder {
  readonly change: NodeChange = {};
  readonly effects: HookEffect[] = [];
  readonly events: EventSpec[] = [];
  private requeueAfterMs: number | undefined;
  private readonly node: BootNodeFacts;

  constructor(node: BootNodeFacts) {
    this.node = node;
  }

  /** Look again within `ms` (the earliest asked for wins). */
  wakeIn(ms: number | undefined): void {
    if (ms === undefined) return;
    const m = Math.max(0, Math.ceil(ms));
    this.requeueAfterMs = this.requeueAfterMs === undefined ? m : Math.min(this.requeueAfterMs, m);
  }

  /** Puts the preready taint on or takes it off (a no-op when it already is so), with its Event. */
  setTaint(want: boolean, why: string): void {
    if (want === this.node.tainted) return;
    this.change.taint = want;
    this.events.push(
      want
        ? {
            type: 'Normal',
            reason: 'PrereadyTainted',
            message: `talos.dev/preready:NoSchedule put on: ${why}`,
          }
        : {
            type: 'Normal',
            reason: 'PrereadyUntainted',
            message: `talos.dev/preready taint removed: ${why}`,
          },
    );
  }

  finish(message: string): BootDecision {
    return {
      ...(Object.keys(this.change).length ? { change: this.change } : {}),
      effects: this.effects,
      events: this.events,
      message,
      ...(this.requeueAfterMs !== undefined ? { requeueAfterMs: this.requeueAfterMs } : {}),
    };
  }
}

/** The hooks that guard and follow a boot of the node. */
interface BootHooks {
  preready: HookObject[];
  ready: HookObject[];
}

/** Whether a boot an action caused still waits for that action to see the node return (in words), or undefined. */
function waitingForAction(input: BootInput, record: BootRecord, b: BootDecisionBuilder): string | undefined {
  if (!record.action) return undefined;
  const facts = input.actions.get(record.action.uid);
  const claimed = facts?.phase === 'RunningPostHooks' && facts.bootIDAfter === input.node.bootID;
  if (!facts || claimed || facts.phase === 'Succeeded' || ENDED.has(facts.phase)) return undefined;
  b.wakeIn(ACTION_POLL_MS);
  return `NodeAction ${record.action.name} to see node ${input.node.name} return (it is ${facts.phase ?? 'new'})`;
}

/** Plans one stage of boot hooks (NodePrereadyJob or NodeReadyJob) and records its effects. */
function planStage(
  input: BootInput,
  b: BootDecisionBuilder,
  subject: HookSubject,
  stage: BootStage,
  hooks: readonly HookObject[],
  kind: HookKindName,
): BootStage {
  const p = planHookStage({
    now: input.now,
    subject,
    hooks,
    kinds: [kind],
    records: stage.runs,
    jobs: input.jobs,
    webhooks: input.webhooks,
    ...(input.readiness ? { readiness: input.readiness } : {}),
  });
  b.effects.push(...p.effects);
  b.wakeIn(p.requeueAfterMs);
  return stageAfter(stage, p, hooks, input.now);
}

/** NodePrereadyJobs: for this boot, once the node is Ready. */
function prereadyStage(
  input: BootInput,
  b: BootDecisionBuilder,
  record: BootRecord,
  hooks: BootHooks,
  subject: HookSubject,
): void {
  const before = record.preready;
  if (!input.node.ready || stageDone(before, hooks.preready)) return;
  record.preready = planStage(input, b, subject, before, hooks.preready, 'NodePrereadyJob');
  if (record.preready.phase === 'Failed' && before.phase !== 'Failed')
    b.events.push({
      type: 'Warning',
      reason: 'PrereadyHookFailed',
      message: `boot ${String(input.node.bootID)}: ${record.preready.message ?? 'a NodePrereadyJob failed'}; the node keeps the talos.dev/preready taint for this boot (delete the hook, or fix it and create it again, to run it again)`,
    });
}

/**
 * NodeReadyJobs: once the NodePrereadyJobs are done and the node is Ready and untainted
 * (as observed: the taint removal is written first), and for good once started.
 */
function readyStage(
  input: BootInput,
  b: BootDecisionBuilder,
  record: BootRecord,
  hooks: BootHooks,
  subject: HookSubject,
): void {
  const { node } = input;
  const before = record.ready;
  const started = before.runs.some((r) => r.phase === 'Pending' || r.phase === 'Running');
  const clear = node.ready && !node.tainted && b.change.taint === undefined;
  if (!(clear || started) || stageDone(before, hooks.ready)) return;
  record.ready = planStage(input, b, subject, before, hooks.ready, 'NodeReadyJob');
  if (record.ready.phase === 'Failed' && before.phase !== 'Failed') {
    b.events.push({
      type: 'Warning',
      reason: 'ReadyHookFailed',
      message: `boot ${String(node.bootID)}: ${record.ready.message ?? 'a NodeReadyJob failed'}`,
    });
  } else if (record.ready.phase === 'Succeeded' && before.phase !== 'Succeeded' && hooks.ready.length > 0) {
    b.events.push({
      type: 'Normal',
      reason: 'BootHooksSucceeded',
      message: `boot ${String(node.bootID)}: ${plural(hooks.preready.length + hooks.ready.length, 'boot hook')} done`,
    });
  }
}

/** A boot some boot hook selects: its record, its hooks in order, the taint, and what it waits for. */
function hooksOfBoot(
  input: BootInput,
  b: BootDecisionBuilder,
  hooks: BootHooks,
  reading: AnnouncementReading,
): BootDecision {
  const { node } = input;
  const bootID = node.bootID ?? '';
  const record = currentRecord(input, bootID, reading.attribution, b.effects);
  b.effects.push(...sweepEarlierBoots(input, bootID, b.effects));
  const waitingFor = waitingForAction(input, record, b);
  const subject = bootSubject(node, record);
  if (!waitingFor) prereadyStage(input, b, record, hooks, subject);
  const prereadyDone = stageDone(record.preready, hooks.preready);

  // The taint, decided on the record as it will be written.
  const guarded = hooks.preready.length > 0;
  const taintReason = whyTainted(
    node,
    record,
    prereadyDone,
    reading.announced ? node.announcement : undefined,
  );
  if (guarded && taintReason) b.setTaint(true, taintReason);
  else
    b.setTaint(
      false,
      guarded
        ? `the ${plural(hooks.preready.length, 'NodePrereadyJob')} of boot ${bootID} succeeded`
        : 'no NodePrereadyJob selects the node',
    );
  if (!waitingFor && prereadyDone) readyStage(input, b, record, hooks, subject);

  if (!sameRecord(record, node.record)) b.change.record = record;
  return b.finish(
    waitingFor
      ? `waiting for ${waitingFor}`
      : !prereadyDone
        ? `NodePrereadyJobs: ${node.ready ? (record.preready.message ?? 'pending') : 'waiting for the node to be Ready'}`
        : stageDone(record.ready, hooks.ready)
          ? `boot hooks of boot ${bootID} done`
          : `NodeReadyJobs: ${record.ready.message ?? 'waiting for the node to be Ready and untainted'}`,
  );
}

export function decideBoot(input: BootInput): BootDecision {
  const { node } = input;
  const b = new BootDecisionBuilder(node);
  const hooks: BootHooks = {
    preready: selectHooks(input.hooks, 'NodePrereadyJob', node.labels),
    ready: selectHooks(input.hooks, 'NodeReadyJob', node.labels),
  };
  const guarded = hooks.preready.length > 0;
  const bootID = node.bootID;
  const mine = (uid: string | undefined) =>
    uid !== undefined && (input.onlyActions === undefined || input.onlyActions.has(uid));

  const reading = readAnnouncement(input);
  const recordIsCurrent = node.record !== undefined && node.record.bootID === bootID;
  const recordAction = recordIsCurrent ? node.record?.action?.uid : reading.attribution?.uid;
  if (input.onlyActions && !mine(recordAction)) {
    // Not this controller's node: only its own announcement is its business.
    const release = reading.removeAnnouncement && mine(node.announcement?.action.uid);
    return {
      ...(release ? { change: { removeAnnouncement: true } } : {}),
      effects: b.effects,
      events: b.events,
      message: 'not a boot this controller handles',
      ...(reading.announced || reading.undetermined ? { requeueAfterMs: ACTION_POLL_MS } : {}),
    };
  }

  if (reading.removeAnnouncement) b.change.removeAnnouncement = true;
  if (bootID === undefined) {
    // No boot to run hooks for yet; a node that boot hooks guard is kept from workloads.
    if (guarded) b.setTaint(true, 'the node has not reported a boot ID yet');
    return b.finish('no boot ID reported yet');
  }
  if (reading.undetermined) {
    if (guarded) b.setTaint(true, `boot ${bootID} began before its action was approved`);
    b.wakeIn(ACTION_POLL_MS);
    return b.finish('waiting to learn whether the announced action caused this boot');
  }
  if (hooks.preready.length + hooks.ready.length === 0) {
    // No boot hooks: nothing to record, nothing to guard.
    if (node.tainted) b.setTaint(false, 'no NodePrereadyJob selects the node');
    b.effects.push(...sweepEarlierBoots(input, bootID, b.effects));
    return b.finish('no boot hooks select the node');
  }
  return hooksOfBoot(input, b, hooks, reading);
}
