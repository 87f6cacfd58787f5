// Managed execution in the decision core: the steps (prepare, drain, install, the Talos
// call) one per pass, what is recorded before the call, what a controller that finds the
// record without knowing the outcome does, and the cordon lifted at the end.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  decide,
  type ActionDecision,
  type ActionEffect,
  type ActionInput,
} from '../../src/actions/decide.ts';
import type { NodeActionSpec, NodeActionStatus } from '../../src/api/node-action.ts';
import type { ExecutionFacts } from '../../src/talos/facts.ts';
import { CALL_SETTLE_MS, installRetryDelayMs } from '../../src/actions/phases/executing.ts';
import { action, admitted, at, hook, input, node, T0 } from './action-fixtures.ts';

const IMAGE = 'ghcr.io/siderolabs/installer:v1.13.1';
const V13 = 'Talos (v1.13.0)';

function events(d: ActionDecision): string[] {
  return d.effects.flatMap((e) => (e.type === 'event' ? [`${e.eventType}:${e.reason}`] : []));
}

function work(d: ActionDecision): ActionEffect[] {
  return d.effects.filter((e) => e.type !== 'event' && e.type !== 'admission');
}

function condition(status: NodeActionStatus, type: string) {
  return status.conditions?.find((c) => c.type === type);
}

/** A Managed action as the gate approves it, and its node running Talos 1.13. */
function approved(spec: Partial<NodeActionSpec> = {}, extra: NodeActionStatus = {}): ActionInput {
  return input({
    action: action(
      { execution: 'Managed', ...spec },
      admitted(T0, {
        phase: 'Approved',
        approvalTime: T0.toISOString(),
        bootIDBefore: 'boot-1',
        conditions: [
          {
            type: 'Approved',
            status: 'True',
            reason: 'Approved',
            message: 'approved',
            lastTransitionTime: T0.toISOString(),
          },
        ],
        ...extra,
      }),
    ),
    node: node('w1', { osImage: V13 }),
    execution: {},
  });
}

const upgrade: Partial<NodeActionSpec> = { action: 'Upgrade', upgrade: { image: IMAGE } };

/** The next pass: the decided status written and read back, the executor's knowledge as given. */
function next(i: ActionInput, d: ActionDecision, changes: Partial<ActionInput> = {}): ActionInput {
  return {
    ...i,
    now: new Date(i.now.getTime() + 1000),
    action: { ...i.action, status: d.status },
    ...changes,
  };
}

const done = (message: string, extra: Partial<NonNullable<ExecutionFacts['call']>> = {}) => ({
  state: 'succeeded' as const,
  message,
  ...extra,
});

/** Drives an upgrade to the moment the call is recorded; returns that decision and its input. */
function upToTheCall(): { i: ActionInput; d: ActionDecision } {
  let i = approved(upgrade);
  let d = decide(i);
  i = next(i, d, { execution: { prepare: done('pulled') } });
  d = decide(i);
  i = next(i, d, { execution: { prepare: done('pulled'), drain: done('drained: 2 pod(s) evicted') } });
  d = decide(i);
  i = next(i, d, {
    execution: { prepare: done('pulled'), drain: done('drained'), install: done('installed') },
  });
  d = decide(i);
  return { i, d };
}

