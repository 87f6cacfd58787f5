// The turn's Lease, carried out (the protocol is src/kube/turn.ts): watches the Lease,
// creates, renews, takes, asks for and hands over the turn with conditional writes, and
// lets steps of the controller run under it (enter). A step runs only while the turn is
// ours and nobody asked for it; the turn is handed over only once no step runs.
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';
import { Informer } from './informer.ts';
import { KubeApiError, type RestClient } from './rest.ts';
import { leasesPath, newLease } from './lease.ts';
import { rfc3339Micro } from './time.ts';
import {
  DEFAULT_TURN_TIMING,
  TURN_WANTED_ANNOTATION,
  holdsTurn,
  instanceOf,
  mayBegin,
  turnStep,
  type TurnStep,
  type TurnTiming,
  type TurnView,
} from './turn.ts';

/** The turn's Lease, in the controller's namespace; every instance of a cluster must share it. */
export const TURN_LEASE_NAME = 'gatehouse-turn';

interface LeaseObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    resourceVersion?: string;
    annotations?: Record<string, string>;
  };
  spec: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

export interface TurnLeaseOptions {
  rest: RestClient;
  log: Logger;
  namespace: string;
  name?: string;
  /** This replica, as turnIdentity() builds it. */
  identity: string;
  /** Whether this replica takes part now (it leads its instance). */
  active: () => boolean;
  timing?: Partial<TurnTiming>;
  informerOptions?: { watchTimeoutSeconds?: number; idleTimeoutMs?: number };
}

/** A step run under the turn: valid while the turn it began under is still ours. */
export interface TurnSection {
  valid(): boolean;
  release(): void;
}

export interface TurnEvents {
  /** The turn became ours: what we read before may miss another instance's writes. */
  acquired: [];
  /** The turn is no longer ours. */
  lost: [];
}

/** A resourceVersion as a number, when it is one (they are, from Kubernetes 1.35: KEP-5504). */
function version(rv: string | undefined): bigint | undefined {
  return rv !== undefined && /^[0-9]{1,30}$/.test(rv) ? BigInt(rv) : undefined;
}

export class TurnLease extends EventEmitter<TurnEvents> {
  private readonly o: TurnLeaseOptions & { name: string; timing: TurnTiming };
  private readonly informer: Informer<LeaseObject>;
  private lease: LeaseObject | undefined;
  /** The lease's spec as last seen, and when (our clock) it last changed. */
  private record = '';
  private observedAt = performance.now();
  private renewedAt: number | undefined;
  private wanting = false;
  private sections = 0;
  /** Bumped at every acquisition: a section of an earlier holding is not valid in a later one. */
  private epoch = 0;
  private held = false;
  private acquiredAt: number | undefined;
  private pumping = false;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(options: TurnLeaseOptions) {
    super();
    this.o = {
      ...options,
      name: options.name ?? TURN_LEASE_NAME,
      timing: { ...DEFAULT_TURN_TIMING, ...options.timing },
    };
    this.informer = new Informer<LeaseObject>({
      rest: options.rest,
      log: options.log,
      path: this.path(),
      fieldSelector: `metadata.name=${this.o.name}`,
      ...options.informerOptions,
    });
    this.informer.on('add', (l) => this.observe(l));
    this.informer.on('update', (_, l) => this.observe(l));
    this.informer.on('delete', () => {
      this.lease = undefined;
      this.record = '';
      this.settle();
    });
    this.informer.on('synced', () => this.kick());
  }

  start(): void {
    this.informer.start();
  }

  /** Stops taking part; a holder hands the turn on (to whoever asked, else frees it) once its steps are done. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const lease = this.lease;
    if (lease && this.sections === 0 && lease.spec.holderIdentity === this.o.identity) {
      const wanted = lease.metadata.annotations?.[TURN_WANTED_ANNOTATION];
      await this.write({ type: 'handOver', to: wanted && wanted !== this.o.identity ? wanted : '' }).catch(
        () => undefined,
      );
    }
    await this.informer.stop();
  }

  /** Something of ours waits for the turn: ask for it. */
  want(): void {
    if (this.wanting) return;
    this.wanting = true;
    this.kick();
  }

  /**
   * Begins a step under the turn, when it is ours and nobody asked for it; otherwise
   * asks for it and returns undefined. The caller releases the section when done, and
   * checks valid() just before each write that needs the turn.
   */
  enter(): TurnSection | undefined {
    const view = this.view();
    if (!mayBegin(view)) {
      this.want();
      return undefined;
    }
    this.sections++;
    const epoch = this.epoch;
    let done = false;
    return {
      valid: () => !done && epoch === this.epoch && holdsTurn(this.view()),
      release: () => {
        if (done) return;
        done = true;
        this.sections--;
        if (this.sections === 0) this.kick();
      },
    };
  }

  /** The controller instance holding the turn, for messages; undefined: nobody. */
  holderInstance(): string | undefined {
    return instanceOf(this.lease?.spec.holderIdentity);
  }

  /** Where the turn is, for messages: the Lease's namespace and name. */
  get where(): string {
    return `${this.o.namespace}/${this.o.name}`;
  }

