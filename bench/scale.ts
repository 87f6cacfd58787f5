// Scale: 5,000 Nodes as big as a busy kubelet makes them and 1,000 checks. The controller
// runs in a process of its own, started as the Deployment starts it (the same Node flags),
// so its RSS is its own: the time to synced caches, its peak RSS and what that peak was
// made of (V8 heap, external memory, the native rest), and the API requests it makes.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import { talosNode } from '../sandbox/nodes.ts';
import type { KubeObject } from '../src/kube/informer.ts';
import { slimNode } from '../src/kube/nodes.ts';
import { RestClient } from '../src/kube/rest.ts';
import { CONTROLLER_NODE_OPTIONS } from '../src/manifests/controller.ts';
import { installGatehouse } from '../src/manifests/install.ts';
import { sleep, waitFor } from '../src/wait.ts';
import { requestsServed } from './gate.ts';
import type { MemorySample } from './memory-sampler.ts';
import { median, ms, report } from './stats.ts';
import { record } from './summary.ts';

const API = '/apis/talos.dev/v1alpha1';
const MiB = 2 ** 20;
/** Steady state is sampled this long after sync: a quarter of the checks' interval, probes running. */
const STEADY_MS = Number(process.env.BENCH_SCALE_STEADY_MS ?? 15_000);

/** Peak RSS (VmHWM) of a process, in bytes. */
async function peakRss(pid: number): Promise<number> {
  const status = await readFile(`/proc/${String(pid)}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
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

async function createObjects(sandbox: Sandbox, api: RestClient, nodes: number, checks: number) {
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
}

/** Requests the API server serves per second with nothing of ours running. */
async function backgroundRate(api: RestClient, windowMs: number): Promise<number> {
  const before = await requestsServed(api);
  const t0 = performance.now();
  await sleep(windowMs);
  return ((await requestsServed(api)) - before - 1) / ((performance.now() - t0) / 1000);
}

export interface ScaleFigures {
  syncedMs: number;
  peakRss: number;
  peak: MemorySample;
  steady: { rss: number; heapUsed: number };
  requestsToSync: number;
  requestsPerMinute: number;
}

/** Starts the controller as the Deployment does and measures it; stops it again. */
async function runController(sandbox: Sandbox, api: RestClient): Promise<ScaleFigures> {
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-scale-'));
  const memoryFile = join(dir, 'memory.json');
  const extra = (process.env.BENCH_CONTROLLER_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
  const snapshots = process.env.BENCH_HEAP_SNAPSHOT === '1';
  const background = await backgroundRate(api, 5000);
  const beforeStart = await requestsServed(api);
  const child = spawn(
    process.execPath,
    [
      // The sampler first: it sees the whole life of the process.
      '--import',
      new URL('./memory-sampler.ts', import.meta.url).pathname,
      ...(snapshots ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${dir}`] : []),
      ...extra,
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
    {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: {
        ...process.env,
        // As the Deployment sets it (src/manifests/controller.ts), unless the run overrides it.
        NODE_OPTIONS: process.env.BENCH_CONTROLLER_NODE_OPTIONS ?? CONTROLLER_NODE_OPTIONS,
        GATEHOUSE_BENCH_MEMORY_FILE: memoryFile,
      },
    },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
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
    const atSync = await requestsServed(api);
    if (snapshots) child.kill('SIGUSR2');
    await sleep(STEADY_MS);
    const atEnd = await requestsServed(api);
    const steadyMs = performance.now() - started - synced;
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const gauge = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1] ?? NaN);
    if (snapshots) child.kill('SIGUSR2');
    const peakRssBytes = await peakRss(child.pid ?? 0);
    child.kill('SIGTERM');
    await exited;
    const { peak } = JSON.parse(await readFile(memoryFile, 'utf8')) as { peak: MemorySample };
    if (snapshots) process.stderr.write(`heap snapshots in ${dir}\n`);
    else await rm(dir, { recursive: true, force: true });
    return {
      syncedMs: synced,
      peakRss: peakRssBytes,
      peak,
      steady: {
        rss: gauge('gatehouse_process_resident_memory_bytes'),
        heapUsed: gauge('gatehouse_nodejs_heap_size_used_bytes'),
      },
      // Less what the cluster serves on its own meanwhile, and our own counter reads.
      requestsToSync: atSync - beforeStart - 1 - (background * synced) / 1000,
      requestsPerMinute: ((atEnd - atSync - 1 - (background * steadyMs) / 1000) * 60_000) / steadyMs,
    };
  } finally {
    if (child.exitCode === null) child.kill('SIGTERM');
  }
}

