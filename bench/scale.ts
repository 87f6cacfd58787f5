// Scale: 5,000 Nodes as big as a busy kubelet makes them and 1,000 `nodes` checks at 60 s.
// gatehouse's controller runs in a process of its own, started as the Deployment starts it,
// and beside it — one after the other, against the same objects — a controller-runtime
// manager doing the same work the way Go controllers do (bench/baseline-go): each one's
// time to synced caches, peak and steady memory, and the API requests it makes at start
// and in a steady window, by verb and resource, from the API server's own counters.
//
// `growth` runs gatehouse alone at 1,000 / 5,000 / 10,000 Nodes × 100 / 1,000 / 5,000
// checks, one start per cell, and prints what memory each Node and each check costs.
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import type { KubeObject } from '../src/kube/informer.ts';
import { slimNode } from '../src/kube/nodes.ts';
import { RestClient } from '../src/kube/rest.ts';
import { installGatehouse } from '../src/manifests/install.ts';
import { byVerbAndResource, total, type ServerCounters } from './api-requests.ts';
import { periodicReadCosts } from './periodic-reads.ts';
import { createChecks, createNodes, deleteChecksFrom, settle } from './scale-objects.ts';
import { measureStart, type StartFigures, type StartTiming, type SubjectName } from './scale-start.ts';
import { median, ms, report } from './stats.ts';
import { record } from './summary.ts';

const MiB = 2 ** 20;
const INTERVAL = process.env.BENCH_SCALE_INTERVAL ?? '60s';
const TIMING: StartTiming = {
  intervalMs: Number.parseInt(INTERVAL, 10) * 1000,
  settleIntervals: Number(process.env.BENCH_SCALE_SETTLE_INTERVALS ?? 2),
};

function mib(bytes: number): string {
  return `${(bytes / MiB).toFixed(0)} MiB`;
}

const log = (line: string) => process.stdout.write(`${line}\n`);

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

/** What a peak was made of: the V8 heap's pages, and memory outside it. */
function peakMakeup(peak: NonNullable<StartFigures['peak']>): string {
  const native = peak.rss - peak.heapPhysical - peak.external;
  return `V8 heap ${mib(peak.heapPhysical)} (${mib(peak.heapUsed)} in use), external ${mib(peak.external)} (array buffers ${mib(peak.arrayBuffers)}), native rest ${mib(native)}`;
}

/**
 * One start's figures on a line, printed as it ends — with what its peak was made of, for
 * the summary prints that only for the median start (never a cluster's first).
 */
function startLine(f: StartFigures): string {
  const perMinute = (total(f.steadyWindow.requests) * 60_000) / f.steadyMs;
  const peak = f.peak ? `\n      peak at ${ms(f.peak.atMs)}: ${peakMakeup(f.peak)}` : '';
  const split = f.syncSplit
    ? ` (by its own clock: loading ${ms(f.syncSplit.loadingMs)}, then lists ${ms(f.syncSplit.listingMs)})`
    : '';
  return `[${f.confinement}] synced ${ms(f.syncedMs)}${split}, peak RSS ${mib(f.peakRss)}, steady RSS ${mib(f.steady.rss)}, heap ${mib(f.steady.heapUsed)}, steady ${perMinute.toFixed(0)} requests/min over ${String(f.probes)} probes${peak}`;
}

/** The start whose peak RSS is the median: it stands for all in what its memory was made of. */
function medianStart(figures: StartFigures[]): StartFigures {
  const sorted = [...figures].sort((a, b) => a.peakRss - b.peakRss);
  return sorted[Math.floor((sorted.length - 1) / 2)] as StartFigures;
}

interface Summary {
  synced: number;
  peakRss: number;
  steadyRss: number;
  steadyHeap: number;
  perMinute: number;
  perProbe: number;
  /** The controller's own CPU: start to sync (ms), and steady (ms per minute). */
  cpuToSync: number;
  cpuPerMinute: number;
  start: StartFigures;
}

