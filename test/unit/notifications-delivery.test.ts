// Delivering a message to a receiver this test starts: the Generic body and its signature
// as a receiver verifies them, the Slack body, what is retried, and that neither the URL's
// secret parts nor the signing key appear in what an attempt reports.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import {
  attemptDelivery,
  parseRetryAfter,
  retryDelayMs,
  scrub,
  type Receiver,
} from '../../src/notifications/delivery.ts';
import {
  notificationDocument,
  signature,
  slackBody,
  verifySignature,
  type Message,
} from '../../src/notifications/message.ts';

interface Received {
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
}

const received: Received[] = [];
let answer: (res: ServerResponse) => void = (res) => res.end();
const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c: Buffer) => (body += c.toString()));
  req.on('end', () => {
    received.push({ path: req.url ?? '', headers: req.headers, body });
    answer(res);
  });
});
let base = '';

before(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

const message: Message = {
  id: 'delivery-1',
  policy: 'ops',
  subject: {
    kind: 'NodeAction',
    name: 'reboot-w1',
    uid: 'uid-1',
    action: 'Reboot',
    node: 'worker-1',
    requestedBy: 'alice',
    execution: 'External',
    nodes: ['worker-1'],
  },
  steps: [
    {
      step: 'Started',
      reason: 'Requested',
      message: 'alice requested Reboot of node worker-1 <now> & then',
      type: 'Normal',
      time: '2026-01-01T00:00:00.000Z',
      final: false,
    },
    {
      step: 'Failed',
      reason: 'Denied',
      message: 'see http://user:pw@example.com/x?token=abc',
      type: 'Warning',
      time: '2026-01-01T00:00:01.000Z',
      final: true,
    },
  ],
  dropped: 0,
};

describe('notification delivery', () => {
  it('posts the Generic document, signed so that a receiver can verify it', async () => {
    received.length = 0;
    answer = (res) => res.writeHead(204).end();
    const key = 'k3y-of-the-test';
    const receiver: Receiver = { format: 'Generic', url: `${base}/hook`, signingKey: key, timeoutMs: 2000 };
    assert.deepEqual(await attemptDelivery(receiver, message), { ok: true });
    const got = received[0];
    assert.ok(got);
    const doc = JSON.parse(got.body) as ReturnType<typeof notificationDocument> & {
      steps: { step: string; message: string }[];
    };
    assert.equal(doc.apiVersion, 'talos.dev/v1alpha1');
    assert.equal(doc.kind, 'Notification');
    assert.equal(doc.policy, 'ops');
    assert.deepEqual(doc.action, {
      name: 'reboot-w1',
      uid: 'uid-1',
      node: 'worker-1',
      action: 'Reboot',
      requestedBy: 'alice',
      execution: 'External',
    });
    assert.deepEqual(
      doc.steps.map((s) => s.step),
      ['Started', 'Failed'],
    );
    assert.equal(
      doc.steps[1]?.message,
      'see http://***@example.com/x?token=***',
      'URLs in messages redacted',
    );
    const headers = {
      timestamp: got.headers['x-gatehouse-timestamp'] as string,
      signature: got.headers['x-gatehouse-signature'] as string,
    };
    assert.match(headers.signature, /^sha256=[0-9a-f]{64}$/);
    assert.equal(headers.signature, signature(key, headers.timestamp, got.body));
    assert.ok(verifySignature(key, headers, got.body));
    assert.ok(!verifySignature('another key', headers, got.body));
    assert.ok(!verifySignature(key, headers, `${got.body} `), 'a changed body fails');
    assert.ok(
      !verifySignature(key, headers, got.body, Date.now() + 600_000),
      'an old timestamp fails (replay)',
    );
    assert.equal(got.headers['x-gatehouse-delivery'], 'delivery-1');
  });

  it('posts a Slack body: text, escaped, no signature', async () => {
    received.length = 0;
    answer = (res) => res.writeHead(200).end('ok');
    const receiver: Receiver = {
      format: 'Slack',
      url: `${base}/services/T0/B0/secret-token`,
      timeoutMs: 2000,
    };
    assert.deepEqual(await attemptDelivery(receiver, message), { ok: true });
    const got = received[0];
    assert.ok(got);
    assert.equal(got.headers['x-gatehouse-signature'], undefined);
    const body = JSON.parse(got.body) as { text: string };
    assert.deepEqual(Object.keys(body), ['text']);
    assert.equal(body, body);
    assert.deepEqual(slackBody(message), body);
    assert.match(
      body.text,
      /^\*Reboot\* of node \*worker-1\* \(NodeAction reboot-w1, requested by alice\)\n/,
    );
    assert.match(
      body.text,
      /\*Started\* \(Requested\): alice requested Reboot of node worker-1 &lt;now&gt; &amp; then/,
    );
    assert.match(body.text, /\*Failed\* \(Denied\)/);
  });

  it('retries network errors, timeouts, 429 and 5xx; not other answers; never shows the URL’s secrets', async () => {
    const secretPath = '/services/T0/B0/very-secret-token';
    const receiver: Receiver = {
      format: 'Generic',
      url: `${base}${secretPath}?token=abc`,
      signingKey: 'signing-key-value',
      timeoutMs: 300,
    };
    const cases: [(res: ServerResponse) => void, boolean, number | undefined][] = [
      [(res) => res.writeHead(500).end(), true, undefined],
      [(res) => res.writeHead(503, { 'Retry-After': '7' }).end(), true, 7000],
      [(res) => res.writeHead(429, { 'Retry-After': '2' }).end(), true, 2000],
      [(res) => res.writeHead(404).end(), false, undefined],
      [(res) => res.writeHead(401).end(), false, undefined],
      [() => undefined, true, undefined], // hangs: cut by the timeout
    ];
    for (const [reply, retryable, retryAfterMs] of cases) {
      answer = reply;
      const outcome = await attemptDelivery(receiver, message);
      assert.ok(!outcome.ok);
      assert.equal(outcome.retryable, retryable, outcome.error);
      assert.equal(outcome.retryAfterMs, retryAfterMs);
      assert.ok(outcome.error.includes(base), outcome.error);
      for (const secret of ['very-secret-token', 'token=abc', 'signing-key-value'])
        assert.ok(!outcome.error.includes(secret), outcome.error);
    }
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const refused: Receiver = {
      ...receiver,
      url: `http://127.0.0.1:${String(port)}/services/x/very-secret-token`,
    };
    const outcome = await attemptDelivery(refused, message);
    assert.ok(!outcome.ok);
    assert.ok(outcome.retryable && /ECONNREFUSED/.test(outcome.error), outcome.error);
    assert.ok(!outcome.error.includes('very-secret-token'));
  });

  it('backs off exponentially with full jitter, at least as long as Retry-After asks', () => {
    const top = (c: number) => c;
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7].map((a) => retryDelayMs(a, undefined, 1000, top)),
      [1000, 2000, 4000, 8000, 16000, 30000, 30000],
    );
    assert.equal(
      retryDelayMs(3, undefined, 1000, () => 0),
      0,
    );
    assert.equal(retryDelayMs(1, 7000, 1000, top), 7000);
    assert.equal(retryDelayMs(1, 3_600_000, 1000, top), 300_000, 'capped');
    for (let i = 0; i < 100; i++) {
      const d = retryDelayMs(2, undefined);
      assert.ok(d >= 0 && d <= 2000, String(d));
    }
    assert.equal(parseRetryAfter('12'), 12_000);
    assert.equal(parseRetryAfter(new Date(61_000).toUTCString(), 1_000), 60_000);
    assert.equal(parseRetryAfter('soon'), undefined);
    assert.equal(parseRetryAfter(null), undefined);
  });

  it('scrubs a receiver’s URL and key from any text', () => {
    const receiver = { url: 'https://hooks.example/services/abc/def', signingKey: 'sekret' };
    assert.equal(
      scrub('posting to https://hooks.example/services/abc/def with sekret failed', receiver),
      'posting to *** with *** failed',
    );
  });
});
