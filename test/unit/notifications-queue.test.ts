// The notification queue: adding never waits; steps of one subject go in order, at most
// one message per interval (later steps together in the next); retries back off and honour
// Retry-After; past its bound the oldest steps that are not an end are dropped, and an end
// is not dropped for a step that is not.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AttemptOutcome } from '../../src/notifications/delivery.ts';
import type { Message, StepRecord } from '../../src/notifications/message.ts';
import { NotificationQueue } from '../../src/notifications/queue.ts';
import type { Subject } from '../../src/notifications/subject.ts';
import { sleep, waitFor } from '../../src/wait.ts';

const subject = (name: string): Subject => ({ kind: 'NodeAction', name, uid: name, nodes: [] });
const step = (reason: string, final = false): StepRecord => ({
  step: final ? 'Done' : 'Started',
  reason,
  message: reason,
  type: 'Normal',
  time: new Date().toISOString(),
  final,
});

/** Records each attempt, answering with `answer(attempt number of that message)`. */
function recorder(answer: (m: Message, attempt: number) => AttemptOutcome | Promise<AttemptOutcome>) {
  const attempts: { id: string; at: number; reasons: string[] }[] = [];
  const counts = new Map<string, number>();
  return {
    attempts,
    deliver: async (m: Message) => {
      const n = (counts.get(m.id) ?? 0) + 1;
      counts.set(m.id, n);
      attempts.push({ id: m.id, at: Date.now(), reasons: m.steps.map((s) => s.reason) });
      return answer(m, n);
    },
  };
}

describe('NotificationQueue', () => {
  it('sends the first step at once, then coalesces a subject’s later steps into one message per interval, in order', async () => {
    const r = recorder(() => ({ ok: true }));
    const delivered: string[] = [];
    const q = new NotificationQueue({
      minIntervalMs: 300,
      deliver: r.deliver,
      delivered: (p, o) => delivered.push(`${p}:${String(o.ok)}`),
    });
    const t0 = Date.now();
    q.add('p', subject('a'), step('Requested'));
    q.add('p', subject('a'), step('Pending'));
    q.add('p', subject('a'), step('Approved'));
    q.add('p', subject('b'), step('Requested')); // another subject: its own rate
    q.add('p', subject('a'), step('Succeeded', true));
    assert.ok(Date.now() - t0 < 20, 'adding never waits');
    await waitFor('two messages of a', () => (r.attempts.length >= 3 ? true : undefined), {
      timeoutMs: 2000,
    });
    assert.deepEqual(
      r.attempts.map((a) => a.reasons),
      [['Requested'], ['Requested'], ['Pending', 'Approved', 'Succeeded']],
    );
    const last = r.attempts[2];
    assert.ok(
      last && last.at - t0 >= 290,
      `the second message of a waited its interval (${String(last?.at)})`,
    );
    assert.deepEqual(delivered, ['p:true', 'p:true', 'p:true']);
    q.stop();
  });

  it('keeps one subject’s messages in order while one is retried, honouring Retry-After', async () => {
    const r = recorder((m, n) =>
      m.steps[0]?.reason === 'Requested' && n < 3
        ? { ok: false, retryable: true, retryAfterMs: 150, error: 'HTTP 503' }
        : { ok: true },
    );
    const q = new NotificationQueue({ minIntervalMs: 0, backoffBaseMs: 10, deliver: r.deliver });
    q.add('p', subject('a'), step('Requested'));
    await sleep(20);
    q.add('p', subject('a'), step('Approved'));
    await waitFor('the second step', () => (r.attempts.length >= 4 ? true : undefined), { timeoutMs: 3000 });
    assert.deepEqual(
      r.attempts.map((a) => a.reasons.join()),
      ['Requested', 'Requested', 'Requested', 'Approved'],
    );
    const [first, second, third] = r.attempts;
    assert.ok(first && second && third);
    assert.ok(second.at - first.at >= 140, `Retry-After honoured: ${String(second.at - first.at)} ms`);
    assert.ok(third.at - second.at >= 140);
    q.stop();
  });

  it('gives up after its attempts, and does not retry an answer that will not change', async () => {
    const failures: string[] = [];
    const retried = recorder(() => ({ ok: false, retryable: true, error: 'down' }));
    const q = new NotificationQueue({
      minIntervalMs: 0,
      maxAttempts: 4,
      backoffBaseMs: 5,
      deliver: retried.deliver,
      delivered: (_, o) => failures.push(o.ok ? 'ok' : o.error),
    });
    q.add('p', subject('a'), step('Requested'));
    await waitFor('given up', () => (failures.length ? true : undefined), { timeoutMs: 3000 });
    assert.equal(retried.attempts.length, 4);
    assert.deepEqual(failures, ['down']);
    assert.equal(q.size, 0);
    q.stop();

    const final = recorder(() => ({ ok: false, retryable: false, error: 'HTTP 404' }));
    const q2 = new NotificationQueue({ minIntervalMs: 0, deliver: final.deliver });
    q2.add('p', subject('a'), step('Requested'));
    await sleep(100);
    assert.equal(final.attempts.length, 1);
    q2.stop();
  });

  it('is bounded: a receiver that hangs fills it, then the oldest steps that are not an end are dropped', async () => {
    const hang = new Promise<AttemptOutcome>(() => undefined);
    const r = recorder(() => hang);
    const dropped: string[] = [];
    const q = new NotificationQueue({
      capacity: 10,
      inFlightPerPolicy: 2,
      minIntervalMs: 60_000,
      deliver: r.deliver,
      dropped: (p) => dropped.push(p),
    });
    const t0 = Date.now();
    for (let i = 0; i < 10_000; i++) q.add('p', subject(`s${String(i % 50)}`), step(`Step${String(i)}`));
    assert.ok(Date.now() - t0 < 2000, `10,000 adds took ${String(Date.now() - t0)} ms`);
    assert.equal(q.size, 10);
    assert.equal(q.drops, 9990);
    assert.equal(dropped.length, 9990);
    // Ends are kept over steps that are not: ten ends push out everything else waiting.
    for (let i = 0; i < 10; i++) q.add('p', subject(`end${String(i)}`), step(`End${String(i)}`, true));
    assert.equal(q.size, 10);
    // ... and an end is never dropped for a step that is not one.
    q.add('p', subject('late'), step('Late'));
    assert.equal(q.size, 10);
    await sleep(10);
    assert.ok(r.attempts.length <= 2, 'two in flight at most');
    q.stop();
  });
});
