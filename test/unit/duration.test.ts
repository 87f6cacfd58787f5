import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseDuration } from '../../src/duration.ts';

describe('parseDuration', () => {
  for (const [text, ms] of [
    ['30s', 30_000],
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['250ms', 250],
    ['1.5s', 1500],
    ['0', 0],
  ] as const) {
    it(`${text} is ${String(ms)}ms`, () => assert.equal(parseDuration(text), ms));
  }
  for (const text of ['', '30', 's', '5 m', '1h junk', '-1s', '1d']) {
    it(`refuses ${JSON.stringify(text)}`, () =>
      assert.throws(() => parseDuration(text), /is not a duration/));
  }
});
