// Post-checks and rollback (src/actions/phases/post-checks.ts): a returned node's named
// checks, evaluated afresh for it, must be healthy within `within` before the action
// succeeds; not in time, it fails — or, under onPostCheckFailure: Rollback, Talos's
// Rollback is called once (recorded before the call, never made twice, a restart's
// outcome Unknown) and the action ends Failed once the node is back on another version.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import type { NodeActionSpec } from '../../src/api/node-action.ts';
import type { CheckState } from '../../src/checks/state.ts';
import type { ExecutionStepFacts } from '../../src/talos/facts.ts';
import { action, admitted, input, node, T0 } from './action-fixtures.ts';

const V_OLD = 'Talos (v1.13.0)';
const V_NEW = 'Talos (v1.13.1)';
const IMAGE = 'ghcr.io/siderolabs/installer:v1.13.1';

const state = (healthy: boolean, message = healthy ? 'ok' : 'csi-rbd not registered'): CheckState => ({
  healthy,
  reason: healthy ? 'ProbeSucceeded' : 'ProbeFailed',
  message,
  consecutiveSuccesses: healthy ? 1 : 0,
  consecutiveFailures: healthy ? 0 : 1,
  lastProbeTime: T0,
});

const spec = (extra: Partial<NodeActionSpec> = {}): Partial<NodeActionSpec> => ({
  action: 'Upgrade',
  upgrade: { image: IMAGE },
  execution: 'Managed',
  postChecks: { checks: ['csi'], within: '2m' },
  ...extra,
});

/** An upgrade whose node is back on the new version, boot hooks done (none select it). */
function back(extra: Partial<NodeActionSpec> = {}): ActionInput {
  return input({
    action: action(
      spec(extra),
      admitted(T0, {
        phase: 'WaitingForNode',
        bootIDBefore: 'boot-1',
        execution: {
          drainTime: T0.toISOString(),
          call: 'LifecycleService.Upgrade',
          callTime: T0.toISOString(),
          callResult: 'Acknowledged',
          reboots: true,
        },
      }),
    ),
    node: node('w1', { bootID: 'boot-2', osImage: V_NEW }),
    execution: {},
  });
}

/** The next pass, `ms` later: the decided status written and read back. */
function next(
  i: ActionInput,
  d: ActionDecision,
  ms: number,
  changes: Partial<ActionInput> = {},
): ActionInput {
  const { fresh: _fresh, ...rest } = i;
  return {
    ...rest,
    now: new Date(i.now.getTime() + ms),
    action: { ...i.action, status: d.status },
    ...changes,
  };
}

const fresh = (now: Date, healthy: boolean) => ({ at: now, states: new Map([['csi', state(healthy)]]) });
const rollbacks = (d: ActionDecision) =>
  d.effects.filter((e) => e.type === 'talos' && e.step === 'rollback').length;

