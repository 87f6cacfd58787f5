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
import { parseDuration } from '../duration.ts';
import { formatDuration } from '../wait.ts';
import { buildHookJob, hookJobName, runIdentity, type HookSubject, type JobFacts } from './job.ts';
import { hookRef, orderGroups, type HookObject } from './select.ts';
import { hookRequest, type HookRequest, type WebhookAnswer } from './webhook.ts';

export type HookRunRecord = NonNullable<NonNullable<NodeAction['status']>['hooks']>[number];

/** What the runner remembers of a webhook run's calls (in memory: a restart calls again). */
export interface WebhookFacts {
  inFlight: boolean;
  last?: WebhookAnswer & { at: Date };
}

export interface StageInput {
  now: Date;
  subject: HookSubject;
  /** The hooks of this stage, already selected for the node (selectHooks). */
  hooks: readonly HookObject[];
  /** Every run record of the subject (other stages' records pass through untouched). */
  records: readonly HookRunRecord[];
  /** Observed Jobs by jobKey(); a Job not in the map does not exist. */
  jobs: ReadonlyMap<string, JobFacts>;
  /** Webhook calls by webhookKey(). */
  webhooks: ReadonlyMap<string, WebhookFacts>;
}

export type HookEffect =
  | { type: 'createJob'; record: HookRunRecord; job: V1Job }
  | { type: 'deleteJob'; namespace: string; name: string; reason: string }
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
  requeueAfterMs?: number;
}

/** A failing webhook call (no answer, HTTP error) is tried again after this long. */
export const WEBHOOK_ERROR_BACKOFF_MS = 5000;

/** The longest message a run record holds (the CRD's bound). */
export const MAX_RECORD_MESSAGE = 4096;

