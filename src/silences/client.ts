// Alertmanager silences held as a lease while an action runs (kured's and tuppr's
// users asked not to be paged for a planned reboot). A silence is found again by the
// action's UID in its comment, not by an ID remembered anywhere: a restarted controller
// finds, renews or expires the same silence (the action's status records it for people
// and for knowing when it ends; src/silences/plan.ts decides when to call).
//
// Lease: each renewal sets endsAt to now + LEASE_MS (never past the policy's duration
// since approval), so if gatehouse dies mid-action the silence lapses by itself within
// minutes instead of muting the node for the rest of the hour.
import { errorMessage } from '../wait.ts';
import { LEASE_MS, normalizeAlertmanagerURL } from './plan.ts';

const CREATED_BY = 'gatehouse';

export interface Matcher {
  name: string;
  value: string;
  isRegex: boolean;
  isEqual: boolean;
}

export interface Silence {
  id: string;
  matchers: Matcher[];
  startsAt: string;
  endsAt: string;
  createdBy: string;
  comment: string;
  status: { state: 'active' | 'pending' | 'expired' };
}

export interface SilenceRequest {
  node: string;
  nodeLabel: string;
  action: { name: string; uid: string };
  /** The latest the silence may last (approval + the policy's duration). */
  notAfter: Date;
  now?: Date;
}

export class AlertmanagerError extends Error {
  override readonly name = 'AlertmanagerError';
  /** No answer at all (refused, reset, timed out), as opposed to an answer refusing the request. */
  readonly unreachable: boolean;

  constructor(message: string, options: { cause?: unknown; unreachable?: boolean } = {}) {
    super(message, options.cause === undefined ? {} : { cause: options.cause });
    this.unreachable = options.unreachable ?? false;
  }
}

export interface AlertmanagerClientOptions {
  /** Aborts every call in flight (the controller is stopping). */
  signal?: AbortSignal;
  /** How long one call may take. Defaults to 10s. */
  timeoutMs?: number;
}

/** fetch's own message ("fetch failed") hides the reason: ECONNREFUSED and the like are in its cause. */
function causeOf(error: unknown): string {
  const cause = error instanceof Error ? error.cause : undefined;
  return cause instanceof Error && cause.message
    ? `${errorMessage(error)} (${cause.message})`
    : errorMessage(error);
}

/** What a silence's comment carries so that gatehouse finds it again by the action. */
export function marker(uid: string): string {
  return `[gatehouse action ${uid}]`;
}

export class AlertmanagerClient {
  private readonly base: string;
  private readonly options: AlertmanagerClientOptions;

  constructor(url: string, options: AlertmanagerClientOptions = {}) {
    this.base = normalizeAlertmanagerURL(url);
    this.options = options;
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const timeout = AbortSignal.timeout(this.options.timeoutMs ?? 10_000);
    let res: Response;
    try {
      res = await fetch(`${this.base}${path}`, {
        method,
        headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: this.options.signal ? AbortSignal.any([this.options.signal, timeout]) : timeout,
      });
    } catch (error) {
      throw new AlertmanagerError(`Alertmanager at ${this.base} unreachable: ${causeOf(error)}`, {
        cause: error,
        unreachable: true,
      });
    }
    let text: string;
    try {
      text = await res.text();
    } catch (error) {
      throw new AlertmanagerError(`Alertmanager at ${this.base} broke off its answer: ${causeOf(error)}`, {
        cause: error,
        unreachable: true,
      });
    }
    if (!res.ok)
      throw new AlertmanagerError(
        `Alertmanager ${method} ${path} answered ${String(res.status)}: ${text.slice(0, 300)}`,
      );
    try {
      return (text ? JSON.parse(text) : undefined) as T;
    } catch {
      throw new AlertmanagerError(
        `Alertmanager ${method} ${path} answered something that is not JSON: ${text.slice(0, 300)}`,
      );
    }
  }

  /** Silences whose matchers include `name="value"` (Alertmanager's own filter). */
  async silencesFor(name: string, value: string): Promise<Silence[]> {
    const filter = encodeURIComponent(`${name}="${value}"`);
    return this.call<Silence[]>('GET', `/api/v2/silences?filter=${filter}`);
  }

  /** Creates a silence, or updates the one with `id`; returns its ID. */
  async upsert(silence: Omit<Silence, 'id' | 'status'> & { id?: string }): Promise<string> {
    const reply = await this.call<{ silenceID: string }>('POST', '/api/v2/silences', silence);
    return reply.silenceID;
  }

  async expire(id: string): Promise<void> {
    await this.call('DELETE', `/api/v2/silence/${encodeURIComponent(id)}`);
  }

  /** The live silence held for an action, if any. */
  async find(request: Pick<SilenceRequest, 'node' | 'nodeLabel' | 'action'>): Promise<Silence | undefined> {
    const silences = await this.silencesFor(request.nodeLabel, request.node);
    return silences.find(
      (s) => s.status.state !== 'expired' && s.comment.includes(marker(request.action.uid)),
    );
  }

  /** Creates or renews the action's silence; returns it as it now stands. */
  async hold(request: SilenceRequest): Promise<{ id: string; endsAt: Date; created: boolean }> {
    const now = request.now ?? new Date();
    const endsAt = new Date(Math.min(now.getTime() + LEASE_MS, request.notAfter.getTime()));
    if (endsAt <= now)
      throw new AlertmanagerError(
        `the silence for ${request.node} would already have ended (${request.notAfter.toISOString()})`,
      );
    const existing = await this.find(request);
    const id = await this.upsert({
      ...(existing ? { id: existing.id } : {}),
      matchers: [{ name: request.nodeLabel, value: request.node, isRegex: false, isEqual: true }],
      startsAt: existing?.startsAt ?? now.toISOString(),
      endsAt: endsAt.toISOString(),
      createdBy: CREATED_BY,
      comment: `${request.action.name} on ${request.node} ${marker(request.action.uid)}: planned by gatehouse, expires when the action ends`,
    });
    return { id, endsAt, created: !existing };
  }

  /** Expires the action's silence, if it still holds one. */
  async release(request: Pick<SilenceRequest, 'node' | 'nodeLabel' | 'action'>): Promise<boolean> {
    const existing = await this.find(request);
    if (!existing) return false;
    await this.expire(existing.id);
    return true;
  }
}
