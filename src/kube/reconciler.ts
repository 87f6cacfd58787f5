// The skeleton every reconciler of gatehouse shares (NodeActions, boots, NodeRollouts,
// Cluster API Machines), as controller-runtime gives each of its controllers the same one:
//
//   - a work queue of keys (workqueue.ts), fed by the reconciler's informer handlers;
//   - a start that waits until every cache the reconciler reads is complete: deciding on a
//     partial cache could skip a check, a hook or an action another replica created;
//   - leader gating: only the leader reconciles; a follower returns at once and keeps its
//     caches warm, and a new leader queues every key again (enqueueAll);
//   - writes conditional on the resourceVersion decided upon (ConditionalWrites), with a
//     memory of what our own writes replaced, so that a cache still showing the replaced
//     version is not decided on again before its newer event arrives.
//
// Each reconciler states only what differs: its caches, its keys, and one reconcile.
import type { Logger } from '../log.ts';
import { objectKey, type KubeObject } from './informer.ts';
import { KubeApiError, type RestClient } from './rest.ts';
import { WorkQueue, type ReconcileResult } from './workqueue.ts';

/** A cache the reconciler reads: an Informer. */
export interface Syncable {
  waitForSync(signal?: AbortSignal): Promise<void>;
}

export interface ReconcilerOptions {
  /** The work queue's name, in logs. */
  name: string;
  log: Logger;
  isLeader: () => boolean;
  /** Every cache a reconcile reads, complete before the first one. */
  caches: () => readonly Syncable[];
  /** Every key: queued once started, and again whenever this replica becomes leader. */
  keys: () => Iterable<string>;
  /** One key, by the leader. */
  reconcile: (key: string) => Promise<ReconcileResult | undefined>;
  /** On each key while this replica does not lead (what it knew as leader may go stale). */
  following?: () => void;
  /** On the first key this replica reconciles as leader, at first and after following. */
  leading?: () => void;
  /** After the caches are complete and before the first reconcile (e.g. learning who we are). */
  prepare?: (signal?: AbortSignal) => Promise<void>;
  concurrency?: number;
  /** Keys that never wait for a worker (workqueue.ts). */
  express?: ReadonlySet<string>;
}

export class Reconciler {
  readonly queue: WorkQueue;
  private readonly o: ReconcilerOptions;
  private started = false;
  private leader = false;

  constructor(options: ReconcilerOptions) {
    this.o = options;
    this.queue = new WorkQueue({
      name: options.name,
      log: options.log,
      concurrency: options.concurrency ?? 4,
      ...(options.express ? { express: options.express } : {}),
      reconcile: (key) => this.reconcile(key),
    });
  }

  /** Whether start() finished: the caches are complete and the queue runs. */
  get isStarted(): boolean {
    return this.started;
  }

  async start(signal?: AbortSignal): Promise<void> {
    await Promise.all(this.o.caches().map((c) => c.waitForSync(signal)));
    await this.o.prepare?.(signal);
    this.started = true;
    this.queue.start();
    this.enqueueAll();
  }

  stop(): void {
    this.queue.stop();
  }

  /** Every key: after the start, or on becoming leader. */
  enqueueAll(): void {
    if (!this.started) return;
    for (const key of this.o.keys()) this.queue.add(key);
  }

  private async reconcile(key: string): Promise<ReconcileResult | undefined> {
    if (!this.o.isLeader()) {
      this.leader = false;
      this.o.following?.();
      return undefined;
    }
    if (!this.leader) {
      this.leader = true;
      this.o.leading?.();
    }
    return this.o.reconcile(key);
  }
}

/** A write that lost to another (409), or whose object is gone (404): decide again on what is there now. */
export function isConflict(error: unknown, codes: readonly number[] = [409, 404]): error is KubeApiError {
  return error instanceof KubeApiError && codes.includes(error.code);
}

/**
 * The writes one reconciler makes to the objects it decides on, each conditional on the
 * resourceVersion it decided upon (the object's own, sent back with it), and the versions
 * they replaced: until the cache shows the newer object, it still shows the replaced
 * one, and deciding on that again would only conflict.
 */
export class ConditionalWrites {
  /** Object key → the resourceVersion our last write replaced. */
  private readonly superseded = new Map<string, string>();

  /**
   * Whether the cached object is one our own write already replaced: its newer version's
   * event brings the key back. Forgets the replaced version once the cache moved past it.
   */
  stale(object: KubeObject): boolean {
    const key = objectKey(object);
    const rv = object.metadata.resourceVersion;
    if (rv !== undefined && this.superseded.get(key) === rv) return true;
    this.superseded.delete(key);
    return false;
  }

  /** Records that our write replaced this version of the object. */
  replaced(object: KubeObject): void {
    const rv = object.metadata.resourceVersion;
    if (rv !== undefined) this.superseded.set(objectKey(object), rv);
  }

  forget(key: string): void {
    this.superseded.delete(key);
  }

  /**
   * Writes the object's status (PUT of the status subresource), conditional on the
   * object's resourceVersion: a 409 means someone wrote in between.
   */
  async status<T extends KubeObject>(
    rest: RestClient,
    objectPath: string,
    object: T,
    status: unknown,
  ): Promise<T> {
    const written = await rest.request<T>(`${objectPath}/status`, {
      method: 'PUT',
      body: { ...object, status },
    });
    this.replaced(object);
    return written;
  }
}
