// A supervised informer: list, then watch from the list's resourceVersion, keeping a
// local cache and telling handlers what changed. It survives what real clusters do to
// watches — connections dropped (reconnect with backoff), history compacted (410 Gone:
// relist and report the difference), and watches that go silent without closing (a
// watchdog restarts any watch that has carried no event or bookmark for too long).
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Logger } from '../log.ts';
import { sleep } from '../wait.ts';
import { KubeApiError, type ListFields, type RestClient, type WatchEvent } from './rest.ts';
import type { MemberPath } from './list-decoder.ts';
import { ProtobufUnknownFieldError, type ProtobufList } from './protobuf.ts';
import { LabelIndex } from './label-index.ts';
import type { LabelSelector } from './labels.ts';

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
    creationTimestamp?: string;
  };
}

export interface InformerOptions<T extends KubeObject = KubeObject> {
  rest: RestClient;
  /** The collection path, e.g. /apis/talos.dev/v1alpha1/clusterhealthchecks. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  log: Logger;
  /** The server ends each watch after this long; the informer then resumes it. */
  watchTimeoutSeconds?: number;
  /** Restart a watch that has carried nothing (not even a bookmark) for this long. */
  idleTimeoutMs?: number;
  /** The cache is not `live` once its watch has carried nothing for this long (default LIVE_SILENCE_MS). */
  liveSilenceMs?: number;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Objects per list page (limit); default 500, as client-go's reflector asks. */
  pageSize?: number;
  /**
   * Trims each object before it is cached (after managedFields are dropped), as client-go's
   * SetTransform does: the cache then holds only what its readers need.
   */
  transform?: (object: T) => T;
  /**
   * Members of each listed object to leave out undecoded (list-decoder.ts); the transform
   * must drop them too, for watch events are decoded whole. metadata.managedFields always is.
   */
  omit?: readonly MemberPath[];
  /**
   * Lists in Kubernetes' protobuf encoding, read by these tables (protobuf.ts, e.g.
   * NODE_LIST): the same objects as JSON, decoded in less time. Should the server send a
   * field the tables lack (a newer Kubernetes), the informer warns once and lists in JSON
   * from then on. Watches are JSON either way.
   */
  protobuf?: ProtobufList;
}

export interface InformerEvents<T> {
  add: [T];
  update: [T, T];
  delete: [T];
  /** After every (re)list: the cache is complete. */
  synced: [];
}

export function objectKey(o: { metadata: { name: string; namespace?: string } }): string {
  return o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
}

class Gone extends Error {}

/** The server ended a watch with an error of its own (other than 410) in the stream. */
class WatchStatusError extends Error {}

const LIST_PAGE = 500;
/**
 * A watch silent for longer is not taken as live (Informer.live): kube-apiserver's watch
 * cache sends every watcher a bookmark each minute (cacher.go, defaultBookmarkFrequency),
 * and holds events fresh for a minute and 15 s (DefaultEventFreshDuration).
 */
export const LIVE_SILENCE_MS = 75_000;

/**
 * A cache just filled by a list is as current as a read of the API server's watch cache:
 * it counts as live until the watch after the list answers or fails, for at most this
 * long. Without it, a periodic probe in the round trip between the list and the watch's
 * first response asks the server instead — and the first probes start right at sync.
 */
export const LISTED_FRESH_MS = 5000;

const MANAGED_FIELDS: MemberPath = ['metadata', 'managedFields'];

/**
 * The cache keeps objects without metadata.managedFields: nothing here reads them, and
 * on Nodes they are often the larger part of the object.
 */
function slim<T extends KubeObject>(object: T): T {
  const metadata = object.metadata as { managedFields?: unknown };
  if (metadata.managedFields !== undefined) delete metadata.managedFields;
  return object;
}

