// /v1/health served from its cache (src/http/health-cache.ts) over a real socket, with a
// real CheckRunner whose probe answers what the test says: one build per change of the
// checks, ETags, 304s, the prospective-action variants, and the cache's byte bound.
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import type { ClusterHealthCheckSpec } from '../../src/api/cluster-health-check.ts';
import { CheckRunner, type ObservedCheck } from '../../src/checks/runner.ts';
import { HealthCache, matches } from '../../src/http/health-cache.ts';
import { healthRoutes } from '../../src/http/health.ts';
import { Router, type Request } from '../../src/http/router.ts';
import { serverUrl, startServer } from '../../src/http/server.ts';
import { RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { waitFor } from '../../src/wait.ts';

// Status writes are switched off (mayWrite), so this client never sends a request.
const kc = new KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: 'none', server: 'https://127.0.0.1:1' }],
  users: [{ name: 'none' }],
  contexts: [{ name: 'none', cluster: 'none', user: 'none' }],
  currentContext: 'none',
});

function check(name: string, spec: Partial<ClusterHealthCheckSpec> = {}): ObservedCheck {
  return {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'ClusterHealthCheck',
    metadata: { name, generation: 1 },
    // Probed once soon after it is added, then only when a test asks (evaluateNow).
    spec: { nodes: {}, interval: '24h', failureThreshold: 1, ...spec },
  };
}

describe('/v1/health from its cache', () => {
  const healthy = new Map<string, boolean>();
  const labels = new Map<string, Record<string, string>>([
    ['worker-1', { role: 'worker' }],
    ['cp-1', { role: 'control-plane' }],
  ]);
  const checks = new CheckRunner({
    rest: new RestClient(kc),
    probe: (spec) =>
      Promise.resolve({ healthy: healthy.get(spec.tcpSocket?.host ?? '') ?? true, message: 'as told' }),
    log: silentLogger(),
    serviceResolution: 'dns',
    mayWrite: () => false,
  });
  let server: Server;
  let url: string;
  let cache: HealthCache;

  before(async () => {
    const router = new Router();
    cache = healthRoutes(router, { checks, nodeLabels: (name) => labels.get(name) });
    for (const name of ['alpha', 'beta']) {
      checks.upsert(check(name, { nodes: undefined, tcpSocket: { host: name, port: 1 } }));
    }
    checks.upsert(
      check('workers-only', { nodeSelector: { matchLabels: { role: 'worker' } }, actions: ['Reboot'] }),
    );
    await waitFor('every check probed', () =>
      checks.views().every((v) => v.state.healthy !== undefined) ? true : undefined,
    );
    server = await startServer(router, { host: '127.0.0.1', port: 0, log: silentLogger() });
    url = serverUrl(server);
  });

  after(async () => {
    checks.stop();
    await new Promise((resolve) => server.close(resolve));
  });

  const get = (path: string, headers: Record<string, string> = {}) => fetch(`${url}${path}`, { headers });

  it('builds an answer once and serves its bytes until a check changes', async () => {
    const first = await get('/v1/health');
    const builds = cache.buildCount;
    const second = await get('/v1/health');
    assert.equal(first.status, 200);
    assert.equal(second.status, 200);
    const tag = first.headers.get('etag') ?? '';
    assert.match(tag, /^"[\w-]+"$/);
    assert.equal(second.headers.get('etag'), tag);
    assert.equal(first.headers.get('cache-control'), 'no-cache');
    assert.equal(await second.text(), await first.text());
    assert.equal(cache.buildCount, builds, 'the second request was served from the cache');

    healthy.set('beta', false);
    await checks.evaluateNow(['beta']);
    const after = await get('/v1/health');
    assert.equal(after.status, 503);
    assert.notEqual(after.headers.get('etag'), tag);
    const body = (await after.json()) as { healthy: boolean; message: string };
    assert.equal(body.healthy, false);
    assert.match(body.message, /1 of 3 checks not healthy: beta/);
    healthy.delete('beta');
    await checks.evaluateNow(['beta']);
  });

  it('answers 304 without a body to an If-None-Match that holds, and 200 once it does not', async () => {
    const first = await get('/v1/health');
    const tag = first.headers.get('etag') ?? '';
    for (const ifNoneMatch of [tag, `W/${tag}`, `"other", ${tag}`, '*']) {
      const again = await get('/v1/health', { 'If-None-Match': ifNoneMatch });
      assert.equal(again.status, 304, ifNoneMatch);
      assert.equal(again.headers.get('etag'), tag);
      assert.equal(again.headers.get('content-length'), null);
      assert.equal(await again.text(), '');
    }
    await checks.evaluateNow(['alpha']);
    const changed = await get('/v1/health', { 'If-None-Match': tag });
    assert.equal(changed.status, 200);
    assert.notEqual(changed.headers.get('etag'), tag);
  });

  it('sends an unhealthy answer whatever If-None-Match says', async () => {
    healthy.set('alpha', false);
    await checks.evaluateNow(['alpha']);
    try {
      const first = await get('/v1/health/alpha');
      assert.equal(first.status, 503);
      const again = await get('/v1/health/alpha', { 'If-None-Match': first.headers.get('etag') ?? '' });
      assert.equal(again.status, 503);
      assert.equal(((await again.json()) as { healthy: boolean }).healthy, false);
    } finally {
      healthy.delete('alpha');
      await checks.evaluateNow(['alpha']);
    }
  });

  it('caches each prospective action apart, and follows the node’s labels', async () => {
    const worker = await get('/v1/health?action=Reboot&node=worker-1');
    const cp = await get('/v1/health?action=Reboot&node=cp-1');
    const names = async (r: Response) =>
      ((await r.json()) as { checks: { name: string }[] }).checks.map((c) => c.name);
    assert.deepEqual(await names(worker), ['alpha', 'beta', 'workers-only']);
    assert.deepEqual(await names(cp), ['alpha', 'beta']);
    const builds = cache.buildCount;
    const workerAgain = await get('/v1/health?action=Reboot&node=worker-1');
    assert.equal(workerAgain.headers.get('etag'), worker.headers.get('etag'));
    assert.equal(cache.buildCount, builds);
    // No check changed, but the node did: the answer is the new labels'.
    labels.set('cp-1', { role: 'worker' });
    try {
      assert.deepEqual(await names(await get('/v1/health?action=Reboot&node=cp-1')), [
        'alpha',
        'beta',
        'workers-only',
      ]);
    } finally {
      labels.set('cp-1', { role: 'control-plane' });
    }
  });

  it('caches one check’s answer, including whether it gates a prospective action', async () => {
    const gates = await get('/v1/health/workers-only?action=Reboot&node=worker-1');
    const doesNot = await get('/v1/health/workers-only?action=Reboot&node=cp-1');
    assert.equal(((await gates.json()) as { gates: boolean }).gates, true);
    const body = (await doesNot.json()) as { gates: boolean; message: string };
    assert.equal(body.gates, false);
    assert.equal(body.message, 'workers-only does not gate Reboot on cp-1');
    const builds = cache.buildCount;
    const again = await get('/v1/health/workers-only?action=Reboot&node=cp-1');
    assert.equal(again.headers.get('etag'), doesNot.headers.get('etag'));
    assert.equal(cache.buildCount, builds);
    assert.equal((await get('/v1/health/missing')).status, 404);
    // An unknown node is answered like a node without labels, never with a 404 that
    // would tell anonymous readers which nodes exist.
    const unknown = await get('/v1/health/alpha?action=Reboot&node=nowhere');
    assert.notEqual(unknown.status, 404);
    assert.equal(typeof ((await unknown.json()) as { gates: unknown }).gates, 'boolean');
  });
});

