import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  applyOutcome,
  significantlyChanged,
  unknownState,
  writtenState,
  type CheckState,
  type Outcome,
} from '../../src/checks/state.ts';

const ok: Outcome = { healthy: true, reason: 'ProbeSucceeded', message: 'HEALTH_OK' };
const bad: Outcome = { healthy: false, reason: 'ProbeFailed', message: 'HEALTH_WARN' };
const thresholds = { successThreshold: 2, failureThreshold: 3 };
const t = (s: number) => new Date(Date.UTC(2026, 10, 30, 0, 0, s));

function run(outcomes: Outcome[], start: CheckState = unknownState(t(0))): CheckState[] {
  const states: CheckState[] = [];
  let state = start;
  outcomes.forEach((o, i) => {
    state = applyOutcome(state, o, thresholds, t(i + 1));
    states.push(state);
  });
  return states;
}

describe('check state', () => {
  it('starts unknown, which is not healthy', () => {
    const s = unknownState();
    assert.equal(s.healthy, undefined);
    assert.equal(s.reason, 'NotProbed');
  });

  it('becomes healthy only after successThreshold successes', () => {
    const [first, second] = run([ok, ok]);
    assert.equal(first?.healthy, undefined);
    assert.match(first?.message ?? '', /success 1\/2 before healthy/);
    assert.equal(second?.healthy, true);
    assert.equal(second.message, 'HEALTH_OK');
    assert.deepEqual(second.lastTransitionTime, t(2));
  });

  it('fails closed: the first failure of an unknown check makes it unhealthy at once', () => {
    const [first] = run([bad]);
    assert.equal(first?.healthy, false);
    assert.equal(first.reason, 'ProbeFailed');
  });

  it('stays healthy through failures below failureThreshold, saying so, then turns', () => {
    const states = run([ok, ok, bad, bad, bad]);
    assert.deepEqual(
      states.map((s) => s.healthy),
      [undefined, true, true, true, false],
    );
    assert.match(states[3]?.message ?? '', /HEALTH_WARN \(failure 2\/3 before unhealthy\)/);
    assert.deepEqual(states[4]?.lastTransitionTime, t(5));
    assert.equal(states[4].consecutiveFailures, 3);
  });

  it('a success resets the failure count', () => {
    const states = run([ok, ok, bad, bad, ok, bad, bad]);
    assert.equal(states.at(-1)?.healthy, true);
    assert.equal(states.at(-1)?.consecutiveFailures, 2);
  });

  it('keeps lastTransitionTime while the state holds', () => {
    const states = run([ok, ok, ok, ok]);
    assert.deepEqual(states[3]?.lastTransitionTime, t(2));
    assert.deepEqual(states[3].lastProbeTime, t(4));
  });

  it('reports progress toward a transition as a significant change, and steady repetition as not', () => {
    const states = run([ok, ok, ok, bad, bad, bad, bad, bad]);
    const changed = (a: number, b: number) =>
      significantlyChanged(states[a] as CheckState, states[b] as CheckState, thresholds);
    assert.equal(changed(1, 2), false, 'healthy and unchanged');
    assert.equal(changed(2, 3), true, 'first failure while healthy');
    assert.equal(changed(4, 5), true, 'turned unhealthy');
    assert.equal(changed(6, 7), false, 'unhealthy and unchanged');
  });
});

describe('writtenState: what an earlier controller wrote, read back', () => {
  const status = {
    observedGeneration: 3,
    healthy: true,
    consecutiveFailures: 0,
    consecutiveSuccesses: 42,
    lastProbeTime: '2026-12-01T10:00:00Z',
    lastTransitionTime: '2026-12-01T09:00:00Z',
    message: '3/3 nodes Ready',
    conditions: [{ type: 'Healthy', reason: 'ProbeSucceeded' }],
  };

  it('is the state it wrote, for the same generation of a Cluster-scoped check', () => {
    const state = writtenState(status, 3);
    assert.deepEqual(state, {
      healthy: true,
      reason: 'ProbeSucceeded',
      message: '3/3 nodes Ready',
      consecutiveFailures: 0,
      consecutiveSuccesses: 42,
      lastProbeTime: new Date('2026-12-01T10:00:00Z'),
      lastTransitionTime: new Date('2026-12-01T09:00:00Z'),
    });
    // A first probe after a restart that finds the same is no change worth a write.
    const first = applyOutcome(
      unknownState(),
      { healthy: true, reason: 'ProbeSucceeded', message: '3/3 nodes Ready' },
      { successThreshold: 1, failureThreshold: 3 },
      new Date(),
    );
    assert.equal(
      significantlyChanged(state as CheckState, first, { successThreshold: 1, failureThreshold: 3 }),
      false,
    );
  });

  it('is nothing for another generation, a Node-scoped status, or one it cannot read', () => {
    assert.equal(writtenState(status, 4), undefined);
    assert.equal(writtenState(undefined, 3), undefined);
    assert.equal(writtenState({ ...status, nodes: { evaluated: 1 } }, 3), undefined);
    assert.equal(writtenState({ ...status, conditions: [] }, 3), undefined);
    assert.equal(
      writtenState({ ...status, conditions: [{ type: 'Healthy', reason: 'Invented' }] }, 3),
      undefined,
    );
    assert.equal(
      writtenState({ ...status, healthy: null, conditions: [{ type: 'Healthy', reason: 'NotProbed' }] }, 3)
        ?.healthy,
      undefined,
    );
  });
});