describe('Managed execution: the steps', () => {
  it('approves without the ExecutorNotInstalled instruction when the controller has an executor', () => {
    const i = input({
      action: action({ execution: 'Managed' }, admitted(T0, { phase: 'RunningPreHooks' })),
      execution: {},
    });
    const d = decide(i);
    assert.equal(d.status.phase, 'Approved');
    assert.equal(condition(d.status, 'Executed'), undefined);
    assert.match(d.status.message ?? '', /performs it through the Talos API/);
  });

  it('upgrades Talos 1.13: pull, then cordon and drain, then install, then record the reboot before making it', () => {
    let i = approved(upgrade);
    let d = decide(i);
    assert.equal(d.status.phase, 'Executing');
    assert.equal(d.status.executionTime, T0.toISOString());
    assert.deepEqual(work(d), [{ type: 'talos', step: 'prepare' }]);
    assert.deepEqual(events(d), ['Normal:Executing', 'Normal:Preparing']);
    assert.match(d.status.message ?? '', /pull ghcr\.io\/siderolabs\/installer:v1\.13\.1 on node w1/);

    i = next(i, d, { execution: { prepare: { state: 'running', message: 'layer 3 downloading' } } });
    d = decide(i);
    assert.deepEqual(work(d), [], 'nothing new while it runs');
    assert.match(d.status.message ?? '', /layer 3 downloading/);

    i = next(i, d, { execution: { prepare: done('pulled') } });
    d = decide(i);
    assert.deepEqual(work(d), [{ type: 'drain' }]);
    assert.deepEqual(events(d), ['Normal:Draining']);
    assert.equal(condition(d.status, 'Drained')?.status, 'Unknown');
    assert.equal(d.status.execution, undefined, 'nothing recorded before the drain is done');

    i = next(i, d, { execution: { prepare: done('pulled'), drain: done('drained: 2 pod(s) evicted') } });
    d = decide(i);
    assert.equal(d.status.execution?.drainTime, i.now.toISOString());
    assert.equal(condition(d.status, 'Drained')?.status, 'True');
    assert.deepEqual(work(d), [{ type: 'talos', step: 'install' }]);
    assert.deepEqual(events(d), ['Normal:Drained', 'Normal:Installing']);

    i = next(i, d, {
      execution: { prepare: done('pulled'), drain: done('drained'), install: done('installed') },
    });
    d = decide(i);
    const callTime = i.now.toISOString();
    assert.deepEqual(d.status.execution, {
      drainTime: at(3).toISOString(),
      call: 'MachineService.Reboot',
      callTime,
    });
    assert.deepEqual(work(d), [{ type: 'talos', step: 'call', call: 'MachineService.Reboot', callTime }]);
    assert.equal(condition(d.status, 'Executed')?.reason, 'Calling');
    assert.deepEqual(events(d), ['Normal:TalosCall']);
  });

  it('follows the node once Talos acknowledges the call, and never asks for it again', () => {
    const { i: before, d: recorded } = upToTheCall();
    const facts = { prepare: done('pulled'), drain: done('drained'), install: done('installed') };
    let i = next(before, recorded, {
      execution: { ...facts, call: { state: 'running', message: 'waiting for Talos to answer' } },
    });
    let d = decide(i);
    assert.equal(d.status.phase, 'Executing');
    assert.deepEqual(work(d), []);
    i = next(i, d, {
      execution: { ...facts, call: done('rebooting into the new image', { disrupts: true }) },
    });
    d = decide(i);
    assert.equal(d.status.phase, 'WaitingForNode');
    assert.equal(d.status.execution?.callResult, 'Acknowledged');
    assert.equal(d.status.execution.reboots, true);
    assert.equal(condition(d.status, 'Executed')?.status, 'True');
    assert.deepEqual(work(d), []);
    assert.ok(events(d).includes('Normal:TalosCallAcknowledged'));
  });

  it('upgrades an older Talos with the legacy Upgrade call, after the drain', () => {
    let i = approved(upgrade);
    i = { ...i, node: node('w1', { osImage: 'Talos (v1.12.4)' }) };
    let d = decide(i);
    assert.deepEqual(work(d), [{ type: 'drain' }], 'nothing to pull first');
    i = next(i, d, { execution: { drain: done('drained') } });
    d = decide(i);
    assert.deepEqual(
      work(d).map((e) => (e.type === 'talos' ? `${e.step}:${e.step === 'call' ? e.call : ''}` : e.type)),
      ['call:MachineService.Upgrade'],
    );
  });

  it('reboots without a drain when spec.drain.enabled is false', () => {
    const d = decide(approved({ action: 'Reboot', drain: { enabled: false } }));
    assert.equal(condition(d.status, 'Drained')?.reason, 'Disabled');
    assert.deepEqual(
      work(d).map((e) => e.type),
      ['talos'],
    );
    assert.equal(d.status.execution?.call, 'MachineService.Reboot');
  });

  it('fails an upgrade of a node whose Talos version it cannot tell, before doing anything', () => {
    const i = { ...approved(upgrade), node: node('w1', { osImage: 'Ubuntu 24.04' }) };
    const d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.match(
      d.status.message ?? '',
      /cannot tell the Talos version of node w1 from its osImage "Ubuntu 24\.04"/,
    );
    assert.deepEqual(work(d), []);
  });
});

