// The hook callback protocol (DESIGN.md): POST a HookRequest to a Service in the hook's
// namespace, read {status: Success | Failure, message, retryAfterSeconds}. The shape of
// Cluster API's Runtime SDK lifecycle hooks: Success with retryAfterSeconds > 0 means
// "not yet, ask again".
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { rootCertificates } from 'node:tls';
import { API_VERSION, type Action } from '../api/common.ts';
import type { HookKindName } from '../api/hooks.ts';
import { resolveService } from '../checks/service-address.ts';
import { parseDuration } from '../duration.ts';
import type { RestClient } from '../kube/rest.ts';
import { errorMessage } from '../wait.ts';
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

export interface WebhookCallContext {
  rest: RestClient;
  serviceResolution: 'dns' | 'endpoints';
  /** The controller's own namespace. */
  namespace: string;
  /** The cluster's CA (the service account's ca.crt), trusted next to the system roots. */
  clusterCA?: string;
}

const SERVICE_ACCOUNT_CA = '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt';

/** The cluster CA when running in a pod, else nothing. */
export async function loadClusterCA(): Promise<string | undefined> {
  return readFile(SERVICE_ACCOUNT_CA, 'utf8').catch(() => undefined);
}

/** Calls a webhook hook once. Never throws: a call that gets no answer is an Error outcome. */
export async function callWebhook(
  hook: HookObject,
  request: HookRequest,
  context: WebhookCallContext,
): Promise<WebhookAnswer> {
  const webhook = hook.spec.webhook;
  if (!webhook)
    throw new Error(`${hook.kind} ${hook.metadata.namespace}/${hook.metadata.name} has no webhook`);
  const port = webhook.service.port ?? 443;
  const path = webhook.path ?? '/';
  const https = (webhook.scheme ?? 'HTTPS') === 'HTTPS';
  const timeoutMs = parseDuration(webhook.requestTimeout ?? '10s');
  const signal = AbortSignal.timeout(timeoutMs);
  const service = { name: webhook.service.name, namespace: hook.metadata.namespace };
  const url = `${https ? 'https' : 'http'}://${service.name}.${service.namespace}.svc:${port}${path}`;
  try {
    const address = await resolveService(service, port, {
      rest: context.rest,
      signal,
      serviceResolution: context.serviceResolution,
      namespace: context.namespace,
    });
    const where = address.via ? `${url} (via ${address.via})` : url;
    const payload = JSON.stringify(request);
    const ca = webhook.caBundle
      ? Buffer.from(webhook.caBundle, 'base64').toString('utf8')
      : context.clusterCA
        ? [...rootCertificates, context.clusterCA]
        : undefined;
    const options: RequestOptions = {
      method: 'POST',
      hostname: address.host.replace(/^\[|\]$/g, ''),
      port: address.port,
      path,
      headers: {
        Host: `${address.serviceHost}:${port}`,
        'Content-Type': 'application/json',
        Accept: 'application/json',
        'Content-Length': Buffer.byteLength(payload),
        'User-Agent': 'gatehouse-hook',
      },
      signal,
      ...(https ? { servername: address.serviceHost, ...(ca ? { ca } : {}) } : {}),
    };
    const send = https ? httpsRequest : httpRequest;
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = send(options, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (body.length < 65536) body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(payload);
    });
    return parseHookAnswer(`POST ${where}`, status, body);
  } catch (error) {
    const reason = signal.aborted
      ? `no answer within ${webhook.requestTimeout ?? '10s'}`
      : errorMessage(error);
    return { outcome: 'Error', message: `POST ${url}: ${reason}`, retryAfterMs: 0 };
  }
}
