// One start of a controller against the scale benchmark's cluster — gatehouse as the
// Deployment starts it, or the Go baseline — and what it cost: time to synced caches,
// peak and steady memory, and the API requests it made at start and in a steady window.
//
// The steady window starts two check intervals after sync (by then every check has
// probed twice and every first status write and Event is done) and lasts one interval,
// so that each check probes in it about once.
import type { ChildProcess } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Readable } from 'node:stream';
import { transform } from 'esbuild';
import type { Sandbox } from '../sandbox/cluster.ts';
import { bundle } from '../scripts/bundle.ts';
import type { RestClient } from '../src/kube/rest.ts';
import {
  CONTROLLER_MALLOC_ARENA_MAX,
  CONTROLLER_NODE_OPTIONS,
  CONTROLLER_RESOURCES,
} from '../src/manifests/controller.ts';
import { sleep, waitFor } from '../src/wait.ts';
import { lessBackground, perMs, served, serverCounters, type ServerCounters } from './api-requests.ts';
import { baselineArguments, baselineBinary, freePort } from './baseline-go.ts';
import { analyse, byConstructor, dominatorTree } from './heap-retainers.ts';
import { spawnLimited } from './memory-limit.ts';
import type { MemorySample } from './memory-sampler.ts';

const MiB = 2 ** 20;

export interface StartTiming {
  /** The checks' interval. */
  intervalMs: number;
  /** The steady window starts this many intervals after sync. */
  settleIntervals: number;
}

export interface StartFigures {
  syncedMs: number;
  peakRss: number;
  /** gatehouse only: what its peak RSS was made of (bench/memory-sampler.ts). */
  peak?: MemorySample;
  steady: { rss: number; heapUsed: number };
  /** The memory cgroup it ran in, or why none. */
  confinement: string;
  /** Loading the code, then the lists, by the controller's own clock (gatehouse only). */
  syncSplit?: SyncSplit;
  /** Requests from the start to caches synced, less the cluster's background. */
  toSync: ServerCounters;
  /** From the start to the steady window: the start burst. */
  burst: ServerCounters;
  burstMs: number;
  steadyWindow: ServerCounters;
  steadyMs: number;
  /** Probes the process made in the steady window. */
  probes: number;
  /** CPU kube-apiserver and etcd spent in the steady window (ms), less their background. */
  serverCpuMs: number;
  /** CPU the controller itself spent: from its start to sync, and in the steady window (ms). */
  ownCpuMs: { toSync: number; steady: number };
}

/** From the controller's `caches synced` line: milliseconds since its process started. */
export interface SyncSplit {
  loadingMs: number;
  listingMs: number;
}

/**
 * The memory limit each controller runs under: its Deployment's (CONTROLLER_RESOURCES),
 * unless BENCH_CONTROLLER_MEMORY_LIMIT names another, or `none`.
 */
function memoryLimit(): string | undefined {
  const limit = process.env.BENCH_CONTROLLER_MEMORY_LIMIT ?? CONTROLLER_RESOURCES.limits.memory;
  return limit === 'none' ? undefined : limit;
}

/** A controller process under measurement. */
interface Subject {
  child: ChildProcess;
  /** The memory cgroup it runs in, or why none. */
  confinement: string;
  /** Resolves with its base URLs once it listens: readiness, and metrics. */
  listening: Promise<{ ready: string; metrics: string }>;
  probesMetric: string;
  heapMetric: string;
  /** After it exited. */
  peakSample?: () => Promise<MemorySample>;
  /** What its own `caches synced` log line said the sync time went to (gatehouse). */
  syncSplit?: Promise<SyncSplit>;
  /** Takes a heap snapshot (gatehouse with BENCH_HEAP_SNAPSHOT=1), named by the moment. */
  snapshot?: (moment: string) => Promise<void>;
  cleanup: () => Promise<void>;
}

/** CPU time kube-apiserver and etcd have used so far, in milliseconds (/proc/PID/stat: utime + stime). */
export async function serverCpuMs(sandbox: Sandbox): Promise<number> {
  let ms = 0;
  for (const p of sandbox.state.processes.filter((x) => x.name === 'kube-apiserver' || x.name === 'etcd'))
    ms += await processCpuMs(p.pid);
  return ms;
}

