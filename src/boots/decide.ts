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

export function decideBoot(input: BootInput): BootDecision {
  const { now, node } = input;
  const effects: HookEffect[] = [];
  const events: EventSpec[] = [];
  let requeueAfterMs: number | undefined;
  const wakeIn = (ms: number | undefined) => {
    if (ms === undefined) return;
    const m = Math.max(0, Math.ceil(ms));
    requeueAfterMs = requeueAfterMs === undefined ? m : Math.min(requeueAfterMs, m);
  };
  const prereadyHooks = selectHooks(input.hooks, 'NodePrereadyJob', node.labels);
  const readyHooks = selectHooks(input.hooks, 'NodeReadyJob', node.labels);
  const guarded = prereadyHooks.length > 0;
  const bootID = node.bootID;
  const actionOf = (uid: string) => input.actions.get(uid);
  const mine = (uid: string | undefined) =>
    uid !== undefined && (input.onlyActions === undefined || input.onlyActions.has(uid));

  const announcement = node.announcement;
  const { announced, removeAnnouncement, attribution, undetermined } = readAnnouncement(input);

  const recordIsCurrent = node.record !== undefined && node.record.bootID === bootID;
  const recordAction = recordIsCurrent ? node.record?.action?.uid : attribution?.uid;
  if (input.onlyActions && !mine(recordAction)) {
    // Not this controller's node: only its own announcement is its business.
    const release = removeAnnouncement && mine(announcement?.action.uid);
    return {
      ...(release ? { change: { removeAnnouncement: true } } : {}),
      effects,
      events,
      message: 'not a boot this controller handles',
      ...(announced || undetermined ? { requeueAfterMs: ACTION_POLL_MS } : {}),
    };
  }

  const change: NodeChange = {};
  if (removeAnnouncement) change.removeAnnouncement = true;
  const setTaint = (want: boolean, why: string) => {
    if (want === node.tainted) return;
    change.taint = want;
    events.push(
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
  };
  const finish = (message: string): BootDecision => ({
    ...(Object.keys(change).length ? { change } : {}),
    effects,
    events,
    message,
    ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}),
  });

  if (bootID === undefined) {
    // No boot to run hooks for yet; a node that boot hooks guard is kept from workloads.
    if (guarded) setTaint(true, 'the node has not reported a boot ID yet');
    return finish('no boot ID reported yet');
  }
  if (undetermined) {
    if (guarded) setTaint(true, `boot ${bootID} began before its action was approved`);
    wakeIn(ACTION_POLL_MS);
    return finish('waiting to learn whether the announced action caused this boot');
  }
  const sweep = () => effects.push(...sweepEarlierBoots(input, bootID, effects));
  if (prereadyHooks.length + readyHooks.length === 0) {
    // No boot hooks: nothing to record, nothing to guard.
    if (node.tainted) setTaint(false, 'no NodePrereadyJob selects the node');
    sweep();
    return finish('no boot hooks select the node');
  }

  const record = currentRecord(input, bootID, attribution, effects);
  sweep();

  // A boot an action caused starts its hooks once that action has seen the node return.
  let waitingFor: string | undefined;
  if (record.action) {
    const facts = actionOf(record.action.uid);
    const claimed = facts?.phase === 'RunningPostHooks' && facts.bootIDAfter === bootID;
    if (facts && !claimed && facts.phase !== 'Succeeded' && !ENDED.has(facts.phase)) {
      waitingFor = `NodeAction ${record.action.name} to see node ${node.name} return (it is ${facts.phase ?? 'new'})`;
      wakeIn(ACTION_POLL_MS);
    }
  }

  const subject = bootSubject(node, record);
  const plan = (stage: BootStage, hooks: readonly HookObject[], kind: HookKindName): BootStage => {
    const p = planHookStage({
      now,
      subject,
      hooks,
      kinds: [kind],
      records: stage.runs,
      jobs: input.jobs,
      webhooks: input.webhooks,
    });
    effects.push(...p.effects);
    wakeIn(p.requeueAfterMs);
    return stageAfter(stage, p, hooks, now);
  };

  // NodePrereadyJobs: for this boot, once the node is Ready.
  const preready = record.preready;
  if (!waitingFor && node.ready && !stageDone(preready, prereadyHooks)) {
    record.preready = plan(preready, prereadyHooks, 'NodePrereadyJob');
    if (record.preready.phase === 'Failed' && preready.phase !== 'Failed') {
      events.push({
        type: 'Warning',
        reason: 'PrereadyHookFailed',
        message: `boot ${bootID}: ${record.preready.message ?? 'a NodePrereadyJob failed'}; the node keeps the talos.dev/preready taint for this boot (delete the hook, or fix it and create it again, to run it again)`,
      });
    }
  }
  const prereadyDone = stageDone(record.preready, prereadyHooks);

  // The taint, decided on the record as it will be written.
  const taintReason = whyTainted(node, record, prereadyDone, announced ? announcement : undefined);
  if (guarded && taintReason) setTaint(true, taintReason);
  else
    setTaint(
      false,
      guarded
        ? `the ${plural(prereadyHooks.length, 'NodePrereadyJob')} of boot ${bootID} succeeded`
        : 'no NodePrereadyJob selects the node',
    );

  // NodeReadyJobs: once the node is Ready and untainted (as observed: the taint removal
  // is written first), and for good once started.
  const ready = record.ready;
  const started = ready.runs.some((r) => r.phase === 'Pending' || r.phase === 'Running');
  const clear = node.ready && !node.tainted && change.taint === undefined;
  if (!waitingFor && prereadyDone && (clear || started) && !stageDone(ready, readyHooks)) {
    record.ready = plan(ready, readyHooks, 'NodeReadyJob');
    if (record.ready.phase === 'Failed' && ready.phase !== 'Failed') {
      events.push({
        type: 'Warning',
        reason: 'ReadyHookFailed',
        message: `boot ${bootID}: ${record.ready.message ?? 'a NodeReadyJob failed'}`,
      });
    } else if (record.ready.phase === 'Succeeded' && ready.phase !== 'Succeeded' && readyHooks.length > 0) {
      events.push({
        type: 'Normal',
        reason: 'BootHooksSucceeded',
        message: `boot ${bootID}: ${plural(prereadyHooks.length + readyHooks.length, 'boot hook')} done`,
      });
    }
  }

  if (!sameRecord(record, node.record)) change.record = record;
  const message = waitingFor
    ? `waiting for ${waitingFor}`
    : !prereadyDone
      ? `NodePrereadyJobs: ${node.ready ? (record.preready.message ?? 'pending') : 'waiting for the node to be Ready'}`
      : stageDone(record.ready, readyHooks)
        ? `boot hooks of boot ${bootID} done`
        : `NodeReadyJobs: ${record.ready.message ?? 'waiting for the node to be Ready and untainted'}`;
  return finish(message);
}