export class Informer<T extends KubeObject> extends EventEmitter<InformerEvents<T>> {
  private readonly options: Required<
    Omit<InformerOptions, 'labelSelector' | 'fieldSelector' | 'transform' | 'omit' | 'protobuf'>
  > &
    Pick<InformerOptions, 'labelSelector' | 'fieldSelector'>;
  // Typed for any object, so that an Informer<Check> still reads as an Informer<KubeObject>.
  private readonly transform: ((object: KubeObject) => KubeObject) | undefined;
  private readonly omit: readonly MemberPath[];
  /** The tables lists are read by in protobuf; undefined once a list had a field they lack. */
  private protobuf: ProtobufList | undefined;
  private readonly store = new Map<string, T>();
  private readonly labelIndex = new LabelIndex<T>(this.store);
  private resourceVersion: string | undefined;
  private running: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private hasSynced = false;
  private currentWatch: AbortController | undefined;
  /** Whether a watch is open: the server accepted it and it has not ended or failed since. */
  private watching = false;
  /** When the open watch last carried anything, an event or a bookmark, or a list ended (performance.now()). */
  private lastHeard = -Infinity;
  /** When the last list ended, until the watch after it answers or fails (performance.now()). */
  private listedAt = -Infinity;
  /** Counters for tests and metrics. */
  readonly stats = { lists: 0, watches: 0, watchdogRestarts: 0, gone: 0, errors: 0, protobufPages: 0 };

  constructor({ transform, omit = [], protobuf, ...options }: InformerOptions<T>) {
    super();
    this.options = {
      watchTimeoutSeconds: 290,
      idleTimeoutMs: 330_000,
      minBackoffMs: 200,
      maxBackoffMs: 30_000,
      pageSize: LIST_PAGE,
      liveSilenceMs: LIVE_SILENCE_MS,
      ...options,
    };
    this.transform = transform as ((object: KubeObject) => KubeObject) | undefined;
    this.omit = [MANAGED_FIELDS, ...omit];
    this.protobuf = protobuf;
  }

  get synced(): boolean {
    return this.hasSynced;
  }

  /**
   * Whether the cache is being kept current: synced, its watch open (or a list ended within
   * LISTED_FRESH_MS, while the watch after it opens), and heard from within LIVE_SILENCE_MS
   * (kube-apiserver sends each watch a bookmark every minute). False while the watch
   * reconnects, a relist runs or a connection has gone quiet, when the cache may lag the
   * API server by more than an event's delivery: readers that must not lag then ask the server.
   */
  get live(): boolean {
    const now = performance.now();
    return (
      this.hasSynced &&
      (this.watching || now - this.listedAt < LISTED_FRESH_MS) &&
      now - this.lastHeard < this.options.liveSilenceMs
    );
  }

  /**
   * The resourceVersion up to which the list and the watch have delivered every change
   * (objects written back by applyWritten may be newer): undefined before the first list.
   */
  get watchedVersion(): string | undefined {
    return this.resourceVersion;
  }

  list(): T[] {
    return [...this.store.values()];
  }

  get(key: string): T | undefined {
    return this.store.get(key);
  }

  /**
   * The cached objects a label selector selects, found through an index of the labels it
   * names rather than by matching every object (label-index.ts). `selector` must be valid
   * (labels.ts selectorValid): the API server would refuse it, and so must the caller.
   */
  select(selector: LabelSelector | undefined): T[] {
    return this.labelIndex.select(selector);
  }

  /**
   * Takes in the object a write of ours returned, when the cache still shows the version
   * that write replaced: the response already carries the new state, so those who wait
   * on the cache need not wait for the watch to bring it (the watch's event for the same
   * version is then no change). Anything else in the cache — the watch got there first,
   * or someone wrote after us — is left as it is.
   */
  applyWritten(replaced: string | undefined, written: T): void {
    const key = objectKey(written);
    const cached = this.store.get(key);
    if (replaced === undefined || cached?.metadata.resourceVersion !== replaced) return;
    this.upsert(key, this.trim(written));
  }