function summarise(figures: StartFigures[]): Summary {
  const perMinute = (f: StartFigures) => (total(f.steadyWindow.requests) * 60_000) / f.steadyMs;
  return {
    synced: median(figures.map((f) => f.syncedMs)),
    peakRss: median(figures.map((f) => f.peakRss)),
    steadyRss: median(figures.map((f) => f.steady.rss)),
    steadyHeap: median(figures.map((f) => f.steady.heapUsed)),
    perMinute: median(figures.map(perMinute)),
    perProbe: median(figures.map((f) => total(f.steadyWindow.requests) / Math.max(1, f.probes))),
    cpuToSync: median(figures.map((f) => f.ownCpuMs.toSync)),
    cpuPerMinute: median(figures.map((f) => (f.ownCpuMs.steady * 60_000) / f.steadyMs)),
    start: medianStart(figures),
  };
}

function all(figures: StartFigures[], of: (f: StartFigures) => string): string {
  return figures.length > 1 ? `  [${figures.map(of).join(', ')}]` : '';
}

function lists(c: ServerCounters, scale: number): string {
  const { fromCache, consistentFromCache, fromEtcd } = c.lists;
  const f = (n: number) => (n * scale).toFixed(0);
  return `${f(fromCache)} answered from the watch cache (${f(consistentFromCache)} of them consistent reads, each first reading etcd's revision); etcd range reads for lists ${f(fromEtcd)}`;
}

function requestRows(name: string, s: Summary): [string, string][] {
  const f = s.start;
  const perMin = 60_000 / f.steadyMs;
  return [
    [
      `${name}: requests, start → synced`,
      `${total(f.toSync.requests).toFixed(0)}: ${byVerbAndResource(f.toSync.requests)}`,
    ],
    [
      `${name}: requests, start burst (start → ${String(TIMING.settleIntervals)} intervals after sync, ${ms(f.burstMs)})`,
      `${total(f.burst.requests).toFixed(0)}: ${byVerbAndResource(f.burst.requests)}`,
    ],
    [
      `${name}: requests, steady (per minute, ${String(f.probes)} probes in ${ms(f.steadyMs)})`,
      `${s.perMinute.toFixed(0)} (${s.perProbe.toFixed(2)} per probe): ${byVerbAndResource(f.steadyWindow.requests, perMin)}`,
    ],
    [`${name}: lists, steady (per minute)`, lists(f.steadyWindow, perMin)],
    [
      `${name}: kube-apiserver and etcd CPU, steady`,
      `${((f.serverCpuMs * perMin) / 1000).toFixed(1)} s per minute (background subtracted)`,
    ],
  ];
}

