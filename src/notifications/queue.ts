// The notifications waiting to be delivered: bounded, rate-limited per subject (one
// action or rollout) and policy, a few deliveries in flight per policy, retried with
// backoff. Adding a step is synchronous and cheap, so the reconciler that recorded the
// Event never waits for a receiver; a receiver that hangs only fills this queue, and
// past its bound the oldest steps that are not an end are dropped (and counted).
import { randomUUID } from 'node:crypto';
import { retryDelayMs, type AttemptOutcome } from './delivery.ts';
import type { Message, StepRecord } from './message.ts';
import type { Subject } from './subject.ts';

export interface QueueOptions {
  /** Steps held at once, waiting or in a delivery not finished (default 1,000). */
  capacity?: number;
  /** Per policy and subject, at most one message per this long; later steps wait and go together (default 5 s). */
  minIntervalMs?: number;
  /** Deliveries in flight at once per policy (default 4). */
  inFlightPerPolicy?: number;
  maxAttempts?: number;
  backoffBaseMs?: number;
  /** Steps one message carries at most (default 20). */
  maxStepsPerMessage?: number;
  /** One attempt; never throws. */
  deliver: (message: Message, signal: AbortSignal) => Promise<AttemptOutcome>;
  /** A message delivered, or given up on. */
  delivered?: (policy: string, outcome: { ok: true } | { ok: false; error: string }) => void;
  /** A step dropped because the queue was full. */
  dropped?: (policy: string) => void;
}

interface Held {
  outbox: Outbox;
  record: StepRecord;
}

/** The steps of one subject for one policy, and where its deliveries are. */
interface Outbox {
  key: string;
  policy: string;
  subject: Subject;
  steps: Held[];
  /** A message of this outbox is unfinished: the next waits for it, so steps arrive in order. */
  busy: boolean;
  /** No message before this time (the rate limit). */
  nextAt: number;
  timer: NodeJS.Timeout | undefined;
  /** Steps dropped since its last message, which the next one reports. */
  dropped: number;
}

export class NotificationQueue {
  private readonly o: Required<Omit<QueueOptions, 'delivered' | 'dropped'>> &
    Pick<QueueOptions, 'delivered' | 'dropped'>;
  private readonly outboxes = new Map<string, Outbox>();
  /** Every step waiting for a message, oldest first (a Set keeps insertion order). */
  private readonly waiting = new Set<Held>();
  /** Steps in messages not finished yet. */
  private inMessages = 0;
  private readonly slots = new Map<string, { inFlight: number; queue: (() => void)[] }>();
  private readonly abort = new AbortController();
  private dropCount = 0;

  constructor(options: QueueOptions) {
    this.o = {
      capacity: 1000,
      minIntervalMs: 5000,
      inFlightPerPolicy: 4,
      maxAttempts: 6,
      backoffBaseMs: 1000,
      maxStepsPerMessage: 20,
      ...options,
    };
  }

  /** Steps held now (waiting, or in a message not finished). */
  get size(): number {
    return this.waiting.size + this.inMessages;
  }

  /** Steps dropped since the start. */
  get drops(): number {
    return this.dropCount;
  }

  /** Queues a step of `subject` for `policy`. Synchronous; never throws. */
  add(policy: string, subject: Subject, record: StepRecord): void {
    if (this.abort.signal.aborted) return;
    const key = `${policy}\0${subject.kind}\0${subject.uid ?? subject.name}`;
    let outbox = this.outboxes.get(key);
    if (!outbox) {
      outbox = { key, policy, subject, steps: [], busy: false, nextAt: 0, timer: undefined, dropped: 0 };
      this.outboxes.set(key, outbox);
    }
    if (this.size >= this.o.capacity && !this.makeRoom(record)) {
      this.drop(outbox);
      return;
    }
    const held = { outbox, record };
    outbox.steps.push(held);
    this.waiting.add(held);
    this.pump(outbox);
  }