/** Text cut to `max` characters, marked as cut. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
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

type HookState = 'unstarted' | 'active' | 'succeeded' | 'ignored' | 'failed';

export function planHookStage(input: StageInput): StagePlan {
  const { now, subject, hooks, jobs, webhooks } = input;
  const nowText = now.toISOString();
  const records = [...input.records];
  const effects: HookEffect[] = [];
  let requeueAfterMs: number | undefined;
  const wakeIn = (ms: number) => {
    const m = Math.max(0, Math.ceil(ms));
    requeueAfterMs = requeueAfterMs === undefined ? m : Math.min(requeueAfterMs, m);
  };
  const changed = (hook: HookObject, record: HookRunRecord) =>
    effects.push({
      type: 'hookRun',
      hook: { kind: hook.kind, namespace: hook.metadata.namespace, name: hook.metadata.name },
      run: hookRunOf(record, subject),
    });

  /** Replaces the record at `index`, reporting a phase change to the hook's status. */
  const update = (index: number, hook: HookObject, next: HookRunRecord) => {
    const before = records[index];
    if (next.message !== undefined) next.message = clip(next.message, MAX_RECORD_MESSAGE);
    records[index] = next;
    if (before?.phase !== next.phase) changed(hook, next);
  };

  const newAttempt = (hook: HookObject, attempt: number): HookRunRecord => {
    const record: HookRunRecord = {
      kind: hook.kind,
      namespace: hook.metadata.namespace,
      name: hook.metadata.name,
      uid: hook.metadata.uid,
      attempt,
      failurePolicy: hook.spec.failurePolicy ?? 'Fail',
      phase: 'Pending',
      startTime: nowText,
      ...(hook.spec.template ? { jobName: hookJobName(subject, hook, attempt) } : {}),
      message: hook.spec.template
        ? `creating Job ${hookJobName(subject, hook, attempt)}`
        : `calling webhook Service ${hook.spec.webhook?.service.name ?? ''}`,
    };
    records.push(record);
    changed(hook, record);
    if (hook.spec.template)
      effects.push({ type: 'createJob', record, job: buildHookJob(hook, subject, attempt) });
    else
      effects.push({
        type: 'callWebhook',
        key: webhookKey(subject, hook.metadata.uid, attempt),
        hook,
        request: hookRequest(hook, subject),
        record,
      });
    return record;
  };

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
      const timedOut = now.getTime() >= deadline;
      const fail = (message: string) =>
        update(index, hook, { ...record, phase: 'Failed', completionTime: nowText, message });
      const timeoutMessage = `${hookRef(hook)} timed out after ${formatDuration(timeoutMs)}`;

      if (record.jobName !== undefined) {
        const facts = jobs.get(jobKey(hook.metadata.namespace, record.jobName));
        if (facts?.phase === 'Succeeded' || facts?.phase === 'Failed') {
          update(index, hook, {
            ...record,
            phase: facts.phase,
            completionTime: facts.completionTime ?? nowText,
            message: facts.message,
          });
        } else if (timedOut) {
          fail(`${timeoutMessage}${facts ? `: ${facts.message}` : ''}`);
          if (facts && !facts.deleting) {
            effects.push({
              type: 'deleteJob',
              namespace: hook.metadata.namespace,
              name: record.jobName,
              reason: 'timed out',
            });
          }
        } else if (facts && !facts.deleting) {
          update(index, hook, { ...record, phase: 'Running', message: facts.message });
          wakeIn(deadline - now.getTime());
        } else if (!facts && record.phase === 'Pending') {
          // Not created yet (or created and not seen yet: creating again adopts it).
          effects.push({ type: 'createJob', record, job: buildHookJob(hook, subject, record.attempt) });
          wakeIn(deadline - now.getTime());
        } else {
          // Seen before and gone now, or being deleted unfinished: someone deleted it. The
          // attempt failed; a new one (a new Job name) runs while the timeout allows.
          fail(`Job ${hook.metadata.namespace}/${record.jobName} was deleted before it finished`);
          newAttempt(hook, record.attempt + 1);
          wakeIn(deadline - now.getTime());
        }
      } else {
        const facts = webhooks.get(webhookKey(subject, hook.metadata.uid, record.attempt));
        const last = facts?.last;
        if (last?.outcome === 'Success' || last?.outcome === 'Failure') {
          update(index, hook, {
            ...record,
            phase: last.outcome === 'Success' ? 'Succeeded' : 'Failed',
            completionTime: last.at.toISOString(),
            message: last.message,
          });
        } else if (timedOut) {
          fail(`${timeoutMessage}${last ? `: ${last.message}` : ''}`);
        } else {
          const message = last
            ? last.outcome === 'NotYet'
              ? `not done yet: ${last.message}`
              : `${last.message}; calling again`
            : (record.message ?? '');
          if (facts?.inFlight) {
            update(index, hook, { ...record, phase: 'Running', message });
          } else {
            const due = last
              ? last.at.getTime() + (last.outcome === 'NotYet' ? last.retryAfterMs : WEBHOOK_ERROR_BACKOFF_MS)
              : now.getTime();
            if (now.getTime() >= due) {
              const next: HookRunRecord = { ...record, phase: 'Running', message };
              update(index, hook, next);
              effects.push({
                type: 'callWebhook',
                key: webhookKey(subject, hook.metadata.uid, record.attempt),
                hook,
                request: hookRequest(hook, subject),
                record: next,
              });
            } else {
              update(index, hook, { ...record, phase: 'Running', message });
              wakeIn(Math.min(due, deadline) - now.getTime());
            }
          }
          wakeIn(deadline - now.getTime());
        }
      }
    }
    // The hook's state is that of its newest attempt.
    const newest = records.filter((r) => recordOf(r, hook)).reduce((a, b) => (b.attempt > a.attempt ? b : a));
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

  const failedHook = hooks.find((h) => states.get(h) === 'failed');
  if (failedHook) {
    const failed = records
      .filter((r) => recordOf(r, failedHook))
      .reduce((a, b) => (b.attempt > a.attempt ? b : a));
    return {
      records,
      effects,
      outcome: 'Failed',
      message: `${hookRef(failedHook)} failed: ${clip(failed.message ?? 'no message', 2048)}`,
      failed,
      ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}),
    };
  }

  // Start what may start: the unstarted hooks of the first group with unfinished hooks.
  const groups = orderGroups(hooks);
  const done = (h: HookObject) => states.get(h) === 'succeeded' || states.get(h) === 'ignored';
  const current = groups.find((g) => !g.every(done));
  if (!current) {
    const ignored = hooks.filter((h) => states.get(h) === 'ignored').map(hookRef);
    return {
      records,
      effects,
      outcome: 'Succeeded',
      message:
        hooks.length === 0
          ? 'no hooks to run'
          : `${hooks.length} hook${hooks.length === 1 ? '' : 's'} done${ignored.length ? ` (failures ignored: ${ignored.join(', ')})` : ''}`,
      ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}),
    };
  }
  for (const hook of current) {
    if (states.get(hook) !== 'unstarted') continue;
    newAttempt(hook, 1);
    states.set(hook, 'active');
    wakeIn(parseDuration(hook.spec.timeout ?? '15m'));
  }
  const active = hooks
    .filter((h) => states.get(h) === 'active')
    .map((h) => {
      const latest = records.filter((r) => recordOf(r, h)).reduce((a, b) => (b.attempt > a.attempt ? b : a));
      return latest.message ? `${hookRef(h)} (${clip(latest.message, 512)})` : hookRef(h);
    });
  const waiting = hooks.filter((h) => states.get(h) === 'unstarted').length;
  return {
    records,
    effects,
    outcome: 'Running',
    message: `running ${active.join(', ')}${waiting ? `; ${waiting} more after ${waiting === 1 ? 'it' : 'them'}` : ''}`,
    ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}),
  };
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