export async function scaleBench(sandbox: Sandbox, nodes: number, checks: number, runs = 1): Promise<void> {
  const api = new RestClient(sandbox.kubeConfig());
  await installGatehouse(api, { withoutDeployment: true });
  const t0 = performance.now();
  await createNodes(sandbox, api, 0, nodes);
  await createChecks(api, 0, checks, nodes, INTERVAL);
  const created = performance.now() - t0;
  await settle(api, { from: 0, to: nodes }, log);
  const baselineRuns = Number(process.env.BENCH_BASELINE_RUNS ?? runs);
  const figures: Record<SubjectName, StartFigures[]> = { gatehouse: [], baseline: [] };
  // Interleaved, so that the machine's load drifts over both alike.
  // A start that fails (a controller exiting: the baseline's manager exits when it loses its
  // lease to a starved API server) is reported and made again, up to two more times.
  let failures = 0;
  for (let i = 0; i < Math.max(runs, baselineRuns) + failures; i++) {
    for (const which of ['gatehouse', 'baseline'] as const) {
      if (figures[which].length >= (which === 'gatehouse' ? runs : baselineRuns)) continue;
      log(`  start ${String(figures[which].length + 1)} of ${which}`);
      let f: StartFigures;
      try {
        f = await measureStart(which, sandbox, api, { checks, nodes, interval: INTERVAL }, TIMING);
      } catch (error) {
        if (++failures > 2) throw error;
        log(`    failed, made again: ${error instanceof Error ? error.message : String(error)}`);
        continue;
      }
      figures[which].push(f);
      log(`    ${startLine(f)}`);
    }
  }
  const sizes = await nodeCacheSizes(api);
  const readCosts = await periodicReadCosts(sandbox, api, nodes);
  const g = summarise(figures.gatehouse);
  const b = figures.baseline.length ? summarise(figures.baseline) : undefined;
  const ratio = (x: number, y: number | undefined) => (y ? ` (${(x / y).toFixed(2)}× the baseline)` : '');
  const { peak } = g.start;
  const split = figures.gatehouse.flatMap((f) => (f.syncSplit ? [f.syncSplit] : []));
  const scope = `${String(nodes)} nodes, ${String(checks)} checks at ${INTERVAL}`;
  const rows: [string, string][] = [
    ['objects created in', ms(created)],
    [
      'gatehouse: start → caches synced (/readyz 200)',
      `${ms(g.synced)}${ratio(g.synced, b?.synced)}${all(figures.gatehouse, (f) => ms(f.syncedMs))}`,
    ],
    [
      '  by its own clock (median): loading the code, then the lists',
      split.length
        ? `${ms(median(split.map((x) => x.loadingMs)))}, ${ms(median(split.map((x) => x.listingMs)))}`
        : 'not logged (no "caches synced" line)',
    ],
    [
      'gatehouse: peak RSS',
      `${mib(g.peakRss)}${ratio(g.peakRss, b?.peakRss)}${all(figures.gatehouse, (f) => mib(f.peakRss))}`,
    ],
  ];
  if (peak) {
    const spaces = Object.entries(peak.spaces)
      .filter(([, bytes]) => bytes >= MiB)
      .map(([name, bytes]) => `${name.replace(/_space$/, '')} ${mib(bytes)}`)
      .join(', ');
    rows.push(
      [`  at its peak (${ms(peak.atMs)} after start)`, peakMakeup(peak)],
      ['  V8 heap spaces at the peak', spaces],
    );
  }
  rows.push([
    'gatehouse: steady RSS, V8 heap in use',
    `${mib(g.steadyRss)}, ${mib(g.steadyHeap)}${all(figures.gatehouse, (f) => mib(f.steady.heapUsed))}`,
  ]);
  if (b)
    rows.push(
      [
        'baseline: start → cache synced (/readyz 200)',
        `${ms(b.synced)}${all(figures.baseline, (f) => ms(f.syncedMs))}`,
      ],
      ['baseline: peak RSS', `${mib(b.peakRss)}${all(figures.baseline, (f) => mib(f.peakRss))}`],
      ['baseline: steady RSS, Go heap in use', `${mib(b.steadyRss)}, ${mib(b.steadyHeap)}`],
    );
  const cpu = (s: Summary) =>
    `${ms(s.cpuToSync)} to sync, ${(s.cpuPerMinute / 1000).toFixed(2)} s per minute steady`;
  rows.push([
    'controller CPU (its own process, median)',
    `gatehouse ${cpu(g)}${b ? `; baseline ${cpu(b)}` : ''}`,
  ]);
  rows.push(...requestRows('gatehouse', g), ...(b ? requestRows('baseline', b) : []));
  rows.push(...readCosts);
  rows.push([
    'a Node as served → as gatehouse caches it (JSON)',
    `${(sizes.served / 1024).toFixed(1)} KiB → ${(sizes.cached / 1024).toFixed(1)} KiB (${(sizes.cached / sizes.served).toFixed(2)}×)`,
  ]);
  report(
    `scale: ${scope} (each controller in its own process, one at a time; medians of ${String(runs)} starts of gatehouse, ${String(baselineRuns)} of the controller-runtime baseline; background subtracted)`,
    rows,
  );
  record(
    `scale (${scope}): gatehouse peak RSS`,
    `${mib(g.peakRss)}${ratio(g.peakRss, b?.peakRss)}`,
    '≤ 200 MiB, ≤ 1.0×',
  );
  record(`scale (${scope}): start → caches synced`, `${ms(g.synced)}${ratio(g.synced, b?.synced)}`, '≤ 1.0×');
  record(`scale (${scope}): V8 heap in use, steady`, mib(g.steadyHeap), '≤ 80 MiB');
  record(
    `scale (${scope}): API requests, steady`,
    `${g.perMinute.toFixed(0)}/min, ${g.perProbe.toFixed(2)} per probe${ratio(g.perMinute, b?.perMinute)}`,
    '≤ 1.1 per probe, ≤ 1.0×',
  );
}

