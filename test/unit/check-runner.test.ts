// The runner's scheduling, timeouts and coalescing, with probe functions written here.
// (Probes against real targets are tested in test/integration.)
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import type { ClusterHealthCheckSpec } from '../../src/api/cluster-health-check.ts';
import { CheckRunner, type ObservedCheck, type ProbeFunction } from '../../src/checks/runner.ts';
import { RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { sleep, waitFor } from '../../src/wait.ts';

// Status writes are switched off (mayWrite), so this client never sends a request.
const kc = new KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: 'none', server: 'https://127.0.0.1:1' }],
  users: [{ name: 'none' }],
  contexts: [{ name: 'none', cluster: 'none', user: 'none' }],
  currentContext: 'none',
});

function runner(probe: ProbeFunction): CheckRunner {
  return new CheckRunner({
    rest: new RestClient(kc),
    probe,
    log: silentLogger(),
    serviceResolution: 'dns',
    mayWrite: () => false,
  });
}

function check(name: string, spec: Partial<ClusterHealthCheckSpec>, generation = 1): ObservedCheck {
  return {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'ClusterHealthCheck',
    metadata: { name, generation },
    spec: { nodes: {}, interval: '100ms', timeout: '1s', successThreshold: 1, failureThreshold: 1, ...spec },
  };
}

