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