  /** Looks again now (after a change of leadership, a released section, an event). */
  kick(): void {
    if (this.stopped) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    void this.pump().finally(() => {
      this.pumping = false;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  private path(name?: string): string {
    return leasesPath(this.o.namespace, name);
  }

  private view(): TurnView {
    const lease = this.lease;
    return {
      identity: this.o.identity,
      active: !this.stopped && this.o.active(),
      wanting: this.wanting,
      busy: this.sections > 0,
      lease: lease
        ? {
            ...(lease.spec.holderIdentity ? { holder: lease.spec.holderIdentity } : {}),
            ...(lease.metadata.annotations?.[TURN_WANTED_ANNOTATION]
              ? { wanted: lease.metadata.annotations[TURN_WANTED_ANNOTATION] }
              : {}),
            durationMs: (lease.spec.leaseDurationSeconds ?? 1) * 1000,
          }
        : undefined,
      observedAt: this.observedAt,
      ...(this.renewedAt !== undefined ? { renewedAt: this.renewedAt } : {}),
      ...(this.acquiredAt !== undefined ? { acquiredAt: this.acquiredAt } : {}),
      now: performance.now(),
      timing: this.o.timing,
    };
  }

  /** Takes in a lease read or written, unless an older one than we have. */
  private observe(lease: LeaseObject): void {
    const have = version(this.lease?.metadata.resourceVersion);
    const got = version(lease.metadata.resourceVersion);
    if (have !== undefined && got !== undefined && got < have) return;
    this.lease = lease;
    const record = JSON.stringify(lease.spec);
    if (record !== this.record) {
      this.record = record;
      this.observedAt = performance.now();
    }
    if (lease.spec.holderIdentity !== this.o.identity) this.renewedAt = undefined;
    this.settle();
  }

  /** Tells whether the turn became or stopped being ours, and looks again. */
  private settle(): void {
    const held = holdsTurn(this.view());
    if (held !== this.held) {
      this.held = held;
      this.acquiredAt = held ? performance.now() : undefined;
      if (held) {
        this.epoch++;
        this.wanting = false;
        this.o.log.debug({ turn: this.where, identity: this.o.identity }, 'took the turn');
        this.emit('acquired');
      } else {
        this.o.log.debug({ turn: this.where, identity: this.o.identity }, 'gave up the turn');
        this.emit('lost');
      }
    }
    this.kick();
  }

  private async pump(): Promise<void> {
    clearTimeout(this.timer);
    let waitMs = this.o.timing.retryPeriodMs;
    try {
      // A few steps in a row (take, then wait); a failing write waits a retry period.
      for (let i = 0; i < 4 && !this.stopped && this.informer.synced; i++) {
        const step = turnStep(this.view());
        if (step.type === 'wait') {
          waitMs = step.inMs;
          break;
        }
        await this.write(step);
      }
    } catch (error) {
      this.o.log.warn({ turn: this.where, err: errorMessage(error) }, 'could not update the turn Lease');
    }
    // The renew deadline passes on the clock alone: look at it then too.
    if (this.held && this.renewedAt !== undefined)
      waitMs = Math.min(waitMs, this.renewedAt + this.o.timing.renewDeadlineMs - performance.now());
    if (this.held !== holdsTurn(this.view())) this.settle();
    if (!this.stopped) this.timer = setTimeout(() => this.kick(), Math.max(10, waitMs)).unref();
  }

  private async write(step: Exclude<TurnStep, { type: 'wait' }>): Promise<void> {
    const sent = performance.now();
    const now = rfc3339Micro(new Date());
    const duration = Math.ceil(this.o.timing.leaseDurationMs / 1000);
    const lease = this.lease;
    try {
      if (step.type === 'create' || !lease) {
        const created = await this.o.rest.request<LeaseObject>(this.path(), {
          method: 'POST',
          body: newLease({ ...this.o, durationSeconds: duration, now }),
        });
        this.renewedAt = sent;
        this.observe(created);
        return;
      }
      if (step.type === 'ask') {
        const asked = await this.o.rest.request<LeaseObject>(this.path(this.o.name), {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: { metadata: { annotations: { [TURN_WANTED_ANNOTATION]: this.o.identity } } },
        });
        this.observe(asked);
        return;
      }
      const handing = step.type === 'handOver';
      // The ask is answered by a handover, or by our taking it: it is cleared then.
      const answered = (k: string, v: string) =>
        k === TURN_WANTED_ANNOTATION && (handing || v === this.o.identity);
      const annotations = Object.fromEntries(
        Object.entries(lease.metadata.annotations ?? {}).filter(([k, v]) => !answered(k, v)),
      );
      if (handing && this.sections > 0) return; // a step began after all: the next pump hands over
      const spec = {
        ...lease.spec,
        holderIdentity: handing ? step.to : this.o.identity,
        leaseDurationSeconds: handing && !step.to ? 1 : duration,
        renewTime: now,
        ...(step.type === 'renew'
          ? {}
          : { acquireTime: now, leaseTransitions: (lease.spec.leaseTransitions ?? 0) + 1 }),
      };
      // The resourceVersion makes it a compare-and-swap: two replicas cannot both win.
      const written = await this.o.rest.request<LeaseObject>(this.path(this.o.name), {
        method: 'PUT',
        body: { ...lease, metadata: { ...lease.metadata, annotations }, spec },
      });
      if (handing) {
        this.renewedAt = undefined;
        this.o.log.debug({ turn: this.where, to: step.to || '(nobody)' }, 'handed the turn over');
      } else this.renewedAt = sent;
      this.observe(written);
    } catch (error) {
      if (!(error instanceof KubeApiError && (error.code === 409 || error.code === 404))) throw error;
      // Someone else wrote first (or it is gone): read it again and decide anew.
      await this.refresh();
    }
  }

  private async refresh(): Promise<void> {
    try {
      this.observe(await this.o.rest.request<LeaseObject>(this.path(this.o.name)));
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 404)) throw error;
      this.lease = undefined;
      this.record = '';
      this.settle();
    }
  }
}
