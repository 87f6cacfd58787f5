// A ConfigChange in mode Try confirmed by checks (spec.configChange.confirm): the change
// was applied in TRY mode with the window as Talos's timeout; the checks named are then
// evaluated afresh for the node, and only if all are healthy before the window ends
// (less a margin for the call) is the change committed — applied again with NO_REBOOT,
// which cancels Talos's revert. Otherwise nothing is called: Talos reverts the change at
// the timeout, and the action fails with the checks' messages.
//
// The commit is a Talos call made like the action's own: decided and written first
// (status.tryConfirm.commitTime), carried out only while the action, read afresh, still
// records it without an outcome and before the window ends; never made twice, never
// after the window.
import { formatDuration, parseDuration } from '../../duration.ts';
import type { DecisionBuilder } from '../decision.ts';
import { checkResult, describeChecks, HEALTH_RETRY_MS } from './waiting-for-health.ts';

/** Time kept before the window ends for the commit to reach the node: a tenth of it, at least 5 s. */
export function commitMarginMs(windowMs: number): number {
  return Math.max(5000, Math.floor(windowMs / 10));
}

/** How long after the window the action waits before it says Talos reverted the change. */
export const REVERT_GRACE_MS = 5000;

/** Whether the action is a TRY confirmed by checks (its WaitingForNode is this module's). */
export function confirmsTry(b: DecisionBuilder): boolean {
  return b.spec.configChange?.mode === 'Try' && b.spec.configChange.confirm !== undefined;
}

/** Decides a pass of a TRY under confirmation; the action succeeds or fails from here. */
export function confirmTry(b: DecisionBuilder): void {
  const { spec, status, now, nodeName, condition } = b;
  const confirm = spec.configChange?.confirm;
  if (!confirm) return;
  const windowMs = parseDuration(confirm.window ?? '2m');
  const start = Date.parse(status.execution?.callTime ?? now.toISOString());
  const record = status.tryConfirm ?? { until: new Date(start + windowMs).toISOString() };
  status.tryConfirm = record;
  const until = Date.parse(record.until);
  if (record.commitTime !== undefined) {
    followCommit(b);
    return;
  }
  const lastCall = until - commitMarginMs(windowMs);
  if (now.getTime() >= lastCall) {
    notConfirmed(b, until);
    return;
  }
  const fresh = b.input.fresh;
  if (!fresh) {
    const age = now.getTime() - Date.parse(record.time ?? '');
    if (age < HEALTH_RETRY_MS) b.wake(Math.min(HEALTH_RETRY_MS - age, lastCall - now.getTime()));
    else b.evaluate([...confirm.checks]);
    return;
  }
  const results = confirm.checks.map((name) => checkResult(name, fresh.states.get(name), fresh.at, false));
  status.tryConfirm = { ...record, time: fresh.at.toISOString(), results };
  if (!results.every((r) => r.healthy)) {
    const failing = describeChecks(results);
    condition('Executed', 'Unknown', 'OnTrial', `on trial until ${record.until}: waiting for ${failing}`);
    b.say(
      `configuration on trial on node ${nodeName} until ${record.until} (${formatDuration(lastCall - now.getTime())} left to confirm it): waiting for ${failing}`,
    );
    b.wake(Math.min(HEALTH_RETRY_MS, lastCall - now.getTime()));
    return;
  }
  const commitTime = now.toISOString();
  status.tryConfirm = { ...status.tryConfirm, commitTime };
  const message = `${String(results.length)} check${results.length === 1 ? '' : 's'} healthy: committing the configuration on node ${nodeName} (applied again with NO_REBOOT)`;
  condition('Executed', 'Unknown', 'Committing', message);
  b.event('Normal', 'TryConfirmed', message);
  b.say(message);
  b.effect({ type: 'talos', step: 'commit', time: commitTime });
}

/** The window ends without the checks healthy: nothing is called; Talos reverts at `until`. */
function notConfirmed(b: DecisionBuilder, until: number): void {
  const { status, now, nodeName, condition } = b;
  const results = status.tryConfirm?.results ?? [];
  const why = results.length ? describeChecks(results) : 'the checks were not evaluated healthy in time';
  if (now.getTime() < until + REVERT_GRACE_MS) {
    b.say(
      `not confirmed on node ${nodeName} (${why}): not committed; Talos reverts the configuration at ${new Date(until).toISOString()}`,
    );
    b.wake(until + REVERT_GRACE_MS - now.getTime());
    return;
  }
  const message = `the configuration was not confirmed within its window: ${why}; not committed, so Talos reverted it at ${new Date(until).toISOString()}`;
  condition('Executed', 'False', 'NotConfirmed', message);
  b.end('Failed', message);
}

/** A commit on the record: Talos's answer decides; unknown is never made again. */
function followCommit(b: DecisionBuilder): void {
  const { status, nodeName, condition, event } = b;
  const record = status.tryConfirm;
  if (!record) return;
  const op = b.input.execution?.commit;
  if (op?.state === 'running') {
    b.say(`committing the configuration on node ${nodeName}: waiting for Talos to answer`);
    return;
  }
  if (op?.state === 'succeeded') {
    status.tryConfirm = { ...record, commitResult: 'Acknowledged', message: op.message.slice(0, 4096) };
    condition('Executed', 'True', 'Committed', `confirmed by its checks and ${op.message}`);
    event('Normal', 'TryCommitted', `node ${nodeName}: ${op.message}`);
    b.succeed(`configuration change confirmed by its checks and committed on node ${nodeName}`);
    return;
  }
  // Refused, no answer, or made by a process that is gone: never made again. Whether the
  // change stays is Talos's to say: a refused commit reverts at the timeout.
  const refused = op?.state === 'failed' && op.mayHaveReached !== true;
  const why = op?.message ?? 'the controller restarted (or another replica took over) while committing';
  status.tryConfirm = {
    ...record,
    commitResult: refused ? 'Failed' : 'Unknown',
    message: why.slice(0, 4096),
  };
  const message = refused
    ? `the commit failed (${why}): Talos reverts the configuration at ${record.until}`
    : `whether the commit reached node ${nodeName} is unknown (${why}); it is not made twice: check the node's configuration (talosctl get machineconfig -n ${nodeName}) after ${record.until}`;
  condition('Executed', 'False', refused ? 'CommitFailed' : 'CommitUnknown', message);
  b.end('Failed', message);
}
