// One stage of hooks — the pre-action hooks of an action, or the boot hooks of a node
// — as a pure function: given the hooks, the run records so far and what the Jobs and
// webhook calls show, the next records, what to do, and whether the stage is done.
//
// The caller persists the returned records BEFORE it performs the effects. That order
// is what makes a Job be created at most once per (subject, hook, attempt): the record
// of an attempt exists before its Job can, the Job is created only while its record is
// unfinished (the runner re-reads the record from the API server first), and a record,
// once finished, never becomes unfinished again.
import type { V1Job } from '@kubernetes/client-node';
import type { HookKindName, HookRun } from '../api/hooks.ts';
import type { NodeAction } from '../api/node-action.ts';
import { formatDuration, parseDuration } from '../duration.ts';

import {
  buildHookJob,
  hookJobName,
  jobHash,
  jobImpostor,
  runIdentity,
  type HookSubject,
  type JobFacts,
} from './job.ts';
import { hookRef, orderGroups, type HookObject } from './select.ts';
import { hookRequest, type HookRequest, type WebhookAnswer } from './protocol.ts';
import { approvalStep, type ApprovalAnswer } from './approval.ts';
import { readinessStep, type NodeReadinessFacts } from './readiness.ts';

export type HookRunRecord = NonNullable<NonNullable<NodeAction['status']>['hooks']>[number];

/** What the runner remembers of a webhook run's calls (in memory: a restart calls again). */
export interface WebhookFacts {
  inFlight: boolean;
  /** Calls made for the run so far (counted against WEBHOOK_CALL_BUDGET). */
  calls?: number;
  last?: WebhookAnswer & { at: Date };
}

export interface StageInput {
  now: Date;
  subject: HookSubject;
  /** The hooks of this stage, already selected for the node (selectHooks). */
  hooks: readonly HookObject[];
  /** Every run record of the subject (other stages' records pass through untouched). */
  records: readonly HookRunRecord[];
  /**
   * The hook kinds of this stage: an unfinished run of one of them whose hook is not
   * among `hooks` any more (deleted, or it no longer selects the node) is closed.
   */
  kinds?: readonly HookKindName[];
  /** Observed Jobs by jobKey(); a Job not in the map does not exist. */
  jobs: ReadonlyMap<string, JobFacts>;
  /** Webhook calls by webhookKey(). */
  webhooks: ReadonlyMap<string, WebhookFacts>;
  /**
   * Whether a run whose Job was deleted before it finished gets a new attempt (default
   * true). An undo runs at most once: its deleted Job fails the run instead.
   */
  retryDeleted?: boolean;
  /** A person's answer to an approval hook, from the action's annotations. */
  approval?: ApprovalAnswer;
  /** Who requested the action: no approver of their own action unless the hook allows it. */
  requester?: string;
  /** The node's Pods and CSINode, for NodePrereadyJobs with readiness (read only while one waits). */
  readiness?: NodeReadinessFacts;
}

export type HookEffect =
  | { type: 'createJob'; record: HookRunRecord; job: V1Job }
  | {
      type: 'deleteJob';
      namespace: string;
      name: string;
      reason: string;
      /**
       * Set on a sweep of an earlier boot's Job: delete it only if the node, read afresh, has
       * moved past this boot. A cached node view may be older than the Job, so "not the boot I
       * see" is not yet "an earlier boot".
       */
      earlierBoot?: string;
    }
  | { type: 'callWebhook'; key: string; hook: HookObject; request: HookRequest; record: HookRunRecord }
  | { type: 'hookRun'; hook: { kind: HookKindName; namespace: string; name: string }; run: HookRun };

export interface StagePlan {
  records: HookRunRecord[];
  effects: HookEffect[];
  outcome: 'Running' | 'Succeeded' | 'Failed';
  /** What the stage is doing or how it ended, in words. */
  message: string;
  /** The hook that failed the stage (failurePolicy Fail). */
  failed?: HookRunRecord;
  /** A person refused the action at an approval hook: it ends Denied, not Failed. */
  refused?: ApprovalAnswer;
  /** The answers that decided approval hooks on this pass, to record. */
  answered: ApprovalAnswer[];
  requeueAfterMs?: number;
}

