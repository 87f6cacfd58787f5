// The gate's costs, each against the floor measured in the same run:
//  - gate latency: a NodeAction created → Approved, with 10 healthy checks gating it
//    and no hooks, beside the raw watch round trip (create → watch event);
//  - per-hook overhead: a hook Job seen Complete → the action seen in its next phase;
//  - API requests per completed action, from the API server's own request counters;
//  - scale: 5,000 nodes and 1,000 checks — the controller's time to synced caches and
//    its peak RSS, in a process of its own.
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import { talosNode } from '../sandbox/nodes.ts';
import { Controller } from '../src/controller.ts';
import type { KubeObject } from '../src/kube/informer.ts';
import { slimNode } from '../src/kube/nodes.ts';
import { RestClient, type WatchEvent } from '../src/kube/rest.ts';
import { silentLogger } from '../src/log.ts';
import { installGatehouse } from '../src/manifests/install.ts';
import { sleep, waitFor } from '../src/wait.ts';
import { ms, percentile, report } from './stats.ts';
import { measureWatchRoundTrip } from './watch-round-trip.ts';

const API = '/apis/talos.dev/v1alpha1';

/** Watches NodeActions and Jobs, noting when each is first seen in a phase (our clock). */
class Observer {
  readonly seen = new Map<string, number>();
  private readonly abort = new AbortController();
  private readonly api: RestClient;
  constructor(api: RestClient) {
    this.api = api;
  }