  /**
   * Fault injection for tests: make the next watch resume from `resourceVersion`, as if
   * the connection had dropped there (an old version provokes 410 Gone).
   */
  resumeFrom(resourceVersion: string): void {
    this.resourceVersion = resourceVersion;
    this.currentWatch?.abort(new Error('resumeFrom'));
  }

  start(): void {
    if (this.loop) return;
    this.running = new AbortController();
    this.loop = this.run(this.running.signal);
  }

  async stop(): Promise<void> {
    this.listedAt = -Infinity;
    this.running?.abort(new Error('informer stopped'));
    await this.loop;
    this.loop = undefined;
  }

  /** Resolves once the first list has filled the cache. */
  async waitForSync(signal?: AbortSignal): Promise<void> {
    if (this.hasSynced) return;
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => reject(signal?.reason as Error);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.once('synced', () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }

  private async run(signal: AbortSignal): Promise<void> {
    // A function, so that the compiler does not assume the signal cannot change mid-loop.
    const stopped = () => signal.aborted;
    let backoff = this.options.minBackoffMs;
    while (!signal.aborted) {
      try {
        if (this.resourceVersion === undefined) await this.relist(signal);
        await this.watchOnce(signal);
        backoff = this.options.minBackoffMs;
      } catch (error) {
        if (stopped()) break;
        if (error instanceof Gone || (error instanceof KubeApiError && error.code === 410)) {
          this.stats.gone++;
          this.options.log.info({ path: this.options.path }, 'watch history expired (410 Gone): relisting');
          this.resourceVersion = undefined;
          continue;
        }
        this.stats.errors++;
        // An error the server put in the stream is about the watch at this version (seen:
        // a 500 while etcd compacts); resuming from it would repeat it, so relist instead.
        // A dropped connection resumes from where it was.
        if (error instanceof WatchStatusError) this.resourceVersion = undefined;
        this.options.log.warn(
          {
            path: this.options.path,
            err: String(error),
            retryInMs: backoff,
            relist: this.resourceVersion === undefined,
          },
          'watch failed',
        );
        await sleep(backoff + Math.random() * backoff * 0.2, signal).catch(() => undefined);
        backoff = Math.min(backoff * 2, this.options.maxBackoffMs);
      }
    }
  }

  private async relist(signal: AbortSignal): Promise<void> {
    this.stats.lists++;
    let list: { items: T[]; metadata: { resourceVersion: string } };
    try {
      list = await this.listAll(signal);
    } catch (error) {
      if (!(error instanceof ProtobufUnknownFieldError)) throw error;
      // An API server newer than the tables: JSON for good, this list started over.
      this.protobuf = undefined;
      this.options.log.warn(
        { path: this.options.path, messageType: error.messageType, field: error.fieldNumber },
        'a list in protobuf had a field this version does not know: listing in JSON from now on',
      );
      list = await this.listAll(signal);
    }
    const seen = new Set<string>();
    for (const item of list.items) {
      const key = objectKey(item);
      seen.add(key);
      this.upsert(key, item);
    }
    for (const [key, old] of this.store) {
      if (!seen.has(key)) {
        this.store.delete(key);
        this.labelIndex.remove(key, old);
        this.emit('delete', old);
      }
    }
    this.resourceVersion = list.metadata.resourceVersion;
    this.listedAt = this.lastHeard = performance.now();
    this.hasSynced = true;
    this.emit('synced');
  }

  /** Every page of the collection, each item trimmed. */
  private async listAll(signal: AbortSignal): Promise<{ items: T[]; metadata: { resourceVersion: string } }> {
    // In pages, so that 5,000 nodes never sit in memory as one response; and each page
    // decoded as it arrives, each item trimmed as soon as it is complete (list-decoder.ts).
    const items: T[] = [];
    let metadata: ListFields['metadata'];
    do {
      const page = await this.options.rest.listPage(
        this.options.path,
        {
          query: {
            labelSelector: this.options.labelSelector,
            fieldSelector: this.options.fieldSelector,
            limit: this.options.pageSize,
            continue: metadata?.continue,
          },
          signal,
        },
        (item) => items.push(this.trim(item as T)),
        {
          omit: this.omit,
          ...(this.protobuf
            ? {
                protobuf: this.protobuf,
                onEncoding: (encoding) => {
                  if (encoding === 'protobuf') this.stats.protobufPages++;
                },
              }
            : {}),
        },
      );
      metadata = page.metadata;
    } while (metadata?.continue);
    if (metadata?.resourceVersion === undefined)
      throw new Error(`list ${this.options.path}: no resourceVersion`);
    return { items, metadata: { resourceVersion: metadata.resourceVersion } };
  }

  private upsert(key: string, item: T): void {
    const old = this.store.get(key);
    this.store.set(key, item);
    this.labelIndex.put(key, old, item);
    if (!old) this.emit('add', item);
    else if (old.metadata.resourceVersion !== item.metadata.resourceVersion) this.emit('update', old, item);
  }

  private async watchOnce(signal: AbortSignal): Promise<void> {
    // Stopped while the list ran: the listener below would never hear of it.
    signal.throwIfAborted();
    this.stats.watches++;
    const watch = new AbortController();
    this.currentWatch = watch;
    const onAbort = () => watch.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    let idle: NodeJS.Timeout | undefined;
    const watchdog = { fired: false };
    const stopped = () => signal.aborted;
    const kick = () => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        watchdog.fired = true;
        watch.abort(new Error('watch went silent'));
      }, this.options.idleTimeoutMs);
    };
    kick();
    try {
      await this.options.rest.watch(
        this.options.path,
        {
          resourceVersion: this.resourceVersion,
          allowWatchBookmarks: true,
          timeoutSeconds: this.options.watchTimeoutSeconds,
          labelSelector: this.options.labelSelector,
          fieldSelector: this.options.fieldSelector,
        },
        (event) => {
          kick();
          this.lastHeard = performance.now();
          this.apply(event);
        },
        watch.signal,
        () => {
          this.watching = true;
          this.listedAt = -Infinity;
          this.lastHeard = performance.now();
        },
      );
    } catch (error) {
      if (watchdog.fired && !stopped()) {
        this.stats.watchdogRestarts++;
        this.options.log.warn({ path: this.options.path }, 'watch silent for too long: restarting it');
        return;
      }
      throw error;
    } finally {
      this.watching = false;
      this.listedAt = -Infinity;
      clearTimeout(idle);
      signal.removeEventListener('abort', onAbort);
    }
  }

  private trim(object: T): T {
    const slimmed = slim(object);
    return this.transform ? (this.transform(slimmed) as T) : slimmed;
  }

  private apply(event: WatchEvent): void {
    if (event.type === 'ERROR') {
      const status = event.object as { code?: number; message?: string };
      if (status.code === 410) throw new Gone(status.message ?? 'Gone');
      throw new WatchStatusError(`watch error: ${status.message ?? JSON.stringify(status)}`);
    }
    // A bookmark carries a resourceVersion and nothing else: never given to a transform,
    // which may read fields only a whole object has (a NodeAction's spec).
    if (event.type === 'BOOKMARK') {
      const rv = (event.object as Partial<KubeObject>).metadata?.resourceVersion;
      if (rv) this.resourceVersion = rv;
      return;
    }
    const object = this.trim(event.object as unknown as T);
    if (object.metadata.resourceVersion) this.resourceVersion = object.metadata.resourceVersion;
    const key = objectKey(object);
    if (event.type === 'DELETED') {
      const old = this.store.get(key);
      this.store.delete(key);
      if (old) this.labelIndex.remove(key, old);
      this.emit('delete', old ?? object);
    } else {
      this.upsert(key, object);
    }
  }
}
