// RestClient's shared reads (RestRequest.sharedSince): identical GETs join one request
// only when it was sent at or after the moment each caller names — never an older read —
// and one caller giving up does not cancel it for the others. A local server answers
// after a delay it is told, and counts what it was sent.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, beforeEach, it } from 'node:test';
import { performance } from 'node:perf_hooks';
import type { RestClient } from '../../src/kube/rest.ts';
import { localRest } from '../support/local-rest.ts';

let server: Server;
let rest: RestClient;
let served = 0;
let aborted = 0;

before(async () => {
  server = createServer((req, res) => {
    served++;
    const url = new URL(req.url ?? '/', 'http://x');
    const delay = Number(url.searchParams.get('delay') ?? 0);
    const timer = setTimeout(() => {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ n: served, path: url.pathname }));
    }, delay);
    res.on('close', () => {
      if (!res.writableFinished) {
        aborted++;
        clearTimeout(timer);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  rest = localRest(server);
});

after(() => server.close());

beforeEach(() => {
  served = 0;
  aborted = 0;
});

it('makes ten identical reads asked at once one request, and gives all ten its answer', async () => {
  const since = performance.now();
  const answers = await Promise.all(
    Array.from({ length: 10 }, () =>
      rest.request('/api/v1/nodes', { query: { delay: 50 }, sharedSince: since }),
    ),
  );
  assert.equal(served, 1);
  for (const a of answers) assert.deepEqual(a, answers[0]);
});

it('never joins a read sent before the caller asked', async () => {
  const first = rest.request('/api/v1/nodes', { query: { delay: 100 }, sharedSince: performance.now() });
  await new Promise((r) => setTimeout(r, 20));
  // Asked after the first was sent: its answer may predate this caller's question.
  const second = rest.request('/api/v1/nodes', { query: { delay: 100 }, sharedSince: performance.now() });
  await Promise.all([first, second]);
  assert.equal(served, 2);
});

it('keys on the path and the query, and leaves reads without sharedSince alone', async () => {
  const since = performance.now();
  await Promise.all([
    rest.request('/api/v1/nodes', { query: { delay: 30, labelSelector: 'a=b' }, sharedSince: since }),
    rest.request('/api/v1/nodes', { query: { delay: 30 }, sharedSince: since }),
    rest.request('/api/v1/pods', { query: { delay: 30 }, sharedSince: since }),
    rest.request('/api/v1/pods', { query: { delay: 30 } }),
  ]);
  assert.equal(served, 4);
});

it('goes on for the callers still waiting when one gives up, and stops when the last does', async () => {
  const since = performance.now();
  const impatient = new AbortController();
  const patient = new AbortController();
  const a = rest.request('/slow', { query: { delay: 150 }, sharedSince: since, signal: impatient.signal });
  const b = rest.request('/slow', { query: { delay: 150 }, sharedSince: since, signal: patient.signal });
  setTimeout(() => impatient.abort(new Error('check timed out')), 20);
  await assert.rejects(a, /check timed out/);
  assert.deepEqual(await b, { n: 1, path: '/slow' });
  assert.equal(served, 1);
  assert.equal(aborted, 0);

  const c1 = new AbortController();
  const c2 = new AbortController();
  const asked = performance.now();
  const c = rest.request('/slow', {
    query: { delay: 500 },
    sharedSince: asked,
    signal: c1.signal,
  });
  const d = rest.request('/slow', {
    query: { delay: 500 },
    sharedSince: asked,
    signal: c2.signal,
  });
  await new Promise((r) => setTimeout(r, 50)); // the server has it
  c1.abort(new Error('one'));
  c2.abort(new Error('two'));
  await assert.rejects(c, /one/);
  await assert.rejects(d, /two/);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(served, 2);
  assert.equal(aborted, 1, 'the request is cancelled once nobody waits for it');
});
