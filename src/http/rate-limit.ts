// Per-caller limits of the HTTP API: token buckets for request rates, and a count of
// open long-running requests (long-polls, event streams), each keyed by caller.
//
// Both are bounded in memory: a flood of distinct callers (say, a spray of bad tokens
// keyed by address) cannot grow them without limit.

export interface RateLimit {
  /** Sustained requests per second. */
  perSecond: number;
  /** Requests allowed at once after a quiet period. */
  burst: number;
}

export type Admission = { ok: true } | { ok: false; retryAfterSeconds: number };

interface Bucket {
  tokens: number;
  updatedAt: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly limit: RateLimit;
  private readonly maxKeys: number;
  private readonly now: () => number;

  constructor(limit: RateLimit, options: { maxKeys?: number; now?: () => number } = {}) {
    if (!(limit.perSecond > 0) || !(limit.burst >= 1)) {
      throw new Error(`a rate limit needs perSecond > 0 and burst >= 1, not ${JSON.stringify(limit)}`);
    }
    this.limit = limit;
    this.maxKeys = options.maxKeys ?? 10_000;
    this.now = options.now ?? (() => performance.now());
  }

  /** Takes one token from `key`'s bucket, or says how long until one is there. */
  take(key: string): Admission {
    const bucket = this.refill(key);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return { ok: true };
    }
    return this.refusal(bucket);
  }

  /** Whether `key` has a token, without taking it. */
  peek(key: string): Admission {
    const bucket = this.buckets.get(key);
    if (!bucket) return { ok: true };
    const tokens = this.tokensAt(bucket, this.now());
    return tokens >= 1 ? { ok: true } : this.refusal({ tokens, updatedAt: bucket.updatedAt });
  }

  private tokensAt(bucket: Bucket, now: number): number {
    return Math.min(
      this.limit.burst,
      bucket.tokens + ((now - bucket.updatedAt) / 1000) * this.limit.perSecond,
    );
  }

  private refusal(bucket: Bucket): Admission {
    return {
      ok: false,
      retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / this.limit.perSecond)),
    };
  }

  private refill(key: string): Bucket {
    const now = this.now();
    let bucket = this.buckets.get(key);
    if (bucket) {
      bucket.tokens = this.tokensAt(bucket, now);
      bucket.updatedAt = now;
      // Map order is insertion order: re-inserting keeps the least recently used first.
      this.buckets.delete(key);
    } else {
      bucket = { tokens: this.limit.burst, updatedAt: now };
      this.evict();
    }
    this.buckets.set(key, bucket);
    return bucket;
  }

  get size(): number {
    return this.buckets.size;
  }

  private evict(): void {
    // Forgetting a caller only ever gives it a full bucket again, so the least recently
    // seen go first.
    while (this.buckets.size >= this.maxKeys) {
      const oldest = this.buckets.keys().next();
      if (oldest.done) return;
      this.buckets.delete(oldest.value);
    }
  }
}

/** How many long-running requests each caller has open, up to a limit. */
export class ConcurrencyLimiter {
  private readonly open = new Map<string, number>();
  private readonly max: number;

  constructor(max: number) {
    this.max = max;
  }

  /** A release function, or undefined when `key` already has `max` open. */
  acquire(key: string): (() => void) | undefined {
    const count = this.open.get(key) ?? 0;
    if (count >= this.max) return undefined;
    this.open.set(key, count + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const now = (this.open.get(key) ?? 1) - 1;
      if (now <= 0) this.open.delete(key);
      else this.open.set(key, now);
    };
  }

  count(key: string): number {
    return this.open.get(key) ?? 0;
  }
}
