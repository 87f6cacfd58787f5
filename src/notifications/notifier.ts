// The notifier: the EventRecorder hands it every Event as it is recorded (synchronously,
// before the Event is queued for the API server); the Events that are steps of a
// NodeAction or NodeRollout (steps.ts) are queued for every NotificationPolicy that wants
// them (subject.ts), and delivered in the background (queue.ts). Only the leader sends.
import type { EventSpec } from '../kube/event-spec.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';
import { attemptDelivery, scrub, type AttemptOutcome } from './delivery.ts';
import type { Message, StepRecord } from './message.ts';
import { NotificationQueue, type QueueOptions } from './queue.ts';
import { SecretMissingError, SecretReader } from './secrets.ts';
import { PolicyStatusTracker, type NotificationPolicyObject } from './status.ts';
import { stepOf, type SubjectKind } from './steps.ts';
import { policyWants, subjectOf, type Subject } from './subject.ts';

/** How long an action may sit in Pending or WaitingForHealth before that is reported as Held. */
export const HOLD_GRACE_MS = 10_000;

export interface NotifierOptions {
  rest: RestClient;
  log: Logger;
  /** The controller's namespace: the only one Secrets are read from. */
  namespace: string;
  policies: () => readonly NotificationPolicyObject[];
  policy: (name: string) => NotificationPolicyObject | undefined;
  nodeLabels: (node: string) => Record<string, string> | undefined;
  /** The subject as the caches show it now: a hold is reported with why it waits then. */
  current: (kind: SubjectKind, name: string) => { phase?: string; message?: string } | undefined;
  isLeader: () => boolean;
  holdGraceMs?: number;
  statusIntervalMs?: number;
  queue?: Omit<QueueOptions, 'deliver' | 'delivered' | 'dropped'>;
}

export class Notifier {
  private readonly o: NotifierOptions;
  private readonly secrets: SecretReader;
  readonly status: PolicyStatusTracker;
  readonly queue: NotificationQueue;
  /** Tentative holds waiting for their grace to pass, by subject. */
  private readonly holds = new Map<string, NodeJS.Timeout>();

  constructor(options: NotifierOptions) {
    this.o = options;
    this.secrets = new SecretReader(options.rest, options.namespace);
    this.status = new PolicyStatusTracker({
      rest: options.rest,
      log: options.log,
      policy: options.policy,
      isLeader: options.isLeader,
      ...(options.statusIntervalMs !== undefined ? { intervalMs: options.statusIntervalMs } : {}),
    });
    this.queue = new NotificationQueue({
      ...options.queue,
      deliver: (message, signal) => this.deliver(message, signal),
      delivered: (policy, outcome) => this.status.delivered(policy, outcome),
      dropped: (policy) => this.status.dropped(policy),
    });
  }

  /**
   * The EventRecorder's tap: called for every Event recorded, synchronously. Cheap for
   * every Event that is not a step (a table lookup); never throws.
   */
  observe(object: KubeObject, event: EventSpec): void {
    try {
      const kind = object.kind;
      if (kind !== 'NodeAction' && kind !== 'NodeRollout') return;
      const key = `${kind}/${object.metadata.uid ?? object.metadata.name}`;
      // Any later Event of the subject means it moved on: its tentative hold is not one.
      const hold = this.holds.get(key);
      if (hold) {
        clearTimeout(hold);
        this.holds.delete(key);
      }
      const rule = stepOf(kind, event.reason);
      if (!rule || !this.o.isLeader() || this.o.policies().length === 0) return;
      const record: StepRecord = {
        step: rule.step,
        reason: event.reason,
        message: event.message,
        type: event.type,
        time: new Date().toISOString(),
        final: rule.final === true,
      };
      const subject = subjectOf(kind, object, event.reason, event.message);
      if (!rule.tentative) {
        this.dispatch(subject, record);
        return;
      }
      const timer = setTimeout(() => {
        this.holds.delete(key);
        this.confirmHold(subject, record);
      }, this.o.holdGraceMs ?? HOLD_GRACE_MS);
      timer.unref();
      this.holds.set(key, timer);
    } catch (error) {
      this.o.log.warn({ err: errorMessage(error) }, 'could not queue a notification');
    }
  }

  /** A tentative hold whose grace passed: sent if the subject still waits there, with why. */
  private confirmHold(subject: Subject, record: StepRecord): void {
    const now = this.o.current(subject.kind, subject.name);
    if (!now || now.phase !== record.reason || !this.o.isLeader()) return;
    const what = subject.node ? `${subject.action ?? 'action'} of node ${subject.node}` : subject.name;
    this.dispatch(subject, {
      ...record,
      message: `${what} waits: ${now.message ?? record.message}`,
      time: new Date().toISOString(),
    });
  }

  private dispatch(subject: Subject, record: StepRecord): void {
    for (const policy of this.o.policies()) {
      if (policyWants(policy.spec, subject, record.step, this.o.nodeLabels))
        this.queue.add(policy.metadata.name, subject, record);
    }
  }

  /** One attempt of a message: its policy's receiver read (Secrets included), then the POST. */
  private async deliver(message: Message, signal: AbortSignal): Promise<AttemptOutcome> {
    const policy = this.o.policy(message.policy);
    if (!policy) return { ok: false, retryable: false, error: 'the NotificationPolicy was deleted' };
    try {
      const receiver = await this.secrets.receiver(policy.spec);
      return await attemptDelivery(receiver, message, signal);
    } catch (error) {
      if (error instanceof SecretMissingError) {
        this.status.secrets(message.policy, error.message);
        return { ok: false, retryable: true, error: error.message };
      }
      return { ok: false, retryable: true, error: scrub(errorMessage(error), { url: '' }) };
    }
  }

  /**
   * A policy added or its spec changed (not its status): its Secrets are read afresh
   * (now, so that its status says at once whether they exist), and its Ready condition set.
   */
  async policyChanged(policy: NotificationPolicyObject): Promise<void> {
    this.secrets.forget();
    if (!this.o.isLeader()) return;
    try {
      await this.secrets.receiver(policy.spec);
      this.status.secrets(policy.metadata.name, undefined);
    } catch (error) {
      const problem =
        error instanceof SecretMissingError ? error.message : scrub(errorMessage(error), { url: '' });
      this.status.secrets(policy.metadata.name, problem);
    }
  }

  stop(): void {
    for (const timer of this.holds.values()) clearTimeout(timer);
    this.holds.clear();
    this.queue.stop();
    this.status.stop();
  }
}
