// The remediation pause (src/actions/remediation.ts): put on once an action that takes
// its node away is approved, recorded before it is written, never over a label someone
// else set, and taken off at any end before the finalizer goes.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionInput } from '../../src/actions/decide.ts';
import { remediationPauseOff } from '../../src/actions/remediation.ts';
import type { NodeActionSpec, NodeActionStatus } from '../../src/api/node-action.ts';
import { T0, action, admitted, input, node } from './action-fixtures.ts';

/** A node without the exclusion label (the fixtures' nodes carry it). */
const bare = (extra = {}) => node('w1', { remediationExcluded: undefined, ...extra });

function inPhase(
  spec: Partial<NodeActionSpec>,
  status: NodeActionStatus,
  extra: Partial<ActionInput> = {},
  metadata = {},
): ActionInput {
  return input({ action: action(spec, admitted(T0, status), metadata), node: bare(), ...extra });
}

const approvedStatus: NodeActionStatus = {
  phase: 'Approved',
  approvalTime: T0.toISOString(),
  bootIDBefore: 'boot-1',
};

const remediation = (i: ActionInput) => {
  const d = decide(i);
  return { d, ops: d.effects.flatMap((e) => (e.type === 'remediation' ? [e.op] : [])) };
};

describe('the remediation pause', () => {
  it('is put on once an action that takes its node away is approved, and recorded first', () => {
    const { d, ops } = remediation(inPhase({ action: 'Reboot' }, approvedStatus));
    assert.deepEqual(ops, ['pause']);
    assert.equal(d.status.remediationPaused, true);
    // Before approval: nothing.
    assert.deepEqual(remediation(inPhase({ action: 'Reboot' }, { phase: 'Pending' })).ops, []);
  });

  it('is not put on where a governing ActionPolicy says pauseRemediation: false', () => {
    const off = inPhase({ action: 'Reboot' }, approvedStatus, { remediationPauseOff: 'storage' });
    assert.deepEqual(remediation(off).ops, []);
    const spec = { action: 'Reboot' as const, nodeName: 'w1' };
    const storage = {
      name: 'storage',
      spec: { nodeSelector: { matchLabels: { pool: 'storage' } }, pauseRemediation: false },
    };
    const on = { name: 'all', spec: { pauseRemediation: true } };
    assert.equal(remediationPauseOff([on, storage], spec, { pool: 'storage' }), 'storage');
    assert.equal(remediationPauseOff([on, storage], spec, { pool: 'compute' }), undefined);
    assert.equal(remediationPauseOff([], spec, {}), undefined, 'on by default');
  });

  it('is not put on for a change applied live, nor over a label someone else set', () => {
    const live = inPhase({ action: 'ConfigChange', configChange: { mode: 'NoReboot' } }, approvedStatus);
    assert.deepEqual(remediation(live).ops, []);
    const theirs = inPhase({ action: 'Reboot' }, approvedStatus, { node: node('w1') });
    const { d, ops } = remediation(theirs);
    assert.deepEqual(ops, []);
    assert.equal(d.status.remediationPaused, undefined, 'not ours: nothing to take off later');
  });

  it('is asked for again while the node does not show it (a write lost to a crash)', () => {
    const recorded = { ...approvedStatus, remediationPaused: true };
    assert.deepEqual(remediation(inPhase({ action: 'Reboot' }, recorded)).ops, ['pause']);
    const shown = inPhase({ action: 'Reboot' }, recorded, {
      node: bare({ remediationExcluded: true, remediationPausedBy: 'reboot-w1' }),
    });
    assert.deepEqual(remediation(shown).ops, []);
  });

  it('is taken off at any end, before the finalizer goes, when it was put on', () => {
    for (const phase of ['Succeeded', 'Failed', 'Cancelled'] as const) {
      const ended = inPhase({ action: 'Reboot' }, { ...approvedStatus, phase, remediationPaused: true });
      const { d, ops } = remediation(ended);
      assert.deepEqual(ops, ['resume'], phase);
      assert.equal(d.removeFinalizer, true, 'the effects run before the finalizer goes');
    }
    // Deleted mid-way: cancelled, and the pause taken off with it.
    const deleted = inPhase(
      { action: 'Reboot' },
      { ...approvedStatus, phase: 'WaitingForNode', remediationPaused: true },
      {},
      { deletionTimestamp: T0.toISOString() },
    );
    const cancelled = remediation(deleted);
    assert.equal(cancelled.d.status.phase, 'Cancelled');
    assert.deepEqual(cancelled.ops, ['resume']);
  });

  it('is not asked to come off when it was never put on, nor once the finalizer is gone', () => {
    assert.deepEqual(
      remediation(inPhase({ action: 'Reboot' }, { ...approvedStatus, phase: 'Succeeded' })).ops,
      [],
    );
    const gone = inPhase(
      { action: 'Reboot' },
      { ...approvedStatus, phase: 'Succeeded', remediationPaused: true },
      {},
      { finalizers: [] },
    );
    assert.deepEqual(remediation(gone).ops, []);
  });
});