/** CPU time one process has used so far, in milliseconds (/proc/PID/stat: utime + stime). */
async function processCpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${String(pid)}/stat`, 'utf8');
  // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th of them.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10; // USER_HZ is 100 on Linux
}

async function procStatus(pid: number, field: 'VmHWM' | 'VmRSS'): Promise<number> {
  const status = await readFile(`/proc/${String(pid)}/status`, 'utf8');
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) * 1024;
}

/** Sum of every sample of a metric in a Prometheus text page. */
function metricSum(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

/** Requests the API server serves with nothing of ours running, per millisecond. */
export async function backgroundRate(api: RestClient, windowMs: number): Promise<ServerCounters> {
  const before = await serverCounters(api);
  const t0 = performance.now();
  await sleep(windowMs);
  const after = await serverCounters(api);
  return perMs(served(before, after), performance.now() - t0);
}

let bundled: Promise<{ main: string; sampler: string }> | undefined;

/**
 * The controller as the image runs it: bundled (scripts/bundle.ts) into .build/, once per
 * benchmark run, with the memory sampler beside it as JavaScript — imported as TypeScript
 * it made Node load its type stripper into the controller, ~30 ms of `loading` the
 * Deployment never spends. BENCH_CONTROLLER_SOURCES=1 runs the TypeScript sources instead.
 */
function controllerEntry(): Promise<{ main: string; sampler: string }> {
  const samplerSource = new URL('./memory-sampler.ts', import.meta.url).pathname;
  if (process.env.BENCH_CONTROLLER_SOURCES === '1')
    return Promise.resolve({ main: 'src/cli/main.ts', sampler: samplerSource });
  bundled ??= (async () => {
    const out = join(process.cwd(), '.build', 'bench-controller');
    await bundle(out);
    const sampler = join(out, 'memory-sampler.mjs');
    const { code } = await transform(await readFile(samplerSource, 'utf8'), {
      loader: 'ts',
      format: 'esm',
      target: 'node24',
    });
    await writeFile(sampler, code);
    return { main: join(out, 'main.mjs'), sampler };
  })();
  return bundled;
}

/** gatehouse's controller, started as the Deployment starts it (src/manifests/controller.ts, the image). */
async function gatehouse(sandbox: Sandbox): Promise<Subject> {
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-scale-'));
  const memoryFile = join(dir, 'memory.json');
  const extra = (process.env.BENCH_CONTROLLER_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
  const snapshots = process.env.BENCH_HEAP_SNAPSHOT === '1';
  const entry = await controllerEntry();
  const { child, confinement, release } = await spawnLimited(
    process.execPath,
    [
      // The sampler first: it sees the whole life of the process.
      '--import',
      entry.sampler,
      ...(snapshots ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${dir}`] : []),
      ...extra,
      entry.main,
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
        // As the Deployment and the image set them, unless the run overrides them.
        NODE_OPTIONS: process.env.BENCH_CONTROLLER_NODE_OPTIONS ?? CONTROLLER_NODE_OPTIONS,
        MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? CONTROLLER_MALLOC_ARENA_MAX,
        NODE_ENV: 'production',
        GATEHOUSE_BENCH_MEMORY_FILE: memoryFile,
      },
    },
    memoryLimit(),
  );
  // The controller's log, line by line: where it listens, then what its sync went to.
  // BENCH_CONTROLLER_LOG=FILE keeps it (appended, every start).
  const logFile = process.env.BENCH_CONTROLLER_LOG;
  let listened: (urls: { ready: string; metrics: string }) => void = () => undefined;
  let splitFound: (split: SyncSplit) => void = () => undefined;
  const listening = new Promise<{ ready: string; metrics: string }>((resolve, reject) => {
    listened = resolve;
    child.once('exit', (code) => reject(new Error(`the controller exited with ${String(code)}`)));
  });
  const syncSplit = new Promise<SyncSplit>((resolve) => (splitFound = resolve));
  let partial = '';
  (child.stdout as Readable).on('data', (d: Buffer) => {
    if (logFile) appendFileSync(logFile, d);
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      const url = /"url":"(http:\/\/[^"]+)"/.exec(line)?.[1];
      if (url) listened({ ready: `${url}/readyz`, metrics: `${url}/metrics` });
      if (line.includes('"msg":"caches synced"')) splitFound(JSON.parse(line) as SyncSplit);
    }
  });
  let taken = 0;
  return {
    child,
    confinement,
    listening,
    probesMetric: 'gatehouse_probes_total',
    syncSplit,
    heapMetric: 'gatehouse_nodejs_heap_size_used_bytes',
    peakSample: async () => (JSON.parse(await readFile(memoryFile, 'utf8')) as { peak: MemorySample }).peak,
    ...(snapshots
      ? {
          snapshot: async (moment: string) => {
            child.kill('SIGUSR2');
            // Written synchronously by the process; wait for the file to appear.
            const n = ++taken;
            const file = await waitFor(
              `heap snapshot ${String(n)}`,
              async () => {
                const files = (await readdir(dir)).filter((f) => f.endsWith('.heapsnapshot')).sort();
                return files.length >= n ? join(dir, files[n - 1] as string) : undefined;
              },
              { timeoutMs: 120_000, intervalMs: 500 },
            );
            // The process writes it in one go: done once its size holds for a second.
            let size = -1;
            await waitFor(
              `heap snapshot ${String(n)} written`,
              async () => {
                const now = (await stat(file)).size;
                const done = now > 0 && now === size;
                size = now;
                return done ? true : undefined;
              },
              { timeoutMs: 300_000, intervalMs: 1000 },
            );
            printRetainers(moment, file, await readFile(file, 'utf8'));
          },
        }
      : {}),
    cleanup: async () => {
      await release();
      if (snapshots) process.stderr.write(`heap snapshots kept in ${dir}\n`);
      else await rm(dir, { recursive: true, force: true });
    },
  };
}

