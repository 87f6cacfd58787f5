// `npm run bench`: every benchmark, printing figures. Each runs against a sandbox of its
// own started here, so the figures include nothing from the test suites.
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { execFileSync } from 'node:child_process';
import { CoreV1Api } from '@kubernetes/client-node';
import { ensureBinaries } from '../sandbox/binaries.ts';
import { startSandbox, type Sandbox } from '../sandbox/cluster.ts';
import { formatDuration } from '../src/duration.ts';
import { median, ms, percentile, report } from './stats.ts';
import { installGatehouseAPI } from '../test/support/install.ts';
import { checksBench } from './checks.ts';
import { gateBench } from './gate.ts';
import { nodeChecksBench } from './node-checks.ts';
import { restBench } from './rest.ts';
import { rolloutBench } from './rollout.ts';
import { growthBench, scaleBench } from './scale.ts';
import { talosGateBench } from './talos-gate.ts';
import { printSummary } from './summary.ts';
import { measureWatchRoundTrip } from './watch-round-trip.ts';

const WARM_STARTS = Number(process.env.BENCH_WARM_STARTS ?? 3);
const RTT_SAMPLES = Number(process.env.BENCH_RTT_SAMPLES ?? 300);
const CHECKS = Number(process.env.BENCH_CHECKS ?? 1000);
const GATE_SAMPLES = Number(process.env.BENCH_GATE_SAMPLES ?? 100);
const SCALE_NODES = Number(process.env.BENCH_SCALE_NODES ?? 5000);
const SCALE_CHECKS = Number(process.env.BENCH_SCALE_CHECKS ?? 1000);
/** Controller starts against the same 5,000 nodes: the noisy machine's spread shows. */
const SCALE_RUNS = Number(process.env.BENCH_SCALE_RUNS ?? 3);
const CHECKS_WINDOW_MS = Number(process.env.BENCH_CHECKS_WINDOW_MS ?? 60_000);
/** Idle held calls whose memory the Talos API gate benchmark measures. */
const TALOS_GATE_HELD = Number(process.env.BENCH_TALOS_GATE_HELD ?? 200);
const NODE_CHECK_NODES = Number(process.env.BENCH_NODE_CHECK_NODES ?? 1000);
/** One round of every node is measured: a shorter nodeInterval than the default 5m keeps the run short (and is harder). */
const NODE_INTERVAL = process.env.BENCH_NODE_INTERVAL ?? '1m';
/** The rollout benchmark's nodes (a NodeRollout tracks at most 1,000) and its parallelism. */
const ROLLOUT_NODES = Number(process.env.BENCH_ROLLOUT_NODES ?? 1000);
const ROLLOUT_PARALLEL = Number(process.env.BENCH_ROLLOUT_PARALLEL ?? 50);

/** Empties the page cache so the next start reads every binary from disk; false if not permitted. */
async function dropPageCache(): Promise<boolean> {
  try {
    execFileSync('sync');
    await writeFile('/proc/sys/vm/drop_caches', '3');
    return true;
  } catch {
    return false;
  }
}

async function timedStart(nodes: number) {
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-bench-'));
  const t0 = performance.now();
  const sandbox = await startSandbox({ dir, nodes, ownerPid: process.pid });
  const started = performance.now() - t0;
  return { sandbox, started };
}

async function sandboxBench() {
  const binaries = await ensureBinaries((line) => process.stderr.write(`${line}\n`));
  const build = JSON.parse(await readFile(join(binaries.dir, 'build.json'), 'utf8').catch(() => '{}')) as {
    seconds?: number;
    finished?: string;
  };
  const rows: [string, string][] = [];
  rows.push([
    'build from Go modules (cold)',
    build.seconds !== undefined
      ? `${formatDuration(build.seconds * 1000)} (recorded by sandbox/build.sh, ${build.finished ?? '?'})`
      : 'not recorded',
  ]);
  const dropped = await dropPageCache();
  const cold = await timedStart(4);
  const t0 = performance.now();
  await cold.sandbox.stop();
  const stopped = performance.now() - t0;
  rows.push([`start, page cache ${dropped ? 'dropped' : 'NOT dropped (needs root)'}`, ms(cold.started)]);
  const warm: number[] = [];
  for (let i = 0; i < WARM_STARTS; i++) {
    const s = await timedStart(4);
    warm.push(s.started);
    await s.sandbox.stop();
  }
  rows.push([
    `start, warm (median of ${String(WARM_STARTS)})`,
    `${ms(median(warm))}  [${warm.map(ms).join(', ')}]`,
  ]);
  rows.push(['stop (every process gone, files removed)', ms(stopped)]);
  report(`sandbox (kubernetes ${binaries.kubernetesVersion}, 4 simulated nodes)`, rows);
}

