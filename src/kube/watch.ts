// Following one object by name: read it, then watch it from that version on, so that
// every version the API server records reaches the caller, in order — however briefly
// it lasted. Where the informer (informer.ts) keeps a cache of a collection, this tells
// the story of a single object, and survives the same things: the server ending the
// watch (resumed from the last version seen), dropped connections (resumed after a short
// backoff), expired history (410 Gone: read again, watch from there) and a watch that
// stalls without closing (a slow safety poll sees the object move on while the watch
// said nothing, and restarts it from where it was).
import { sleep } from '../wait.ts';
import type { KubeObject } from './informer.ts';
import { KubeApiError, type RestClient, type WatchEvent } from './rest.ts';

export interface ObjectWatchOptions<T extends KubeObject> {
  rest: RestClient;
  /** The collection path, e.g. /api/v1/nodes. */
  path: string;
  name: string;
  /** A version already seen (say, the answer to its creation): delivered first, and watched from. */
  from?: T;
  /** Every version, in order; `undefined` when the object does not exist (or was deleted). */
  onVersion: (object: T | undefined) => void;
  /** The server ends each watch after this long; it is then resumed. Default 300. */
  watchTimeoutSeconds?: number;
  /** How often to check that the watch has not silently stalled. Default 10s. */
  safetyPollMs?: number;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Give up when neither a read nor a watch has succeeded for this long. Default 60s. */
  giveUpAfterMs?: number;
}

class Gone extends Error {}

/** An error the server reported inside the stream: resuming from the same version would meet it again. */
class StreamError extends Error {}

class Stalled extends Error {}

/** The resourceVersion of what was last delivered; null for "does not exist". */
type Delivered = string | null;

export class ObjectWatch<T extends KubeObject> {
  /** Counters for tests. */
  readonly stats = { reads: 0, watches: 0, gone: 0, stalls: 0, errors: 0 };
  private readonly o: Required<Omit<ObjectWatchOptions<T>, 'from'>> & Pick<ObjectWatchOptions<T>, 'from'>;
  /** Where the next watch starts; undefined: read the object first. */
  private resourceVersion: string | undefined;
  private delivered: Delivered | undefined;
  /** Events (bookmarks included) received so far: tells the safety poll whether the watch moved. */
  private received = 0;
  private currentWatch: AbortController | undefined;
  /** An exception from onVersion: not a watch failure, so it ends the run. */
  private fault: { error: unknown } | undefined;

  constructor(options: ObjectWatchOptions<T>) {
    this.o = {
      watchTimeoutSeconds: 300,
      safetyPollMs: 10_000,
      minBackoffMs: 200,
      maxBackoffMs: 5000,
      giveUpAfterMs: 60_000,
      ...options,
    };
  }

  /**
   * Delivers versions until `signal` aborts (then resolves). Rejects with the last error
   * once nothing has succeeded for giveUpAfterMs, or with what onVersion threw.
   */
  async run(signal: AbortSignal): Promise<void> {
    const done = new AbortController();
    const both = AbortSignal.any([signal, done.signal]);
    const stopped = () => signal.aborted;
    const poll = this.safetyPoll(both);
    let backoff = this.o.minBackoffMs;
    let failingSince: number | undefined;
    try {
      if (this.o.from && !stopped()) {
        this.resourceVersion = this.o.from.metadata.resourceVersion;
        this.deliver(this.o.from);
      }
      while (!stopped()) {
        try {
          if (this.resourceVersion === undefined) {
            await this.read(signal);
            failingSince = undefined;
            if (stopped()) break;
          }
          await this.watchOnce(signal, {
            // The server is there, even if this watch then fails...
            opened: () => {
              failingSince = undefined;
            },
            // ...but only one that carries something is a reason to retry at once.
            working: () => {
              backoff = this.o.minBackoffMs;
            },
          });
          backoff = this.o.minBackoffMs;
        } catch (error) {
          if (this.fault) throw this.fault.error;
          if (stopped()) break;
          if (error instanceof Gone || (error instanceof KubeApiError && error.code === 410)) {
            this.stats.gone++;
            this.resourceVersion = undefined;
            continue;
          }
          this.stats.errors++;
          failingSince ??= Date.now();
          if (Date.now() - failingSince > this.o.giveUpAfterMs) throw error;
          // A dropped connection resumes where it was. A refusal (no permission to watch, a
          // proxy that cannot stream) or an error in the stream (etcd history half
          // compacted) would recur from there, so the object is read again each time: at
          // worst, polling at the backoff's pace.
          if (error instanceof KubeApiError || error instanceof StreamError) this.resourceVersion = undefined;
          await sleep(backoff + Math.random() * backoff * 0.2, signal).catch(() => undefined);
          backoff = Math.min(backoff * 2, this.o.maxBackoffMs);
        }
      }
    } finally {
      done.abort();
      await poll;
    }
  }