describe('Managed execution: failures', () => {
  it('fails when the drain fails, naming what held it, and lifts its own cordon of the undisrupted node', () => {
    let i = approved({ action: 'Reboot' });
    let d = decide(i);
    const why =
      'drain of w1 timed out after 5.0s with 2 pod(s) left; evictions refused: ceph/osd-0: The disruption budget osd needs 2 healthy pods';
    i = next(i, d, {
      execution: { drain: { state: 'failed', message: why } },
      node: node('w1', { osImage: V13, cordonedBy: 'reboot-w1' }),
    });
    d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /the drain failed: drain of w1 timed out .*disruption budget osd/);
    // Issue 16: nothing was done to the node, so the cordon made for the action is lifted.
    assert.match(d.status.message ?? '', /uncordoning node w1, cordoned for this action/);
    assert.ok(d.effects.some((e) => e.type === 'uncordon'));
    assert.equal(d.status.undo?.nodeDisrupted, false);
    assert.equal(condition(d.status, 'Drained')?.reason, 'DrainFailed');
    assert.ok(!work(d).some((e) => e.type === 'talos'), 'no Talos call after a failed drain');
  });

  it('a drain that timed out under drain.onTimeout: KeepCordoned keeps its cordon, now and on later passes', () => {
    const why = 'drain of w1 timed out after 5.0s with 1 pod(s) left; evictions refused: ceph/osd-0: budget';
    for (const onTimeout of ['KeepCordoned', 'Uncordon'] as const) {
      let i = approved({ action: 'Reboot', drain: { timeout: '5s', onTimeout } });
      let d = decide(i);
      const cordoned = node('w1', { osImage: V13, cordonedBy: 'reboot-w1' });
      i = next(i, d, {
        execution: { drain: { state: 'failed', message: why, timedOut: true } },
        node: cordoned,
      });
      d = decide(i);
      assert.equal(d.status.phase, 'Failed');
      assert.equal(condition(d.status, 'Drained')?.reason, 'DrainTimedOut');
      const keeps = onTimeout === 'KeepCordoned';
      assert.equal(
        d.effects.some((e) => e.type === 'uncordon'),
        !keeps,
        onTimeout,
      );
      if (keeps)
        assert.match(
          d.status.message ?? '',
          /node w1 stays cordoned \(spec\.drain\.onTimeout: KeepCordoned\)/,
        );
      // The pass after: the undo is settled, and still nothing lifts the kept cordon.
      i = next(i, d, { node: cordoned });
      d = decide(i);
      assert.equal(
        d.effects.some((e) => e.type === 'uncordon'),
        !keeps,
        `${onTimeout}, later`,
      );
    }
  });

  it('fails with the installer error, without calling for the reboot', () => {
    let i = approved(upgrade);
    let d = decide(i);
    i = next(i, d, { execution: { prepare: done('pulled') } });
    d = decide(i);
    i = next(i, d, { execution: { prepare: done('pulled'), drain: done('drained') } });
    d = decide(i);
    const error =
      'Talos LifecycleService.Upgrade on node 10.5.0.9 via 127.0.0.1:5 failed: the installer exited with code 1: error: disk full';
    i = next(i, d, {
      execution: {
        prepare: done('pulled'),
        drain: done('drained'),
        install: { state: 'failed', message: error },
      },
    });
    d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /could not install .*: .*exited with code 1: error: disk full/);
    assert.equal(condition(d.status, 'Executed')?.reason, 'TalosError');
    assert.equal(d.status.execution?.callTime, undefined);
  });

  it('fails at once when the installer exits 2 or 3 (permanent), and pulls and installs again on 5 (issue 30)', () => {
    const drained = () => {
      let i = approved({ action: 'Upgrade', upgrade: { image: 'factory.talos.dev/installer/a:v1.14.0' } });
      let d = decide(i);
      i = next(i, d, { execution: { prepare: done('pulled') } });
      d = decide(i);
      i = next(i, d, { execution: { prepare: done('pulled'), drain: done('drained') } });
      return { i, d: decide(i) };
    };
    const failedWith = (exitCode: number) => {
      const { i, d } = drained();
      const message = `the installer exited with code ${String(exitCode)} (…): error`;
      const facts = {
        prepare: done('pulled'),
        drain: done('drained'),
        install: { state: 'failed' as const, message, exitCode },
      };
      return { i: next(i, d, { execution: facts }), facts };
    };
    for (const code of [2, 3, 4, 7]) {
      const d = decide(failedWith(code).i);
      assert.equal(d.status.phase, 'Failed', String(code));
      assert.equal(d.status.execution?.installRetries, undefined);
    }
    // 5: recorded, a pause, then both steps again; a new failure counts and pauses longer.
    const five = failedWith(5);
    const facts = five.facts;
    let i = five.i;
    let d = decide(i);
    assert.equal(d.status.phase, 'Executing');
    assert.equal(d.status.execution?.installRetries?.count, 1);
    assert.equal(d.requeueAfterMs, installRetryDelayMs(1));
    assert.deepEqual(events(d), ['Warning:InstallRetried']);
    assert.deepEqual(work(d), []);
    i = next(i, d, { execution: facts });
    d = decide(i);
    assert.deepEqual(work(d), [], 'still within the pause');
    i = { ...next(i, d, { execution: facts }), now: new Date(i.now.getTime() + installRetryDelayMs(1)) };
    d = decide(i);
    assert.deepEqual(work(d), [{ type: 'talosAgain', steps: ['prepare', 'install'] }]);
    assert.equal(d.status.execution?.installRetries?.madeAgain, true);
    i = next(i, d, { execution: { drain: done('drained') } });
    d = decide(i);
    assert.deepEqual(work(d), [{ type: 'talos', step: 'prepare' }], 'pulled again');
    i = next(i, d, { execution: facts });
    d = decide(i);
    assert.equal(d.status.execution?.installRetries?.count, 2);
    assert.equal(d.requeueAfterMs, installRetryDelayMs(2));
    assert.ok(installRetryDelayMs(2) > installRetryDelayMs(1) && installRetryDelayMs(9) === 120_000);
  });

  it('records the etcd leadership hand-off before the call: who gave it up, who took it', () => {
    const { i, d } = upToTheCall();
    const handOff = 'etcd leadership handed over by w1 to cp-2';
    const after = decide(
      next(i, d, {
        execution: {
          prepare: done('pulled'),
          drain: done('drained'),
          install: done('installed'),
          call: done('rebooting', { handOff, disrupts: true }),
        },
      }),
    );
    assert.equal(after.status.phase, 'WaitingForNode');
    assert.ok(
      after.effects.some(
        (e) => e.type === 'event' && e.reason === 'EtcdLeadershipHandOff' && e.message === handOff,
      ),
    );
  });

  it('fails when Talos refuses the call, and records that it failed', () => {
    const { i: before, d: recorded } = upToTheCall();
    const i = next(before, recorded, {
      execution: {
        call: {
          state: 'failed',
          message: 'Talos MachineService.Reboot failed: busy (UNKNOWN)',
          mayHaveReached: false,
        },
      },
    });
    const d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.equal(d.status.execution?.callResult, 'Failed');
    assert.match(d.status.message ?? '', /Talos MachineService\.Reboot failed: .*busy/);
    assert.deepEqual(work(d), []);
  });
});

