// Go-style duration strings ("30s", "1m30s", "250ms", "1h"), as Kubernetes and the
// talos.dev API write them.
const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const PART = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;

/** Milliseconds in a duration string; throws with the offending text when it is not one. */
export function parseDuration(text: string): number {
  const trimmed = text.trim();
  if (trimmed === '0') return 0;
  let total = 0;
  let consumed = 0;
  for (const match of trimmed.matchAll(PART)) {
    if (match.index !== consumed) break;
    total += Number(match[1]) * (UNIT_MS[match[2] as string] as number);
    consumed += match[0].length;
  }
  if (consumed === 0 || consumed !== trimmed.length) {
    throw new Error(`"${text}" is not a duration; write it like 30s, 5m or 1h30m`);
  }
  return total;
}

/** A duration for people: 850ms, 4.2s, 12s, 3m, 3m20s, 1h30m, 24h. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)}s`;
  if (ms >= 3_600_000) {
    const hours = Math.floor(ms / 3_600_000);
    const minutes = Math.round((ms % 3_600_000) / 60_000);
    return minutes === 60 ? `${hours + 1}h` : minutes ? `${hours}h${minutes}m` : `${hours}h`;
  }
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.round((ms % 60_000) / 1000);
  return seconds ? `${minutes}m${seconds}s` : `${minutes}m`;
}
