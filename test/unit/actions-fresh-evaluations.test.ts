// The fresh evaluations begun ahead of the health gate: taken once, only while young,
// and only for exactly the checks the gate asks about.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FreshEvaluations, PREFETCH_FRESH_MS } from '../../src/actions/fresh-evaluations.ts';
import type { CheckState } from '../../src/checks/state.ts';

function counting() {
  const calls: string[][] = [];
  const checks = {
    evaluateNow: (names: readonly string[]) => {
      calls.push([...names]);
      return Promise.resolve(new Map<string, CheckState | undefined>(names.map((n) => [n, undefined])));
    },
  };
  return { calls, checks };
}

test('an evaluation begun ahead is taken once, for the same checks in any order', async () => {
  const { calls, checks } = counting();
  const fresh = new FreshEvaluations(checks);
  fresh.begin('a', ['x', 'y']);
  fresh.begin('a', ['y', 'x']); // the same, still young: not begun twice
  assert.equal(calls.length, 1);
  const taken = fresh.take('a', ['y', 'x']);
  assert.ok(taken);
  assert.deepEqual([...(await taken).states.keys()], ['x', 'y']);
  assert.equal(fresh.take('a', ['x', 'y']), undefined, 'a second gate pass evaluates anew');
});

test('an evaluation of other checks, or too old, is not what the gate judges on', async () => {
  let now = 1_000_000;
  const { checks } = counting();
  const fresh = new FreshEvaluations(checks, () => now);
  fresh.begin('a', ['x']);
  assert.equal(fresh.take('a', ['x', 'y']), undefined, 'a check added since');
  fresh.begin('a', ['x']);
  await fresh.settle('a', 1000);
  assert.equal(fresh.finished('a'), true);
  now += PREFETCH_FRESH_MS + 1;
  assert.equal(fresh.take('a', ['x']), undefined, 'too old');
  fresh.begin('b', ['x']);
  fresh.forget('b');
  assert.equal(fresh.take('b', ['x']), undefined, 'forgotten with its action');
});

test('settle waits no longer than asked for an evaluation still running', async () => {
  const fresh = new FreshEvaluations({ evaluateNow: () => new Promise(() => undefined) });
  fresh.begin('a', ['x']);
  const t0 = Date.now();
  await fresh.settle('a', 30);
  assert.ok(Date.now() - t0 < 1000);
  assert.equal(fresh.finished('a'), false);
});
