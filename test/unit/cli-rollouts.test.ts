// The rollout commands' pure parts: the spec they ask for, the exit code a followed
// rollout ends with, and the text a person reads.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ObservedNodeRollout } from '../../src/api/node-rollout.ts';
import { CliError, EXIT } from '../../src/cli/exit.ts';
import { rolloutCode, rolloutSpec, statusText } from '../../src/cli/node-rollouts.ts';
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
});