function mib(bytes: number): string {
  return `${(bytes / MiB).toFixed(0)} MiB`;
}

export async function scaleBench(sandbox: Sandbox, nodes: number, checks: number, runs = 1): Promise<void> {
  const api = new RestClient(sandbox.kubeConfig());
  await installGatehouse(api, { withoutDeployment: true });
  const t0 = performance.now();
  await createObjects(sandbox, api, nodes, checks);
  const created = performance.now() - t0;
  const figures: ScaleFigures[] = [];
  for (let i = 0; i < runs; i++) figures.push(await runController(sandbox, api));
  const sizes = await nodeCacheSizes(api);
  // The start with the median peak RSS stands for all of them in what memory is made of.
  const sorted = [...figures].sort((a, b) => a.peakRss - b.peakRss);
  const f = sorted[Math.floor((sorted.length - 1) / 2)] as ScaleFigures;
  const { peak } = f;
  // Sync times vary apart from memory (the API server's load): their own median.
  const synced = median(figures.map((x) => x.syncedMs));
  const native = peak.rss - peak.heapPhysical - peak.external;
  const spaces = Object.entries(peak.spaces)
    .filter(([, bytes]) => bytes >= MiB)
    .map(([name, bytes]) => `${name.replace(/_space$/, '')} ${mib(bytes)}`)
    .join(', ');
  const scope = `${String(nodes)} nodes, ${String(checks)} checks`;
  report(
    `scale: ${scope} (controller in its own process${runs > 1 ? `; median of ${String(runs)} starts` : ''})`,
    [
      ['objects created in', ms(created)],
      [
        'controller start → caches synced (/readyz 200)',
        `${ms(synced)}${runs > 1 ? `  [${figures.map((x) => ms(x.syncedMs)).join(', ')}]` : ''}`,
      ],
      [
        'controller peak RSS',
        `${mib(f.peakRss)}${runs > 1 ? `  [${figures.map((x) => mib(x.peakRss)).join(', ')}]` : ''}`,
      ],
      [
        `  at its peak (${ms(peak.atMs)} after start)`,
        `V8 heap ${mib(peak.heapPhysical)} (${mib(peak.heapUsed)} in use), external ${mib(peak.external)} (array buffers ${mib(peak.arrayBuffers)}), native rest ${mib(native)}`,
      ],
      ['  V8 heap spaces at the peak', spaces],
      ['steady state: RSS, V8 heap in use', `${mib(f.steady.rss)}, ${mib(f.steady.heapUsed)}`],
      [
        'API requests: to sync, then per minute',
        `${f.requestsToSync.toFixed(0)}, ${f.requestsPerMinute.toFixed(0)} (background subtracted)`,
      ],
      [
        'a Node as served → as cached (JSON)',
        `${(sizes.served / 1024).toFixed(1)} KiB → ${(sizes.cached / 1024).toFixed(1)} KiB (${(sizes.cached / sizes.served).toFixed(2)}×)`,
      ],
    ],
  );
  record(`scale (${scope}): controller peak RSS`, mib(f.peakRss), '≤ 250 MiB');
  record(`scale (${scope}): start → caches synced`, ms(synced), '≤ 15 s');
  record(`scale (${scope}): V8 heap in use, steady`, mib(f.steady.heapUsed));
}
