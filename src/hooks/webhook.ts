// The hook callback protocol (DESIGN.md): POST a HookRequest to a Service in the hook's
// namespace, read {status: Success | Failure, message, retryAfterSeconds}. The shape of
// Cluster API's Runtime SDK lifecycle hooks: Success with retryAfterSeconds > 0 means
// "not yet, ask again".
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { rootCertificates } from 'node:tls';
import { resolveService } from '../checks/service-address.ts';
import { parseDuration } from '../duration.ts';
import type { RestClient } from '../kube/rest.ts';
import { errorMessage } from '../wait.ts';
import { parseHookAnswer, type HookRequest, type WebhookAnswer } from './protocol.ts';
import type { HookObject } from './select.ts';

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
