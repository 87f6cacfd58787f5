// Leader election on a coordination.k8s.io Lease, with client-go's rules: a holder
// renews every retry period; others take over only after they have watched the lease
// go unrenewed for a whole lease duration (measured on their own clock, so clock skew
// between nodes cannot shorten it); a leader that has not renewed within its renew
// deadline stops acting at once, before anyone else may start.
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Logger } from '../log.ts';
import { errorMessage, sleep } from '../wait.ts';
import { leasesPath, newLease } from './lease.ts';
import { rfc3339Micro } from './time.ts';
import { KubeApiError, type RestClient } from './rest.ts';

export interface LeaderElectionOptions {
  rest: RestClient;
  namespace: string;
  name: string;
  identity: string;
  log: Logger;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
}

interface Lease {
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

export interface LeaderEvents {
  started: [];
  stopped: [];
}

export class LeaderElector extends EventEmitter<LeaderEvents> {
  private readonly o: Required<LeaderElectionOptions>;
  private lastRenew = -Infinity;
  private leading = false;
  /** The lease as last observed, and when (our clock) its record last changed. */
  private observed: { holder?: string; record: string; at: number } | undefined;
  private loop: Promise<void> | undefined;
  private readonly abort = new AbortController();

  constructor(options: LeaderElectionOptions) {
    super();
    this.o = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000, ...options };
  }

  get identity(): string {
    return this.o.identity;
  }

  /** True only while our last renewal is younger than the renew deadline. */
  isLeader(): boolean {
    const leader = this.leading && performance.now() - this.lastRenew < this.o.renewDeadlineMs;
    if (this.leading && !leader) this.demote('could not renew the lease within the renew deadline');
    return leader;
  }

  start(): void {
    this.loop ??= this.run();
  }

  /** Stops campaigning; a leader gives the lease up so a follower can take over at once. */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
    if (this.leading) {
      this.demote('stopping');
      await this.release().catch(() => undefined);
    }
  }

  /** Stops campaigning without giving the lease up, as a crashed replica would (tests). */
  async abandon(): Promise<void> {
    this.abort.abort();
    await this.loop;
    this.demote('abandoned');
  }

  private demote(why: string): void {
    if (!this.leading) return;
    this.leading = false;
    this.o.log.warn({ lease: this.o.name, identity: this.o.identity, why }, 'stopped leading');
    this.emit('stopped');
  }

  private async run(): Promise<void> {
    while (!this.abort.signal.aborted) {
      try {
        if (await this.tryAcquireOrRenew()) {
          this.lastRenew = performance.now();
          if (!this.leading) {
            this.leading = true;
            this.o.log.info({ lease: this.o.name, identity: this.o.identity }, 'started leading');
            this.emit('started');
          }
        } else {
          this.demote('another replica holds the lease');
        }
      } catch (error) {
        this.o.log.warn({ lease: this.o.name, err: errorMessage(error) }, 'lease update failed');
      }
      this.isLeader(); // demotes if the renew deadline has passed
      await sleep(
        this.o.retryPeriodMs * (this.leading ? 1 : 1 + Math.random() * 0.2),
        this.abort.signal,
      ).catch(() => undefined);
    }
  }

  private path(name?: string): string {
    return leasesPath(this.o.namespace, name);
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = rfc3339Micro(new Date());
    let lease: Lease | undefined;
    try {
      lease = await this.o.rest.request<Lease>(this.path(this.o.name), { signal: this.abort.signal });
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 404)) throw error;
    }
    const durationSeconds = Math.ceil(this.o.leaseDurationMs / 1000);
    if (!lease) {
      await this.o.rest.request(this.path(), {
        method: 'POST',
        body: newLease({ ...this.o, durationSeconds, now }),
      });
      return true;
    }
    const record = JSON.stringify(lease.spec);
    if (this.observed?.record !== record)
      this.observed = { holder: lease.spec.holderIdentity, record, at: performance.now() };
    const holder = lease.spec.holderIdentity;
    const mine = holder === this.o.identity;
    const expired =
      performance.now() - this.observed.at > (lease.spec.leaseDurationSeconds ?? durationSeconds) * 1000;
    if (!mine && holder && !expired) return false;
    const spec = {
      ...lease.spec,
      holderIdentity: this.o.identity,
      leaseDurationSeconds: durationSeconds,
      renewTime: now,
      ...(mine ? {} : { acquireTime: now, leaseTransitions: (lease.spec.leaseTransitions ?? 0) + 1 }),
    };
    try {
      // resourceVersion makes this a compare-and-swap: two replicas cannot both win.
      await this.o.rest.request(this.path(this.o.name), { method: 'PUT', body: { ...lease, spec } });
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409) return false;
      throw error;
    }
    return true;
  }

  private async release(): Promise<void> {
    const lease = await this.o.rest.request<Lease>(this.path(this.o.name));
    if (lease.spec.holderIdentity !== this.o.identity) return;
    await this.o.rest.request(this.path(this.o.name), {
      method: 'PUT',
      body: {
        ...lease,
        spec: {
          ...lease.spec,
          holderIdentity: '',
          leaseDurationSeconds: 1,
          renewTime: rfc3339Micro(new Date()),
        },
      },
    });
  }
}