/** A failing webhook call (no answer, HTTP error) is tried again after this long. */
export const WEBHOOK_ERROR_BACKOFF_MS = 5000;

/** The shortest wait between two calls of a run, whatever the webhook asks for. */
export const WEBHOOK_MIN_RETRY_MS = 1000;

/**
 * The most calls one run makes: a webhook that keeps answering "not yet" (or errors) is
 * failed after this many, so no answer can make the controller call without end.
 */
export const WEBHOOK_CALL_BUDGET = 1000;

/** The longest message a run record holds (the CRD's bound). */
export const MAX_RECORD_MESSAGE = 4096;

/** Text cut to `max` characters, marked as cut. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A completion time no earlier than the start it completes (clocks of two machines). */
function notBefore(time: string, start: string | undefined): string {
  return start !== undefined && Date.parse(time) < Date.parse(start) ? start : time;
}

export function jobKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

export function webhookKey(subject: HookSubject, hookUID: string, attempt: number): string {
  return `${runIdentity(subject)}/${hookUID}/${attempt}`;
}

export function isFinished(record: HookRunRecord): boolean {
  return record.phase === 'Succeeded' || record.phase === 'Failed' || record.phase === 'Bypassed';
}

/**
 * Whether `records` (as read afresh from where they are persisted) hold this attempt,
 * unfinished: the condition under which the attempt's Job may be created.
 */
export function isRecordPending(records: readonly HookRunRecord[], record: HookRunRecord): boolean {
  return records.some(
    (r) =>
      r.kind === record.kind &&
      r.namespace === record.namespace &&
      r.name === record.name &&
      r.uid === record.uid &&
      r.attempt === record.attempt &&
      !isFinished(r),
  );
}

function recordOf(record: HookRunRecord, hook: HookObject): boolean {
  return (
    record.kind === hook.kind &&
    record.namespace === hook.metadata.namespace &&
    record.name === hook.metadata.name &&
    record.uid === hook.metadata.uid
  );
}

function failurePolicyOf(record: HookRunRecord, hook?: HookObject): 'Fail' | 'Ignore' {
  return record.failurePolicy ?? hook?.spec.failurePolicy ?? 'Fail';
}

/** The hook's status entry for a record. */
export function hookRunOf(record: HookRunRecord, subject: HookSubject): HookRun {
  return {
    ...(subject.action ? { action: subject.action.name } : {}),
    node: subject.node,
    ...(subject.bootID ? { bootID: subject.bootID } : {}),
    attempt: record.attempt,
    ...(record.jobName ? { jobName: record.jobName } : {}),
    phase: record.phase === 'Bypassed' ? 'Succeeded' : record.phase,
    ...(record.startTime ? { startTime: record.startTime } : {}),
    ...(record.completionTime ? { completionTime: record.completionTime } : {}),
    ...(record.message ? { message: record.message } : {}),
  };
}

/** What an attempt of the hook runs, for those who read its record. */
function runsOf(hook: HookObject): NonNullable<HookRunRecord['runs']> {
  if (hook.spec.template) return 'Job';
  if (hook.spec.approval) return 'Approval';
  if ('readiness' in hook.spec && hook.spec.readiness) return 'Readiness';
  return 'Webhook';
}

type HookState = 'unstarted' | 'active' | 'succeeded' | 'ignored' | 'failed';

/**
 * One planning pass over a stage: the records as they become, the effects, and the
 * earliest wake-up, changed only through these verbs so that every phase change of a
 * run is reported to its hook's status.
 */
class StageBuilder {
  readonly records: HookRunRecord[];
  readonly effects: HookEffect[] = [];
  readonly answered: ApprovalAnswer[] = [];
  refused: ApprovalAnswer | undefined;
  requeueAfterMs: number | undefined;
  readonly nowText: string;

  readonly input: StageInput;

  constructor(input: StageInput) {
    this.input = input;
    this.records = [...input.records];
    this.nowText = input.now.toISOString();
  }

  wake(ms: number): void {
    const m = Math.max(0, Math.ceil(ms));
    this.requeueAfterMs = this.requeueAfterMs === undefined ? m : Math.min(this.requeueAfterMs, m);
  }

