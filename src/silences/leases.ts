// Makes the silence calls the action core asks for (src/silences/plan.ts) and
// remembers the outcome of the latest one per (action, silence): the facts the core
// decides on. Calls run in the background, so a slow or unreachable Alertmanager never
// holds up an action's reconcile; `onChange` brings the action back when one ends.
// In memory only: a restarted controller starts without facts and finds its silences
// again by the action's UID (AlertmanagerClient.find), so it renews the same one.
import type { SilenceCallFacts } from './plan.ts';
import { silenceKey } from './plan.ts';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';
import { AlertmanagerClient, AlertmanagerError } from './client.ts';

export interface SilenceCall {
  op: 'hold' | 'release';
  url: string;
  nodeLabel: string;
  node: string;
  action: { name: string; uid: string };
  /** For a hold: the latest the silence may last. */
  notAfter?: Date;
}

export interface SilenceLeasesOptions {
  log: Logger;
  /** How long one call to Alertmanager may take. Defaults to 10s. */
  timeoutMs?: number;
  now?: () => Date;
}

export class SilenceLeases {
  private readonly o: SilenceLeasesOptions;
  private readonly now: () => Date;
  /** Action UID → silence key → the latest call. */
  private readonly calls = new Map<string, Map<string, SilenceCallFacts>>();
  private readonly clients = new Map<string, AlertmanagerClient>();
  private readonly abort = new AbortController();

  constructor(options: SilenceLeasesOptions) {
    this.o = options;
    this.now = options.now ?? (() => new Date());
  }

  facts(uid: string): ReadonlyMap<string, SilenceCallFacts> {
    return new Map(
      [...(this.calls.get(uid) ?? new Map<string, SilenceCallFacts>())].map(([k, f]) => [k, { ...f }]),
    );
  }

  private client(url: string): AlertmanagerClient {
    let client = this.clients.get(url);
    if (!client) {
      client = new AlertmanagerClient(url, {
        signal: this.abort.signal,
        ...(this.o.timeoutMs !== undefined ? { timeoutMs: this.o.timeoutMs } : {}),
      });
      this.clients.set(url, client);
    }
    return client;
  }

  /** Starts a call unless one for the same silence is already under way. */
  start(call: SilenceCall, onChange: () => void, log: Logger = this.o.log): void {
    if (this.abort.signal.aborted) return;
    const key = silenceKey(call);
    const uid = call.action.uid;
    let calls = this.calls.get(uid);
    if (!calls) {
      calls = new Map();
      this.calls.set(uid, calls);
    }
    const previous = calls.get(key);
    if (previous?.state === 'running') return;
    const failed = previous?.state === 'failed' ? previous : undefined;
    const failuresBefore = failed?.failures ?? 0;
    const facts: SilenceCallFacts = {
      op: call.op,
      state: 'running',
      at: this.now(),
      failures: failuresBefore,
      // A retry carries the failure it retries, for the condition meanwhile.
      ...(failed?.message !== undefined ? { message: failed.message } : {}),
      ...(failed?.unreachable !== undefined ? { unreachable: failed.unreachable } : {}),
    };
    calls.set(key, facts);
    const owner = calls;
    const request = { node: call.node, nodeLabel: call.nodeLabel, action: call.action };
    const client = this.client(call.url);
    const finish = (next: SilenceCallFacts) => {
      // Forgotten meanwhile (the action is gone, or leadership changed): nothing to tell.
      if (this.calls.get(uid) !== owner || owner.get(key) !== facts) return;
      owner.set(key, next);
      onChange();
    };
    const work =
      call.op === 'hold'
        ? client
            .hold({ ...request, notAfter: call.notAfter ?? this.now() })
            .then(({ id, endsAt, created }) => {
              log.info(
                { url: call.url, silence: id, endsAt: endsAt.toISOString(), created },
                created ? 'created an Alertmanager silence' : 'renewed an Alertmanager silence',
              );
              finish({
                op: 'hold',
                state: 'succeeded',
                at: this.now(),
                failures: 0,
                id,
                endsAt: endsAt.toISOString(),
              });
            })
        : client.release(request).then((expired) => {
            log.info({ url: call.url, expired }, 'released the Alertmanager silence');
            finish({ op: 'release', state: 'succeeded', at: this.now(), failures: 0 });
          });
    work.catch((error: unknown) => {
      const message = errorMessage(error);
      log.warn({ url: call.url, op: call.op, err: message }, 'Alertmanager silence call failed');
      finish({
        op: call.op,
        state: 'failed',
        at: this.now(),
        failures: failuresBefore + 1,
        message,
        unreachable: error instanceof AlertmanagerError && error.unreachable,
      });
    });
  }

  /** Forgets an action (it is gone). */
  forget(uid: string): void {
    this.calls.delete(uid);
  }

  /** Forgets every action: after a change of leader, what this replica knew may be stale. */
  forgetAll(): void {
    this.calls.clear();
  }

  /** Aborts the calls in flight; the controller is stopping. */
  stop(): void {
    this.abort.abort(new Error('the controller is stopping'));
    this.calls.clear();
  }
}
