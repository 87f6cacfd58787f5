// Managed execution (phase Executing, with a Talos executor), one step per pass, each
// from what is recorded in the status and what the executor knows in memory:
//
//   prepare (repeatable) → drain (repeatable; recorded as drainTime) → install
//   (repeatable) → the Talos call: callTime is written before the call is made, and
//   once it is written the call is never made again unless the node shows it never
//   came: a controller that finds the record without knowing the call's outcome (the
//   process that made it is gone) waits until any call that process sent has arrived
//   or been given up (CALL_SETTLE_MS), then asks the node — still in the boot the call
//   was recorded in — for its events since it booted. No sequence of that call among
//   them: the call never reached it, and is recorded anew and made. Otherwise, or when
//   the node cannot tell, it waits for the node.
//
// The repeatable steps run again in a process that has no result of them (after a
// restart), so a controller that died between installing an upgrade and rebooting
// into it installs again and reboots, instead of waiting for a reboot nobody makes.
import type { ExecutionRecord } from '../../api/node-action.ts';
import { callSequence, talosPlan, type TalosPlan } from '../../talos/plan.ts';
import type { ExecutionStepFacts } from '../../talos/facts.ts';
import { installerExit } from '../../talos/installer-exit.ts';
import { errorMessage } from '../../wait.ts';
import { formatDuration } from '../../duration.ts';
import { COMPLETIONS, waitingMessage } from '../completions.ts';
import { blockedSince, drainHoldWords, drainRecord } from '../drain-hold.ts';
import type { DecisionBuilder } from '../decision.ts';
import { completionOf, drainsBeforeCall, kindOf } from '../kinds/index.ts';

/**
 * How long after a call was recorded a controller that knows nothing of it waits before
 * asking the node whether it came: by then a call the gone process sent has arrived, or
 * been given up (the Talos client's deadline for a call is 60s).
 */
export const CALL_SETTLE_MS = 90_000;

export function execute(b: DecisionBuilder): void {
  const performer = kindOf(b.spec).managed;
  if (performer.by === 'controller') {
    performByDraining(b);
    return;
  }
  const { spec, node, nodeName, now, status, condition, event } = b;
  const repeatable = (step: 'prepare' | 'install', what: string, reason: string) =>
    repeatableStep(b, step, what, reason);
  const facts = b.input.execution ?? {};
  const recorded: ExecutionRecord = status.execution ?? {};
  if (recorded.callTime !== undefined) {
    afterCall(b, recorded, facts.call);
    return;
  }
  if (facts.call) {
    // This process made the call, but the status it decides on does not show the
    // record written before it: a stale view. Its own write will bring a newer one.
    b.wake(1000);
    return;
  }
  if (!node) {
    b.end('Failed', `node ${nodeName} disappeared before it was acted on; nothing was done to it`);
    return;
  }
  let plan: TalosPlan;
  try {
    plan = talosPlan(performer.steps(spec, node.osImage));
  } catch (error) {
    const message = errorMessage(error);
    condition('Executed', 'False', 'CannotPlan', message);
    b.end('Failed', message);
    return;
  }
  if (plan.prepare !== undefined && !repeatable('prepare', plan.prepare, 'Preparing')) return;
  if (!drained(b, node.osImage)) return;
  if (plan.install !== undefined && !repeatable('install', plan.install, 'Installing')) return;
  // The call: recorded first (the reconciler writes this status before carrying out
  // the effect, and the effect checks the record afresh), then made.
  const callTime = now.toISOString();
  const message = `calling Talos ${plan.call} on node ${nodeName}`;
  status.execution = { ...(status.execution ?? {}), call: plan.call, callTime };
  condition('Executed', 'Unknown', 'Calling', message);
  event('Normal', 'TalosCall', message);
  b.say(message);
  b.effect({ type: 'talos', step: 'call', call: plan.call, callTime });
}

