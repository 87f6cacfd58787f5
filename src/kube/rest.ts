// A plain JSON client for the Kubernetes REST API, authenticated from a kubeconfig.
//
// @kubernetes/client-node's typed APIs serialise through generated models, which drop
// keys they do not know under their JSON names (a CRD schema's
// `x-kubernetes-validations`, for one) and cannot speak to arbitrary custom resources.
// Anything that must send objects exactly as written uses this instead.
import { createHash, randomUUID } from 'node:crypto';
import type { ClientRequest, IncomingMessage } from 'node:http';
import { request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest, type RequestOptions } from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';

/** Idle connections are closed after this long: before kube-apiserver closes them (after 90 s). */
const IDLE_CONNECTION_MS = 30_000;

/** A refusal from the API server, carrying its Status (reason, message, details). */
export class KubeApiError extends Error {
  override readonly name = 'KubeApiError';
  readonly code: number;
  readonly reason: string;
  readonly status: Record<string, unknown>;

  constructor(method: string, path: string, code: number, status: Record<string, unknown>) {
    const message = typeof status.message === 'string' ? status.message : JSON.stringify(status);
    super(`${method} ${path}: ${String(code)} ${message}`);
    this.code = code;
    this.reason = typeof status.reason === 'string' ? status.reason : '';
    this.status = status;
  }

  /** The API server's own message, without the request line. */
  get serverMessage(): string {
    return typeof this.status.message === 'string' ? this.status.message : '';
  }
}

