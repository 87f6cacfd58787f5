import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  floorFromSerialMs,
  handOverGapsMs,
  idealMakespanMs,
  machineBoundMs,
  medianByPhase,
  perNodeBeyondIdle,
  phaseDurations,
  ratio,
  slotUse,
  times,
} from '../../bench/rollout-figures.ts';

describe('the rollout benchmark: ideal makespan', () => {
  it('is whole waves of maxParallel, the last one partial counted whole', () => {
    assert.equal(idealMakespanMs(1000, 50, 4000), 20 * 4000);
    assert.equal(idealMakespanMs(1001, 50, 4000), 21 * 4000);
    assert.equal(idealMakespanMs(900, 50, 4000), 18 * 4000);
    assert.equal(idealMakespanMs(3, 50, 4000), 4000);
    assert.equal(idealMakespanMs(5, 1, 4000), 5 * 4000);
    assert.equal(idealMakespanMs(0, 50, 4000), 0);
  });
  it('refuses a parallelism below one', () => assert.throws(() => idealMakespanMs(10, 0, 1), /maxParallel/));
  it('takes the floor as the serial makespan per node, and a ratio against a positive baseline', () => {
    assert.equal(floorFromSerialMs(21_000, 5), 4200);
    assert.throws(() => floorFromSerialMs(1, 0), /at least one node/);
    assert.equal(ratio(92_000, 80_000), 1.15);
    assert.throws(() => ratio(1, 0), /positive baseline/);
  });
});

describe('the rollout benchmark: cost per node', () => {
  it('takes the idle cost over as long out before dividing, never below zero', () => {
    // 5,000 requests over 100 s, 10 a second of them idle: 4,000 for 100 nodes.
    assert.equal(perNodeBeyondIdle(5000, 100_000, 0.01, 100), 40);
    assert.equal(perNodeBeyondIdle(500, 100_000, 0.01, 100), 0);
    assert.throws(() => perNodeBeyondIdle(1, 1, 0, 0), /at least one node/);
  });
});

describe('the rollout benchmark: slots', () => {
  it('counts the busy share of maxParallel slots over the makespan', () => {
    const spans = [
      { start: 0, end: 10 },
      { start: 0, end: 10 },
      { start: 10, end: 20 },
    ];
    assert.equal(slotUse(spans, 2, 20), 30 / 40);
    assert.equal(slotUse([], 2, 0), 0);
  });
  it('pairs each start past the first wave with the end it replaced', () => {
    const spans = [
      { start: 0, end: 10 },
      { start: 1, end: 12 },
      { start: 13, end: 20 },
      { start: 12, end: 30 },
    ];
    // In order: the third start (12) fills the first freed slot (10), the fourth (13) the second (12).
    assert.deepEqual(handOverGapsMs(spans, 2), [2, 1]);
    assert.deepEqual(handOverGapsMs(spans.slice(0, 2), 2), []);
  });
});

describe('the rollout benchmark: where an action spends its time', () => {
  it('gives each phase the time to the next, the last one to the end, a phase entered twice both', () => {
    const t = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
    const history = [
      { phase: 'Pending', since: t(0) },
      { phase: 'Executing', since: t(1) },
      { phase: 'WaitingForNode', since: t(4) },
      { phase: 'Executing', since: t(6) },
    ];
    const d = phaseDurations(history, Date.parse(t(7)));
    assert.deepEqual(
      [...d],
      [
        ['Pending', 1000],
        ['Executing', 4000],
        ['WaitingForNode', 2000],
      ],
    );
  });
  it('takes the median of each phase over the actions that entered it', () => {
    const a = new Map([
      ['Pending', 100],
      ['Executing', 3000],
    ]);
    const b = new Map([['Pending', 300]]);
    const c = new Map([
      ['Pending', 200],
      ['Executing', 1000],
    ]);
    assert.deepEqual(medianByPhase([a, b, c]), [
      ['Pending', 200],
      ['Executing', 1000],
    ]);
  });
});

describe('the rollout benchmark: ratios as printed', () => {
  it('says n/a rather than divide by nothing', () => {
    assert.equal(times(92, 80), '1.15×');
    assert.equal(times(5, 0), 'n/a');
    assert.equal(times(Number.NaN, 3), 'n/a');
  });
});

describe('the rollout benchmark: what the machine allows', () => {
  it("is every process's CPU spread over the cores, none idle", () => {
    assert.equal(machineBoundMs([9_000, 33_000, 4_000, 4_000], 2), 25_000);
    assert.equal(machineBoundMs(new Map([['etcd', 3_000]]).values(), 1), 3_000);
    assert.equal(machineBoundMs([], 2), 0);
    assert.throws(() => machineBoundMs([1], 0), /cores must be at least 1/);
  });
});
