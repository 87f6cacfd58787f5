// NotificationPolicy status: counts, the last error and the Ready condition, gathered in
// memory and written at most every 30 seconds per policy, and only when it changed, so a
// busy receiver costs the API server nothing per message. Each write adds the counts
// since the last one to the stored ones, on the resourceVersion it read (a write in
// between: 409, and the next write adds them again), so replicas and restarts add up.
import type { NotificationPolicy, NotificationPolicyStatus } from '../api/notification-policy.ts';
import { NOTIFICATION_POLICIES_PATH } from '../api/paths.ts';
import { sameJSON } from '../canonical-json.ts';
import { setCondition } from '../kube/conditions.ts';
import type { KubeObject } from '../kube/informer.ts';
import { isConflict } from '../kube/reconciler.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';

export type NotificationPolicyObject = NotificationPolicy & KubeObject;

/** The condition every NotificationPolicy carries. */
export const READY_CONDITION = 'Ready';

/** Why a policy is (not) Ready. */
export type NotificationReadyReason = 'SecretsFound' | 'Delivered' | 'SecretMissing' | 'DeliveryFailed';

/** Shortest time between two status writes of one policy. */
export const STATUS_INTERVAL_MS = 30_000;

interface Ready {
  status: 'True' | 'False';
  reason: NotificationReadyReason;
  message: string;
}

interface PolicyReport {
  sent: number;
  failed: number;
  dropped: number;
  lastSentTime?: string;
  lastError?: string;
  ready?: Ready;
  lastWrite: number;
  timer: NodeJS.Timeout | undefined;
}

export interface StatusTrackerOptions {
  rest: RestClient;
  log: Logger;
  policy: (name: string) => NotificationPolicyObject | undefined;
  isLeader: () => boolean;
  intervalMs?: number;
}

export class PolicyStatusTracker {
  private readonly o: StatusTrackerOptions;
  private readonly reports = new Map<string, PolicyReport>();
  private stopped = false;

  constructor(options: StatusTrackerOptions) {
    this.o = options;
  }

  private report(policy: string): PolicyReport {
    let r = this.reports.get(policy);
    if (!r) {
      r = { sent: 0, failed: 0, dropped: 0, lastWrite: 0, timer: undefined };
      this.reports.set(policy, r);
    }
    return r;
  }

  delivered(policy: string, outcome: { ok: true } | { ok: false; error: string }): void {
    const r = this.report(policy);
    if (outcome.ok) {
      r.sent++;
      r.lastSentTime = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
      this.ready(policy, {
        status: 'True',
        reason: 'Delivered',
        message: 'the receiver accepted the last message',
      });
    } else {
      r.failed++;
      r.lastError = outcome.error;
      this.ready(policy, {
        status: 'False',
        reason: 'DeliveryFailed',
        message: `the last message was given up on after its retries: ${outcome.error}`,
      });
    }
    this.schedule(policy);
  }

  dropped(policy: string): void {
    this.report(policy).dropped++;
    this.schedule(policy);
  }

  /** The policy's Secrets were read (problem undefined), or one could not be. */
  secrets(policy: string, problem: string | undefined): void {
    const current = this.report(policy).ready;
    if (problem === undefined) {
      // Readable Secrets say nothing new about a policy that already delivers.
      if (current?.reason === 'SecretMissing' || current === undefined)
        this.ready(policy, { status: 'True', reason: 'SecretsFound', message: 'the webhook can be reached' });
    } else {
      this.ready(policy, { status: 'False', reason: 'SecretMissing', message: problem });
    }
    this.schedule(policy);
  }

  /** Sets Ready; a change is logged once (one warning per outage, not per message). */
  private ready(policy: string, next: Ready): void {
    const r = this.report(policy);
    if (r.ready?.status !== next.status || r.ready.reason !== next.reason) {
      if (next.status === 'False')
        this.o.log.warn({ notificationPolicy: policy, ready: next.reason }, next.message);
      else if (r.ready?.status === 'False')
        this.o.log.info({ notificationPolicy: policy, ready: next.reason }, next.message);
    }
    r.ready = next;
  }

  private schedule(policy: string): void {
    const r = this.report(policy);
    if (r.timer || this.stopped) return;
    const interval = this.o.intervalMs ?? STATUS_INTERVAL_MS;
    const wait = Math.max(1000, r.lastWrite + interval - Date.now());
    r.timer = setTimeout(() => {
      r.timer = undefined;
      void this.write(policy);
    }, wait);
    r.timer.unref();
  }

  /** The status to write: the stored one with this replica's counts added. */
  private next(object: NotificationPolicyObject, r: PolicyReport): NotificationPolicyStatus {
    const stored = object.status ?? {};
    const generation = object.metadata.generation;
    return {
      ...stored,
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      sent: (stored.sent ?? 0) + r.sent,
      failed: (stored.failed ?? 0) + r.failed,
      dropped: (stored.dropped ?? 0) + r.dropped,
      ...(r.lastSentTime ? { lastSentTime: r.lastSentTime } : {}),
      ...(r.lastError !== undefined ? { lastError: r.lastError } : {}),
      ...(r.ready
        ? {
            conditions: setCondition(
              stored.conditions,
              {
                type: READY_CONDITION,
                status: r.ready.status,
                reason: r.ready.reason,
                message: r.ready.message,
                ...(generation !== undefined ? { observedGeneration: generation } : {}),
              },
              new Date(),
            ),
          }
        : {}),
    };
  }

  private async write(policy: string): Promise<void> {
    const r = this.reports.get(policy);
    const object = this.o.policy(policy);
    if (!r || !object || this.stopped || !this.o.isLeader()) {
      if (r) clearTimeout(r.timer);
      this.reports.delete(policy);
      return;
    }
    const written = { sent: r.sent, failed: r.failed, dropped: r.dropped };
    const status = this.next(object, r);
    const stored = object.status ?? {};
    // Only a change is written; conditions compared without their transition times.
    if (
      !sameJSON({ ...status, conditions: undefined }, { ...stored, conditions: undefined }) ||
      !sameJSON(
        status.conditions?.map((c) => ({ ...c, lastTransitionTime: '' })),
        stored.conditions?.map((c) => ({ ...c, lastTransitionTime: '' })),
      )
    ) {
      try {
        await this.o.rest.request(`${NOTIFICATION_POLICIES_PATH}/${encodeURIComponent(policy)}/status`, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: { metadata: { resourceVersion: object.metadata.resourceVersion }, status },
        });
      } catch (error) {
        if (isConflict(error, [404])) {
          this.reports.delete(policy);
          return;
        }
        // A conflict (the cache behind a write) or an outage: the counts stay, tried again.
        if (!isConflict(error, [409]))
          this.o.log.warn(
            { notificationPolicy: policy, err: errorMessage(error) },
            'could not write the status',
          );
        r.lastWrite = Date.now() - (this.o.intervalMs ?? STATUS_INTERVAL_MS) + 2000;
        this.schedule(policy);
        return;
      }
    }
    r.sent -= written.sent;
    r.failed -= written.failed;
    r.dropped -= written.dropped;
    r.lastWrite = Date.now();
    if (r.sent || r.failed || r.dropped) this.schedule(policy);
  }

  stop(): void {
    this.stopped = true;
    for (const r of this.reports.values()) clearTimeout(r.timer);
    this.reports.clear();
  }
}
