// The EventRecorder's queueing: Events go out in the background, in order per object, a
// few at a time, and past the backlog they are dropped rather than held. (What the API
// server does with them is tested against the sandbox; here only when each is sent.)
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EVENT_BACKLOG, EVENT_SENDS_IN_FLIGHT, EventRecorder } from '../../src/kube/events.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { sleep } from '../../src/wait.ts';

/** Takes Event writes and answers each when told to. */
class SlowServer {
  readonly received: { object: string; reason: string }[] = [];
  inFlight = 0;
  mostInFlight = 0;
  private readonly pending: (() => void)[] = [];
  readonly rest = {
    request: async (_path: string, req: { body: { involvedObject: { name: string }; reason: string } }) => {
      this.received.push({ object: req.body.involvedObject.name, reason: req.body.reason });
      this.inFlight++;
      this.mostInFlight = Math.max(this.mostInFlight, this.inFlight);
      await new Promise<void>((r) => this.pending.push(r));
      this.inFlight--;
      return {};
    },
  } as unknown as RestClient;

  busy(): boolean {
    return this.inFlight > 0;
  }

  answerAll(): void {
    for (const r of this.pending.splice(0)) r();
  }
}

const object = (name: string) => ({ metadata: { name, uid: `uid-${name}` } });

describe('EventRecorder', () => {
  it('returns at once, sends a few at a time, and keeps each object’s order', async () => {
    const server = new SlowServer();
    const recorder = new EventRecorder(server.rest, silentLogger());
    const started = performance.now();
    for (let i = 0; i < 3; i++)
      for (const name of ['a', 'b', 'c', 'd', 'e', 'f'])
        await recorder.record(object(name), { type: 'Normal', reason: `R${String(i)}`, message: 'm' });
    assert.ok(performance.now() - started < 100, 'recording never waits for the API server');
    await sleep(10);
    assert.equal(server.inFlight, EVENT_SENDS_IN_FLIGHT);
    while (server.received.length < 18 || server.busy()) {
      server.answerAll();
      await sleep(1);
    }
    await recorder.flush();
    assert.equal(server.mostInFlight, EVENT_SENDS_IN_FLIGHT);
    for (const name of ['a', 'b', 'c', 'd', 'e', 'f'])
      assert.deepEqual(
        server.received.filter((e) => e.object === name).map((e) => e.reason),
        ['R0', 'R1', 'R2'],
        `${name}'s Events in the order recorded`,
      );
  });

  it('drops what is past the backlog instead of holding it', async () => {
    const server = new SlowServer();
    const recorder = new EventRecorder(server.rest, silentLogger());
    for (let i = 0; i < EVENT_BACKLOG + 50; i++)
      await recorder.record(object(`o${String(i)}`), { type: 'Normal', reason: 'R', message: 'm' });
    while (server.busy() || server.received.length < EVENT_BACKLOG) {
      server.answerAll();
      await sleep(0);
    }
    await recorder.flush();
    assert.equal(server.received.length, EVENT_BACKLOG);
  });
});