describe('Managed execution: the call is never made twice', () => {
  /** A new process (the executor knows nothing) finds the call recorded, and waits out CALL_SETTLE_MS. */
  function restartedAfterTheRecord(): { i: ActionInput; d: ActionDecision } {
    const { i: before, d: recorded } = upToTheCall();
    let i = next(before, recorded, { execution: {} });
    let d = decide(i);
    assert.equal(d.status.phase, 'Executing');
    assert.deepEqual(work(d), [], 'nothing before a call the gone process sent has arrived or been given up');
    assert.match(
      d.status.message ?? '',
      /restarted .* while calling Talos MachineService\.Reboot on node w1: waiting until/,
    );
    assert.equal(d.requeueAfterMs, CALL_SETTLE_MS - 1000);
    i = { ...next(i, d), now: new Date(i.now.getTime() + CALL_SETTLE_MS) };
    d = decide(i);
    assert.deepEqual(work(d), [{ type: 'talos', step: 'verify', call: 'MachineService.Reboot' }]);
    assert.match(d.status.message ?? '', /asking the node for its events since it booted/);
    return { i, d };
  }

  it('waits for the node when a restarted controller finds the call recorded and the node shows it came', () => {
    const { i: asked, d: asking } = restartedAfterTheRecord();
    const i = next(asked, asking, {
      execution: { verify: done('a reboot sequence started', { reached: true }) },
    });
    const d = decide(i);
    assert.equal(d.status.phase, 'WaitingForNode');
    assert.equal(d.status.execution?.callResult, 'Unknown');
    assert.deepEqual(work(d), [], 'no call, no repeated steps');
    const executed = condition(d.status, 'Executed');
    assert.equal(executed?.reason, 'OutcomeUnknown');
    assert.match(executed.message, /whether Talos MachineService\.Reboot reached node w1 is unknown/);
    assert.match(executed.message, /it is not made twice/);
    assert.ok(events(d).includes('Warning:TalosCallOutcomeUnknown'));
    // And it finishes when the node comes back, like any reboot.
    const back = decide(next(i, d, { node: node('w1', { osImage: 'Talos (v1.13.1)', bootID: 'boot-2' }) }));
    assert.equal(back.status.phase, 'Succeeded');
    assert.equal(back.status.bootIDAfter, 'boot-2');
  });

  it('waits for the node when the node cannot tell, or is already in another boot', () => {
    const { i: asked, d: asking } = restartedAfterTheRecord();
    const failed = decide(
      next(asked, asking, { execution: { verify: { state: 'failed', message: 'connection refused' } } }),
    );
    assert.equal(failed.status.phase, 'WaitingForNode');
    assert.equal(failed.status.execution?.callResult, 'Unknown');
    assert.deepEqual(work(failed), []);
    const { i: before, d: recorded } = upToTheCall();
    const rebooted = decide(
      next(before, recorded, { execution: {}, node: node('w1', { osImage: V13, bootID: 'boot-2' }) }),
    );
    assert.notEqual(
      rebooted.status.execution?.callResult,
      undefined,
      'not asked: the node shows more than its events would',
    );
    assert.deepEqual(
      work(rebooted).filter((e) => e.type === 'talos'),
      [],
    );
  });

  it('makes the call anew when the node, in the same boot, shows it never came', () => {
    const { i: asked, d: asking } = restartedAfterTheRecord();
    const i = next(asked, asking, {
      execution: {
        verify: done("the node's 2 events since it booted show no reboot sequence", { reached: false }),
      },
    });
    const d = decide(i);
    const first = asked.action.status?.execution?.callTime;
    const callTime = d.status.execution?.callTime;
    assert.equal(d.status.phase, 'Executing');
    assert.ok(callTime && callTime !== first, 'recorded anew');
    assert.equal(d.status.execution?.callResult, undefined);
    assert.deepEqual(work(d), [{ type: 'talos', step: 'call', call: 'MachineService.Reboot', callTime }]);
    assert.ok(events(d).includes('Normal:TalosCallNotReceived'));
    assert.match(condition(d.status, 'Executed')?.message ?? '', /never reached node w1 .*: calling it now/);
    // This process made it: its answer decides, as for any call.
    const acked = decide(next(i, d, { execution: { call: done('rebooting', { disrupts: true }) } }));
    assert.equal(acked.status.phase, 'WaitingForNode');
    assert.equal(acked.status.execution?.callResult, 'Acknowledged');
  });

  it('waits for the node when the call got no answer', () => {
    const { i: before, d: recorded } = upToTheCall();
    const i = next(before, recorded, {
      execution: { call: { state: 'failed', message: 'no answer within 1m', mayHaveReached: true } },
    });
    const d = decide(i);
    assert.equal(d.status.phase, 'WaitingForNode');
    assert.equal(d.status.execution?.callResult, 'Unknown');
    assert.deepEqual(work(d), []);
  });

  it('repeats the steps before the call after a restart, so an installed upgrade still gets its reboot', () => {
    const { i: before, d: drained } = (() => {
      let i = approved(upgrade);
      let d = decide(i);
      i = next(i, d, { execution: { prepare: done('pulled') } });
      d = decide(i);
      i = next(i, d, { execution: { prepare: done('pulled'), drain: done('drained') } });
      d = decide(i);
      return { i, d };
    })();
    assert.ok(drained.status.execution?.drainTime);
    // Restarted after the install: pull and install again (the drain is recorded), then call.
    let i = next(before, drained, { execution: {} });
    let d = decide(i);
    assert.deepEqual(work(d), [{ type: 'talos', step: 'prepare' }]);
    i = next(i, d, { execution: { prepare: done('pulled') } });
    d = decide(i);
    assert.deepEqual(work(d), [{ type: 'talos', step: 'install' }], 'the drain is not made again');
    i = next(i, d, { execution: { prepare: done('pulled'), install: done('installed') } });
    d = decide(i);
    assert.equal(d.status.execution?.call, 'MachineService.Reboot');
  });

  it('does nothing on a stale view that does not show the call this process made', () => {
    const { i: before } = upToTheCall();
    const stale = {
      ...before,
      execution: { ...before.execution, call: { state: 'running' as const, message: 'waiting for Talos' } },
    };
    const d = decide(stale);
    assert.deepEqual(work(d), []);
    assert.equal(d.status.execution?.callTime, undefined);
  });

  it('stops the steps of an action that ended while they ran', () => {
    const { i: before, d: recorded } = upToTheCall();
    const i = next(before, recorded, {
      now: at(3600),
      execution: { call: { state: 'running', message: 'waiting for Talos' } },
    });
    const d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /deadlines\.executing \(30m\)/);
    assert.ok(work(d).some((e) => e.type === 'stopExecution'));
  });

  it('leaves an action approved without an executor to its requester, even once an executor is there', () => {
    const i = approved({ action: 'Reboot' }, {});
    const told = {
      ...i,
      action: {
        ...i.action,
        status: {
          ...i.action.status,
          conditions: [
            ...(i.action.status?.conditions ?? []),
            {
              type: 'Executed',
              status: 'False' as const,
              reason: 'ExecutorNotInstalled',
              message: 'perform it',
              lastTransitionTime: T0.toISOString(),
            },
          ],
        },
      },
    };
    const d = decide(told);
    assert.equal(d.status.phase, 'Approved');
    assert.deepEqual(work(d), []);
  });
});

