// After an action ended unsuccessfully (Failed, Cancelled, Denied, past a deadline):
// putting back what it prepared, when it never touched the node (docs/decisions.md,
// "Undo"). In the pass that ends the action, the rule is applied once and recorded in
// status.undo, in the same write as the ending: whether the node may have been
// disrupted (disruption.ts) and, if it was not, one undo run per pre-action hook that
// had started and carries an `undo`. Later passes follow those runs like hook runs
// (src/hooks/plan.ts), never starting one again: the record exists before its Job can,
// and the Job's name is derived from (action, hook, "undo"), so a controller killed
// anywhere in between finds the Job instead of making a second one.
//
// The action keeps its finalizer until every undo run finished (each bounded by its
// timeout), so deleting it waits for them; and a cordon it made is lifted, since a node
// that was never disrupted is as it was — unless its drain timed out and it was asked to
// keep it (spec.drain.onTimeout: KeepCordoned, a quarantining NodeRollout's).
import type { HookKindName } from '../../api/hooks.ts';
import type { UndoRecord } from '../../api/node-action.ts';
import { isBootHookKind } from '../../boots/record.ts';
import type { HookSubject } from '../../hooks/job.ts';
import {
  clip,
  isFinished,
  jobKey,
  planHookStage,
  webhookKey,
  type HookEffect,
  type HookRunRecord,
} from '../../hooks/plan.ts';
import { hookRef, type HookObject } from '../../hooks/select.ts';
import type { DecisionBuilder } from '../decision.ts';
import { PRE_ACTION_HOOK_KINDS } from '../kinds/index.ts';
import { keepsCordon } from '../disruption.ts';

/** Every pre-action hook kind: an undo run of one whose hook is gone is closed. */
const PRE_ACTION_KINDS: readonly HookKindName[] = PRE_ACTION_HOOK_KINDS;

/**
 * The undo of a hook as a hook the stage planner runs: the hook's identity (so its run
 * records name the hook), the undo's template or webhook, the hook's placement, and a
 * failure that stops nothing (there is nothing left to stop). Undefined: no undo.
 */
export function undoHook(hook: HookObject): HookObject | undefined {
  const undo = hook.spec.undo;
  if (!undo || isBootHookKind(hook.kind)) return undefined;
  return {
    kind: hook.kind,
    metadata: hook.metadata,
    spec: {
      ...(undo.template ? { template: undo.template } : {}),
      ...(undo.webhook ? { webhook: undo.webhook } : {}),
      timeout: undo.timeout ?? hook.spec.timeout ?? '15m',
      placement: hook.spec.placement ?? 'AwayFromTarget',
      failurePolicy: 'Ignore',
      order: 0,
    },
  };
}

const sameHook = (r: HookRunRecord, h: HookObject) =>
  r.uid !== undefined && r.uid === h.metadata.uid && r.kind === h.kind;

/**
 * The undo hooks an ended action runs: of each pre-action hook that had an attempt
 * started (succeeded, running, failed: a half-run hook may have prepared something;
 * undos are idempotent by contract) — not one bypassed — and that carries an undo.
 */
export function hooksToUndo(records: readonly HookRunRecord[], hooks: readonly HookObject[]): HookObject[] {
  const started = records.filter((r) => !isBootHookKind(r.kind) && r.phase !== 'Bypassed');
  return hooks.filter((h) => started.some((r) => sameHook(r, h))).flatMap((h) => undoHook(h) ?? []);
}

function undoSubject(b: DecisionBuilder): HookSubject {
  // The boot the hooks ran about: the action ended before the node had another.
  return { ...b.subject(b.status.bootIDBefore ?? b.node?.bootID), purpose: 'Undo' };
}

/** Undo runs are the action's record; the hook's own status counts the hook's runs only. */
const withoutHookStatus = (effects: readonly HookEffect[]) => effects.filter((e) => e.type !== 'hookRun');

/**
 * Applies the undo rule in the pass that ended the action, then follows what it
 * started; lifts the action's own cordon of an undisrupted node. True once no undo run
 * is unfinished (the finalizer may go).
 */
export function settle(b: DecisionBuilder): boolean {
  const { status, node, action } = b;
  let done = true;
  if (b.ended && status.undo === undefined) done = begin(b, b.ended.disruption);
  else if (status.undo) done = follow(b, status.undo);
  if (
    status.undo?.nodeDisrupted === false &&
    node?.cordonedBy === action.metadata.name &&
    !keepsCordon(action, status)
  ) {
    b.effect({ type: 'uncordon' });
    b.wake(2000);
  }
  return done;
}

