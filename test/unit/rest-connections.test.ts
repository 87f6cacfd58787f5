// The REST client keeps its TLS connections open between requests, sends a read again
// when the server had closed the kept connection it reused, never a write, and opens a
// new pool when the kubeconfig's client certificate changes.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { CertificateAuthority } from '../../sandbox/pki.ts';
import { KubeApiError, MAX_REQUESTS_IN_FLIGHT, RestClient } from '../../src/kube/rest.ts';

let dir: string;
let server: Server;
let url: string;
let ca: CertificateAuthority;
/** Each TLS connection the server accepted, with the client certificate's common name. */
const connections: string[] = [];
/** Requests to /slow being answered now, and the most at once. */
const inFlight = { now: 0, max: 0 };
/** Requests to /drop close their connection without an answer when it was used before. */
const requestsOn = new WeakMap<object, number>();

async function clientCert(name: string) {
  const paths = await ca.issue({ name, commonName: name, usage: 'client' });
  return { cert: await readFile(paths.cert, 'utf8'), key: await readFile(paths.key, 'utf8') };
}

function kubeConfig(user: { cert: string; key: string }): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: url, caFile: ca.cert, skipTLSVerify: false }],
    users: [
      {
        name: 'u',
        certData: Buffer.from(user.cert).toString('base64'),
        keyData: Buffer.from(user.key).toString('base64'),
      },
    ],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-rest-'));
  ca = await CertificateAuthority.create(dir, 'ca', 'rest test CA');
  const serving = await ca.issue({
    name: 'server',
    commonName: 'localhost',
    ipAddresses: ['127.0.0.1'],
    usage: 'server',
  });
  server = createServer(
    {
      cert: await readFile(serving.cert),
      key: await readFile(serving.key),
      ca: await readFile(ca.cert),
      requestCert: true,
      rejectUnauthorized: true,
    },
    (req, res) => {
      const socket = req.socket;
      const count = (requestsOn.get(socket) ?? 0) + 1;
      requestsOn.set(socket, count);
      if (req.url === '/drop' && count > 1) {
        socket.destroy();
        return;
      }
      if (req.url?.startsWith('/watch')) {
        // A watch: open until the client goes.
        res.writeHead(200, { 'Content-Type': 'application/json' }).flushHeaders();
        return;
      }
      if (req.url === '/slow') {
        inFlight.now++;
        inFlight.max = Math.max(inFlight.max, inFlight.now);
        setTimeout(() => {
          inFlight.now--;
          res.end('{}');
        }, 100);
        return;
      }
      req.resume();
      req.on('end', () => {
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify({ method: req.method, count }));
      });
    },
  );
  server.on('secureConnection', (socket: TLSSocket) => {
    const subject = socket.getPeerCertificate().subject as { CN?: string } | undefined;
    connections.push(subject?.CN ?? '?');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `https://127.0.0.1:${String((server.address() as AddressInfo).port)}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await rm(dir, { recursive: true, force: true });
});

describe('REST client connections', () => {
  it('sends one request after another over one TLS connection', async () => {
    const kc = kubeConfig(await clientCert('alice'));
    const api = new RestClient(kc);
    const before = connections.length;
    for (let i = 0; i < 20; i++) await api.request('/');
    await api.request('/', { method: 'POST', body: {} });
    assert.deepEqual(connections.slice(before), ['alice'], 'one handshake for 21 requests');
  });

  it('sends a read again on a new connection when the kept one was closed, but not a write', async () => {
    const kc = kubeConfig(await clientCert('bob'));
    const api = new RestClient(kc);
    await api.request('/');
    // The next request reuses the connection, and the server hangs up on it unanswered.
    const read = await api.request<{ count: number }>('/drop');
    assert.equal(read.count, 1, 'answered on a fresh connection');
    await api.request('/');
    await assert.rejects(
      api.request('/drop', { method: 'POST', body: {} }),
      (error: NodeJS.ErrnoException) => !(error instanceof KubeApiError) && error.code === 'ECONNRESET',
    );
  });

  it('opens a new pool when the client certificate changes', async () => {
    const kc = kubeConfig(await clientCert('carol'));
    const api = new RestClient(kc);
    const before = connections.length;
    await api.request('/');
    await api.request('/');
    // As an exec credential plugin would: the same kubeconfig now yields another certificate.
    const renewed = await clientCert('carol-renewed');
    const user = kc.users[0];
    assert.ok(user);
    kc.users[0] = {
      ...user,
      certData: Buffer.from(renewed.cert).toString('base64'),
      keyData: Buffer.from(renewed.key).toString('base64'),
    };
    await api.request('/');
    await api.request('/');
    assert.deepEqual(connections.slice(before), ['carol', 'carol-renewed']);
  });

  it('keeps at most MAX_REQUESTS_IN_FLIGHT requests (and connections) open, however many are asked', async () => {
    const kc = kubeConfig(await clientCert('dave'));
    const api = new RestClient(kc);
    const before = connections.length;
    inFlight.max = 0;
    await Promise.all(Array.from({ length: 200 }, () => api.request('/slow')));
    assert.ok(
      inFlight.max <= MAX_REQUESTS_IN_FLIGHT,
      `${String(inFlight.max)} at once: the rest waited in line`,
    );
    const opened = connections.slice(before).length;
    assert.ok(opened <= MAX_REQUESTS_IN_FLIGHT, `${String(opened)} connections`);
  });

  it('never lets watches take the connections requests need', async () => {
    const kc = kubeConfig(await clientCert('erin'));
    const api = new RestClient(kc);
    const stop = new AbortController();
    const opened: Promise<void>[] = [];
    const watches = Array.from({ length: MAX_REQUESTS_IN_FLIGHT }, () => {
      const open = Promise.withResolvers<undefined>();
      opened.push(open.promise);
      return api
        .watch(
          '/watch',
          {},
          () => undefined,
          stop.signal,
          () => open.resolve(undefined),
        )
        .catch(() => undefined);
    });
    await Promise.all(opened);
    const answer = await api.request<{ method: string }>('/', { signal: AbortSignal.timeout(5000) });
    assert.equal(answer.method, 'GET');
    stop.abort();
    await Promise.all(watches);
  });

  it('reads list pages beside the queue of requests, not at its end', async () => {
    const kc = kubeConfig(await clientCert('frank'));
    const api = new RestClient(kc);
    let answered = 0;
    const queue = Array.from({ length: 200 }, () => api.request('/slow').then(() => answered++));
    // Each /slow takes 100 ms and 32 go at once: the queue lasts over 600 ms.
    const fields = await api.listPage('/', {}, () => undefined);
    assert.equal(fields.kind, undefined);
    assert.ok(
      answered < 100,
      `the list page came back early in the queue (${String(answered)} of 200 answered)`,
    );
    await Promise.all(queue);
  });
});