describe('post-checks', () => {
  it('evaluate the named checks afresh for the node, and the action succeeds once they are healthy', () => {
    let i = back();
    let d = decide(i);
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.deepEqual(d.evaluateChecks, ['csi'], 'a fresh evaluation, for the node');
    d = decide({ ...i, fresh: fresh(i.now, true) });
    assert.equal(d.status.phase, 'Succeeded');
    assert.equal(d.status.conditions?.find((c) => c.type === 'PostChecksPassed')?.status, 'True');
    assert.equal(d.status.postChecks?.results?.[0]?.healthy, true);
    i = back({ postChecks: undefined });
    assert.equal(decide(i).status.phase, 'Succeeded', 'without post-checks, as before');
  });

  it('wait up to `within`, then fail with the checks’ messages (Fail)', () => {
    let i = back();
    let d = decide({ ...i, fresh: fresh(i.now, false) });
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.match(
      d.status.message ?? '',
      /waiting up to 2m more for post-checks: csi \(csi-rbd not registered\)/,
    );
    i = next(i, d, 121_000);
    d = decide({ ...i, fresh: fresh(i.now, false) });
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /post-checks not healthy within 2m of node w1's return: csi/);
    assert.equal(rollbacks(d), 0);
  });

  it('Rollback: recorded before the call, called once, and Failed once the node is back on the previous version', () => {
    let i = back({ onPostCheckFailure: 'Rollback' });
    let d = decide({ ...i, fresh: fresh(i.now, false) });
    i = next(i, d, 121_000);
    d = decide({ ...i, fresh: fresh(i.now, false) });
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.equal(d.status.rollback?.from, V_NEW);
    assert.equal(rollbacks(d), 1);
    assert.deepEqual(
      d.effects.find((e) => e.type === 'talos'),
      { type: 'talos', step: 'rollback', time: d.status.rollback.time },
      'the call is tied to the recorded decision',
    );
    // Talos acknowledges; the node reboots into the version it ran before.
    i = next(i, d, 1000, { execution: { rollback: { state: 'succeeded', message: 'Talos acknowledged' } } });
    d = decide(i);
    assert.equal(d.status.rollback?.callResult, 'Acknowledged');
    assert.equal(rollbacks(d), 0);
    i = next(i, d, 30_000, { node: node('w1', { bootID: 'boot-3', osImage: V_OLD }) });
    d = decide(i);
    assert.equal(d.status.phase, 'Failed');
    assert.equal(d.status.rollback?.to, V_OLD);
    assert.equal(d.status.rollback.bootID, 'boot-3');
    assert.match(d.status.message ?? '', /rolled back from Talos \(v1\.13\.1\) to Talos \(v1\.13\.0\)/);
    assert.equal(d.status.conditions?.find((c) => c.type === 'RolledBack')?.status, 'True');
  });

  it('a rollback Talos refused ends the action with its answer; one a restart interrupted is Unknown, never made again', () => {
    const decided = () => {
      let i = back({ onPostCheckFailure: 'Rollback' });
      const d0 = decide({ ...i, fresh: fresh(i.now, false) });
      i = next(i, d0, 121_000);
      return { i, d: decide({ ...i, fresh: fresh(i.now, false) }) };
    };
    const refused: ExecutionStepFacts = {
      state: 'failed',
      mayHaveReached: false,
      message: 'no previous installation',
    };
    let { i, d } = decided();
    d = decide(next(i, d, 1000, { execution: { rollback: refused } }));
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /the rollback failed: no previous installation/);
    ({ i, d } = decided());
    // A new process: it knows nothing of the call.
    i = next(i, d, 1000, { execution: {} });
    d = decide(i);
    assert.equal(d.status.rollback?.callResult, 'Unknown');
    assert.equal(rollbacks(d), 0, 'never made twice');
  });
});

describe('rollback as a process (property)', () => {
  it('MachineService.Rollback is asked for at most once per action, whatever restarts and answers', () => {
    const answer = fc.constantFrom<ExecutionStepFacts | undefined>(
      undefined,
      { state: 'running', message: 'waiting' },
      { state: 'succeeded', message: 'ok' },
      { state: 'failed', mayHaveReached: true, message: 'deadline' },
      { state: 'failed', mayHaveReached: false, message: 'refused' },
    );
    fc.assert(
      fc.property(
        // Mostly unhealthy: the post-checks fail, and the rollback's passes are many.
        fc.array(
          fc.tuple(answer, fc.boolean(), fc.constantFrom(false, false, false, true), fc.nat({ max: 60_000 })),
          { maxLength: 30 },
        ),
        (steps) => {
          let i = back({ onPostCheckFailure: 'Rollback' });
          let d = decide({ ...i, fresh: fresh(i.now, false) });
          // Rollbacks that can be carried out: asked for by a pass whose status was written
          // (the executor makes the call only while the written status records it).
          let asked = 0;
          for (const [op, lostWrite, healthy, ms] of steps) {
            const written = lostWrite ? (i.action.status ?? {}) : d.status;
            if (!lostWrite) asked += rollbacks(d);
            i = {
              ...next(i, { ...d, status: written }, ms + 30_000),
              execution: op ? { rollback: op } : {},
              fresh: fresh(i.now, healthy),
            };
            d = decide(i);
            if (i.action.status?.rollback) assert.equal(rollbacks(d), 0, 'asked for again once recorded');
            if (d.status.phase === 'Failed' || d.status.phase === 'Succeeded') {
              if (!lostWrite) asked += rollbacks(d);
              break;
            }
          }
          assert.ok(asked <= 1, `Rollback asked for ${String(asked)} times`);
        },
      ),
      { numRuns: 500 },
    );
  });
});
