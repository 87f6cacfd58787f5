// A ConfigChange in mode Try confirmed by checks (src/actions/phases/try-confirm.ts):
// applied in TRY mode with the window as Talos's timeout, committed (applied again with
// NO_REBOOT) only when its checks are healthy before the window ends, and otherwise left
// to Talos's revert; the commit recorded before it is made, never made twice, never after
// the window — also as a property over passes with lost writes and restarts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import type { NodeActionSpec } from '../../src/api/node-action.ts';
import type { CheckState } from '../../src/checks/state.ts';
import type { ExecutionStepFacts } from '../../src/talos/facts.ts';
import { configChangeSteps } from '../../src/talos/plan.ts';
import { commitMarginMs } from '../../src/actions/phases/try-confirm.ts';
import { action, admitted, input, node, T0 } from './action-fixtures.ts';

const WINDOW_MS = 120_000;
const UNTIL = T0.getTime() + WINDOW_MS;
const LAST_CALL = UNTIL - commitMarginMs(WINDOW_MS);

const state = (healthy: boolean): CheckState => ({
  healthy,
  reason: healthy ? 'ProbeSucceeded' : 'ProbeFailed',
  message: healthy ? 'ok' : 'api latency 2.4s',
  consecutiveSuccesses: healthy ? 1 : 0,
  consecutiveFailures: healthy ? 0 : 1,
  lastProbeTime: T0,
});

const spec: Partial<NodeActionSpec> = {
  action: 'ConfigChange',
  execution: 'Managed',
  configChange: {
    mode: 'Try',
    configSecretRef: { name: 'cfg' },
    confirm: { checks: ['api'], window: '2m' },
  },
};

/** The TRY applied and acknowledged at T0: the action waits for its node (its trial). */
function applied(): ActionInput {
  return input({
    action: action(
      spec,
      admitted(T0, {
        phase: 'WaitingForNode',
        bootIDBefore: 'boot-1',
        execution: {
          drainTime: T0.toISOString(),
          call: 'MachineService.ApplyConfiguration',
          callTime: T0.toISOString(),
          callResult: 'Acknowledged',
          reboots: false,
        },
      }),
    ),
    node: node('w1', { osImage: 'Talos (v1.14.0)' }),
    execution: {},
  });
}

function at(
  i: ActionInput,
  d: ActionDecision,
  time: number,
  changes: Partial<ActionInput> = {},
): ActionInput {
  const { fresh: _fresh, ...rest } = i;
  return { ...rest, now: new Date(time), action: { ...i.action, status: d.status }, ...changes };
}

const fresh = (now: Date, healthy: boolean) => ({ at: now, states: new Map([['api', state(healthy)]]) });
const commits = (d: ActionDecision) => d.effects.filter((e) => e.type === 'talos' && e.step === 'commit');

describe('TRY confirmed by checks', () => {
  it('sends the window as Talos’s TRY timeout', () => {
    const steps = configChangeSteps(spec as NodeActionSpec, 'Talos (v1.14.0)');
    assert.deepEqual(steps.call, {
      method: 'MachineService.ApplyConfiguration',
      mode: 'try',
      secret: { name: 'cfg' },
      tryTimeoutMs: WINDOW_MS,
    });
  });

  it('commits once the checks are healthy inside the window, and succeeds on Talos’s answer', () => {
    let i = applied();
    let d = decide(i);
    assert.deepEqual(d.evaluateChecks, ['api']);
    d = decide({ ...i, fresh: fresh(i.now, false) });
    assert.match(
      d.status.message ?? '',
      /configuration on trial on node w1 until .*waiting for api \(api latency 2\.4s\)/,
    );
    assert.equal(commits(d).length, 0);
    i = at(i, d, T0.getTime() + 30_000);
    d = decide({ ...i, fresh: fresh(i.now, true) });
    assert.equal(commits(d).length, 1);
    assert.equal(d.status.tryConfirm?.commitTime, i.now.toISOString());
    i = at(i, d, T0.getTime() + 31_000, {
      execution: { commit: { state: 'succeeded', message: 'committed' } },
    });
    d = decide(i);
    assert.equal(d.status.phase, 'Succeeded');
    assert.equal(d.status.tryConfirm?.commitResult, 'Acknowledged');
  });

  it('never commits at the end of the window: Talos reverts, and the action fails with the checks’ messages', () => {
    let i = applied();
    let d = decide({ ...i, fresh: fresh(i.now, false) });
    i = at(i, d, LAST_CALL);
    d = decide({ ...i, fresh: fresh(i.now, true) });
    assert.equal(commits(d).length, 0, 'healthy too late: no commit');
    assert.equal(d.status.phase, 'WaitingForNode');
    i = at(i, d, UNTIL + 6000);
    d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.match(
      d.status.message ?? '',
      /not confirmed within its window: api \(api latency 2\.4s\); not committed, so Talos reverted it/,
    );
  });

  it('a commit whose outcome is unknown is never made again', () => {
    let i = applied();
    let d = decide({ ...i, fresh: fresh(i.now, true) });
    assert.equal(commits(d).length, 1);
    i = at(i, d, T0.getTime() + 2000, { execution: {} });
    d = decide({ ...i, fresh: fresh(i.now, true) });
    assert.equal(commits(d).length, 0);
    assert.equal(d.status.phase, 'Failed');
    assert.equal(d.status.tryConfirm?.commitResult, 'Unknown');
  });
});

describe('TRY as a process (property)', () => {
  it('commit at most once, and never decided past the window’s last call', () => {
    const answer = fc.constantFrom<ExecutionStepFacts | undefined>(
      undefined,
      { state: 'running', message: 'waiting' },
      { state: 'succeeded', message: 'committed' },
      { state: 'failed', mayHaveReached: true, message: 'deadline' },
      { state: 'failed', mayHaveReached: false, message: 'refused' },
    );
    fc.assert(
      fc.property(
        fc.array(fc.tuple(answer, fc.boolean(), fc.boolean(), fc.nat({ max: 30_000 })), { maxLength: 30 }),
        (steps) => {
          let i = applied();
          let d = decide({ ...i, fresh: fresh(i.now, false) });
          let asked = 0;
          for (const [op, lostWrite, healthy, ms] of steps) {
            if (!lostWrite) asked += commits(d).length;
            const written = lostWrite ? (i.action.status ?? {}) : d.status;
            i = {
              ...at(i, { ...d, status: written }, i.now.getTime() + ms + 1000),
              execution: op ? { commit: op } : {},
              fresh: fresh(new Date(i.now.getTime() + ms + 1000), healthy),
            };
            d = decide(i);
            if (commits(d).length > 0) {
              assert.equal(i.action.status?.tryConfirm?.commitTime, undefined, 'a commit decided again');
              assert.ok(i.now.getTime() < LAST_CALL, 'a commit decided past the window');
            }
            if (d.status.phase === 'Failed' || d.status.phase === 'Succeeded') {
              if (!lostWrite) asked += commits(d).length;
              break;
            }
          }
          assert.ok(asked <= 1, `committed ${String(asked)} times`);
        },
      ),
      { numRuns: 500 },
    );
  });
});