describe('CheckRunner', () => {
  it('cuts a hanging probe at its timeout without delaying other checks', async () => {
    const probed = new Map<string, number>();
    const r = runner(async (spec, { signal }) => {
      const name = spec.tcpSocket?.host ?? 'fast';
      probed.set(name, (probed.get(name) ?? 0) + 1);
      if (name === 'hangs') await new Promise(() => undefined); // ignores even its signal
      return { healthy: !signal.aborted, message: 'fine' };
    });
    try {
      r.upsert(
        check('hangs', {
          nodes: undefined,
          tcpSocket: { host: 'hangs', port: 1 },
          timeout: '300ms',
          interval: '10s',
        }),
      );
      r.upsert(check('fast', {}));
      const hung = await waitFor('the hanging probe to time out', () => {
        const s = r.view('hangs')?.state;
        return s?.reason === 'ProbeTimeout' ? s : undefined;
      });
      assert.equal(hung.healthy, false);
      assert.match(hung.message, /probe timed out after 300ms/);
      // Meanwhile the fast check (100ms interval) kept its rhythm: 3+ probes in 300ms+.
      assert.ok((probed.get('fast') ?? 0) >= 3, `fast check probed ${String(probed.get('fast'))} times`);
      assert.equal(r.view('fast')?.state.healthy, true);
    } finally {
      r.stop();
    }
  });

  it('tells its listeners of every new state, and of checks that come and go', async () => {
    const r = runner(() => Promise.resolve({ healthy: true, message: 'fine' }));
    const heard: string[] = [];
    r.onChange(() => {
      throw new Error('a listener that fails does not stop the others, or the probe');
    });
    const unsubscribe = r.onChange((name) => heard.push(name));
    try {
      r.upsert(check('a', { interval: '1h' }));
      assert.deepEqual(heard, ['a'], 'a new check, as unknown');
      await r.evaluateNow(['a']);
      assert.deepEqual(heard, ['a', 'a'], 'a probe replaced its state');
      assert.equal(r.view('a')?.state.healthy, true);
      r.upsert(check('a', { interval: '1h' }));
      assert.equal(heard.length, 2, 'the same generation again changes nothing');
      r.remove('a');
      assert.deepEqual(heard, ['a', 'a', 'a']);
      unsubscribe();
      r.upsert(check('b', { interval: '1h' }));
      assert.equal(heard.length, 3);
    } finally {
      r.stop();
    }
  });

  it('reports a probe that throws as a probe error', async () => {
    const r = runner(() => Promise.reject(new Error('discovery failed: no such kind CephCluster')));
    try {
      const [state] = (await r.evaluateNow(['broken'])).values();
      assert.equal(state, undefined, 'unknown names give undefined');
      r.upsert(check('broken', { interval: '1h' }));
      const fresh = (await r.evaluateNow(['broken'])).get('broken');
      assert.equal(fresh?.healthy, false);
      assert.equal(fresh.reason, 'ProbeError');
      assert.equal(fresh.message, 'probe error: discovery failed: no such kind CephCluster');
    } finally {
      r.stop();
    }
  });

  it('coalesces concurrent on-demand evaluations into one fresh probe', async () => {
    let probes = 0;
    const r = runner(async () => {
      probes++;
      await sleep(50);
      return { healthy: true, message: 'ok' };
    });
    try {
      r.upsert(check('shared', { interval: '1h' }));
      await sleep(1100); // let the first periodic probe pass
      const before = probes;
      const results = await Promise.all(Array.from({ length: 10 }, () => r.evaluateNow(['shared'])));
      assert.equal(probes - before, 1, 'ten concurrent gates, one probe');
      for (const m of results) assert.equal(m.get('shared')?.healthy, true);
      // A request made while that probe runs gets one that starts after it asked.
      const first = r.evaluateNow(['shared']);
      await sleep(10);
      const second = r.evaluateNow(['shared']);
      await Promise.all([first, second]);
      assert.equal(probes - before, 3);
    } finally {
      r.stop();
    }
  });

  it("gives periodic probes cached reads and a gate's fresh evaluation none (invariant 1)", async () => {
    const calls: { cached: boolean; nodes: number | undefined }[] = [];
    let live = true;
    const cachedNode = { metadata: { name: 'n1', labels: { pool: 'a' } } };
    const r = new CheckRunner({
      rest: new RestClient(kc),
      probe: (_spec, context) => {
        calls.push({ cached: context.cached !== undefined, nodes: context.cached?.nodes(undefined)?.length });
        return Promise.resolve({ healthy: true, message: 'ok' });
      },
      log: silentLogger(),
      serviceResolution: 'dns',
      mayWrite: () => false,
      nodes: {
        get: () => cachedNode,
        select: () => [cachedNode],
        busy: () => new Set(),
        live: () => live,
      },
    });
    try {
      r.upsert(check('c', { interval: '50ms' }));
      await waitFor('periodic probes', () => (calls.length >= 2 ? true : undefined));
      assert.ok(
        calls.every((c) => c.cached && c.nodes === 1),
        JSON.stringify(calls),
      );
      live = false;
      const since = calls.length;
      await waitFor('a periodic probe while the Node watch is not live', () =>
        calls.length > since + 1 ? true : undefined,
      );
      assert.equal(calls.at(-1)?.nodes, undefined, 'no Nodes from a cache whose watch is not live');
      r.stop();
      calls.length = 0;
      await r.evaluateNow(['c']);
      assert.deepEqual(calls, [{ cached: false, nodes: undefined }]);
    } finally {
      r.stop();
    }
  });

  it('makes the first probes once the Node cache has synced, not before', async () => {
    let probes = 0;
    let markSynced = () => {};
    const synced = new Promise<void>((resolve) => {
      markSynced = resolve;
    });
    const node = { metadata: { name: 'n1' } };
    const r = new CheckRunner({
      rest: new RestClient(kc),
      probe: () => {
        probes++;
        return Promise.resolve({ healthy: true, message: 'ok' });
      },
      log: silentLogger(),
      serviceResolution: 'dns',
      mayWrite: () => false,
      nodes: {
        get: () => node,
        select: () => [node],
        busy: () => new Set(),
        live: () => true,
        synced: () => synced,
      },
    });
    try {
      r.upsert(check('a', { interval: '20ms' }));
      r.upsert(check('b', { interval: '20ms' }));
      await sleep(1300); // past the first probe's spread (≤ 1 s)
      assert.equal(probes, 0, 'no probe while the Node cache lists');
      markSynced();
      await waitFor('both first probes', () =>
        r.view('a')?.state.healthy && r.view('b')?.state.healthy ? true : undefined,
      );
    } finally {
      r.stop();
    }
  });

  it('starts a check over as unknown when its spec changes', async () => {
    const r = runner(() => Promise.resolve({ healthy: true, message: 'ok' }));
    try {
      r.upsert(check('c', { interval: '1h' }, 1));
      await r.evaluateNow(['c']);
      assert.equal(r.view('c')?.state.healthy, true);
      r.upsert(check('c', { interval: '1h' }, 1)); // same generation: kept
      assert.equal(r.view('c')?.state.healthy, true);
      r.upsert(check('c', { interval: '1h' }, 2));
      assert.equal(r.view('c')?.state.healthy, undefined);
      r.remove('c');
      assert.equal(r.view('c'), undefined);
    } finally {
      r.stop();
    }
  });
});