describe('Managed execution: configuration changes', () => {
  const secret = { configSecretRef: { name: 'w1-config' } };

  it('applies a NoReboot change without a drain and finishes once the node is Ready', () => {
    let i = approved({ action: 'ConfigChange', configChange: { mode: 'NoReboot', ...secret } });
    let d = decide(i);
    assert.deepEqual(work(d), [{ type: 'talos', step: 'prepare' }], 'the Secret is read first');
    i = next(i, d, { execution: { prepare: done('read') } });
    d = decide(i);
    assert.equal(condition(d.status, 'Drained')?.reason, 'NotNeeded');
    assert.equal(d.status.execution?.call, 'MachineService.ApplyConfiguration');
    i = next(i, d, {
      execution: { prepare: done('read'), call: done('applied (mode no-reboot)', { disrupts: false }) },
    });
    d = decide(i);
    assert.equal(d.status.phase, 'Succeeded');
    assert.equal(d.status.execution?.reboots, false);
  });

  it('drains for Auto, and follows what Talos decided: here, no reboot', () => {
    let i = approved({ action: 'ConfigChange', configChange: { mode: 'Auto', ...secret } });
    let d = decide(i);
    i = next(i, d, { execution: { prepare: done('read') } });
    d = decide(i);
    assert.deepEqual(work(d), [{ type: 'drain' }]);
    i = next(i, d, { execution: { prepare: done('read'), drain: done('drained') } });
    d = decide(i);
    i = next(i, d, {
      execution: {
        prepare: done('read'),
        drain: done('drained'),
        call: done('applied (mode no-reboot, asked auto)', { disrupts: false }),
      },
      node: node('w1', { osImage: V13, cordonedBy: 'reboot-w1' }),
    });
    d = decide(i);
    assert.equal(d.status.phase, 'WaitingForNode', 'its own cordon is lifted before it succeeds');
    assert.deepEqual(work(d), [{ type: 'uncordon' }]);
    d = decide(next(i, d, { node: node('w1', { osImage: V13 }) }));
    assert.equal(d.status.phase, 'Succeeded');
  });

  it('fails a live change whose outcome it does not know, rather than apply it twice or claim it', () => {
    let i = approved({ action: 'ConfigChange', configChange: { mode: 'NoReboot', ...secret } });
    let d = decide(i);
    i = next(i, d, { execution: { prepare: done('read') } });
    d = decide(i);
    d = decide(next(i, d, { execution: {} }));
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /not made twice: check the node's configuration/);
  });
});