  /**
   * Drops the oldest waiting step that is not an end; an end only for another end (the
   * bound holds whatever comes). False: the new step is the one to drop.
   */
  private makeRoom(incoming: StepRecord): boolean {
    let victim: Held | undefined;
    for (const held of this.waiting) {
      if (!held.record.final) {
        victim = held;
        break;
      }
    }
    if (!victim && incoming.final) victim = this.waiting.values().next().value;
    if (!victim) return false;
    this.waiting.delete(victim);
    victim.outbox.steps.splice(victim.outbox.steps.indexOf(victim), 1);
    this.drop(victim.outbox);
    return true;
  }

  private drop(outbox: Outbox): void {
    outbox.dropped++;
    this.dropCount++;
    this.o.dropped?.(outbox.policy);
  }

  /** Sends the outbox's next message if it may now, or looks again when it may. */
  private pump(outbox: Outbox): void {
    if (this.abort.signal.aborted || outbox.busy || outbox.timer) return;
    const wait = outbox.nextAt - Date.now();
    if (outbox.steps.length === 0) {
      // Kept until its rate limit ends, so that a step right after still waits for it.
      // (Drops not yet reported stay in the policy's status.)
      if (wait > 0) outbox.timer = this.later(outbox, wait);
      else this.outboxes.delete(outbox.key);
      return;
    }
    if (wait > 0) {
      outbox.timer = this.later(outbox, wait);
      return;
    }
    const taken = outbox.steps.splice(0, this.o.maxStepsPerMessage);
    for (const held of taken) this.waiting.delete(held);
    this.inMessages += taken.length;
    const message: Message = {
      id: randomUUID(),
      policy: outbox.policy,
      subject: outbox.subject,
      steps: taken.map((h) => h.record),
      dropped: outbox.dropped,
    };
    outbox.dropped = 0;
    outbox.busy = true;
    outbox.nextAt = Date.now() + this.o.minIntervalMs;
    void this.run(outbox, message, 1);
  }

  private later(outbox: Outbox, ms: number): NodeJS.Timeout {
    const timer = setTimeout(() => {
      outbox.timer = undefined;
      this.pump(outbox);
    }, ms);
    timer.unref();
    return timer;
  }

  /** One attempt of a message, then the next attempt after a backoff, or its end. */
  private async run(outbox: Outbox, message: Message, attempt: number): Promise<void> {
    await this.slot(outbox.policy);
    let outcome: AttemptOutcome;
    try {
      outcome = this.abort.signal.aborted
        ? { ok: false, retryable: false, error: 'the controller stopped' }
        : await this.o.deliver(message, this.abort.signal);
    } finally {
      this.release(outbox.policy);
    }
    if (!outcome.ok && outcome.retryable && attempt < this.o.maxAttempts && !this.abort.signal.aborted) {
      const delay = retryDelayMs(attempt, outcome.retryAfterMs, this.o.backoffBaseMs);
      setTimeout(() => void this.run(outbox, message, attempt + 1), delay).unref();
      return;
    }
    this.inMessages -= message.steps.length;
    this.o.delivered?.(outbox.policy, outcome.ok ? { ok: true } : { ok: false, error: outcome.error });
    outbox.busy = false;
    this.pump(outbox);
  }

  private async slot(policy: string): Promise<void> {
    let s = this.slots.get(policy);
    if (!s) {
      s = { inFlight: 0, queue: [] };
      this.slots.set(policy, s);
    }
    while (s.inFlight >= this.o.inFlightPerPolicy) await new Promise<void>((r) => s.queue.push(r));
    s.inFlight++;
  }

  private release(policy: string): void {
    const s = this.slots.get(policy);
    if (!s) return;
    s.inFlight--;
    const next = s.queue.shift();
    if (next) next();
    else if (s.inFlight === 0) this.slots.delete(policy);
  }

  /** Stops every delivery (attempts in flight are aborted) and forgets what waits. */
  stop(): void {
    this.abort.abort(new Error('the notifier stopped'));
    for (const outbox of this.outboxes.values()) clearTimeout(outbox.timer);
    this.outboxes.clear();
    this.waiting.clear();
    for (const s of this.slots.values()) for (const r of s.queue.splice(0)) r();
  }
}
