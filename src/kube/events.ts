// Kubernetes Events (core/v1), so `kubectl describe` and `kubectl get events` show what
// gatehouse did and why.
import { randomBytes } from 'node:crypto';
import type { Logger } from '../log.ts';
import { redactURLs } from '../redact.ts';
import { errorMessage } from '../wait.ts';
import type { KubeObject } from './informer.ts';
import type { RestClient } from './rest.ts';
import type { EventSpec } from './event-spec.ts';
import { rfc3339 } from './time.ts';

export type { EventSpec } from './event-spec.ts';

export { rfc3339 } from './time.ts';

/**
 * Events waiting to be sent, at most: past it new ones are dropped (and logged), as
 * client-go's broadcaster drops past its queue of 1,000. An Event is a record for people;
 * the status is the truth.
 */
export const EVENT_BACKLOG = 1000;

/** Event writes in flight at once: a burst (1,000 checks turning healthy at a start) is sent a few at a time. */
export const EVENT_SENDS_IN_FLIGHT = 4;

/**
 * Sends Events in the background, in order per object: a reconcile records and goes on,
 * so a slow Event write never holds up a gate (client-go's recorder is asynchronous too).
 */
export class EventRecorder {
  private readonly rest: RestClient;
  private readonly log: Logger;
  private readonly component: string;
  private readonly instance: string;
  /** Per object (its uid, or namespace/name): the last send queued, so its Events keep their order. */
  private readonly chains = new Map<string, Promise<void>>();
  private backlog = 0;
  private dropped = 0;
  private inFlight = 0;
  private readonly waiters: (() => void)[] = [];
  /** Sees every Event as it is recorded, before the backlog may drop it (the notifier). */
  private observer: ((object: KubeObject, event: EventSpec) => void) | undefined;

  constructor(
    rest: RestClient,
    log: Logger,
    component = 'gatehouse-controller',
    instance = process.env.HOSTNAME ?? 'local',
  ) {
    this.rest = rest;
    this.log = log;
    this.component = component;
    this.instance = instance;
  }

  /** Calls `observer` synchronously for every Event recorded from now on; it must not throw. */
  onRecord(observer: (object: KubeObject, event: EventSpec) => void): void {
    this.observer = observer;
  }

  /**
   * Records an event about `object` (cluster-scoped objects' events go to the default
   * namespace): queued at once and sent in the background. Never throws.
   */
  record(object: KubeObject, event: EventSpec): Promise<void> {
    this.observer?.(object, event);
    if (this.backlog >= EVENT_BACKLOG) {
      if (this.dropped++ % 100 === 0)
        this.log.warn(
          { object: object.metadata.name, reason: event.reason, dropped: this.dropped },
          'too many Events waiting to be sent: dropping this one',
        );
      return Promise.resolve();
    }
    const key = object.metadata.uid ?? `${object.metadata.namespace ?? ''}/${object.metadata.name}`;
    const previous = this.chains.get(key) ?? Promise.resolve();
    this.backlog++;
    const sent = previous.then(async () => {
      while (this.inFlight >= EVENT_SENDS_IN_FLIGHT) await new Promise<void>((r) => this.waiters.push(r));
      this.inFlight++;
      try {
        await this.send(object, event);
      } finally {
        this.inFlight--;
        this.waiters.shift()?.();
      }
    });
    const chained = sent.finally(() => {
      this.backlog--;
      if (this.chains.get(key) === chained) this.chains.delete(key);
    });
    this.chains.set(key, chained);
    return Promise.resolve();
  }

  /** Resolves once every Event recorded so far was sent (or failed), or after `timeoutMs`. */
  async flush(timeoutMs = 5000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all([...this.chains.values()]),
      new Promise((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      }),
    ]);
    clearTimeout(timer);
  }

  private async send(object: KubeObject, event: EventSpec): Promise<void> {
    const namespace = object.metadata.namespace ?? 'default';
    const now = rfc3339(new Date());
    const body = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name: `${object.metadata.name}.${randomBytes(8).toString('hex')}`, namespace },
      involvedObject: {
        apiVersion: object.apiVersion,
        kind: object.kind,
        name: object.metadata.name,
        ...(object.metadata.namespace ? { namespace: object.metadata.namespace } : {}),
        ...(object.metadata.uid ? { uid: object.metadata.uid } : {}),
        ...(object.metadata.resourceVersion ? { resourceVersion: object.metadata.resourceVersion } : {}),
      },
      type: event.type,
      reason: event.reason,
      message: redactURLs(event.message).slice(0, 1024),
      source: { component: this.component },
      reportingComponent: `talos.dev/${this.component}`,
      reportingInstance: this.instance,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
    try {
      await this.rest.request(`/api/v1/namespaces/${namespace}/events`, { method: 'POST', body });
    } catch (error) {
      this.log.warn(
        { object: object.metadata.name, reason: event.reason, err: errorMessage(error) },
        'could not record event',
      );
    }
  }
}