async function watchBench() {
  const { sandbox } = await timedStart(1);
  try {
    const kc = sandbox.kubeConfig();
    await kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: 'bench' } } });
    // A short warm-up so connection set-up and the watch cache's first fill are not sampled.
    await measureWatchRoundTrip(kc, 'bench', 20, 'warm-up');
    const { samples } = await measureWatchRoundTrip(kc, 'bench', RTT_SAMPLES);
    report(
      `watch round trip: create ConfigMap → ADDED event (${String(samples.length)} samples, sequential)`,
      [
        ['p50', ms(percentile(samples, 50))],
        ['p90', ms(percentile(samples, 90))],
        ['p99', ms(percentile(samples, 99))],
        ['max', ms(Math.max(...samples))],
      ],
    );
  } finally {
    await sandbox.stop();
  }
}

async function withSandbox(nodes: number, bench: (sandbox: Sandbox) => Promise<void>): Promise<void> {
  const { sandbox } = await timedStart(nodes);
  try {
    await bench(sandbox);
  } finally {
    await sandbox.stop();
  }
}

async function checksAtScale() {
  const { sandbox } = await timedStart(1);
  try {
    const kc = sandbox.kubeConfig();
    await installGatehouseAPI(kc);
    await checksBench(kc, { checks: CHECKS, measureMs: CHECKS_WINDOW_MS });
  } finally {
    await sandbox.stop();
  }
}

// `npm run bench -- checks watch` runs only those.
const only = process.argv.slice(2);
const benches: Record<string, () => Promise<void>> = {
  sandbox: sandboxBench,
  watch: watchBench,
  rest: () => withSandbox(1, (s) => restBench(s.kubeConfig(), RTT_SAMPLES)),
  checks: checksAtScale,
  gate: () => withSandbox(4, (s) => gateBench(s, GATE_SAMPLES)),
  'gate-node': () => withSandbox(4, (s) => gateBench(s, GATE_SAMPLES, { nodeScoped: true })),
  scale: () => withSandbox(1, (s) => scaleBench(s, SCALE_NODES, SCALE_CHECKS, SCALE_RUNS)),
  growth: () => withSandbox(1, growthBench),
  'talos-gate': () =>
    withSandbox(1, (s) => talosGateBench(s, { samples: RTT_SAMPLES, heldCalls: TALOS_GATE_HELD })),
  'node-checks': () =>
    withSandbox(1, async (s) => {
      await installGatehouseAPI(s.kubeConfig());
      await nodeChecksBench(s, { nodes: NODE_CHECK_NODES, interval: '10s', nodeInterval: NODE_INTERVAL });
    }),
  rollout: () =>
    withSandbox(1, (s) =>
      rolloutBench(s, {
        nodes: ROLLOUT_NODES,
        maxParallel: ROLLOUT_PARALLEL,
        floorNodes: Number(process.env.BENCH_ROLLOUT_FLOOR_NODES ?? 5),
        undrainablePercent: 10,
        drainTimeout: '5s',
        idleMs: Number(process.env.BENCH_ROLLOUT_IDLE_MS ?? 15_000),
      }),
    ),
};
for (const name of only) {
  if (!(name in benches))
    throw new Error(`no benchmark "${name}"; choose from ${Object.keys(benches).join(', ')}`);
}

process.stdout.write(
  `gatehouse benchmarks — node ${process.version}, ${String(availableParallelism())} cores\n`,
);
// The growth table takes most of an hour: run only when named.
const onRequest = new Set(['growth']);
for (const [name, bench] of Object.entries(benches))
  if (only.length === 0 ? !onRequest.has(name) : only.includes(name)) await bench();
printSummary();
