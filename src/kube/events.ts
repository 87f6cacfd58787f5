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

export class EventRecorder {
  private readonly rest: RestClient;
  private readonly log: Logger;
  private readonly component: string;
  private readonly instance: string;

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

  /** Records an event about `object`; cluster-scoped objects' events go to the default namespace. Never throws. */
  async record(object: KubeObject, event: EventSpec): Promise<void> {
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