/**
 * A kind the controller performs by cordoning and draining alone (a Maintenance): once
 * drained, the work is done as far as the controller goes, and the action waits as its
 * completion says (held until released).
 */
function performByDraining(b: DecisionBuilder): void {
  const { spec, node, nodeName, condition } = b;
  if (!node) {
    b.end('Failed', `node ${nodeName} disappeared before it was drained; nothing was done to it`);
    return;
  }
  if (!drained(b, node.osImage)) return;
  const completion = completionOf(spec, b.status.execution, node.osImage);
  const how = drainsBeforeCall(spec, node.osImage, b.status)
    ? `node ${nodeName} cordoned and drained`
    : `node ${nodeName} left as it is (spec.drain.enabled is false)`;
  condition('Executed', 'True', 'Drained', how);
  b.transition(COMPLETIONS[completion].waitsIn, `${how}; ${waitingMessage(completion)}`);
}

/**
 * The drain step (repeatable; recorded as drainTime): true once the node is drained, or
 * needs no drain; otherwise the pass says what the drain waits for.
 */
function drained(b: DecisionBuilder, osImage: string | undefined): boolean {
  const { spec, nodeName, now, status, condition, event } = b;
  const recorded: ExecutionRecord = status.execution ?? {};
  if (recorded.drainTime !== undefined) return true;
  const kind = kindOf(spec);
  if (!drainsBeforeCall(spec, osImage, status)) {
    const why = `not drained: ${
      spec.drain?.enabled === false
        ? 'spec.drain.enabled is false'
        : (kind.noDrain(spec, osImage, status) ?? '')
    }`;
    status.execution = { ...recorded, drainTime: now.toISOString() };
    condition('Drained', 'True', spec.drain?.enabled === false ? 'Disabled' : 'NotNeeded', why);
    return true;
  }
  const op = b.input.execution?.drain;
  if (!op) {
    const message = `cordoning and draining node ${nodeName} (timeout ${spec.drain?.timeout ?? '10m'})`;
    b.effect({ type: 'drain' });
    condition('Drained', 'Unknown', 'Draining', message);
    event('Normal', 'Draining', message);
    b.say(message);
    return false;
  }
  if (op.state === 'running') {
    // Blockers not reported yet (a drain begun again after a restart): as recorded.
    const hold = op.blockers === undefined ? status.drain : drainRecord(status.drain, op.blockers);
    if (hold) {
      // Held: words that change only when what holds it does (drain-hold.ts).
      const words = drainHoldWords(hold);
      status.drain = hold;
      condition('DrainBlocked', 'True', 'EvictionsRefused', words);
      condition('Drained', 'Unknown', 'Draining', `waiting for evictions: ${words}`);
      b.say(`draining node ${nodeName}: waiting for evictions: ${words}`);
      return false;
    }
    released(b);
    condition('Drained', 'Unknown', 'Draining', op.message);
    b.say(`draining node ${nodeName}: ${op.message}`);
    return false;
  }
  if (op.state === 'failed') {
    // What held it stays recorded (status.drain, DrainBlocked): why it failed. A drain
    // that ran out of time is told apart: a NodeRollout may set its node aside for it.
    condition('Drained', 'False', op.timedOut ? 'DrainTimedOut' : 'DrainFailed', op.message);
    b.end('Failed', `the drain failed: ${op.message}`);
    return false;
  }
  released(b);
  status.execution = { ...recorded, drainTime: now.toISOString() };
  condition('Drained', 'True', 'Drained', op.message);
  event('Normal', 'Drained', op.message);
  return true;
}

/** The drain is no longer held: its record goes, and DrainBlocked says for how long it was. */
function released(b: DecisionBuilder): void {
  const { status, condition } = b;
  const since = blockedSince(status.drain);
  if (status.drain === undefined) return;
  delete status.drain;
  const held = since === undefined ? '' : ` after ${formatDuration(b.now.getTime() - Date.parse(since))}`;
  condition(
    'DrainBlocked',
    'False',
    'EvictionsAllowed',
    `the refused evictions went through${held}; the drain proceeds`,
  );
}

