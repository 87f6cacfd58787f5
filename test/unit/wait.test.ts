import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WaitAbortedError, waitFor, WaitTimeoutError } from '../../src/wait.ts';
import { formatDuration } from '../../src/duration.ts';

describe('waitFor', () => {
  it('returns the first defined value', async () => {
    let calls = 0;
    const value = await waitFor('the third call', () => (++calls === 3 ? 'done' : undefined), {
      intervalMs: 1,
    });
    assert.equal(value, 'done');
    assert.equal(calls, 3);
  });

  it('names what it waited for, what it saw last and the last error when it times out', async () => {
    let calls = 0;
    const error = await waitFor(
      'the moon to turn blue',
      (observe) => {
        observe(`grey (look ${String(++calls)})`);
        if (calls % 2 === 0) throw new Error('telescope fogged');
        return undefined;
      },
      { timeoutMs: 30, intervalMs: 5 },
    ).catch((e: unknown) => e);
    assert.ok(error instanceof WaitTimeoutError);
    assert.match(
      error.message,
      /^timed out after 30ms waiting for the moon to turn blue \(last seen: grey \(look \d+\)/,
    );
    if (calls % 2 === 0) assert.match(error.message, /last error: telescope fogged/);
  });

  it('gives up at once on a WaitAbortedError', async () => {
    const started = Date.now();
    await assert.rejects(
      waitFor(
        'a dead process',
        () => {
          throw new WaitAbortedError('etcd exited with code 1');
        },
        { timeoutMs: 10_000 },
      ),
      /etcd exited with code 1/,
    );
    assert.ok(Date.now() - started < 1000);
  });

  it('stops when its signal aborts', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('cancelled by test')), 20);
    await assert.rejects(
      waitFor('never', () => undefined, { timeoutMs: 10_000, signal: controller.signal }),
      /cancelled by test/,
    );
  });
});

describe('formatDuration', () => {
  for (const [ms, text] of [
    [250, '250ms'],
    [1500, '1.5s'],
    [42_000, '42s'],
    [60_000, '1m'],
    [95_000, '1m35s'],
  ] as const) {
    it(`${String(ms)} → ${text}`, () => assert.equal(formatDuration(ms), text));
  }
});
