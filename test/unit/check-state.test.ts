import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  applyOutcome,
  significantlyChanged,
  unknownState,
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
