// The notifier behind the EventRecorder: Events that are steps reach the receiver this
// test starts, a tentative hold only if the action still waits after the grace, and no
// secret (the URL's token, the signing key) ever reaches a log line or a status write.
// The API server is a stand-in answering the Secret reads and recording the status
// writes (the sandbox test, test/integration/notifications.test.ts, runs the real one).
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { EventRecorder } from '../../src/kube/events.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { createLogger } from '../../src/log.ts';
import { Notifier } from '../../src/notifications/notifier.ts';
import type { NotificationPolicyObject } from '../../src/notifications/status.ts';
import { waitFor } from '../../src/wait.ts';

const TOKEN = 'T000/B000/xoxb-very-secret-token';
const KEY = 'the-signing-key-value';
const bodies: string[] = [];
let answer: (res: ServerResponse) => void = (res) => res.end();
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (c: Buffer) => (body += c.toString()));
  req.on('end', () => {
    bodies.push(body);
    answer(res);
  });
});
let url = '';

before(async () => {
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${String((receiver.address() as AddressInfo).port)}/services/${TOKEN}`;
});
after(() => {
  receiver.closeAllConnections();
  receiver.close();
});

/** The API server's part: Secrets in gatehouse-system, status writes recorded. */
function apiStandIn() {
  const writes: string[] = [];
  const rest = {
    request: (path: string, req?: { method?: string; body?: unknown }) => {
      if (req?.method === 'PATCH') {
        writes.push(JSON.stringify(req.body));
        return Promise.resolve({});
      }
      if (path.endsWith('/secrets/hook'))
        return Promise.resolve({
          data: {
            url: Buffer.from(url).toString('base64'),
            key: Buffer.from(KEY).toString('base64'),
          },
        });
      return Promise.resolve({});
    },
  } as unknown as RestClient;
  return { rest, writes };
}

function policy(format: 'Generic' | 'Slack'): NotificationPolicyObject {
  return {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'NotificationPolicy',
    metadata: { name: 'ops', generation: 1, resourceVersion: '1' },
    spec: {
      webhook: {
        format,
        urlSecretRef: { name: 'hook', key: 'url' },
        ...(format === 'Generic' ? { signingSecretRef: { name: 'hook', key: 'key' } } : {}),
        timeout: '1s',
      },
    },
  };
}

const action = (phase: string) => ({
  apiVersion: 'talos.dev/v1alpha1',
  kind: 'NodeAction',
  metadata: { name: 'reboot-w1', uid: 'uid-1' },
  spec: { nodeName: 'worker-1', action: 'Reboot', requestedBy: 'alice', execution: 'External' },
  status: { phase },
});

describe('Notifier', () => {
  it('sends the steps among the Events, confirms a hold after its grace, and keeps secrets out of logs and status', async () => {
    const lines: string[] = [];
    const log = createLogger({
      destination: new Writable({
        write(chunk: Buffer, _e, done) {
          lines.push(chunk.toString());
          done();
        },
      }),
    });
    const api = apiStandIn();
    let current = { phase: 'Pending', message: 'waiting for ActionPolicy one-at-a-time: 1 of 1 busy' };
    const p = policy('Generic');
    const notifier = new Notifier({
      rest: api.rest,
      log,
      namespace: 'gatehouse-system',
      policies: () => [p],
      policy: () => p,
      nodeLabels: () => ({}),
      current: () => current,
      isLeader: () => true,
      holdGraceMs: 150,
      statusIntervalMs: 200,
      queue: { minIntervalMs: 0, backoffBaseMs: 20, maxAttempts: 2 },
    });
    const events = new EventRecorder(api.rest, log);
    events.onRecord((o, e) => notifier.observe(o, e));
    const record = (reason: string, message = reason) =>
      void events.record(action(reason), { type: 'Normal', reason, message });

    answer = (res) => res.writeHead(204).end();
    record('Requested', 'alice requested Reboot of node worker-1');
    record('Pending', 'waiting for its policies to allow it');
    await waitFor('the hold', () => (bodies.length >= 2 ? true : undefined), { timeoutMs: 3000 });
    record('WaitingForHealth');
    record('RunningPreHooks'); // moved on within the grace: no hold for WaitingForHealth
    record('Approved');
    current = { phase: 'Succeeded', message: 'done' };
    record('WaitingForNode');
    record('Succeeded');
    await waitFor('four messages', () => (bodies.length >= 4 ? true : undefined), { timeoutMs: 3000 });
    await new Promise((r) => setTimeout(r, 300));
    const steps = bodies.flatMap(
      (b) => (JSON.parse(b) as { steps: { step: string; reason: string; message: string }[] }).steps,
    );
    assert.deepEqual(
      steps.map((s) => `${s.step}/${s.reason}`),
      ['Started/Requested', 'Held/Pending', 'Approved/Approved', 'Done/Succeeded'],
    );
    assert.equal(
      steps[1]?.message,
      'Reboot of node worker-1 waits: waiting for ActionPolicy one-at-a-time: 1 of 1 busy',
    );

    // A receiver that fails: the failure is in the status and the log, the secrets are not.
    answer = (res) => res.writeHead(500).end();
    record('Requested');
    await waitFor('the failure in a status write', () =>
      api.writes.some((w) => w.includes('DeliveryFailed')) ? true : undefined,
    );
    notifier.stop();
    const everything = [...lines, ...api.writes].join('\n');
    assert.match(everything, /answered HTTP 500/);
    for (const secret of [TOKEN, 'xoxb-very-secret-token', KEY])
      assert.ok(!everything.includes(secret), `${secret} leaked: ${everything}`);
    const status = JSON.parse(api.writes.at(-1) ?? '{}') as { status: { sent?: number; failed?: number } };
    assert.equal(status.status.failed, 1);
    assert.ok((status.status.sent ?? 0) >= 4);
  });
});
