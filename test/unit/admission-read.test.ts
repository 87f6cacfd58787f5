import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { afterWrite, cacheShowsEverySlot, parseResourceVersion } from '../../src/actions/admission-read.ts';

describe('where the admission pass counts slots from', () => {
  it('reads resourceVersions as numbers only when they are decimal numbers', () => {
    assert.equal(parseResourceVersion('12345'), 12345n);
    assert.equal(parseResourceVersion('98765432109876543210'), 98765432109876543210n);
    for (const rv of [undefined, '', 'abc', '12a', '-1', '1.5', ' 1'])
      assert.equal(parseResourceVersion(rv), undefined, String(rv));
  });

  it('never trusts the cache before a quorum read made while leading', () => {
    assert.equal(cacheShowsEverySlot({}, '100'), false);
    assert.equal(cacheShowsEverySlot({ written: 10n }, '100'), false);
  });

  it('trusts it once the watch has delivered both the quorum read and our last write', () => {
    const state = { quorum: 50n, written: 70n };
    assert.equal(cacheShowsEverySlot(state, '49'), false, 'behind the quorum read');
    assert.equal(cacheShowsEverySlot(state, '60'), false, 'behind our last write');
    assert.equal(cacheShowsEverySlot(state, '70'), true);
    assert.equal(cacheShowsEverySlot(state, '71'), true);
    assert.equal(cacheShowsEverySlot(state, undefined), false, 'relisting');
    assert.equal(cacheShowsEverySlot(state, 'x7'), false, 'not a number');
  });

  it('keeps the newest write, and forgets the quorum read on a version it cannot compare', () => {
    let state = afterWrite({ quorum: 5n }, '20');
    state = afterWrite(state, '12');
    assert.deepEqual(state, { quorum: 5n, written: 20n });
    assert.equal(cacheShowsEverySlot(state, '19'), false);
    state = afterWrite(state, 'opaque');
    assert.equal(state.quorum, undefined);
    assert.equal(cacheShowsEverySlot(state, '1000'), false);
  });
});
