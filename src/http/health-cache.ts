// Health answers serialised once and served as bytes to every request until a check
// changes. /v1/health is a probe endpoint: load balancers, scripts and dashboards poll
// it, and with a thousand checks building its body per request cost a quarter of what
// node:http can send. Each answer carries an ETag; a request whose If-None-Match holds
// it gets a bodyless 304.
import { randomBytes } from 'node:crypto';
import type { Reply, Request } from './router.ts';

export interface HealthAnswer {
  status: 200 | 503;
  /** The JSON body, newline-terminated. */
  body: string;
}

interface Entry {
  /** The checks' generation the answer was built from. */
  generation: number;
  status: 200 | 503;
  bytes: Buffer;
  etag: string;
}

export interface HealthCacheOptions {
  /** Bytes of answers kept at most, least recently used dropped first (default 4 MiB). */
  maxBytes?: number;
}

export class HealthCache {
  /** Bumped by every change of any check: every answer built before is stale. */
  private generation = 0;
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;
  private readonly maxBytes: number;
  /** Tags are unique per process and per build, so no two bodies (nor two replicas' bodies) share one. */
  private readonly tagPrefix = randomBytes(6).toString('base64url');
  private builds = 0;

  constructor(checks: { onChange(listener: () => void): unknown }, options: HealthCacheOptions = {}) {
    this.maxBytes = options.maxBytes ?? 4 * 1024 * 1024;
    checks.onChange(() => {
      this.generation++;
    });
  }

  /** Answers built so far: how a test tells a cached answer from a rebuilt one. */
  get buildCount(): number {
    return this.builds;
  }

  /**
   * The reply to `req` for the answer known by `key`: the cached one while no check has
   * changed since it was built, else `build()`'s, cached. `key` must name everything
   * the answer depends on besides the checks (the query, the node's labels).
   */
  reply(req: Request, key: string, build: () => HealthAnswer): Reply {
    const entry = this.answer(key, build);
    const headers = { ETag: entry.etag, 'Cache-Control': 'no-cache' };
    // RFC 9110 §13.2.1: preconditions apply only to what would otherwise be a 2xx.
    if (entry.status === 200 && matches(req.raw.headers['if-none-match'], entry.etag)) {
      return { status: 304, headers };
    }
    return {
      status: entry.status,
      body: entry.bytes,
      contentType: 'application/json; charset=utf-8',
      headers,
    };
  }

  private answer(key: string, build: () => HealthAnswer): Entry {
    const cached = this.entries.get(key);
    if (cached) {
      this.forget(key, cached);
      if (cached.generation === this.generation) {
        this.remember(key, cached);
        return cached;
      }
    }
    const generation = this.generation;
    const { status, body } = build();
    this.builds++;
    const entry: Entry = {
      generation,
      status,
      bytes: Buffer.from(body),
      etag: `"${this.tagPrefix}-${this.builds.toString(36)}"`,
    };
    this.remember(key, entry);
    // The oldest first (a Map iterates in insertion order); the newest always stays.
    for (const [oldKey, old] of this.entries) {
      if (this.bytes <= this.maxBytes || old === entry) break;
      this.forget(oldKey, old);
    }
    return entry;
  }

  private remember(key: string, entry: Entry): void {
    this.entries.set(key, entry);
    this.bytes += entry.bytes.length;
  }

  private forget(key: string, entry: Entry): void {
    this.entries.delete(key);
    this.bytes -= entry.bytes.length;
  }
}

/** Whether an If-None-Match header names `etag` (weak comparison, as RFC 9110 asks for GET). */
export function matches(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}
