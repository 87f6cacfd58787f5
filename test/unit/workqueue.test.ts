import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SLICE_MS, WorkQueue } from '../../src/kube/workqueue.ts';
import { silentLogger } from '../../src/log.ts';
import { sleep, waitFor } from '../../src/wait.ts';

describe('WorkQueue', () => {
  it('collapses repeated adds of a key and never runs one key twice at once', async () => {
    const active = new Set<string>();
    let overlaps = 0;
    const runs: string[] = [];
    const q = new WorkQueue({
      name: 't',
      log: silentLogger(),
      concurrency: 4,
      reconcile: async (key) => {
        if (active.has(key)) overlaps++;
        active.add(key);
        runs.push(key);
        await sleep(20);
        active.delete(key);
        return undefined;
      },
    });
    q.start();
    for (let i = 0; i < 10; i++) q.add('a');
    q.add('b');
    await sleep(5);
    q.add('a'); // arrives while a is being processed: exactly one more run
    q.add('a');
    await waitFor('the queue to drain', () => (q.length === 0 ? true : undefined));
    await q.idle();
    q.stop();
    assert.equal(overlaps, 0);
    assert.deepEqual(runs.filter((k) => k === 'a').length, 2);
    assert.deepEqual(runs.filter((k) => k === 'b').length, 1);
  });

  it('starts an express key at once while every worker is busy, and never twice at once', async () => {
    const started: string[] = [];
    let expressActive = 0;
    let expressOverlaps = 0;
    const release = Promise.withResolvers<undefined>();
    const q = new WorkQueue({
      name: 't',
      log: silentLogger(),
      concurrency: 1,
      express: new Set(['@pass']),
      reconcile: async (key) => {
        started.push(key);
        if (key === '@pass') {
          if (expressActive > 0) expressOverlaps++;
          expressActive++;
          await sleep(10);
          expressActive--;
        } else {
          await release.promise;
        }
        return undefined;
      },
    });
    q.start();
    q.add('slow');
    q.add('waits');
    q.add('@pass');
    await waitFor('the express key to run', () => (started.includes('@pass') ? true : undefined));
    assert.deepEqual(
      started,
      ['slow', '@pass'],
      'the express key ran beside the busy worker; the other waits',
    );
    q.add('@pass'); // while it runs: once more, after it
    q.add('@pass');
    await waitFor('the second express run', () =>
      started.filter((k) => k === '@pass').length === 2 ? true : undefined,
    );
    release.resolve(undefined);
    await waitFor('the queue to drain', () => (q.length === 0 ? true : undefined));
    q.stop();
    assert.equal(expressOverlaps, 0);
    assert.deepEqual(started.filter((k) => k === 'waits').length, 1);
  });

  it('retries failures with growing delays, and honours requeueAfter', async () => {
    const times: number[] = [];
    const q = new WorkQueue({
      name: 't',
      log: silentLogger(),
      baseDelayMs: 20,
      reconcile: (key) => {
        times.push(Date.now());
        if (key === 'flaky' && times.length < 4) return Promise.reject(new Error('apiserver hiccup'));
        return Promise.resolve(times.length === 4 ? { requeueAfterMs: 50 } : undefined);
      },
    });
    q.start();
    q.add('flaky');
    await waitFor('five runs', () => (times.length >= 5 ? true : undefined), { timeoutMs: 5000 });
    q.stop();
    const gaps = times.slice(1).map((t, i) => t - (times[i] as number));
    assert.ok(
      (gaps[0] as number) >= 15 && (gaps[1] as number) >= 35 && (gaps[2] as number) >= 75,
      `backoff gaps ${gaps.join(',')}`,
    );
    assert.ok((gaps[3] as number) >= 45, `requeueAfter gap ${String(gaps[3])}`);
    assert.equal(q.stats.failures, 3);
  });

  it('lets the event loop turn while thousands of reconciles finish without waiting', async () => {
    // A start queues every Node; most have nothing to do and their reconciles never wait.
    // Chained in microtasks they would hold the loop (and the readiness probe) for all of it.
    let done = 0;
    const q = new WorkQueue({
      name: 't',
      log: silentLogger(),
      reconcile: () => {
        const until = performance.now() + 0.1;
        while (performance.now() < until); // a little synchronous work per key
        done++;
        return Promise.resolve(undefined);
      },
    });
    for (let i = 0; i < 5_000; i++) q.add(`node-${String(i)}`);
    let turnedAt: number | undefined;
    let longest = 0;
    let last = performance.now();
    const ticker = setInterval(() => {
      const now = performance.now();
      longest = Math.max(longest, now - last);
      last = now;
    }, 0);
    setImmediate(() => (turnedAt = done));
    q.start();
    await q.idle();
    clearInterval(ticker);
    assert.equal(done, 5_000);
    assert.ok(
      turnedAt !== undefined && turnedAt < 5_000,
      `the loop turned only after ${String(turnedAt)} keys`,
    );
    // 5,000 keys at 0.1 ms are 500 ms of work: no turn of the loop may wait for most of it
    // (a turn takes about SLICE_MS; the bound leaves room for a loaded machine).
    assert.ok(longest < 40 * SLICE_MS, `a turn of the loop waited ${longest.toFixed(0)} ms`);
  });
});