  private changed(hook: HookObject, record: HookRunRecord): void {
    this.effects.push({
      type: 'hookRun',
      hook: { kind: hook.kind, namespace: hook.metadata.namespace, name: hook.metadata.name },
      run: hookRunOf(record, this.input.subject),
    });
  }

  /** Replaces the record at `index`, reporting a phase change to the hook's status. */
  update(index: number, hook: HookObject, next: HookRunRecord): void {
    const before = this.records[index];
    if (next.message !== undefined) next.message = clip(next.message, MAX_RECORD_MESSAGE);
    this.records[index] = next;
    if (before?.phase !== next.phase) this.changed(hook, next);
  }

  newAttempt(hook: HookObject, attempt: number): HookRunRecord {
    const { subject } = this.input;
    const job = hook.spec.template ? buildHookJob(hook, subject, attempt) : undefined;
    const record: HookRunRecord = {
      kind: hook.kind,
      namespace: hook.metadata.namespace,
      name: hook.metadata.name,
      uid: hook.metadata.uid,
      attempt,
      failurePolicy: hook.spec.failurePolicy ?? 'Fail',
      runs: runsOf(hook),
      phase: 'Pending',
      startTime: this.nowText,
      ...(job ? { jobName: hookJobName(subject, hook, attempt), templateHash: jobHash(job) } : {}),
      message: hook.spec.template
        ? `creating Job ${hookJobName(subject, hook, attempt)}`
        : hook.spec.approval
          ? approvalStep(hook, undefined, undefined).message
          : hook.spec.readiness
            ? "waiting for the node's critical DaemonSet Pods and CSI drivers"
            : `calling webhook Service ${hook.spec.webhook?.service.name ?? ''}`,
    };
    this.records.push(record);
    this.changed(hook, record);
    if (job) this.effects.push({ type: 'createJob', record, job });
    else if (hook.spec.approval) followApproval(this, hook, record, this.records.length - 1);
    else if (hook.spec.readiness) followReadiness(this, hook, record, this.records.length - 1);
    else
      this.effects.push({
        type: 'callWebhook',
        key: webhookKey(subject, hook.metadata.uid, attempt),
        hook,
        request: hookRequest(hook, subject),
        record,
      });
    return record;
  }

  /** The newest attempt of a hook that has one. */
  newest(hook: HookObject): HookRunRecord {
    return this.records.filter((r) => recordOf(r, hook)).reduce((a, b) => (b.attempt > a.attempt ? b : a));
  }

  plan(rest: Pick<StagePlan, 'outcome' | 'message' | 'failed'>): StagePlan {
    return {
      records: this.records,
      effects: this.effects,
      answered: this.answered,
      ...(this.refused ? { refused: this.refused } : {}),
      ...rest,
      ...(this.requeueAfterMs !== undefined ? { requeueAfterMs: this.requeueAfterMs } : {}),
    };
  }
}

/** An unfinished attempt and what is known of it: where it stands, and the attempt's timeout. */
interface Attempt {
  hook: HookObject;
  record: HookRunRecord;
  index: number;
  deadline: number;
  timedOut: boolean;
  timeoutMessage: string;
  fail: (message: string) => void;
}