const GROWTH_NODES = (process.env.BENCH_GROWTH_NODES ?? '1000,5000,10000').split(',').map(Number);
const GROWTH_CHECKS = (process.env.BENCH_GROWTH_CHECKS ?? '100,1000,5000').split(',').map(Number);

/** The growth table: one start of gatehouse per cell, and memory per Node and per check from its slopes. */
export async function growthBench(sandbox: Sandbox): Promise<void> {
  const api = new RestClient(sandbox.kubeConfig());
  await installGatehouse(api, { withoutDeployment: true });
  const cells = new Map<string, StartFigures>();
  let madeNodes = 0;
  let madeChecks = 0;
  for (const nodes of GROWTH_NODES) {
    await createNodes(sandbox, api, madeNodes, nodes);
    await settle(api, { from: 0, to: nodes }, log);
    madeNodes = nodes;
    for (const checks of GROWTH_CHECKS) {
      if (madeChecks > checks) await deleteChecksFrom(api, checks as 100 | 1000);
      madeChecks = Math.min(madeChecks, checks);
      await createChecks(api, madeChecks, checks, nodes, INTERVAL);
      madeChecks = checks;
      log(`  ${String(nodes)} nodes, ${String(checks)} checks`);
      const f = await measureStart('gatehouse', sandbox, api, { checks, nodes, interval: INTERVAL }, TIMING);
      cells.set(`${String(nodes)}/${String(checks)}`, f);
      log(`    ${startLine(f)}`);
    }
  }
  const cell = (n: number, c: number) => cells.get(`${String(n)}/${String(c)}`) as StartFigures;
  const rows: [string, string][] = [];
  for (const n of GROWTH_NODES)
    for (const c of GROWTH_CHECKS) {
      const f = cell(n, c);
      const perMinute = (total(f.steadyWindow.requests) * 60_000) / f.steadyMs;
      rows.push([
        `${String(n).padStart(6)} nodes, ${String(c).padStart(5)} checks`,
        `synced ${ms(f.syncedMs).padStart(8)}, peak RSS ${mib(f.peakRss).padStart(8)}, steady RSS ${mib(f.steady.rss).padStart(8)}, V8 heap ${mib(f.steady.heapUsed).padStart(7)}, ${perMinute.toFixed(0).padStart(5)} requests/min (${(total(f.steadyWindow.requests) / Math.max(1, f.probes)).toFixed(2)} per probe)`,
      ]);
    }
  const KiB = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;
  const slope = (a: StartFigures, b: StartFigures, span: number, of: (f: StartFigures) => number) =>
    (of(b) - of(a)) / span;
  const heap = (f: StartFigures) => f.steady.heapUsed;
  const rss = (f: StartFigures) => f.steady.rss;
  const pairs = <T>(xs: T[]) => xs.slice(1).map((x, i) => [xs[i] as T, x] as const);
  const perUnit = (xs: number[], at: (x: number) => StartFigures) =>
    pairs(xs)
      .map(
        ([a, b]) =>
          `${String(a)}→${String(b)}: ${KiB(slope(at(a), at(b), b - a, heap))}; ${KiB(slope(at(a), at(b), b - a, rss))}`,
      )
      .join('   ');
  for (const c of GROWTH_CHECKS)
    rows.push([`per Node, at ${String(c)} checks (V8 heap; RSS)`, perUnit(GROWTH_NODES, (n) => cell(n, c))]);
  for (const n of GROWTH_NODES)
    rows.push([`per check, at ${String(n)} nodes (V8 heap; RSS)`, perUnit(GROWTH_CHECKS, (c) => cell(n, c))]);
  report(
    `growth: gatehouse at each size, one start per cell (steady figures ${String(TIMING.settleIntervals)} intervals after sync, checks at ${INTERVAL})`,
    rows,
  );
}