describe('HealthCache', () => {
  it('keeps at most its byte budget, dropping the least recently used answer first', () => {
    const listeners: (() => void)[] = [];
    const cache = new HealthCache({ onChange: (l) => listeners.push(l) }, { maxBytes: 25 });
    const req = { raw: { headers: {} } } as unknown as Request;
    const built: string[] = [];
    const answer = (key: string) =>
      cache.reply(req, key, () => {
        built.push(key);
        return { status: 200, body: `${key.padEnd(9, '.')}\n` };
      });
    answer('a');
    answer('b');
    answer('a'); // cached, and now the most recently used
    answer('c'); // 30 bytes with a and b: b goes
    answer('a');
    answer('b');
    assert.deepEqual(built, ['a', 'b', 'c', 'b']);
    for (const listener of listeners) listener();
    answer('a');
    assert.deepEqual(built, ['a', 'b', 'c', 'b', 'a'], 'a change of the checks rebuilds');
  });

  it('compares If-None-Match weakly, as RFC 9110 asks for GET', () => {
    assert.ok(matches('"x-1"', '"x-1"'));
    assert.ok(matches('W/"x-1"', '"x-1"'));
    assert.ok(matches('"y", "x-1"', '"x-1"'));
    assert.ok(matches('*', '"x-1"'));
    assert.ok(!matches('"x-12"', '"x-1"'));
    assert.ok(!matches(undefined, '"x-1"'));
  });
});