/** Follows an unfinished attempt that runs as a Job. */
function followJob(
  b: StageBuilder,
  { hook, record, index, deadline, timedOut, timeoutMessage, fail }: Attempt,
): void {
  const { now, subject, jobs } = b.input;
  const jobName = record.jobName ?? '';
  const facts = jobs.get(jobKey(hook.metadata.namespace, jobName));
  const impostor = facts?.provenance && jobImpostor(facts.provenance, subject, record);
  if (impostor) {
    // Not ours: the run fails naming it, and the Job is left to whoever made it.
    fail(
      `Job ${hook.metadata.namespace}/${jobName} was not created by gatehouse for this run (${impostor}): not adopting it`,
    );
  } else if (facts?.phase === 'Succeeded' || facts?.phase === 'Failed') {
    b.update(index, hook, {
      ...record,
      phase: facts.phase,
      completionTime: notBefore(facts.completionTime ?? b.nowText, record.startTime),
      message: facts.message,
    });
  } else if (timedOut) {
    fail(`${timeoutMessage}${facts ? `: ${facts.message}` : ''}`);
    if (facts && !facts.deleting) {
      b.effects.push({
        type: 'deleteJob',
        namespace: hook.metadata.namespace,
        name: jobName,
        reason: 'timed out',
      });
    }
  } else if (facts && !facts.deleting) {
    b.update(index, hook, { ...record, phase: 'Running', message: facts.message });
    b.wake(deadline - now.getTime());
  } else if (!facts && record.phase === 'Pending') {
    // Not created yet (or created and not seen yet: creating again finds it). Built
    // afresh, it may differ from the first build (the hook was edited): the record
    // keeps the hash of what is created, before it is.
    const job = buildHookJob(hook, subject, record.attempt);
    const templateHash = jobHash(job);
    if (record.templateHash !== undefined && record.templateHash !== templateHash)
      b.update(index, hook, { ...record, templateHash });
    b.effects.push({ type: 'createJob', record: b.records[index] ?? record, job });
    b.wake(deadline - now.getTime());
  } else {
    // Seen before and gone now, or being deleted unfinished: someone deleted it. The
    // attempt failed; a new one (a new Job name) runs while the timeout allows.
    fail(`Job ${hook.metadata.namespace}/${jobName} was deleted before it finished`);
    if (b.input.retryDeleted === false) return;
    b.newAttempt(hook, record.attempt + 1);
    b.wake(deadline - now.getTime());
  }
}

/**
 * Follows an unfinished attempt of an approval hook: a person's answer for it decides it
 * (a refusal fails it, and the stage says who refused); until then it waits, to its timeout.
 */
function followApproval(b: StageBuilder, hook: HookObject, record: HookRunRecord, index: number): boolean {
  const step = approvalStep(hook, b.input.approval, b.input.requester);
  if (step.state === 'waiting') {
    b.update(index, hook, { ...record, phase: 'Running', message: step.message });
    return false;
  }
  b.update(index, hook, {
    ...record,
    phase: step.state === 'approved' ? 'Succeeded' : 'Failed',
    completionTime: b.nowText,
    message: step.message,
  });
  b.answered.push(step.answer);
  if (step.state === 'refused') b.refused = step.answer;
  return true;
}

/**
 * Follows an unfinished attempt of a readiness hook (NodePrereadyJob with readiness): the
 * node's facts decide it; until they do, it waits, reading them again soon, to its timeout.
 */
function followReadiness(b: StageBuilder, hook: HookObject, record: HookRunRecord, index: number): void {
  const { now } = b.input;
  const started = record.startTime ? Date.parse(record.startTime) : now.getTime();
  const timeoutMs = parseDuration(hook.spec.timeout ?? '15m');
  const step = readinessStep(hook, b.input.readiness, now.getTime() - started);
  if (step.state === 'ready') {
    b.update(index, hook, {
      ...record,
      phase: 'Succeeded',
      completionTime: b.nowText,
      message: step.message,
    });
  } else if (now.getTime() >= started + timeoutMs) {
    const message = `${hookRef(hook)} timed out after ${formatDuration(timeoutMs)}: ${step.message}`;
    b.update(index, hook, { ...record, phase: 'Failed', completionTime: b.nowText, message });
  } else {
    b.update(index, hook, { ...record, phase: 'Running', message: step.message });
    b.wake(Math.min(step.wakeMs, started + timeoutMs - now.getTime()));
  }
}

