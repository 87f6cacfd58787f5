// The rows the rollout benchmark (bench/rollout.ts) prints for one rollout: what it cost per
// node, and where its time went — each phase's median alone and under load, how full the
// slots were, the hand-over from one node to the next, the API server's time by kind of
// request, the NodeRollout status writes, and who used the machine's cores.
import { availableParallelism } from 'node:os';
import type { NodeAction } from '../src/api/node-action.ts';
import type { NodeRollout } from '../src/api/node-rollout.ts';
import { byVerbAndResource, total, type ServerCounters } from './api-requests.ts';
import type { Latency } from './rollout-cluster.ts';
import {
  handOverGapsMs,
  idealMakespanMs,
  machineBoundMs,
  medianByPhase,
  phaseDurations,
  times,
  slotUse,
  type Span,
} from './rollout-figures.ts';
import { median, ms, percentile } from './stats.ts';

export type Rollout = NodeRollout & { metadata: { name: string } };
export type Action = NodeAction & { metadata: { name: string } };

export interface RunFigures {
  nodes: number;
  /** When the rollout was created (epoch ms, this machine's clock, as the controller's). */
  created: number;
  makespanMs: number;
  windowMs: number;
  rollout: Rollout;
  actions: Action[];
  /** The controller's requests and CPU ms per node, less its idle cost. */
  requestsPerNode: number;
  cpuMsPerNode: number;
  /** Every client's requests over the run, less their idle rate and this benchmark's polls. */
  server: ServerCounters;
  /** The API server's time on each kind of request over the run. */
  latency: Map<string, Latency>;
  /** The controller's CPU over the run (ms), and each sandbox process's. */
  cpuMs: number;
  sandboxCpu: Map<string, number>;
  /** Keys waiting for a worker, sampled every QUEUE_SAMPLE_MS (in-process controller only). */
  queued: { actions: number[]; rollouts: number[] };
}

export function spansOf(actions: readonly Action[], keep: (a: Action) => boolean = () => true): Span[] {
  return actions
    .filter(keep)
    .map((a) => ({
      start: Date.parse(a.status?.startTime ?? ''),
      end: Date.parse(a.status?.completionTime ?? ''),
    }))
    .filter((s) => !Number.isNaN(s.start) && !Number.isNaN(s.end));
}

export function medianActionMs(actions: readonly Action[]): number {
  const spans = spansOf(actions, (a) => a.status?.phase === 'Succeeded');
  return spans.length > 0 ? median(spans.map((s) => s.end - s.start)) : Number.NaN;
}

/** The controller's requests and CPU while it only watches (its checks, its caches, kwok's heartbeats). */
export function costRows(run: RunFigures, floor: RunFigures): [string, string][] {
  return [
    [
      'controller API requests per node',
      `${run.requestsPerNode.toFixed(1)} (${times(run.requestsPerNode, floor.requestsPerNode)} the serial rollout's ${floor.requestsPerNode.toFixed(1)})`,
    ],
    [
      'controller CPU per node (its process)',
      `${ms(run.cpuMsPerNode)} (${times(run.cpuMsPerNode, floor.cpuMsPerNode)} the serial rollout's ${ms(floor.cpuMsPerNode)})`,
    ],
    [
      'everyone else (Talos simulator, kwok, kube-controller-manager), per node',
      `${(total(run.server.requests) / run.nodes - run.requestsPerNode).toFixed(1)} (serial: ${(total(floor.server.requests) / floor.nodes - floor.requestsPerNode).toFixed(1)})`,
    ],
    [
      'all clients, requests per node',
      `${(total(run.server.requests) / run.nodes).toFixed(1)}: ${byVerbAndResource(run.server.requests, 1 / run.nodes, 10)}`,
    ],
  ];
}

