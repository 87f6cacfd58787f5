// JSON with object keys sorted: equal values give equal text, whatever the key order. The
// API server hands a custom resource back with its keys sorted, so a status decided here is
// compared with the stored one this way (an unchanged status is not written again), and the
// HTTP API fingerprints requests and server-sent events with it.

/**
 * @example canonicalJson({ b: 1, a: { d: 2, c: 3 } }) // '{"a":{"c":3,"d":2},"b":1}'
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  );
}

/** JSON equality that ignores key order and undefined members. */
export function sameJSON(a: unknown, b: unknown): boolean {
  return canonicalJson(a) === canonicalJson(b);
}
