// The rollout commands' pure parts: the spec they ask for, the exit code a followed
// rollout ends with, and the text a person reads.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ObservedNodeRollout } from '../../src/api/node-rollout.ts';
import { CliError, EXIT } from '../../src/cli/exit.ts';
import { rolloutSpec, statusText } from '../../src/cli/node-rollouts.ts';
import { rolloutCode, rolloutEvents, runningActions } from '../../src/cli/rollout-follow.ts';
import { PLAIN } from '../../src/cli/style.ts';

const base = { maxParallel: 2, maxFailures: 0 };

function rollout(status: ObservedNodeRollout['status']): ObservedNodeRollout {
  return {
    metadata: { name: 'r', uid: 'u' },
    spec: { action: 'Upgrade', upgrade: { image: 'x/installer:v1.13.1' }, requestedBy: 'alice' },
    ...(status ? { status } : {}),
  };
}

const condition = (type: string, status: 'True' | 'False', reason: string) => ({
  type,
  status,
  reason,
  message: '',
  lastTransitionTime: '2026-01-01T00:00:00Z',
});

describe('gatehouse rollout', () => {
  it('asks for an upgrade or a reboot, never both or neither', () => {
    assert.equal(rolloutSpec({ ...base, image: 'x/installer:v1.13.1' }, 'alice').action, 'Upgrade');
    assert.equal(rolloutSpec({ ...base, reboot: true }, 'alice').action, 'Reboot');
    assert.throws(() => rolloutSpec({ ...base }, 'alice'), CliError);
    assert.throws(() => rolloutSpec({ ...base, reboot: true, image: 'x:v1' }, 'alice'), CliError);
  });

  it('refuses a bypass without a reason, and records it with one', () => {
    assert.throws(() => rolloutSpec({ ...base, reboot: true, skipHooks: true }, 'alice'), /--reason/);
    const spec = rolloutSpec({ ...base, reboot: true, skipHooks: true, reason: 'node is broken' }, 'alice');
    assert.deepEqual(spec.bypass, { healthChecks: false, hooks: true, reason: 'node is broken' });
    assert.equal(spec.requestedBy, 'alice');
  });

  it('asks for post-checks, a rollback only with them, and what an undrainable node becomes', () => {
    assert.throws(() => rolloutSpec({ ...base, image: 'x:v1', rollback: true }, 'alice'), /--post-check/);
    const spec = rolloutSpec(
      {
        ...base,
        image: 'x/installer:v1.13.1',
        postCheck: ['ceph', 'csi'],
        postCheckWithin: '5m',
        rollback: true,
        onDrainTimeout: 'Quarantine',
        maxQuarantined: 3,
      },
      'alice',
    );
    assert.deepEqual(spec.postChecks, { checks: ['ceph', 'csi'], within: '5m' });
    assert.equal(spec.onPostCheckFailure, 'Rollback');
    assert.equal(spec.onDrainTimeout, 'Quarantine');
    assert.equal(spec.maxQuarantined, 3);
  });

  it('ends 0 when complete without failures, 1 when halted or with failed nodes, not before', () => {
    const counts = { pending: 0, running: 0, succeeded: 2, failed: 0, skipped: 0, vanished: 0 };
    assert.equal(
      rolloutCode(rollout({ counts, conditions: [condition('Complete', 'True', 'AllNodesDone')] })),
      EXIT.ok,
    );
    assert.equal(
      rolloutCode(
        rollout({
          counts: { ...counts, failed: 1 },
          conditions: [condition('Complete', 'True', 'AllNodesDone')],
        }),
      ),
      EXIT.failed,
    );
    assert.equal(
      rolloutCode(
        rollout({
          counts: { ...counts, quarantined: 1 },
          conditions: [condition('Complete', 'True', 'AllNodesDone')],
        }),
      ),
      EXIT.failed,
      'nodes left quarantined need a person',
    );
    assert.equal(
      rolloutCode(rollout({ conditions: [condition('Halted', 'True', 'FailureBudgetExhausted')] })),
      EXIT.failed,
    );
    assert.equal(rolloutCode(rollout({ conditions: [condition('Halted', 'True', 'Paused')] })), undefined);
    assert.equal(rolloutCode(rollout(undefined)), undefined);
  });

  it('shows each node with a mark readable without colour', () => {
    const text = statusText(
      rollout({
        counts: { pending: 1, running: 1, succeeded: 1, failed: 0, skipped: 1, vanished: 0 },
        message: '1 running, 1 to go',
        nodes: [
          { node: 'w1', phase: 'Succeeded', message: 'done' },
          { node: 'w2', phase: 'Running', actionPhase: 'Executing', message: 'upgrading' },
          { node: 'w3', phase: 'Skipped', message: 'already runs v1.13.1' },
          { node: 'w4', phase: 'Pending', message: 'not started yet' },
        ],
      }),
      PLAIN,
    );
    assert.match(text, /✓ succeeded w1: done/);
    assert.match(text, /▶ running {3}w2 \(Executing\): upgrading/);
    assert.match(text, /= skipped {3}w3/);
    assert.match(text, /1 succeeded, 1 running, 1 pending, 0 failed, 1 skipped/);
  });

  it('tells a followed rollout as lines, one per change, and leaves a followed node to its action', () => {
    const counts = { pending: 2, running: 0, succeeded: 0, failed: 0, skipped: 1, vanished: 0 };
    const first = rollout({
      counts,
      message: '2 to go',
      nodes: [
        { node: 'w1', phase: 'Pending' },
        { node: 'w2', phase: 'Waiting', message: 'waiting for the next window: w2 needs ~14m, 9m left' },
        { node: 'w3', phase: 'Skipped', message: 'already runs v1.13.1' },
      ],
    });
    assert.deepEqual(rolloutEvents(undefined, first), [
      'rollout r: NodeRollout r: Upgrade to x/installer:v1.13.1',
      'rollout r: w2 waiting: waiting for the next window: w2 needs ~14m, 9m left',
      'rollout r: w3 skipped: already runs v1.13.1',
      'rollout r: 0 succeeded, 0 running, 2 pending, 0 failed, 1 skipped',
      'rollout r: 2 to go',
    ]);
    assert.deepEqual(rolloutEvents(first, first), [], 'nothing changed, nothing said');
    const running = rollout({
      counts: { ...counts, pending: 1, running: 1 },
      message: '2 to go',
      nodes: [
        { node: 'w1', phase: 'Running', action: 'r-w1', actionPhase: 'Executing' },
        { node: 'w2', phase: 'Waiting', message: 'waiting for the next window: w2 needs ~14m, 9m left' },
        { node: 'w3', phase: 'Skipped', message: 'already runs v1.13.1' },
      ],
    });
    assert.deepEqual(runningActions(running), [{ node: 'w1', action: 'r-w1' }]);
    assert.deepEqual(rolloutEvents(first, running, new Set(['w1'])), [
      'rollout r: w1 started (r-w1)',
      'rollout r: 0 succeeded, 1 running, 1 pending, 0 failed, 1 skipped',
    ]);
    const failed = rollout({
      counts: { ...counts, pending: 1, failed: 1 },
      message: 'halted',
      nodes: [
        { node: 'w1', phase: 'Failed', action: 'r-w1', message: 'upgrade refused' },
        { node: 'w2', phase: 'Waiting', message: 'waiting for the next window: w2 needs ~14m, 9m left' },
        { node: 'w3', phase: 'Skipped', message: 'already runs v1.13.1' },
      ],
      conditions: [
        { ...condition('Halted', 'True', 'FailureBudgetExhausted'), message: '1 failed, first w1: Failed' },
      ],
    });
    const followedLines = rolloutEvents(running, failed, new Set(['w1']));
    assert.ok(!followedLines.some((l) => l.includes('w1 failed')), 'its action tells how it ended');
    assert.ok(
      followedLines.includes('rollout r: halted (FailureBudgetExhausted): 1 failed, first w1: Failed'),
    );
    assert.ok(rolloutEvents(running, failed).includes('rollout r: w1 failed: upgrade refused'));
    const done = rollout({
      ...running.status,
      message: 'complete: 1 done',
      conditions: [{ ...condition('Complete', 'True', 'AllNodesDone'), message: 'complete: 1 done' }],
    });
    const doneLines = rolloutEvents(running, done, new Set(['w1']));
    assert.deepEqual(doneLines, ['rollout r: complete (AllNodesDone): complete: 1 done'], 'said once');
  });
});