export function timingRows(
  run: RunFigures,
  floor: RunFigures,
  floorMs: number,
  maxParallel: number,
): [string, string][] {
  const spans = spansOf(run.actions);
  const gaps = handOverGapsMs(spans, maxParallel);
  const alone = medianActionMs(floor.actions);
  const loaded = medianActionMs(run.actions);
  return [
    ['per-node action, median: alone / here', `${ms(alone)} / ${ms(loaded)} (${times(loaded, alone)})`],
    [
      'slot use (action time ÷ maxParallel × makespan)',
      `${(slotUse(spans, maxParallel, run.makespanMs) * 100).toFixed(0)} %`,
    ],
    [
      'freed slot to next action, p50 / p90 / max',
      gaps.length > 0
        ? `${ms(percentile(gaps, 50))} / ${ms(percentile(gaps, 90))} / ${ms(Math.max(...gaps))}`
        : 'no hand-over',
    ],
    ['first action started after creation', ms(Math.min(...spans.map((s) => s.start)) - run.created)],
    ['time in each phase, median: alone → here', phaseRow(floor.actions, run.actions)],
    ['API server time, the largest totals (mean × count)', latencyRow(run.latency)],
    ['NodeRollout status writes', rolloutWrites(run)],
    ['CPU over the run, by process (of the 2 cores × window)', cpuRow(run)],
    [
      "the machine's bound: that CPU at full use of every core",
      machineRow(run, idealMakespanMs(run.nodes, maxParallel, floorMs)),
    ],
    ...(run.queued.actions.length > 0
      ? [
          [
            'keys waiting for a worker, p50 / p90 / max',
            `nodeactions ${queueRow(run.queued.actions)}; noderollouts ${queueRow(run.queued.rollouts)}`,
          ] as [string, string],
        ]
      : []),
    ['per-node floor, for reference', ms(floorMs)],
  ];
}

function latencyRow(latency: Map<string, Latency>): string {
  return (
    [...latency]
      // A watch lasts as long as it is open: its time says nothing of the server's speed.
      .filter(([k, l]) => l.count > 0 && !k.startsWith('WATCH '))
      .sort((a, b) => b[1].seconds - a[1].seconds)
      .slice(0, 6)
      .map(([k, l]) => `${k} ${ms((l.seconds * 1000) / l.count)} × ${l.count.toFixed(0)}`)
      .join(', ')
  );
}

/** Who used the machine's cores while the rollout ran: the controller and every sandbox process. */
function cpuRow(run: RunFigures): string {
  const all: [string, number][] = [['controller', run.cpuMs], ...run.sandboxCpu];
  const capacity = availableParallelism() * run.windowMs;
  const used = all.reduce((sum, [, v]) => sum + v, 0);
  return `${all
    .sort((a, b) => b[1] - a[1])
    .map(([name, v]) => `${name} ${ms(v)}`)
    .join(', ')}: ${((used / capacity) * 100).toFixed(0)} % of the machine`;
}

/**
 * How long the run's work takes with every core always busy, against the ideal: above it,
 * the ideal is out of this machine's reach whatever the controller schedules, and the
 * controller's share of the CPU is the part it can take out itself.
 */
function machineRow(run: RunFigures, idealMs: number): string {
  const cores = availableParallelism();
  const bound = machineBoundMs([run.cpuMs, ...run.sandboxCpu.values()], cores);
  const others = machineBoundMs(run.sandboxCpu.values(), cores);
  return `${ms(bound)} on ${String(cores)} cores (${times(bound, idealMs)} the ideal); without the controller's own process ${ms(others)} (${times(others, idealMs)})`;
}

/** Every write of the rollout's status carries every node's entry: what that came to. */
function rolloutWrites(run: RunFigures): string {
  const writes = run.latency.get('PUT noderollouts/status')?.count ?? 0;
  const bytes = JSON.stringify(run.rollout).length;
  // Every node is listed from the first write on: the object is about as big throughout.
  return `${writes.toFixed(0)} (${(writes / run.nodes).toFixed(1)} per node) of an object of ${(bytes / 1024).toFixed(0)} KiB at the end: ~${((writes * bytes) / 2 ** 20).toFixed(0)} MiB written`;
}

const queueRow = (samples: number[]) =>
  `${String(percentile(samples, 50))} / ${String(percentile(samples, 90))} / ${String(Math.max(...samples))}`;

const phasesOf = (actions: readonly Action[]) =>
  medianByPhase(
    actions
      .filter((a) => a.status?.phase === 'Succeeded')
      .map((a) => phaseDurations(a.status?.phaseHistory ?? [], Date.parse(a.status?.completionTime ?? ''))),
  );

/** Where a node's time goes, alone and under this rollout's load: "Pending 20 ms → 1.1 s, …". */
export function phaseRow(alone: readonly Action[], here: readonly Action[]): string {
  const before = new Map(phasesOf(alone));
  return phasesOf(here)
    .filter(([phase]) => !['Succeeded', 'Failed'].includes(phase))
    .map(([phase, t]) => `${phase} ${before.has(phase) ? ms(before.get(phase) ?? 0) : '–'} → ${ms(t)}`)
    .join(', ');
}
