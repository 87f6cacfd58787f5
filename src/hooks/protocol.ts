// The hook callback protocol's messages (DESIGN.md), with no I/O: what gatehouse sends a
// webhook hook and how it reads the answer. Pure, so the hook planner can use it;
// webhook.ts makes the calls.
import { API_VERSION, type Action } from '../api/common.ts';
import type { HookKindName } from '../api/hooks.ts';
import type { HookSubject } from './job.ts';
import type { HookObject } from './select.ts';

export interface HookRequest {
  apiVersion: typeof API_VERSION;
  kind: 'HookRequest';
  /** For a boot hook (no action) only node and bootID are set. */
  action: {
    name?: string;
    uid?: string;
    action?: Action;
    node: string;
    bootID?: string;
    parameters?: Record<string, unknown>;
  };
  hook: { kind: HookKindName; namespace: string; name: string };
  /** Undo: put back what this hook prepared for the action, which ended without touching the node. */
  purpose?: 'Undo';
}

/** How one call ended. */
export interface WebhookAnswer {
  outcome: 'Success' | 'Failure' | 'NotYet' | 'Error';
  message: string;
  /** NotYet: when to ask again. Error: 0, the caller backs off. */
  retryAfterMs: number;
}

export function hookRequest(hook: HookObject, subject: HookSubject): HookRequest {
  const a = subject.action;
  return {
    apiVersion: API_VERSION,
    kind: 'HookRequest',
    action: {
      ...(a ? { name: a.name, uid: a.uid, action: a.action } : {}),
      node: subject.node,
      ...(subject.bootID ? { bootID: subject.bootID } : {}),
      ...(a ? { parameters: a.parameters } : {}),
    },
    hook: { kind: hook.kind, namespace: hook.metadata.namespace, name: hook.metadata.name },
    ...(subject.purpose ? { purpose: subject.purpose } : {}),
  };
}

/** The longest message gatehouse keeps from a webhook's answer. */
export const MAX_WEBHOOK_MESSAGE = 1024;

/**
 * The longest wait a webhook may ask for in one answer (an hour): beyond that the hook's
 * timeout ends the run anyway, and a larger integer only risks timer overflow.
 */
export const MAX_RETRY_AFTER_SECONDS = 3600;

/**
 * Text from a webhook fit for a status or an Event: one line of printable characters,
 * at most `max` long. A webhook is written by a namespace editor; what it says reaches
 * readers of the action, so it is bounded and cannot forge lines or hide text.
 */
export function webhookText(text: string, max = MAX_WEBHOOK_MESSAGE): string {
  const line = text
    // eslint-disable-next-line no-control-regex
    .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

function excerpt(body: string, max = 300): string {
  return webhookText(body, max) || '(empty body)';
}

type Parsed<T> = { ok: true; value: T } | { ok: false; problem: string };

/** The protocol's fields, each checked: anything outside the protocol is named. */
function readAnswer(parsed: unknown): Parsed<{
  status: 'Success' | 'Failure';
  message: string;
  retryAfterSeconds: number;
}> {
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed))
    return { ok: false, problem: 'outside the hook protocol: not a JSON object' };
  const answer = parsed as { status?: unknown; message?: unknown; retryAfterSeconds?: unknown };
  if (answer.status !== 'Success' && answer.status !== 'Failure')
    return {
      ok: false,
      problem: `without status Success or Failure (status: ${answer.status === undefined ? 'none' : JSON.stringify(answer.status)})`,
    };
  if (answer.message !== undefined && typeof answer.message !== 'string')
    return {
      ok: false,
      problem: `outside the hook protocol: message is a ${typeof answer.message}, not a string`,
    };
  const retry = answer.retryAfterSeconds === undefined ? 0 : answer.retryAfterSeconds;
  if (typeof retry !== 'number' || !Number.isInteger(retry) || retry < 0)
    return {
      ok: false,
      problem: `outside the hook protocol: retryAfterSeconds is ${JSON.stringify(retry)}, not an integer ≥ 0`,
    };
  if (retry > MAX_RETRY_AFTER_SECONDS)
    return {
      ok: false,
      problem: `outside the hook protocol: retryAfterSeconds is ${retry}, more than ${MAX_RETRY_AFTER_SECONDS}`,
    };
  return {
    ok: true,
    value: { status: answer.status, message: webhookText(answer.message ?? ''), retryAfterSeconds: retry },
  };
}

/**
 * What an HTTP answer means under the protocol. Anything outside it (not JSON, a status
 * other than Success or Failure, a retryAfterSeconds that is not an integer ≥ 0, a
 * message that is not a string) is an Error, retried after a back-off, with a message
 * saying what was wrong. Of an answer, only its `message` is kept.
 */
export function parseHookAnswer(where: string, status: number, body: string): WebhookAnswer {
  if (status < 200 || status >= 300) {
    return {
      outcome: 'Error',
      message: `${where} answered HTTP ${status}: ${excerpt(body)}`,
      retryAfterMs: 0,
    };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return {
      outcome: 'Error',
      message: `${where} answered with a body that is not JSON: ${excerpt(body)}`,
      retryAfterMs: 0,
    };
  }
  const read = readAnswer(parsed);
  if (!read.ok) return { outcome: 'Error', message: `${where} answered ${read.problem}`, retryAfterMs: 0 };
  const { message, retryAfterSeconds } = read.value;
  if (read.value.status === 'Failure')
    return { outcome: 'Failure', message: message || `${where} answered Failure`, retryAfterMs: 0 };
  return retryAfterSeconds > 0
    ? {
        outcome: 'NotYet',
        message: message || `${where} is not done yet`,
        retryAfterMs: retryAfterSeconds * 1000,
      }
    : { outcome: 'Success', message: message || `${where} answered Success`, retryAfterMs: 0 };
}
