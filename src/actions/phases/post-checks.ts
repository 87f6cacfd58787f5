// Post-checks (spec.postChecks): once the node is back and its boot hooks are done, the
// checks named must be healthy for it — evaluated afresh, for that node — within
// `within`, before the action succeeds. A node Ready on the new version that fails what
// matters is not a success. Not healthy in time: the action fails with the checks'
// messages or, under onPostCheckFailure: Rollback (a Managed upgrade), is rolled back:
//
//   decided → status.rollback written (time, why, the osImage it rolls back from) → the
//   effect, which calls MachineService.Rollback only while the action, read afresh, still
//   records that rollback without an outcome → Talos's answer recorded → the node back
//   with a new boot on another osImage → Failed, both versions on the record.
//
// The rollback is decided once: a recorded rollback is never decided again, and a call a
// process that is gone may have made is Unknown, never made twice (at most one
// MachineService.Rollback per action).
import type { NodeActionSpec } from '../../api/node-action.ts';
import { formatDuration, parseDuration } from '../../duration.ts';
import type { DecisionBuilder } from '../decision.ts';
import { checkResult, describeChecks, HEALTH_RETRY_MS } from './waiting-for-health.ts';

/** How long a rollback may take to bring the node back on another version before the action says it did not. */
export const ROLLBACK_RETURN_MS = 15 * 60_000;

/**
 * What the post-checks add to the RunningPostHooks deadline: their `within`, and the
 * rollback's return when they may roll back, so that neither is cut short by it.
 */
export function postChecksAllowance(spec: NodeActionSpec): number {
  if (!spec.postChecks) return 0;
  const within = parseDuration(spec.postChecks.within ?? '10m');
  return within + (spec.onPostCheckFailure === 'Rollback' ? ROLLBACK_RETURN_MS : 0);
}

/**
 * The post-checks of a returned node: true once they passed (or there are none), and the
 * caller succeeds; false while they wait, or once they decided the action's end.
 */
export function postChecksPassed(b: DecisionBuilder): boolean {
  const { spec, status, now, input, nodeName, condition } = b;
  const post = spec.postChecks;
  if (!post) return true;
  if (status.rollback) {
    followRollback(b);
    return false;
  }
  const record = status.postChecks ?? { since: now.toISOString() };
  status.postChecks = record;
  const fresh = input.fresh;
  const last = Date.parse(record.time ?? '');
  if (!fresh) {
    // Evaluated at most every HEALTH_RETRY_MS while they wait (each is a status write).
    const age = now.getTime() - last;
    if (age < HEALTH_RETRY_MS) b.wake(HEALTH_RETRY_MS - age);
    else b.evaluate([...post.checks]);
    return false;
  }
  const results = post.checks.map((name) => checkResult(name, fresh.states.get(name), fresh.at, false));
  status.postChecks = { ...record, time: fresh.at.toISOString(), results };
  if (results.every((r) => r.healthy)) {
    condition(
      'PostChecksPassed',
      'True',
      'Healthy',
      `${String(results.length)} post-check${results.length === 1 ? '' : 's'} healthy for node ${nodeName}`,
    );
    return true;
  }
  const failing = describeChecks(results);
  const withinMs = parseDuration(post.within ?? '10m');
  const waited = now.getTime() - Date.parse(record.since);
  if (waited < withinMs) {
    condition('PostChecksPassed', 'Unknown', 'Waiting', `waiting for ${failing}`);
    b.say(
      `node ${nodeName} is back; waiting up to ${formatDuration(withinMs - waited)} more for post-checks: ${failing}`,
    );
    b.wake(HEALTH_RETRY_MS);
    return false;
  }
  const why = `post-checks not healthy within ${formatDuration(withinMs)} of node ${nodeName}'s return: ${failing}`;
  condition('PostChecksPassed', 'False', 'Unhealthy', why);
  if (spec.onPostCheckFailure === 'Rollback') beginRollback(b, why);
  else b.end('Failed', why);
  return false;
}

/** Decides the rollback, on the record before the call: never decided again. */
function beginRollback(b: DecisionBuilder, why: string): void {
  const { status, now, node, nodeName, condition, event } = b;
  const time = now.toISOString();
  status.rollback = { time, why: why.slice(0, 4096), from: node?.osImage ?? 'unknown' };
  const message = `${why}: rolling node ${nodeName} back from ${node?.osImage ?? 'its new version'} (MachineService.Rollback)`;
  condition('RolledBack', 'Unknown', 'RollingBack', message);
  event('Warning', 'RollingBack', message);
  b.say(message);
  b.effect({ type: 'talos', step: 'rollback', time });
}

/** A rollback on the record: what came of the call, then the node's return on another version. */
function followRollback(b: DecisionBuilder): void {
  const { status, node, nodeName, now, input, condition, event } = b;
  const rollback = status.rollback;
  if (!rollback) return;
  const op = input.execution?.rollback;
  if (rollback.callResult === undefined) {
    if (op?.state === 'running') {
      b.say(`rolling node ${nodeName} back: waiting for Talos to answer`);
      return;
    }
    if (op?.state === 'failed' && !op.mayHaveReached) {
      status.rollback = { ...rollback, callResult: 'Failed', message: op.message.slice(0, 4096) };
      condition('RolledBack', 'False', 'RollbackFailed', `Talos refused the rollback: ${op.message}`);
      b.end('Failed', `${rollback.why}; the rollback failed: ${op.message}`);
      return;
    }
    // Acknowledged, no answer, or made by a process that is gone: never made again.
    const result = op?.state === 'succeeded' ? 'Acknowledged' : 'Unknown';
    const message =
      op?.message ?? 'the controller restarted (or another replica took over) while it was being made';
    status.rollback = { ...rollback, callResult: result, message: message.slice(0, 4096) };
    event(
      result === 'Acknowledged' ? 'Normal' : 'Warning',
      'RollbackCalled',
      `MachineService.Rollback on node ${nodeName}: ${result === 'Acknowledged' ? message : `outcome unknown (${message}); not made twice`}`,
    );
  }
  const current = status.rollback ?? rollback;
  const back = node !== undefined && node.bootID !== status.bootIDAfter && node.ready;
  if (back && node.osImage !== current.from) {
    status.rollback = {
      ...current,
      to: node.osImage ?? 'unknown',
      ...(node.bootID ? { bootID: node.bootID } : {}),
    };
    const message = `${current.why}; rolled back from ${current.from} to ${node.osImage ?? 'unknown'} (node back with boot ID ${node.bootID ?? '?'})`;
    condition('RolledBack', 'True', 'RolledBack', message);
    b.end('Failed', message);
    return;
  }
  const waited = now.getTime() - Date.parse(current.time);
  if (waited >= ROLLBACK_RETURN_MS) {
    const message = `${current.why}; the rollback did not bring node ${nodeName} back on another version within ${formatDuration(ROLLBACK_RETURN_MS)} (${back ? `back on ${node.osImage ?? '?'}` : 'not back'}): look at it (talosctl -n ${nodeName} dmesg)`;
    condition('RolledBack', 'False', 'RollbackNotSeen', message);
    b.end('Failed', message);
    return;
  }
  b.say(
    back
      ? `rolled back: node ${nodeName} is back but still on ${node.osImage ?? '?'}; waiting for the previous version`
      : `rolled back: waiting for node ${nodeName} to come back on the version it ran before ${current.from}`,
  );
  b.wake(Math.min(30_000, ROLLBACK_RETURN_MS - waited));
}
