// One attempt to deliver a message, and when to try again. The receiver's URL and the
// signing key never appear in what an attempt reports: the outcome names the receiver by
// its origin only (a Slack webhook's token is in its path).
import { randomInt } from 'node:crypto';
import type { NotificationFormat } from '../api/notification-policy.ts';
import { REDACTED, redactURLs } from '../redact.ts';
import { errorMessage } from '../wait.ts';
import {
  DELIVERY_HEADER,
  SIGNATURE_HEADER,
  TIMESTAMP_HEADER,
  messageBody,
  signature,
  type Message,
} from './message.ts';

/** A policy's receiver, its secrets resolved. */
export interface Receiver {
  format: NotificationFormat;
  url: string;
  /** The HMAC key (Generic only). */
  signingKey?: string;
  timeoutMs: number;
}

export type AttemptOutcome =
  | { ok: true }
  | {
      ok: false;
      /** Network errors, timeouts, 408, 429 and 5xx are tried again; other answers are final. */
      retryable: boolean;
      /** What the receiver asked for (Retry-After), in ms. */
      retryAfterMs?: number;
      /** Why, without the URL's path or query and without any secret. */
      error: string;
    };

/** Attempts of one message, at most: the first and five retries (about a minute with the backoff). */
export const MAX_ATTEMPTS = 6;
/** The first retry's backoff ceiling; it doubles per attempt up to BACKOFF_MAX_MS. */
export const BACKOFF_BASE_MS = 1000;
export const BACKOFF_MAX_MS = 30_000;
/** The longest Retry-After honoured: a receiver asking for more is retried after this. */
export const RETRY_AFTER_MAX_MS = 5 * 60_000;

/**
 * The wait before retry number `attempt` (1 for the first retry): exponential with full
 * jitter (a random wait up to the ceiling), so that many messages failed together do not
 * come back together. A Retry-After is honoured as the least wait.
 */
export function retryDelayMs(
  attempt: number,
  retryAfterMs: number | undefined,
  base = BACKOFF_BASE_MS,
  random: (ceiling: number) => number = (c) => randomInt(Math.max(1, Math.floor(c)) + 1),
): number {
  const ceiling = Math.min(BACKOFF_MAX_MS, base * 2 ** Math.max(0, attempt - 1));
  const jittered = random(ceiling);
  return retryAfterMs === undefined
    ? jittered
    : Math.max(Math.min(retryAfterMs, RETRY_AFTER_MAX_MS), jittered);
}

/** A Retry-After header's wait in ms: delay-seconds or an HTTP date. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** The receiver as it may be shown: its origin (scheme, host, port), nothing else. */
export function receiverOrigin(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(an invalid URL)';
  }
}

/** Text without the receiver's URL or its secrets, for logs and status. */
export function scrub(text: string, receiver: Pick<Receiver, 'url' | 'signingKey'>): string {
  let out = text;
  for (const secret of [receiver.url, receiver.signingKey]) {
    if (secret && secret.length >= 4) out = out.split(secret).join(REDACTED);
  }
  return redactURLs(out).slice(0, 1024);
}

/** The request's headers: JSON, and for Generic the signature over a fresh timestamp. */
function headersFor(receiver: Receiver, message: Message, body: string): Record<string, string> {
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    'User-Agent': 'gatehouse-notifier',
    [DELIVERY_HEADER]: message.id,
  };
  if (receiver.format === 'Generic' && receiver.signingKey !== undefined) {
    const timestamp = String(Math.floor(Date.now() / 1000));
    headers[TIMESTAMP_HEADER] = timestamp;
    headers[SIGNATURE_HEADER] = signature(receiver.signingKey, timestamp, body);
  }
  return headers;
}

/** Why a request failed, as the network says it (the cause's code, e.g. ECONNREFUSED). */
function networkError(error: unknown): string {
  if (error instanceof Error && error.name === 'TimeoutError') return 'no answer within the timeout';
  const cause =
    error instanceof Error ? (error.cause as { code?: string; message?: string } | undefined) : undefined;
  return cause?.code ?? cause?.message ?? errorMessage(error);
}

/** One POST of the message to the receiver, cut at its timeout. Never throws. */
export async function attemptDelivery(
  receiver: Receiver,
  message: Message,
  stop?: AbortSignal,
): Promise<AttemptOutcome> {
  const body = messageBody(receiver.format, message);
  const where = receiverOrigin(receiver.url);
  try {
    const response = await fetch(receiver.url, {
      method: 'POST',
      headers: headersFor(receiver, message, body),
      body,
      redirect: 'manual',
      signal: stop
        ? AbortSignal.any([AbortSignal.timeout(receiver.timeoutMs), stop])
        : AbortSignal.timeout(receiver.timeoutMs),
    });
    // The answer's body is not read: only its status matters.
    await response.body?.cancel().catch(() => undefined);
    if (response.status >= 200 && response.status < 300) return { ok: true };
    const code = response.status;
    const retryAfterMs = parseRetryAfter(response.headers.get('retry-after'));
    return {
      ok: false,
      retryable: code === 408 || code === 429 || code >= 500,
      ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
      error: `the receiver at ${where} answered HTTP ${String(code)}`,
    };
  } catch (error) {
    return {
      ok: false,
      retryable: true,
      error: scrub(`could not deliver to ${where}: ${networkError(error)}`, receiver),
    };
  }
}
