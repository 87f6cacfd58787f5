// A work queue as controllers need it (the shape of client-go's): keys, not events, so
// a burst of changes to one object is one reconcile; a key is never processed by two
// workers at once (a change during processing queues it once more); failures retry
// with per-key exponential backoff; a reconcile can ask to be called again later.
// Express keys (a controller's singletons on its critical path, such as the admission
// pass) start as soon as they are added, beside the `concurrency` workers: a burst of
// slow reconciles never holds them up.
// Reconciles that finish without waiting (a start's thousands of nodes with nothing to do)
// would chain one after another in microtasks and hold the event loop for as long as they
// all take; after SLICE_MS of such a chain the queue lets the loop turn (I/O, timers, the
// readiness probe) before it takes the next key.
import { performance } from 'node:perf_hooks';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';

/** How long one turn of the event loop may spend taking keys whose reconciles did not wait. */
export const SLICE_MS = 5;

/**
 * When this turn of the event loop began taking finished keys' successors (-1 outside one),
 * shared by every queue of the process: the budget is the loop's, not each queue's.
 */
let sliceStartedAt = -1;

/** Whether this turn of the event loop may take more keys; starts a slice if none is open. */
function sliceLeft(): boolean {
  const now = performance.now();
  if (sliceStartedAt < 0) {
    sliceStartedAt = now;
    setImmediate(() => (sliceStartedAt = -1));
    return true;
  }
  return now - sliceStartedAt < SLICE_MS;
}

export interface ReconcileResult {
  /** Reconcile this key again after this long, even if nothing changes (a deadline, a poll). */
  requeueAfterMs?: number;
}

export interface WorkQueueOptions {
  name: string;
  reconcile: (key: string) => Promise<ReconcileResult | undefined>;
  log: Logger;
  concurrency?: number;
  /** Keys that never wait for a worker (each still never processed twice at once). */
  express?: ReadonlySet<string>;
  baseDelayMs?: number;
  maxDelayMs?: number;
}

export class WorkQueue {
  private readonly options: Required<WorkQueueOptions>;
  private readonly queue: string[] = [];
  private readonly expressQueue: string[] = [];
  private readonly queued = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, { timer: NodeJS.Timeout; dueAt: number }>();
  /** Workers busy with keys that are not express: what `concurrency` bounds. */
  private workers = 0;
  private running = false;
  private idleWaiters: (() => void)[] = [];
  private resumeScheduled = false;
  readonly stats = { reconciles: 0, failures: 0 };

  constructor(options: WorkQueueOptions) {
    this.options = { concurrency: 4, express: new Set(), baseDelayMs: 50, maxDelayMs: 60_000, ...options };
  }

  start(): void {
    this.running = true;
    this.pump();
  }

  stop(): void {
    this.running = false;
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  add(key: string): void {
    if (this.processing.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    (this.options.express.has(key) ? this.expressQueue : this.queue).push(key);
    this.pump();
  }

  /** Adds the key after `ms`; an earlier pending delay for the key wins. */
  addAfter(key: string, ms: number): void {
    if (ms <= 0) {
      this.add(key);
      return;
    }
    const dueAt = Date.now() + ms;
    const pending = this.timers.get(key);
    if (pending && pending.dueAt <= dueAt) return;
    clearTimeout(pending?.timer);
    const timer = setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, ms);
    timer.unref();
    this.timers.set(key, { timer, dueAt });
  }

  get length(): number {
    return this.queue.length + this.expressQueue.length + this.processing.size;
  }

  /** Resolves when nothing is queued or being processed (delayed keys excluded). */
  async idle(): Promise<void> {
    if (this.length === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  private pump(): void {
    while (this.running && this.expressQueue.length > 0) this.begin(this.expressQueue.shift() as string);
    while (this.running && this.workers < this.options.concurrency && this.queue.length > 0) {
      this.workers++;
      this.begin(this.queue.shift() as string);
    }
    if (this.length === 0) {
      for (const resolve of this.idleWaiters.splice(0)) resolve();
    }
  }

  private begin(key: string): void {
    this.queued.delete(key);
    this.processing.add(key);
    void this.work(key);
  }

  private async work(key: string): Promise<void> {
    try {
      this.stats.reconciles++;
      const result = await this.options.reconcile(key);
      this.failures.delete(key);
      if (result?.requeueAfterMs !== undefined) this.addAfter(key, result.requeueAfterMs);
    } catch (error) {
      this.stats.failures++;
      const n = (this.failures.get(key) ?? 0) + 1;
      this.failures.set(key, n);
      const delay = Math.min(this.options.baseDelayMs * 2 ** (n - 1), this.options.maxDelayMs);
      this.options.log.warn(
        { queue: this.options.name, key, err: errorMessage(error), retryInMs: delay },
        'reconcile failed',
      );
      this.addAfter(key, delay);
    } finally {
      this.processing.delete(key);
      if (!this.options.express.has(key)) this.workers--;
      if (this.dirty.delete(key)) this.add(key);
      this.pumpInSlice();
    }
  }

  /**
   * pump(), unless this turn of the event loop has already spent SLICE_MS taking keys: then
   * once the loop has turned. A key added from outside (add) still starts at once.
   */
  private pumpInSlice(): void {
    if (sliceLeft()) {
      this.pump();
      return;
    }
    if (this.resumeScheduled) return;
    this.resumeScheduled = true;
    setImmediate(() => {
      this.resumeScheduled = false;
      this.pump();
    });
  }
}