/** Follows an unfinished attempt that is a webhook call, calling again when due. */
function followWebhook(
  b: StageBuilder,
  { hook, record, index, deadline, timedOut, timeoutMessage, fail }: Attempt,
): void {
  const { now, subject, webhooks } = b.input;
  const facts = webhooks.get(webhookKey(subject, hook.metadata.uid, record.attempt));
  const last = facts?.last;
  if (last?.outcome === 'Success' || last?.outcome === 'Failure') {
    b.update(index, hook, {
      ...record,
      phase: last.outcome === 'Success' ? 'Succeeded' : 'Failed',
      completionTime: last.at.toISOString(),
      message: last.message,
    });
    return;
  }
  if (timedOut) {
    fail(`${timeoutMessage}${last ? `: ${last.message}` : ''}`);
    return;
  }
  const message = last
    ? last.outcome === 'NotYet'
      ? `not done yet: ${last.message}`
      : `${last.message}; calling again`
    : (record.message ?? '');
  if (facts?.inFlight) {
    b.update(index, hook, { ...record, phase: 'Running', message });
  } else if ((facts?.calls ?? 0) >= WEBHOOK_CALL_BUDGET) {
    fail(
      `${hookRef(hook)} was called ${String(facts?.calls ?? 0)} times without answering Success or Failure${last ? `: ${last.message}` : ''}`,
    );
  } else {
    const wait = last?.outcome === 'NotYet' ? last.retryAfterMs : WEBHOOK_ERROR_BACKOFF_MS;
    const due = last ? last.at.getTime() + Math.max(WEBHOOK_MIN_RETRY_MS, wait) : now.getTime();
    if (now.getTime() >= due) {
      const next: HookRunRecord = { ...record, phase: 'Running', message };
      b.update(index, hook, next);
      b.effects.push({
        type: 'callWebhook',
        key: webhookKey(subject, hook.metadata.uid, record.attempt),
        hook,
        request: hookRequest(hook, subject),
        record: next,
      });
    } else {
      b.update(index, hook, { ...record, phase: 'Running', message });
      b.wake(Math.min(due, deadline) - now.getTime());
    }
  }
  b.wake(deadline - now.getTime());
}

/**
 * Closes the runs whose hook is gone (deleted, its namespace deleted, or it no longer
 * selects the node), saying so, and deletes their Jobs: nothing is left saying Running,
 * and no Job keeps the action's finalizer. Only runs of the stage's kinds are judged.
 */
function closeRunsOfGoneHooks(b: StageBuilder): void {
  const { hooks, subject } = b.input;
  const kinds = new Set(b.input.kinds ?? []);
  b.records.forEach((record, index) => {
    if (isFinished(record) || !kinds.has(record.kind) || hooks.some((h) => recordOf(record, h))) return;
    const closed: HookRunRecord = {
      ...record,
      phase: 'Failed',
      completionTime: b.nowText,
      message: `${record.kind} ${record.namespace}/${record.name} was deleted, or no longer selects node ${subject.node}, while it ran: its run is closed${record.jobName ? ' and its Job deleted' : ''}, and it no longer counts`,
    };
    b.records[index] = closed;
    if (record.jobName)
      b.effects.push({
        type: 'deleteJob',
        namespace: record.namespace,
        name: record.jobName,
        reason: 'its hook is gone',
      });
    b.effects.push({
      type: 'hookRun',
      hook: { kind: record.kind, namespace: record.namespace, name: record.name },
      run: hookRunOf(closed, subject),
    });
  });
}

