import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { median, percentile } from '../../bench/stats.ts';

describe('percentile', () => {
  const samples = Array.from({ length: 200 }, (_, i) => 200 - i); // 200..1, unsorted
  it('uses the nearest rank', () => {
    assert.equal(percentile(samples, 50), 100);
    assert.equal(percentile(samples, 99), 198);
    assert.equal(percentile(samples, 100), 200);
    assert.equal(percentile(samples, 0), 1);
    assert.equal(median([3, 1, 2]), 2);
  });
  it('refuses an empty sample', () => assert.throws(() => percentile([], 50), /no samples/));
});