  private deliver(object: T | undefined): void {
    const version = object ? (object.metadata.resourceVersion ?? '') : null;
    if (this.delivered !== undefined && version === this.delivered) return;
    this.delivered = version;
    try {
      this.o.onVersion(object);
    } catch (error) {
      this.fault = { error };
      this.currentWatch?.abort(error);
      throw error;
    }
  }

  /** Lists by name rather than GETs: an absent object still gives a version to watch from. */
  private async read(signal: AbortSignal): Promise<void> {
    this.stats.reads++;
    const list = await this.o.rest.request<{ items: T[]; metadata: { resourceVersion: string } }>(
      this.o.path,
      { query: { fieldSelector: `metadata.name=${this.o.name}` }, signal },
    );
    this.deliver(list.items[0]);
    this.resourceVersion = list.metadata.resourceVersion;
  }

  private async watchOnce(
    signal: AbortSignal,
    on: { opened: () => void; working: () => void },
  ): Promise<void> {
    this.stats.watches++;
    const watch = new AbortController();
    this.currentWatch = watch;
    const onAbort = () => watch.abort(signal.reason);
    // Already aborted, by onVersion during the read: the listener alone would never fire.
    if (signal.aborted) onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      await this.o.rest.watch(
        this.o.path,
        {
          fieldSelector: `metadata.name=${this.o.name}`,
          resourceVersion: this.resourceVersion,
          allowWatchBookmarks: true,
          timeoutSeconds: this.o.watchTimeoutSeconds,
        },
        (event) => {
          this.received++;
          this.apply(event);
          on.working();
        },
        watch.signal,
        on.opened,
      );
    } catch (error) {
      // Restarted by the safety poll: resume from the last version seen.
      if (watch.signal.reason instanceof Stalled && !signal.aborted && !this.fault) return;
      throw error;
    } finally {
      this.currentWatch = undefined;
      signal.removeEventListener('abort', onAbort);
    }
  }

  private apply(event: WatchEvent): void {
    if (event.type === 'ERROR') {
      const status = event.object as { code?: number; message?: string };
      if (status.code === 410) throw new Gone(status.message ?? 'Gone');
      throw new StreamError(`watch error: ${status.message ?? JSON.stringify(status)}`);
    }
    const object = event.object as unknown as T;
    if (object.metadata.resourceVersion) this.resourceVersion = object.metadata.resourceVersion;
    if (event.type === 'BOOKMARK') return;
    this.deliver(event.type === 'DELETED' ? undefined : object);
  }

  /**
   * A watch can go quiet without closing (a proxy or load balancer that lost the stream).
   * Every safetyPollMs the object is read; if it is not what was last delivered and the
   * watch carried nothing meanwhile, the watch is restarted. Nothing is delivered from
   * here, so versions never arrive out of order.
   */
  private async safetyPoll(signal: AbortSignal): Promise<void> {
    const path = `${this.o.path}/${encodeURIComponent(this.o.name)}`;
    while (!signal.aborted) {
      try {
        await sleep(this.o.safetyPollMs, signal);
      } catch {
        return;
      }
      const before = this.received;
      const watch = this.currentWatch;
      let version: Delivered;
      try {
        const object = await this.o.rest.request<T>(path, {
          signal: AbortSignal.any([signal, AbortSignal.timeout(this.o.safetyPollMs)]),
        });
        version = object.metadata.resourceVersion ?? '';
      } catch (error) {
        if (!(error instanceof KubeApiError && error.code === 404)) continue;
        version = null;
      }
      if (!watch || watch !== this.currentWatch || this.received !== before) continue;
      if (this.delivered === undefined || version === this.delivered) continue;
      this.stats.stalls++;
      watch.abort(new Stalled('no event while the object changed'));
    }
  }
}