export interface RestRequest {
  method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  /** Defaults to application/json; use application/apply-patch+yaml for server-side apply. */
  contentType?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export class RestClient {
  readonly kubeConfig: KubeConfig;
  private readonly server: string;
  private pool: { key: string; agent: HttpsAgent } | undefined;

  constructor(kubeConfig: KubeConfig) {
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster; pass --context or fix the file');
    this.kubeConfig = kubeConfig;
    this.server = cluster.server.replace(/\/+$/, '');
  }

  async request<T = unknown>(path: string, req: RestRequest = {}): Promise<T> {
    const method = req.method ?? 'GET';
    const url = new URL(this.server + path);
    for (const [k, v] of Object.entries(req.query ?? {}))
      if (v !== undefined) url.searchParams.set(k, String(v));
    const payload =
      req.body === undefined ? undefined : typeof req.body === 'string' ? req.body : JSON.stringify(req.body);
    const options = await this.options(url, {
      method,
      headers: {
        Accept: 'application/json',
        ...(payload !== undefined ? { 'Content-Type': req.contentType ?? 'application/json' } : {}),
        ...req.headers,
      },
      ...(req.signal ? { signal: req.signal } : {}),
    });
    const send = (retried: boolean) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const r = this.send(url, options, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
          res.on('error', reject);
        });
        r.on('error', (error: NodeJS.ErrnoException) => {
          // A kept-alive connection the server closed as we reused it: the request never
          // reached it. Reads are sent again on a new connection; writes are not (never twice).
          if (r.reusedSocket && error.code === 'ECONNRESET' && method === 'GET' && !retried) {
            send(true).then(resolve, reject);
          } else reject(error);
        });
        r.end(payload);
      });
    const { status, text } = await send(false);
    const parsed = parse(text);
    if (status < 200 || status >= 300) {
      const body =
        parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : { message: text };
      throw new KubeApiError(method, url.pathname, status, body);
    }
    return parsed as T;
  }

  private send(url: URL, options: RequestOptions, onResponse: (res: IncomingMessage) => void): ClientRequest {
    return (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, options, onResponse);
  }

  /**
   * The kubeconfig's credentials on a request, over a connection kept open between requests
   * as client-go does: client-node's agent closes each connection after one request, and a
   * TLS handshake per request cost three times the request (9.4 ms against 3.0 ms for a GET
   * here). Credentials that change (a client certificate from an exec plugin, renewed) get
   * a new pool; the old one's idle connections close on their own. Behind a proxy the
   * kubeconfig's proxy agent is used as it is.
   */
  private async options(url: URL, base: RequestOptions): Promise<RequestOptions> {
    const options = { ...base };
    await this.kubeConfig.applyToHTTPSOptions(options);
    if (url.protocol !== 'https:' || this.kubeConfig.getCurrentCluster()?.proxyUrl) return options;
    const tls = {
      ca: options.ca,
      cert: options.cert,
      key: options.key,
      pfx: options.pfx,
      passphrase: options.passphrase,
      servername: options.servername,
      ...(options.rejectUnauthorized !== undefined ? { rejectUnauthorized: options.rejectUnauthorized } : {}),
    };
    const key = fingerprint(tls);
    if (this.pool?.key !== key) {
      this.pool = { key, agent: new HttpsAgent({ ...tls, keepAlive: true, timeout: IDLE_CONNECTION_MS }) };
    }
    options.agent = this.pool.agent;
    return options;
  }

  /**
   * Streams a watch: calls `onEvent` for every event until the server ends the stream
   * (resolves) or the connection fails or `signal` aborts (rejects). A watch the server
   * refuses (e.g. 410 Gone) rejects with a KubeApiError. `onOpen` is called once the
   * server has accepted the watch, before any event: a sign that the server is there even
   * when nothing changes.
   */
  async watch(
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (event: WatchEvent) => void,
    signal?: AbortSignal,
    onOpen?: () => void,
  ): Promise<void> {
    const url = new URL(this.server + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    url.searchParams.set('watch', 'true');
    const options = await this.options(url, {
      method: 'GET',
      headers: { Accept: 'application/json' },
      ...(signal ? { signal } : {}),
    });
    await new Promise<void>((resolve, reject) => {
      const r = this.send(url, options, (res) => {
        res.setEncoding('utf8');
        let buffer = '';
        if ((res.statusCode ?? 0) >= 300) {
          res.on('data', (chunk: string) => (buffer += chunk));
          res.on('end', () => {
            const body = parse(buffer);
            reject(
              new KubeApiError(
                'WATCH',
                url.pathname,
                res.statusCode ?? 0,
                typeof body === 'object' && body ? (body as Record<string, unknown>) : { message: buffer },
              ),
            );
          });
          return;
        }
        onOpen?.();
        res.on('data', (chunk: string) => {
          buffer += chunk;
          let newline: number;
          while ((newline = buffer.indexOf('\n')) >= 0) {
            const line = buffer.slice(0, newline).trim();
            buffer = buffer.slice(newline + 1);
            if (!line) continue;
            try {
              onEvent(JSON.parse(line) as WatchEvent);
            } catch (error) {
              r.destroy(error instanceof Error ? error : new Error(String(error)));
              return;
            }
          }
        });
        res.on('end', () => resolve());
        res.on('error', reject);
        res.on('aborted', () => reject(new Error(`watch ${url.pathname} aborted by the server`)));
      });
      r.on('error', reject);
      r.end();
    });
  }

  /** Server-side apply of one object (JSON is valid YAML), owned by `fieldManager`. */
  async apply<T = unknown>(path: string, object: unknown, fieldManager: string, force = true): Promise<T> {
    return this.request<T>(path, {
      method: 'PATCH',
      body: object,
      contentType: 'application/apply-patch+yaml',
      query: { fieldManager, force },
    });
  }
}

/** Objects other than Buffers (a KeyObject, say) count as the same only when they are the same object. */
const identities = new WeakMap<object, string>();
function identityOf(object: object): string {
  let id = identities.get(object);
  if (!id) identities.set(object, (id = randomUUID()));
  return id;
}

/** A digest of connection options (strings, Buffers, lists of them, flags), to tell pools apart. */
function fingerprint(values: Record<string, unknown>): string {
  const hash = createHash('sha256');
  for (const [name, value] of Object.entries(values)) {
    for (const part of [value].flat()) {
      hash.update(`${name}\0`);
      if (typeof part === 'string' || Buffer.isBuffer(part)) hash.update(part);
      else if (typeof part === 'boolean' || typeof part === 'number') hash.update(String(part));
      else if (typeof part === 'object' && part !== null) hash.update(identityOf(part));
      hash.update('\0');
    }
  }
  return hash.digest('hex');
}

export interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: Record<string, unknown>;
}

function parse(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