/** A repeatable step: true once this process has made it; `reason` is its Event's. */
function repeatableStep(
  b: DecisionBuilder,
  step: 'prepare' | 'install',
  what: string,
  reason: string,
): boolean {
  const { nodeName, condition, event } = b;
  const op = b.input.execution?.[step];
  if (!op) {
    b.effect({ type: 'talos', step });
    event('Normal', reason, `${what} on node ${nodeName}`);
    b.say(`${what} on node ${nodeName}`);
    return false;
  }
  if (op.state === 'running') {
    b.say(`${what} on node ${nodeName}: ${op.message}`);
    return false;
  }
  if (op.state === 'failed') {
    if (step === 'install' && op.exitCode !== undefined && retryInstall(b, op)) return false;
    condition('Executed', 'False', 'TalosError', op.message);
    b.end('Failed', `could not ${what}: ${op.message}`);
    return false;
  }
  return true;
}

/** The pause before the pull and install are made again: 10 s, doubling, at most 2 minutes. */
export function installRetryDelayMs(count: number): number {
  return Math.min(120_000, 10_000 * 2 ** Math.max(0, count - 1));
}

/**
 * An install whose installer failed on a dependency (exit code 5, e.g. an image pull) is
 * pulled and installed again, with a growing pause, until the executing deadline ends
 * the action (phases/deadlines.ts). Any other exit code fails the action with what it
 * means (2 and 3 are permanent: never made again). True: this pass is decided here.
 */
function retryInstall(b: DecisionBuilder, op: ExecutionStepFacts): boolean {
  const image = b.spec.upgrade?.image ?? '';
  const exit = installerExit(op.exitCode ?? 1, image);
  if (exit.then !== 'pull') return false;
  const { condition, event } = b;
  const recorded = b.status.execution ?? {};
  const previous = recorded.installRetries;
  // A failure not yet recorded (the first, or one after the steps were made again).
  if (!previous || previous.madeAgain) {
    const count = (previous?.count ?? 0) + 1;
    b.status.execution = {
      ...recorded,
      installRetries: { count, lastTime: b.now.toISOString(), message: op.message.slice(0, 4096) },
    };
    const wait = installRetryDelayMs(count);
    const message = `the installer failed on a dependency (exit code 5): pulling and installing ${image} again in ${formatDuration(wait)} (attempt ${String(count + 1)}), until the executing deadline: ${op.message}`;
    condition('Executed', 'Unknown', 'InstallerDependencyFailed', message);
    event('Warning', 'InstallRetried', message);
    b.say(message);
    b.wake(wait);
    return true;
  }
  const due = Date.parse(previous.lastTime) + installRetryDelayMs(previous.count);
  if (b.now.getTime() < due) {
    b.say(
      `the installer failed on a dependency (exit code 5): pulling and installing ${image} again at ${new Date(due).toISOString()}`,
    );
    b.wake(due - b.now.getTime());
    return true;
  }
  b.status.execution = { ...recorded, installRetries: { ...previous, madeAgain: true } };
  b.effect({ type: 'talosAgain', steps: ['prepare', 'install'] });
  b.say(`pulling and installing ${image} again (attempt ${String(previous.count + 1)})`);
  return true;
}