function printRetainers(moment: string, file: string, text: string): void {
  const graph = analyse(JSON.parse(text) as Parameters<typeof analyse>[0]);
  const out = [
    `\nheap snapshot ${moment} (${file}): ${((graph.retained[0] as number) / MiB).toFixed(1)} MiB reachable`,
    'retained by (dominator tree, ≥ 0.5 MiB):',
    ...dominatorTree(graph, 0.5 * MiB, 16),
    'own size by constructor (top 20):',
    ...byConstructor(graph, 20),
  ];
  process.stdout.write(`${out.join('\n')}\n`);
}

/** The controller-runtime baseline (bench/baseline-go), with the same checks. */
async function baseline(sandbox: Sandbox, checks: number, nodes: number, interval: string): Promise<Subject> {
  const binary = await baselineBinary((line) => process.stderr.write(`${line}\n`));
  const [healthPort, metricsPort] = [await freePort(), await freePort()];
  const { child, confinement, release } = await spawnLimited(
    binary,
    baselineArguments({ kubeconfig: sandbox.kubeconfig, checks, nodes, interval, healthPort, metricsPort }),
    { stdio: ['ignore', 'ignore', 'inherit'] },
    memoryLimit(),
  );
  return {
    child,
    confinement,
    listening: Promise.resolve({
      ready: `http://127.0.0.1:${String(healthPort)}/readyz`,
      metrics: `http://127.0.0.1:${String(metricsPort)}/metrics`,
    }),
    probesMetric: 'baseline_probes_total',
    heapMetric: 'go_memstats_heap_inuse_bytes',
    cleanup: release,
  };
}

export type SubjectName = 'gatehouse' | 'baseline';

