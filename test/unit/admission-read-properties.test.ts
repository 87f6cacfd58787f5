// Invariant 3 (never more slot holders than the budget) when the admission pass counts
// from its cache (src/actions/admission-read.ts), over two replicas whose watches lag
// independently, leadership changing hands, writes of other resources moving the
// revision on, and slots freed by the leader or by anyone (a deletion).
//
// The model is harsher than the controller: a replica's cache is only what its watch has
// delivered (the controller also takes in its own writes' responses at once), and a pass
// that trusts the cache counts from that prefix alone.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  afterWrite,
  cacheShowsEverySlot,
  type AdmissionReadState,
} from '../../src/actions/admission-read.ts';

const BUDGET = 2;

interface Change {
  rev: bigint;
  /** +1 a slot taken (an admission), -1 one freed. */
  delta: 1 | -1;
}

interface Replica {
  delivered: number;
  state: AdmissionReadState;
}

type Step =
  | { type: 'deliver'; replica: 0 | 1; count: number }
  | { type: 'pass'; replica: 0 | 1 }
  | { type: 'finish' }
  | { type: 'delete' }
  | { type: 'other-write' }
  | { type: 'handover' };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant('deliver' as const),
      replica: fc.constantFrom(0 as const, 1 as const),
      count: fc.integer({ min: 1, max: 3 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant('pass' as const),
      replica: fc.constantFrom(0 as const, 1 as const),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ type: 'finish' as const }) },
  { weight: 1, arbitrary: fc.constant({ type: 'delete' as const }) },
  { weight: 1, arbitrary: fc.constant({ type: 'other-write' as const }) },
  { weight: 1, arbitrary: fc.constant({ type: 'handover' as const }) },
);

function held(changes: readonly Change[]): number {
  return changes.reduce((n, c) => n + c.delta, 0);
}

/** Runs the steps; returns the most slots ever held and how many passes trusted a cache. */
function run(steps: readonly Step[], rule = cacheShowsEverySlot): { most: number; fromCache: number } {
  let rev = 100n;
  const log: Change[] = [];
  const replicas: [Replica, Replica] = [
    { delivered: 0, state: {} },
    { delivered: 0, state: {} },
  ];
  let leader: 0 | 1 = 0;
  let most = 0;
  let fromCache = 0;
  const watched = (r: Replica): string =>
    String(r.delivered === 0 ? 100n : (log[r.delivered - 1]?.rev ?? 100n));
  const write = (delta: 1 | -1, by?: Replica) => {
    rev++;
    log.push({ rev, delta });
    if (by) by.state = afterWrite(by.state, String(rev));
    most = Math.max(most, held(log));
  };
  for (const s of steps) {
    switch (s.type) {
      case 'deliver': {
        const r = replicas[s.replica];
        r.delivered = Math.min(log.length, r.delivered + s.count);
        break;
      }
      case 'other-write':
        rev++; // a Lease renewed, an Event: the revision moves, no NodeAction changes
        break;
      case 'handover':
        // The old leader's next reconcile as a follower, and the new one's enqueueAll.
        for (const r of replicas) r.state = { ...r.state, quorum: undefined };
        leader = leader === 0 ? 1 : 0;
        break;
      case 'pass': {
        if (s.replica !== leader) break; // followers return at once
        const r = replicas[s.replica];
        let count: number;
        if (rule(r.state, watched(r))) {
          fromCache++;
          count = held(log.slice(0, r.delivered));
        } else {
          count = held(log);
          r.state = { ...r.state, quorum: rev };
        }
        if (count < BUDGET) write(1, r);
        break;
      }
      case 'finish':
        // The leader writes an action's end, when some slot is held.
        if (held(log) > 0) write(-1, replicas[leader]);
        break;
      case 'delete':
        // Anyone deletes an action holding a slot: no write of the controller.
        if (held(log) > 0) write(-1);
        break;
    }
  }
  return { most, fromCache };
}

describe('admission from the cache: invariant 3 across lagging watches and leader changes', () => {
  it('never holds more slots than the budget, with passes counting from the cache', () => {
    let cached = 0;
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 80 }), (steps) => {
        const { most, fromCache } = run(steps);
        cached += fromCache;
        assert.ok(most <= BUDGET, `${String(most)} slots held, budget ${String(BUDGET)}`);
      }),
      { numRuns: 3000, seed: Number(process.env.FC_SEED ?? 20261202) },
    );
    console.log(cached);
    assert.ok(cached > 100, `the cache path was taken (${String(cached)} passes)`);
  });

  it('is broken by a rule that trusts the cache without the watch reaching our own write', () => {
    const careless = (state: AdmissionReadState, watched: string | undefined) =>
      cacheShowsEverySlot({ ...state, written: undefined }, watched);
    const found = fc.check(
      fc.property(
        fc.array(step, { minLength: 1, maxLength: 80 }),
        (steps) => run(steps, careless).most <= BUDGET,
      ),
      { numRuns: 3000, seed: 20261202 },
    );
    assert.equal(found.failed, true, 'the model catches a rule that forgets our own writes');
  });

  it('is broken by a rule that keeps trusting the cache across a leader change', () => {
    let remembered: bigint | undefined;
    const forgetful = (state: AdmissionReadState, watched: string | undefined) => {
      remembered ??= state.quorum;
      return cacheShowsEverySlot({ ...state, quorum: state.quorum ?? remembered }, watched);
    };
    const found = fc.check(
      fc.property(fc.array(step, { minLength: 1, maxLength: 80 }), (steps) => {
        remembered = undefined;
        return run(steps, forgetful).most <= BUDGET;
      }),
      { numRuns: 3000, seed: 20261202 },
    );
    assert.equal(found.failed, true, 'the model catches a rule that survives a handover');
  });
});