/** Executing, with the call recorded: what came of it decides, and it is never made again. */
function afterCall(b: DecisionBuilder, recorded: ExecutionRecord, op: ExecutionStepFacts | undefined): void {
  const { spec, nodeName, status, condition, event, transition } = b;
  const call = recorded.call ?? 'the Talos call';
  if (op?.state === 'running') {
    b.say(`calling Talos ${call} on node ${nodeName}: ${op.message}`);
    return;
  }
  // The etcd leadership hand-off before the call (who gave it up, who took it), on the record.
  if (op?.handOff) event('Normal', 'EtcdLeadershipHandOff', op.handOff);
  if (op?.state === 'succeeded') {
    status.execution = { ...recorded, callResult: 'Acknowledged', reboots: op.disrupts ?? true };
    condition('Executed', 'True', 'Acknowledged', `Talos acknowledged ${call}: ${op.message}`);
    event('Normal', 'TalosCallAcknowledged', `Talos acknowledged ${call}: ${op.message}`);
    transition(
      'WaitingForNode',
      `Talos acknowledged ${call} (${op.message}); ${waitingMessage(completionOf(spec, status.execution, b.node?.osImage))}`,
    );
    return;
  }
  if (op?.state === 'failed' && !op.mayHaveReached) {
    status.execution = { ...recorded, callResult: 'Failed' };
    condition('Executed', 'False', 'TalosError', op.message);
    b.end('Failed', `Talos ${call} failed: ${op.message}`);
    return;
  }
  if (!op && !verifyCall(b, recorded)) return;
  // Made, perhaps: by a process that is gone, or without an answer. Never again.
  const why = op
    ? `no answer from Talos: ${op.message}`
    : 'the controller restarted (or another replica took over) while it was being made';
  status.execution = { ...recorded, callResult: 'Unknown' };
  const completion = completionOf(spec, status.execution, b.node?.osImage);
  const message = `whether Talos ${call} reached node ${nodeName} is unknown (${why}); it is not made twice`;
  condition('Executed', 'Unknown', 'OutcomeUnknown', message);
  event('Warning', 'TalosCallOutcomeUnknown', message);
  if (!COMPLETIONS[completion].shows) {
    // Nothing about the node would show a change applied live.
    b.end(
      'Failed',
      `${message}: check the node's configuration (talosctl get machineconfig -n ${nodeName}) and request the change again if it is not there`,
    );
    return;
  }
  transition('WaitingForNode', `${message}; ${waitingMessage(completion)}`);
}

/**
 * A call recorded by a process that is gone (nothing known of it here): asks the node,
 * still in the boot the call was recorded in, whether it came, and makes it anew when
 * the node's events show it never did. False: this pass is decided here. True: the
 * outcome stays unknown (the node shows the call, or cannot tell), and the action waits
 * for the node.
 */
function verifyCall(b: DecisionBuilder, recorded: ExecutionRecord): boolean {
  const { node, nodeName, now, status, condition, event } = b;
  const call = recorded.call ?? '';
  const sequence = callSequence(call, b.spec);
  // A node in another boot already shows the call (or something that did as much).
  if (!sequence || !node || node.bootID === undefined || node.bootID !== status.bootIDBefore) return true;
  const settled = Date.parse(recorded.callTime ?? '') + CALL_SETTLE_MS;
  if (Number.isNaN(settled)) return true;
  const intro = `the controller restarted (or another replica took over) while calling Talos ${call} on node ${nodeName}`;
  if (now.getTime() < settled) {
    b.say(
      `${intro}: waiting until ${new Date(settled).toISOString()} for a call it may have sent to arrive, then asking the node whether it did`,
    );
    b.wake(settled - now.getTime());
    return false;
  }
  const verify = b.input.execution?.verify;
  if (!verify) {
    b.effect({ type: 'talos', step: 'verify', call });
    b.say(`${intro}: asking the node for its events since it booted`);
    return false;
  }
  if (verify.state === 'running') {
    b.say(`${intro}: asking the node for its events since it booted`);
    return false;
  }
  if (verify.state === 'failed' || verify.reached !== false) return true;
  // Never reached the node: recorded anew (the executor's guard reads this callTime), then made.
  const callTime = now.toISOString();
  const message = `Talos ${call} never reached node ${nodeName} (${intro}; ${verify.message}): calling it now`;
  status.execution = { ...recorded, callTime };
  condition('Executed', 'Unknown', 'Calling', message);
  event('Normal', 'TalosCallNotReceived', message);
  b.say(message);
  b.effect({ type: 'talos', step: 'call', call, callTime });
  return false;
}