function begin(b: DecisionBuilder, disruption: string | undefined): boolean {
  const { status, spec, nodeName, now, input, event, condition } = b;
  const decisionTime = now.toISOString();
  const records = b.ownRecords();
  const started = records.filter((r) => r.phase !== 'Bypassed');
  const about = `${spec.action} of node ${nodeName}`;
  if (disruption !== undefined) {
    const reason = clip(`nothing undone: ${disruption}; the node's boot hooks clean up`, 1024);
    status.undo = { decisionTime, nodeDisrupted: true, reason };
    if (started.length > 0) event('Normal', 'NotUndone', `${about}: ${reason}`);
    return true;
  }
  const hooks = hooksToUndo(records, input.hooks);
  if (hooks.length === 0) {
    const reason = started.length ? 'no pre-action hook that ran has an undo' : 'no pre-action hook had run';
    status.undo = { decisionTime, nodeDisrupted: false, reason };
    return true;
  }
  const plan = planHookStage({
    now,
    subject: undoSubject(b),
    hooks,
    records: [],
    jobs: input.jobs,
    webhooks: input.webhooks,
    retryDeleted: false,
  });
  const reason = clip(
    `undoing ${hooks.map(hookRef).join(', ')}: the action ended before the node was disrupted`,
    1024,
  );
  status.undo = { decisionTime, nodeDisrupted: false, reason, runs: plan.records };
  b.effect(...withoutHookStatus(plan.effects));
  b.wake(plan.requeueAfterMs);
  condition('Undone', 'Unknown', 'Undoing', reason);
  event('Normal', 'Undoing', `${about}: ${reason}`);
  return false;
}

/** Whether anything shows that a run began: its Job observed, or its webhook called. */
function started(b: DecisionBuilder, subject: HookSubject, run: HookRunRecord): boolean {
  if (run.jobName !== undefined) return b.input.jobs.has(jobKey(run.namespace, run.jobName));
  return b.input.webhooks.has(webhookKey(subject, run.uid ?? '', run.attempt));
}

function follow(b: DecisionBuilder, undo: UndoRecord): boolean {
  const { status, spec, nodeName, now, input, event, condition } = b;
  if ((undo.runs ?? []).every(isFinished)) return true;
  const subject = undoSubject(b);
  // A run's timeout counts from when it could start: a controller that was down longer
  // than the timeout still runs the undo it recorded, rather than failing it unrun.
  const runs = (undo.runs ?? []).map((r) =>
    r.phase === 'Pending' && !started(b, subject, r) ? { ...r, startTime: now.toISOString() } : r,
  );
  const hooks = input.hooks.filter((h) => runs.some((r) => sameHook(r, h))).flatMap((h) => undoHook(h) ?? []);
  const plan = planHookStage({
    now,
    subject,
    hooks,
    records: runs,
    kinds: PRE_ACTION_KINDS,
    jobs: input.jobs,
    webhooks: input.webhooks,
    retryDeleted: false,
  });
  status.undo = { ...undo, runs: plan.records };
  b.effect(...withoutHookStatus(plan.effects));
  b.wake(plan.requeueAfterMs);
  const about = `${spec.action} of node ${nodeName}`;
  const before = undo.runs ?? [];
  plan.records.forEach((run, index) => {
    if (!isFinished(run) || isFinished(before[index] ?? run)) return;
    const what = `${run.kind} ${run.namespace}/${run.name}`;
    if (run.phase === 'Succeeded') event('Normal', 'Undone', `${about}: undid ${what}: ${run.message ?? ''}`);
    else
      event(
        'Warning',
        'UndoFailed',
        `${about}: the undo of ${what} failed: ${run.message ?? 'no message'}; what it prepared may still be in place`,
      );
  });
  if (!plan.records.every(isFinished)) {
    condition('Undone', 'Unknown', 'Undoing', clip(plan.message, 4096));
    return false;
  }
  const failed = plan.records.filter((r) => r.phase !== 'Succeeded');
  if (failed.length === 0) {
    condition('Undone', 'True', 'Undone', `${plan.records.length} undo run(s) succeeded`);
  } else {
    const list = failed.map((r) => `${r.kind} ${r.namespace}/${r.name}: ${clip(r.message ?? '', 512)}`);
    condition(
      'Undone',
      'False',
      'UndoFailed',
      clip(`undo failed — what these hooks prepared may still be in place: ${list.join('; ')}`, 4096),
    );
  }
  return true;
}
