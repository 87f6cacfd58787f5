// status.phaseHistory: the phases an action entered, each with its time, bounded, and
// written by the same status write that changes the phase (the builder's transition and
// the admission pass), so the dashboard can draw an action's phases as segments.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planAdmissions } from '../../src/actions/admission.ts';
import { decide } from '../../src/actions/decide.ts';
import { PHASE_HISTORY_LIMIT, type NodeActionStatus } from '../../src/api/node-action.ts';
import { withPhaseEntered } from '../../src/api/phases.ts';
import { T0, action, at, input, node } from './action-fixtures.ts';

describe('phaseHistory', () => {
  it('appends each phase entered with its time, and sets phase and phaseTime with it', () => {
    const status: NodeActionStatus = {};
    withPhaseEntered(status, 'Pending', at(0));
    withPhaseEntered(status, 'WaitingForHealth', at(5));
    assert.equal(status.phase, 'WaitingForHealth');
    assert.equal(status.phaseTime, at(5).toISOString());
    assert.deepEqual(status.phaseHistory, [
      { phase: 'Pending', since: at(0).toISOString() },
      { phase: 'WaitingForHealth', since: at(5).toISOString() },
    ]);
  });

  it(`keeps the last ${String(PHASE_HISTORY_LIMIT)} entries, dropping the oldest`, () => {
    const status: NodeActionStatus = {};
    for (let i = 0; i < PHASE_HISTORY_LIMIT + 3; i++)
      withPhaseEntered(status, i % 2 ? 'Pending' : 'WaitingForHealth', at(i));
    assert.equal(status.phaseHistory?.length, PHASE_HISTORY_LIMIT);
    assert.equal(status.phaseHistory[0]?.since, at(3).toISOString(), 'the three oldest are gone');
    assert.equal(status.phaseHistory.at(-1)?.since, at(PHASE_HISTORY_LIMIT + 2).toISOString());
  });

  it('is written by the decision that changes the phase: requested, admitted, then approved in one pass', () => {
    const requested = decide(input({ now: at(0) }));
    assert.deepEqual(requested.status.phaseHistory, [{ phase: 'Pending', since: at(0).toISOString() }]);

    const pending = action({}, requested.status);
    const plan = planAdmissions({
      now: at(2),
      actions: [pending],
      nodes: new Map([['w1', {}]]),
      policies: [],
    });
    const admitted = plan.admit[0]?.status;
    assert.deepEqual(
      admitted?.phaseHistory?.map((e) => [e.phase, e.since]),
      [
        ['Pending', at(0).toISOString()],
        ['WaitingForHealth', at(2).toISOString()],
      ],
    );

    // No checks, no hooks: one pass goes through RunningPreHooks to Approved, each recorded.
    const approved = decide(input({ now: at(3), action: action({}, admitted), node: node() }));
    assert.equal(approved.status.phase, 'Approved');
    assert.deepEqual(
      approved.status.phaseHistory?.map((e) => e.phase),
      ['Pending', 'WaitingForHealth', 'RunningPreHooks', 'Approved'],
    );
    assert.equal(approved.status.phaseHistory.at(-1)?.since, approved.status.phaseTime);
  });

  it('starts the history of an older status (none kept) at its next phase change', () => {
    const old = action(
      {},
      { phase: 'WaitingForHealth', startTime: T0.toISOString(), phaseTime: T0.toISOString() },
    );
    const d = decide(input({ now: at(1), action: old }));
    assert.equal(d.status.phase, 'Approved');
    assert.deepEqual(
      d.status.phaseHistory?.map((e) => e.phase),
      ['RunningPreHooks', 'Approved'],
    );
  });
});
