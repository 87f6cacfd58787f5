// The requests the API server serves, by verb and resource, from its own counters
// (apiserver_request_total), and whether its lists were answered from the watch cache or
// from etcd — so a benchmark can say what a process asked of the API server over a window.
import type { RestClient } from '../src/kube/rest.ts';

/** Requests served so far, keyed "VERB resource[/subresource]" ("GET /metrics" for a path). */
export type RequestCounts = Map<string, number>;

/**
 * How the API server answered lists: from its watch cache (how many of those were
 * consistent reads), and the list reads it sent etcd — a list delegated to etcd, or the
 * revision a consistent read from the cache first asks etcd for (a range read of limit 1).
 */
export interface ListSources {
  fromCache: number;
  consistentFromCache: number;
  fromEtcd: number;
}

export interface ServerCounters {
  requests: RequestCounts;
  lists: ListSources;
}

/** Each sample line's labels and value. */
function samples(text: string, metric: string): { labels: Record<string, string>; value: number }[] {
  const out: { labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`)) continue;
    const close = line.lastIndexOf('}');
    const labels: Record<string, string> = {};
    for (const m of line.slice(metric.length + 1, close).matchAll(/(\w+)="([^"]*)"/g))
      labels[m[1] as string] = m[2] as string;
    out.push({ labels, value: Number(line.slice(close + 1).trim()) });
  }
  return out;
}

function requestKey(l: Record<string, string>): string {
  // A non-resource request (/metrics, /readyz) carries its path where a subresource would be.
  if (!l.resource) return `${l.verb ?? '?'} ${l.subresource || '(non-resource)'}`;
  const group = l.group ? `.${l.group}` : '';
  return `${l.verb ?? '?'} ${l.resource}${group}${l.subresource ? `/${l.subresource}` : ''}`;
}

/** The API server's counters now. Reading them is itself one request: "GET /metrics". */
export async function serverCounters(api: RestClient): Promise<ServerCounters> {
  const text = await api.request<string>('/metrics', { headers: { Accept: 'text/plain' } });
  const requests: RequestCounts = new Map();
  for (const { labels, value } of samples(text, 'apiserver_request_total')) {
    const key = requestKey(labels);
    requests.set(key, (requests.get(key) ?? 0) + value);
  }
  const sum = (metric: string, keep: (l: Record<string, string>) => boolean = () => true) =>
    samples(text, metric)
      .filter((s) => keep(s.labels))
      .reduce((total, s) => total + s.value, 0);
  return {
    requests,
    lists: {
      fromCache: sum('apiserver_cache_list_total'),
      consistentFromCache: sum('apiserver_watch_cache_consistent_read_total', (l) => l.fallback === 'false'),
      fromEtcd: sum('apiserver_storage_list_total'),
    },
  };
}

/** What was served between two readings, less `readings` of our own counter reads. */
export function served(before: ServerCounters, after: ServerCounters, readings = 1): ServerCounters {
  const requests: RequestCounts = new Map();
  for (const [key, value] of after.requests) {
    const delta = value - (before.requests.get(key) ?? 0) - (key === 'GET /metrics' ? readings : 0);
    if (delta > 0) requests.set(key, delta);
  }
  return {
    requests,
    lists: {
      fromCache: after.lists.fromCache - before.lists.fromCache,
      consistentFromCache: after.lists.consistentFromCache - before.lists.consistentFromCache,
      fromEtcd: after.lists.fromEtcd - before.lists.fromEtcd,
    },
  };
}

/** `counts` less what the cluster serves on its own at `rate` (per ms) over `ms`; nothing below zero. */
export function lessBackground(counts: ServerCounters, rate: ServerCounters, ms: number): ServerCounters {
  const requests: RequestCounts = new Map();
  for (const [key, value] of counts.requests) {
    const left = value - (rate.requests.get(key) ?? 0) * ms;
    if (left >= 0.5) requests.set(key, left);
  }
  const less = (k: keyof ListSources) => Math.max(0, counts.lists[k] - rate.lists[k] * ms);
  return {
    requests,
    lists: {
      fromCache: less('fromCache'),
      consistentFromCache: less('consistentFromCache'),
      fromEtcd: less('fromEtcd'),
    },
  };
}

/** Counts per millisecond over `ms`. */
export function perMs(counts: ServerCounters, ms: number): ServerCounters {
  return {
    requests: new Map([...counts.requests].map(([k, v]) => [k, v / ms])),
    lists: {
      fromCache: counts.lists.fromCache / ms,
      consistentFromCache: counts.lists.consistentFromCache / ms,
      fromEtcd: counts.lists.fromEtcd / ms,
    },
  };
}

export function total(counts: RequestCounts): number {
  let sum = 0;
  for (const value of counts.values()) sum += value;
  return sum;
}

/** "LIST nodes 612, PATCH clusterhealthchecks.talos.dev/status 200, …": the largest first. */
export function byVerbAndResource(counts: RequestCounts, scale = 1, top = 8): string {
  const entries = [...counts].sort((a, b) => b[1] - a[1]);
  const shown = entries.slice(0, top).map(([k, v]) => `${k} ${(v * scale).toFixed(v * scale < 10 ? 1 : 0)}`);
  const rest = entries.slice(top).reduce((sum, [, v]) => sum + v, 0);
  return [...shown, ...(rest > 0 ? [`other ${(rest * scale).toFixed(0)}`] : [])].join(', ') || 'none';
}