  /** Resolves once both watches are open: nothing created after it goes unseen. */
  async start(): Promise<void> {
    const note = (key: string) => {
      if (!this.seen.has(key)) this.seen.set(key, performance.now());
    };
    await Promise.all([
      this.watch(`${API}/nodeactions`, (e) => {
        const o = e.object as { metadata: { name: string }; status?: { phase?: string } };
        if (o.status?.phase) note(`${o.metadata.name}:${o.status.phase}`);
      }),
      this.watch('/apis/batch/v1/jobs', (e) => {
        const o = e.object as {
          metadata: { name: string; labels?: Record<string, string> };
          status?: { conditions?: { type: string; status: string }[] };
        };
        const action = o.metadata.labels?.['talos.dev/action'];
        if (action && o.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True'))
          note(`${action}:job-complete`);
      }),
    ]);
  }

  /**
   * Watches until stopped, resuming where the last event left off. A just-installed CRD's
   * watch cache answers 429 for a moment ("storage is (re)initializing"): opening is retried.
   */
  private async watch(path: string, onEvent: (e: WatchEvent) => void): Promise<void> {
    const opened = Promise.withResolvers<undefined>();
    const run = async () => {
      let resourceVersion: string | undefined;
      while (!this.abort.signal.aborted) {
        try {
          resourceVersion ??= (
            await this.api.request<{ metadata: { resourceVersion: string } }>(path, { query: { limit: 1 } })
          ).metadata.resourceVersion;
          await this.api.watch(
            path,
            { resourceVersion, allowWatchBookmarks: true },
            (e) => {
              const rv = (e.object as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion;
              if (rv) resourceVersion = rv;
              if (e.type !== 'BOOKMARK') onEvent(e);
            },
            this.abort.signal,
            () => opened.resolve(undefined),
          );
        } catch {
          await sleep(100);
        }
      }
    };
    void run();
    await opened.promise;
  }

  stop(): void {
    this.abort.abort();
  }

  async when(key: string, timeoutMs = 60_000): Promise<number> {
    return waitFor(`the benchmark to see ${key}`, () => this.seen.get(key), { timeoutMs, intervalMs: 2 });
  }
}

async function requestsServed(api: RestClient): Promise<number> {
  const text = await api.request<string>('/metrics', { headers: { Accept: 'text/plain' } });
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('apiserver_request_total{')) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function whoami(api: RestClient): Promise<string> {
  const review = await api.request<{ status: { userInfo: { username: string } } }>(
    '/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { method: 'POST', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
  );
  return review.status.userInfo.username;
}

export async function gateBench(sandbox: Sandbox, samples: number): Promise<void> {
  const kc = sandbox.kubeConfig();
  const api = new RestClient(kc);
  await installGatehouse(api, { withoutDeployment: true });
  const me = await whoami(api);
  // Ten healthy checks gating every action (cheap probes: the sandbox's own nodes).
  for (let i = 0; i < 10; i++) {
    await api.request(`${API}/clusterhealthchecks`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ClusterHealthCheck',
        metadata: { name: `gate-${String(i)}` },
        spec: { interval: '10s', nodes: { maxNotReady: 0 } },
      },
    });
  }
  await api.request('/api/v1/namespaces', { method: 'POST', body: { metadata: { name: 'bench' } } });
  const controller = await Controller.start({
    kubeConfig: kc,
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
  });
  const observer = new Observer(api);
  await observer.start();
  try {
    await controller.waitForSync();
    await waitFor(
      '10 healthy checks',
      () => (controller.checks.views().filter((v) => v.state.healthy).length === 10 ? true : undefined),
      { timeoutMs: 60_000 },
    );
    const node = 'worker-1';
    // A ConfigChange that does not reboot finishes on the requester's mark: the quickest
    // full life of an action, so each sample frees the one slot for the next.
    const runAction = async (name: string) => {
      const t0 = performance.now();
      await api.request(`${API}/nodeactions`, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'NodeAction',
          metadata: { name },
          spec: {
            nodeName: node,
            action: 'ConfigChange',
            execution: 'External',
            requestedBy: me,
            configChange: { mode: 'NoReboot' },
          },
        },
      });
      const approved = await observer.when(`${name}:Approved`);
      await api.request(`${API}/nodeactions/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { 'talos.dev/executed': 'true' } } },
      });
      await observer.when(`${name}:Succeeded`);
      return approved - t0;
    };
    await runAction('warm-up');
    const before = await requestsServed(api);
    const t0 = performance.now();
    const latencies: number[] = [];
    for (let i = 0; i < samples; i++) latencies.push(await runAction(`gate-${String(i)}`));
    const busy = performance.now() - t0;
    const after = await requestsServed(api);
    // The same span with nothing to do: the cluster's own background requests.
    const idle0 = await requestsServed(api);
    await sleep(Math.min(busy, 20_000));
    const idle = ((await requestsServed(api)) - idle0) * (busy / Math.min(busy, 20_000));
    const floor = (await measureWatchRoundTrip(kc, 'bench', 200)).samples;
    report(
      `gate latency: NodeAction created → Approved, 10 healthy checks, no hooks (${String(samples)} actions, one at a time)`,
      [
        ['gate p50', ms(percentile(latencies, 50))],
        ['gate p99', ms(percentile(latencies, 99))],
        ['floor: watch round trip p50 (same run)', ms(percentile(floor, 50))],
        ['floor: watch round trip p99 (same run)', ms(percentile(floor, 99))],
        ['gate p50 / floor p50', `${(percentile(latencies, 50) / percentile(floor, 50)).toFixed(1)}×`],
      ],
    );
    report('API requests per completed action (apiserver_request_total, idle background subtracted)', [
      ['requests per action', ((after - before - idle) / samples).toFixed(1)],
      ['of which the benchmark client made', '2 (create, mark executed; its watches are long-lived)'],
    ]);

    // Per-hook overhead: one PreRebootJob (ConfigChange runs them in every mode).
    await api.request(`${API}/namespaces/bench/prerebootjobs`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'PreRebootJob',
        metadata: { name: 'hook', namespace: 'bench' },
        spec: {
          template: {
            spec: {
              backoffLimit: 0,
              template: {
                metadata: { annotations: { 'sandbox.gatehouse.dev/run-duration': '100ms' } },
                spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'registry.example/hook' }] },
              },
            },
          },
        },
      },
    });
    await sleep(1000);
    const overheads: number[] = [];
    const hookSamples = Math.max(10, Math.floor(samples / 3));
    for (let i = 0; i < hookSamples; i++) {
      const name = `hook-${String(i)}`;
      const run = runAction(name);
      const complete = await observer.when(`${name}:job-complete`);
      const next = await observer.when(`${name}:Approved`);
      overheads.push(next - complete);
      await run;
    }
    report(
      `per-hook overhead: hook Job seen Complete → action seen Approved (${String(hookSamples)} actions)`,
      [
        ['p50', ms(percentile(overheads, 50))],
        ['p99', ms(percentile(overheads, 99))],
        // Two watches of the benchmark's own, on two resources: their events arrive in either
        // order within a few ms, so a figure near zero (or below) is within that jitter.
        ['note', 'seen on two separate watches: near 0 means within their delivery jitter'],
      ],
    );
  } finally {
    observer.stop();
    await controller.stop();
  }
}

/** Peak RSS (VmHWM) of a process, in MiB. */
async function peakRss(pid: number): Promise<number> {
  const status = await readFile(`/proc/${String(pid)}/status`, 'utf8');
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

/** What a kubelet of a busy node adds to its status: 50 images (its default cap) and volumes. */
function busyNodeStatus(n: number) {
  return {
    conditions: ['MemoryPressure', 'DiskPressure', 'PIDPressure', 'Ready'].map((type) => ({
      type,
      status: type === 'Ready' ? 'True' : 'False',
      reason: type === 'Ready' ? 'KubeletReady' : `KubeletHasNo${type}`,
      message: type === 'Ready' ? 'kubelet is posting ready status' : `kubelet has no ${type}`,
      lastHeartbeatTime: '2026-11-30T00:00:00Z',
      lastTransitionTime: '2026-11-30T00:00:00Z',
    })),
    images: Array.from({ length: 50 }, (_, i) => ({
      names: [
        `registry.example.com/team-${String((n + i) % 40)}/service-${String(i)}@sha256:${i.toString(16).padStart(64, '0')}`,
        `registry.example.com/team-${String((n + i) % 40)}/service-${String(i)}:v1.${String(i)}.0`,
      ],
      sizeBytes: 50_000_000 + i * 1_000_000,
    })),
    volumesInUse: Array.from(
      { length: 8 },
      (_, i) => `kubernetes.io/csi/rbd.csi.ceph.com^0001-${String(n)}-${String(i)}`,
    ),
    volumesAttached: Array.from({ length: 8 }, (_, i) => ({
      name: `kubernetes.io/csi/rbd.csi.ceph.com^0001-${String(n)}-${String(i)}`,
      devicePath: '',
    })),
  };
}

/** Mean JSON size of a Node as the API server serves it, and as the controller caches it. */
async function nodeCacheSizes(api: RestClient): Promise<{ served: number; cached: number }> {
  const list = await api.request<{ items: KubeObject[] }>('/api/v1/nodes', { query: { limit: 200 } });
  let served = 0;
  let cached = 0;
  for (const node of list.items) {
    served += JSON.stringify(node).length;
    delete (node.metadata as { managedFields?: unknown }).managedFields;
    cached += JSON.stringify(slimNode(node)).length;
  }
  return { served: served / list.items.length, cached: cached / list.items.length };
}

export async function scaleBench(sandbox: Sandbox, nodes: number, checks: number): Promise<void> {
  const api = new RestClient(sandbox.kubeConfig());
  await installGatehouse(api, { withoutDeployment: true });
  const t0 = performance.now();
  const names = Array.from({ length: nodes }, (_, i) => `scale-${String(i).padStart(5, '0')}`);
  for (let i = 0; i < names.length; i += 100) {
    await Promise.all(
      names.slice(i, i + 100).map((name, j) => {
        const node = talosNode(
          {
            name,
            role: 'worker',
            internalIP: `10.99.${String(Math.floor((i + j) / 250))}.${String(((i + j) % 250) + 2)}`,
          },
          sandbox.state.kubernetesVersion,
        );
        // Not simulated by kwok: the point is the controller's caches, not 5,000 kubelets.
        // But as big as a kubelet makes them: the images it reports (up to 50) and volumes.
        node.metadata = { name, labels: node.metadata?.labels ?? {} };
        Object.assign(node.status ?? {}, busyNodeStatus(i + j));
        return api.request('/api/v1/nodes', { method: 'POST', body: node });
      }),
    );
  }
  for (let i = 0; i < checks; i += 100) {
    await Promise.all(
      Array.from({ length: Math.min(100, checks - i) }, (_, j) =>
        api.request(`${API}/clusterhealthchecks`, {
          method: 'POST',
          body: {
            apiVersion: 'talos.dev/v1alpha1',
            kind: 'ClusterHealthCheck',
            metadata: { name: `scale-${String(i + j)}` },
            spec: {
              interval: '60s',
              nodes: {
                selector: { matchLabels: { 'kubernetes.io/hostname': names[(i + j) % names.length] ?? '' } },
              },
            },
          },
        }),
      ),
    );
  }
  const created = performance.now() - t0;
  // The controller in a process of its own, so its RSS is its own.
  const child = spawn(
    process.execPath,
    [
      'src/cli/main.ts',
      'controller',
      '--kubeconfig',
      sandbox.kubeconfig,
      '--listen-host',
      '127.0.0.1',
      '--port',
      '0',
      '--log-level',
      'info',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const started = performance.now();
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let buffer = '';
      child.stdout.on('data', (d: Buffer) => {
        buffer += d.toString();
        const match = /"url":"(http:\/\/[^"]+)"/.exec(buffer);
        if (match?.[1]) resolve(match[1]);
      });
      child.once('exit', (code) => reject(new Error(`controller exited with ${String(code)}`)));
    });
    await waitFor(
      'the controller to be ready (caches synced)',
      async () => ((await fetch(`${url}/readyz`)).status === 200 ? true : undefined),
      { timeoutMs: 300_000, intervalMs: 50 },
    );
    const synced = performance.now() - started;
    await sleep(15_000); // a quarter of the checks' interval: steady state, probes running
    const rss = await peakRss(child.pid ?? 0);
    const sizes = await nodeCacheSizes(api);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const gauge = (name: string) =>
      Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1] ?? NaN) / 2 ** 20;
    report(`scale: ${String(nodes)} nodes, ${String(checks)} checks (controller in its own process)`, [
      ['objects created in', ms(created)],
      ['controller start → caches synced (/readyz 200)', ms(synced)],
      ['controller peak RSS', `${rss.toFixed(0)} MiB`],
      [
        'steady state: RSS, V8 heap in use',
        `${gauge('gatehouse_process_resident_memory_bytes').toFixed(0)} MiB, ${gauge('gatehouse_nodejs_heap_size_used_bytes').toFixed(0)} MiB`,
      ],
      [
        'a Node as served → as cached (JSON)',
        `${(sizes.served / 1024).toFixed(1)} KiB → ${(sizes.cached / 1024).toFixed(1)} KiB (${(sizes.cached / sizes.served).toFixed(2)}×)`,
      ],
    ]);
  } finally {
    child.kill('SIGTERM');
  }
}