describe('Managed execution: the end', () => {
  const afterReboot = (spec: Partial<NodeActionSpec>, nodeOptions = {}) =>
    input({
      action: action(
        { execution: 'Managed', ...spec },
        admitted(T0, {
          phase: 'WaitingForNode',
          bootIDBefore: 'boot-1',
          execution: {
            drainTime: T0.toISOString(),
            call: 'MachineService.Reboot',
            callTime: T0.toISOString(),
            callResult: 'Acknowledged',
            reboots: true,
          },
        }),
      ),
      node: node('w1', { bootID: 'boot-2', osImage: V13, ...nodeOptions }),
      execution: {},
    });

  it('lifts its own cordon only once the boot hooks are done, then succeeds', () => {
    const ready = hook('NodeReadyJob', 'unset-noout');
    const i = { ...afterReboot({ action: 'Reboot' }, { cordonedBy: 'reboot-w1' }), hooks: [ready] };
    let d = decide(i);
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.ok(!work(d).some((e) => e.type === 'uncordon'), 'not while the boot hooks are not done');
    // The boot hooks done (here: none select the node any more).
    const j = next(i, d, { hooks: [] });
    d = decide(j);
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.deepEqual(
      work(d).map((e) => e.type),
      ['uncordon'],
    );
    assert.match(d.status.message ?? '', /uncordoning node w1/);
    d = decide(next(j, d, { node: node('w1', { bootID: 'boot-2', osImage: V13 }) }));
    assert.equal(d.status.phase, 'Succeeded');
  });

  it('leaves a cordon that is not its own', () => {
    const d = decide(afterReboot({ action: 'Reboot' }, { cordonedBy: 'an-older-action' }));
    assert.equal(d.status.phase, 'Succeeded');
    assert.ok(!work(d).some((e) => e.type === 'uncordon'));
  });

  it('does not uncordon after a shutdown', () => {
    const i = afterReboot(
      { action: 'Shutdown' },
      { cordonedBy: 'reboot-w1', ready: false, bootID: 'boot-1' },
    );
    const d = decide(i);
    assert.equal(d.status.phase, 'Succeeded');
    assert.ok(!work(d).some((e) => e.type === 'uncordon'));
  });

  it('fails an upgrade whose node came back running the old version', () => {
    const i = afterReboot(upgrade, { osImage: V13 });
    const d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /came back running Talos v1\.13\.0, not v1\.13\.1/);
    const fine = decide(afterReboot(upgrade, { osImage: 'Talos (v1.13.1)' }));
    assert.equal(fine.status.phase, 'Succeeded');
  });

  it('fails an External upgrade whose node came back running the old version (Talos fell back)', () => {
    const external = (osImage: string) =>
      input({
        action: action(
          { ...upgrade, execution: 'External' },
          admitted(T0, { phase: 'WaitingForNode', bootIDBefore: 'boot-1' }),
          { annotations: { 'talos.dev/executed': 'true' } },
        ),
        node: node('w1', { bootID: 'boot-2', osImage }),
      });
    const fell = decide(external(V13));
    assert.equal(fell.status.phase, 'Failed');
    assert.match(fell.status.message ?? '', /came back running Talos v1\.13\.0, not v1\.13\.1/);
    assert.equal(decide(external('Talos (v1.13.1)')).status.phase, 'Succeeded');
  });
});