/** Starts `which`, measures it through sync, the start burst and one steady window, and stops it. */
export async function measureStart(
  which: SubjectName,
  sandbox: Sandbox,
  api: RestClient,
  scale: { checks: number; nodes: number; interval: string },
  timing: StartTiming,
): Promise<StartFigures> {
  const cpu0 = await serverCpuMs(sandbox);
  const bg0 = performance.now();
  const background = await backgroundRate(api, 10_000);
  const backgroundCpu = ((await serverCpuMs(sandbox)) - cpu0) / (performance.now() - bg0);
  const beforeStart = await serverCounters(api);
  const subject =
    which === 'gatehouse'
      ? await gatehouse(sandbox)
      : await baseline(sandbox, scale.checks, scale.nodes, scale.interval);
  const { child } = subject;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const started = performance.now();
  const pid = child.pid ?? 0;
  try {
    const urls = await subject.listening;
    await waitFor(
      `the ${which} controller to be ready (caches synced)`,
      async () => {
        if (child.exitCode !== null)
          throw new Error(`the ${which} controller exited with ${String(child.exitCode)}`);
        return (await fetch(urls.ready).catch(() => undefined))?.status === 200 ? true : undefined;
      },
      { timeoutMs: 600_000, intervalMs: 50 },
    );
    const syncedMs = performance.now() - started;
    const ownCpuAtSync = await processCpuMs(pid);
    const atSync = await serverCounters(api);
    await subject.snapshot?.('at sync');
    // The start burst's height: a quarter interval in, the first probes and their writes.
    await sleep(Math.max(0, started + syncedMs + timing.intervalMs / 4 - performance.now()));
    await subject.snapshot?.('a quarter interval after sync (the start burst)');
    await sleep(
      Math.max(0, started + syncedMs + timing.settleIntervals * timing.intervalMs - performance.now()),
    );
    const metricsText = async () => {
      if (child.exitCode !== null)
        throw new Error(
          `the ${which} controller exited with ${String(child.exitCode)} during the measurement`,
        );
      return (await fetch(urls.metrics)).text();
    };
    const windowStart = {
      counters: await serverCounters(api),
      at: performance.now(),
      cpu: await serverCpuMs(sandbox),
      ownCpu: await processCpuMs(pid),
    };
    const probesBefore = metricSum(await metricsText(), subject.probesMetric);
    await sleep(timing.intervalMs);
    const probesAfter = metricSum(await metricsText(), subject.probesMetric);
    const windowEnd = {
      counters: await serverCounters(api),
      at: performance.now(),
      cpu: await serverCpuMs(sandbox),
      ownCpu: await processCpuMs(pid),
    };
    const steadyText = await metricsText();
    const steady = {
      rss: await procStatus(pid, 'VmRSS'),
      heapUsed: metricSum(steadyText, subject.heapMetric),
    };
    await subject.snapshot?.('in the steady window');
    const peakRss = await procStatus(pid, 'VmHWM');
    child.kill('SIGTERM');
    await exited;
    const peak = await subject.peakSample?.();
    // Logged at sync, long before the process was stopped; none if it never was.
    const syncSplit = subject.syncSplit
      ? await Promise.race([subject.syncSplit, sleep(1000).then(() => undefined)])
      : undefined;
    const burstMs = windowStart.at - started;
    const steadyMs = windowEnd.at - windowStart.at;
    return {
      confinement: subject.confinement,
      syncedMs,
      peakRss,
      ...(peak ? { peak } : {}),
      ...(syncSplit ? { syncSplit: { loadingMs: syncSplit.loadingMs, listingMs: syncSplit.listingMs } } : {}),
      steady,
      toSync: lessBackground(served(beforeStart, atSync), background, syncedMs),
      // Each reading in between is one GET /metrics of ours.
      burst: lessBackground(served(beforeStart, windowStart.counters, 2), background, burstMs),
      burstMs,
      steadyWindow: lessBackground(served(windowStart.counters, windowEnd.counters), background, steadyMs),
      steadyMs,
      probes: probesAfter - probesBefore,
      serverCpuMs: windowEnd.cpu - windowStart.cpu - backgroundCpu * steadyMs,
      ownCpuMs: { toSync: ownCpuAtSync, steady: windowEnd.ownCpu - windowStart.ownCpu },
    };
  } finally {
    if (child.exitCode === null) child.kill('SIGTERM');
    await subject.cleanup();
  }
}
