// The arithmetic of the rollout benchmark (bench/rollout.ts), apart so that it can be
// tested: the ideal makespan a per-node floor gives, the ratio a rollout's makespan is
// to it, what a run costs per node once the controller's idle cost is taken out, and how
// full the rollout kept its maxParallel slots.

/**
 * The ideal makespan of `nodes` nodes at `maxParallel` at once, each taking `floorMs`:
 * full waves of maxParallel, the last one partial — ceil(nodes ÷ maxParallel) × floor.
 */
export function idealMakespanMs(nodes: number, maxParallel: number, floorMs: number): number {
  if (nodes <= 0) return 0;
  if (maxParallel < 1) throw new Error(`maxParallel must be at least 1, not ${String(maxParallel)}`);
  return Math.ceil(nodes / maxParallel) * floorMs;
}

/**
 * The per-node floor from a rollout of `nodes` nodes one at a time: its makespan ÷ its
 * nodes, so each node carries its share of the rollout's own start and hand-over from one
 * node to the next, as every node of a parallel rollout does.
 */
export function floorFromSerialMs(makespanMs: number, nodes: number): number {
  if (nodes < 1) throw new Error('a floor needs at least one node');
  return makespanMs / nodes;
}

/**
 * The shortest makespan the machine allows for the work a run did: every process's CPU
 * (the controller, kube-apiserver, etcd, kwok, the Talos simulator) spread over `cores`
 * with none ever idle. When this alone is above the ideal, no scheduling of the controller
 * reaches the ideal on this machine; only less work does.
 */
export function machineBoundMs(cpuMsByProcess: Iterable<number>, cores: number): number {
  if (cores < 1) throw new Error(`cores must be at least 1, not ${String(cores)}`);
  let sum = 0;
  for (const ms of cpuMsByProcess) sum += ms;
  return sum / cores;
}

export function ratio(value: number, baseline: number): number {
  if (baseline <= 0) throw new Error(`a ratio needs a positive baseline, not ${String(baseline)}`);
  return value / baseline;
}

/**
 * What a run cost per node: `total` over `ms` less what the same process costs idle at
 * `idlePerMs` over as long (never below zero), divided among `nodes`.
 */
export function perNodeBeyondIdle(total: number, ms: number, idlePerMs: number, nodes: number): number {
  if (nodes < 1) throw new Error('per node needs at least one node');
  return Math.max(0, total - idlePerMs * ms) / nodes;
}

export interface Span {
  start: number;
  end: number;
}

/**
 * How full the rollout kept its slots: the time its nodes' actions were unfinished, all
 * added up, ÷ (maxParallel × the makespan). 1 is every slot busy from the first moment to
 * the last; the rest is time a slot stood empty (an action not yet created, or the tail).
 */
export function slotUse(spans: readonly Span[], maxParallel: number, makespanMs: number): number {
  if (makespanMs <= 0) return 0;
  const busy = spans.reduce((sum, s) => sum + Math.max(0, s.end - s.start), 0);
  return busy / (maxParallel * makespanMs);
}

/**
 * The longest time a freed slot waited for its next action: the spans sorted by end
 * paired with the starts after the first maxParallel, each start less the end it
 * replaced (a start before that end means the slot was not the one it took: 0).
 */
export function handOverGapsMs(spans: readonly Span[], maxParallel: number): number[] {
  const ends = spans.map((s) => s.end).sort((a, b) => a - b);
  const starts = spans.map((s) => s.start).sort((a, b) => a - b);
  const gaps: number[] = [];
  for (let i = maxParallel; i < starts.length; i++) {
    const freed = ends[i - maxParallel];
    if (freed === undefined) break;
    gaps.push(Math.max(0, (starts[i] as number) - freed));
  }
  return gaps;
}

export interface PhaseMark {
  phase: string;
  since: string;
}

/** How long one action spent in each phase: from entering it to entering the next, the last one to `end`. */
export function phaseDurations(history: readonly PhaseMark[], end: number): Map<string, number> {
  const out = new Map<string, number>();
  history.forEach((mark, i) => {
    const from = Date.parse(mark.since);
    const next = history[i + 1];
    const to = next ? Date.parse(next.since) : end;
    if (Number.isNaN(from) || Number.isNaN(to)) return;
    out.set(mark.phase, (out.get(mark.phase) ?? 0) + Math.max(0, to - from));
  });
  return out;
}

/** The median time in each phase over the actions that entered it, phases in the order first seen. */
export function medianByPhase(actions: readonly Map<string, number>[]): [string, number][] {
  const byPhase = new Map<string, number[]>();
  for (const a of actions)
    for (const [phase, ms] of a) byPhase.set(phase, [...(byPhase.get(phase) ?? []), ms]);
  return [...byPhase].map(([phase, all]) => {
    const sorted = [...all].sort((x, y) => x - y);
    return [phase, sorted[Math.ceil(sorted.length / 2) - 1] as number];
  });
}

/** `value ÷ baseline` as "1.23×", or "n/a" when there is no baseline to divide by (nothing above idle, no node done). */
export function times(value: number, baseline: number): string {
  return baseline > 0 && Number.isFinite(value) && Number.isFinite(baseline)
    ? `${(value / baseline).toFixed(2)}×`
    : 'n/a';
}