export function planHookStage(input: StageInput): StagePlan {
  const { now, hooks } = input;
  const b = new StageBuilder(input);
  const records = b.records;

  const states = new Map<HookObject, HookState>();
  for (const hook of hooks) {
    const own = records.map((r, i) => [r, i] as const).filter(([r]) => recordOf(r, hook));
    const latest = own.reduce<(typeof own)[number] | undefined>(
      (best, cur) => (!best || cur[0].attempt > best[0].attempt ? cur : best),
      undefined,
    );
    if (!latest) {
      states.set(hook, 'unstarted');
      continue;
    }
    const [record, index] = latest;
    if (!isFinished(record)) {
      const timeoutMs = parseDuration(hook.spec.timeout ?? '15m');
      const firstStart = Math.min(
        ...own.map(([r]) => (r.startTime ? Date.parse(r.startTime) : now.getTime())),
      );
      const deadline = firstStart + timeoutMs;
      const attempt: Attempt = {
        hook,
        record,
        index,
        deadline,
        timedOut: now.getTime() >= deadline,
        timeoutMessage: `${hookRef(hook)} timed out after ${formatDuration(timeoutMs)}`,
        fail: (message: string) =>
          b.update(index, hook, { ...record, phase: 'Failed', completionTime: b.nowText, message }),
      };
      if (hook.spec.approval) {
        if (!followApproval(b, hook, record, index)) {
          if (attempt.timedOut) attempt.fail(`${attempt.timeoutMessage} without an approval`);
          else b.wake(deadline - now.getTime());
        }
      } else if (hook.spec.readiness) followReadiness(b, hook, record, index);
      else if (record.jobName !== undefined) followJob(b, attempt);
      else followWebhook(b, attempt);
    }
    // The hook's state is that of its newest attempt.
    const newest = b.newest(hook);
    states.set(
      hook,
      !isFinished(newest)
        ? 'active'
        : newest.phase === 'Failed'
          ? failurePolicyOf(newest, hook) === 'Ignore'
            ? 'ignored'
            : 'failed'
          : 'succeeded',
    );
  }

  closeRunsOfGoneHooks(b);

  const failedHook = hooks.find((h) => states.get(h) === 'failed');
  if (failedHook) {
    const failed = b.newest(failedHook);
    return b.plan({
      outcome: 'Failed',
      message: `${hookRef(failedHook)} failed: ${clip(failed.message ?? 'no message', 2048)}`,
      failed,
    });
  }

  // Start what may start: the unstarted hooks of the first group with unfinished hooks.
  const groups = orderGroups(hooks);
  const done = (h: HookObject) => states.get(h) === 'succeeded' || states.get(h) === 'ignored';
  const current = groups.find((g) => !g.every(done));
  if (!current) {
    const ignored = hooks.filter((h) => states.get(h) === 'ignored').map(hookRef);
    return b.plan({
      outcome: 'Succeeded',
      message:
        hooks.length === 0
          ? 'no hooks to run'
          : `${hooks.length} hook${hooks.length === 1 ? '' : 's'} done${ignored.length ? ` (failures ignored: ${ignored.join(', ')})` : ''}`,
    });
  }
  for (const hook of current) {
    if (states.get(hook) !== 'unstarted') continue;
    b.newAttempt(hook, 1);
    states.set(hook, 'active');
    b.wake(parseDuration(hook.spec.timeout ?? '15m'));
  }
  const active = hooks
    .filter((h) => states.get(h) === 'active')
    .map((h) => {
      const latest = b.newest(h);
      return latest.message ? `${hookRef(h)} (${clip(latest.message, 512)})` : hookRef(h);
    });
  const waiting = hooks.filter((h) => states.get(h) === 'unstarted').length;
  return b.plan({
    outcome: 'Running',
    message: `running ${active.join(', ')}${waiting ? `; ${waiting} more after ${waiting === 1 ? 'it' : 'them'}` : ''}`,
  });
}

/**
 * Stops every unfinished run among `records` (the action failed or was cancelled): the
 * records finish as Failed with the reason, and their Jobs are deleted.
 */
export function stopRuns(
  records: readonly HookRunRecord[],
  subject: HookSubject,
  now: Date,
  reason: string,
): { records: HookRunRecord[]; effects: HookEffect[] } {
  const effects: HookEffect[] = [];
  const next = records.map((record) => {
    if (isFinished(record)) return record;
    const stopped: HookRunRecord = {
      ...record,
      phase: 'Failed',
      completionTime: now.toISOString(),
      message: reason,
    };
    if (record.jobName) {
      effects.push({ type: 'deleteJob', namespace: record.namespace, name: record.jobName, reason });
    }
    effects.push({
      type: 'hookRun',
      hook: { kind: record.kind, namespace: record.namespace, name: record.name },
      run: hookRunOf(stopped, subject),
    });
    return stopped;
  });
  return { records: next, effects };
}

/** Records for hooks not run because of spec.bypass.hooks. */
export function bypassedRecords(hooks: readonly HookObject[], now: Date, reason: string): HookRunRecord[] {
  return hooks.map((hook) => ({
    kind: hook.kind,
    namespace: hook.metadata.namespace,
    name: hook.metadata.name,
    uid: hook.metadata.uid,
    attempt: 1,
    failurePolicy: hook.spec.failurePolicy ?? 'Fail',
    phase: 'Bypassed',
    startTime: now.toISOString(),
    completionTime: now.toISOString(),
    message: reason,
  }));
}
