// How long a node's action is expected to take, for window fit: the median of that
// node's last successful actions of the same kind, else of its pool's (the rollout's
// nodes of the same role and group), else a default for a cluster with no history.
// Measured from admission (leaving Pending: from then on the action holds its policy's
// slot and its window matters) to completion; a queue in Pending is not the node's time.
import type { Action } from '../api/common.ts';

/** A finished NodeAction, as history. */
export interface HistoryEntry {
  node: string;
  action: Action;
  phase: string | undefined;
  /** When it was admitted (condition Admitted True), else when first processed. */
  startTime: string | undefined;
  completionTime: string | undefined;
}

/** With no history at all: long enough for a drain, a reboot and the boot hooks of a typical node. */
export const DEFAULT_EXPECTED_DURATION_MS = 10 * 60_000;

/** How many of the latest successful actions the median is taken over. */
export const HISTORY_DEPTH = 5;

export interface Expectation {
  ms: number;
  /** Where the figure comes from, for the status message. */
  basis: 'node' | 'pool' | 'default';
  samples: number;
}

function durations(entries: readonly HistoryEntry[], action: Action, nodes: ReadonlySet<string>): number[] {
  return entries
    .filter((e) => e.phase === 'Succeeded' && e.action === action && nodes.has(e.node))
    .map((e) => ({ end: Date.parse(e.completionTime ?? ''), start: Date.parse(e.startTime ?? '') }))
    .filter((d) => Number.isFinite(d.end) && Number.isFinite(d.start) && d.end >= d.start)
    .sort((a, b) => b.end - a.end)
    .slice(0, HISTORY_DEPTH)
    .map((d) => d.end - d.start);
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] ?? 0) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
}

export function expectedDuration(
  node: string,
  pool: ReadonlySet<string>,
  action: Action,
  history: readonly HistoryEntry[],
): Expectation {
  const own = durations(history, action, new Set([node]));
  if (own.length > 0) return { ms: median(own), basis: 'node', samples: own.length };
  const pooled = durations(history, action, pool);
  if (pooled.length > 0) return { ms: median(pooled), basis: 'pool', samples: pooled.length };
  return { ms: DEFAULT_EXPECTED_DURATION_MS, basis: 'default', samples: 0 };
}

/** "~14m", "~1h05m", "~40s": a rough duration for a message. */
export function roughDuration(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 60) return `~${String(seconds)}s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `~${String(minutes)}m`;
  return `~${String(Math.floor(minutes / 60))}h${String(minutes % 60).padStart(2, '0')}m`;
}
