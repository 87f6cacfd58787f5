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
import { createSecureContext } from 'node:tls';
import { ListDecoder, type ListDecoderOptions } from './list-decoder.ts';
import { PROTOBUF_CONTENT_TYPE, ProtobufListDecoder, decodeStatus, type ProtobufList } from './protobuf.ts';
import type { KubeCredentials } from './kubeconfig.ts';

/** Idle connections are closed after this long: before kube-apiserver closes them (after 90 s). */
const IDLE_CONNECTION_MS = 30_000;

/**
 * Requests in flight at once (watches apart): each needs a TLS connection of its own, and
 * each connection costs ~80 KiB of native memory on this side. A controller starting
 * with 1,000 checks probes them all within a second; unbounded, that opened hundreds of
 * connections at once (docs/decisions.md, "What the controller caches"). The API server
 * answers 32 at a time about as fast as it answers hundreds, so the rest wait in line.
 */
export const MAX_REQUESTS_IN_FLIGHT = 32;

interface Pool {
  key: string;
  /** Short requests, at most MAX_REQUESTS_IN_FLIGHT connections. */
  requests: HttpsAgent;
  /**
   * The informers' watches and list pages: a watch holds its connection for minutes, and a
   * cache's sync should not wait behind a thousand probes. There are as many at once as
   * there are informers (and followed objects), so this pool needs no bound of its own.
   */
  streams: HttpsAgent;
}

type PoolName = 'requests' | 'streams';

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
  /**
   * A read (GET) that may share an identical one already in flight, if that one was sent
   * at or after this moment (performance.now()): what it answers is then no older than
   * the caller asked for. The ten checks of one gate that list the same Nodes make one
   * request, not ten. The shared answer is the same object for every caller: read-only.
   */
  sharedSince?: number;
}

/** A read in flight that later identical reads may join (RestRequest.sharedSince). */
interface SharedRead {
  sentAt: number;
  result: Promise<unknown>;
  /** Callers still waiting; the last one to give up aborts the request. */
  waiting: number;
  abort: AbortController;
}

export class RestClient {
  readonly kubeConfig: KubeCredentials;
  private readonly server: string;
  private pool: Pool | undefined;

  constructor(kubeConfig: KubeCredentials) {
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster; pass --context or fix the file');
    this.kubeConfig = kubeConfig;
    this.server = cluster.server.replace(/\/+$/, '');
  }

  private readonly shared = new Map<string, SharedRead>();

  async request<T = unknown>(path: string, req: RestRequest = {}): Promise<T> {
    if (req.sharedSince !== undefined && (req.method ?? 'GET') === 'GET' && req.body === undefined)
      return this.sharedRequest<T>(path, req, req.sharedSince);
    return this.sendRequest<T>(path, req);
  }

  /** A read joined to an identical one sent since `since`, or sent now for others to join. */
  private async sharedRequest<T>(path: string, req: RestRequest, since: number): Promise<T> {
    const { signal, sharedSince: _, ...rest } = req;
    signal?.throwIfAborted();
    const key = JSON.stringify([path, rest.query ?? {}, rest.headers ?? {}]);
    let read = this.shared.get(key);
    if (!read || read.sentAt < since) {
      const abort = new AbortController();
      const entry: SharedRead = {
        sentAt: performance.now(),
        waiting: 0,
        abort,
        result: this.sendRequest(path, { ...rest, signal: abort.signal }),
      };
      read = entry;
      this.shared.set(key, entry);
      const done = () => {
        if (this.shared.get(key) === entry) this.shared.delete(key);
      };
      entry.result.then(done, done);
    }
    const joined = read;
    joined.waiting++;
    if (!signal) return (await joined.result) as T;
    // Each caller stops waiting on its own signal; the request goes on while anyone waits.
    let onAbort!: () => void;
    const aborted = new Promise<never>((_resolve, reject) => {
      onAbort = () => {
        if (--joined.waiting === 0) joined.abort.abort(signal.reason);
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      return (await Promise.race([joined.result, aborted])) as T;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  private async sendRequest<T>(path: string, req: RestRequest): Promise<T> {
    const method = req.method ?? 'GET';
    const { status, body: text } = await this.exchange(path, req, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      return new Promise<string>((resolve, reject) => {
        res.on('end', () => {
          resolve(text);
          text = ''; // not held by a connection that outlives the request (see listPage)
        });
        res.on('error', reject);
      });
    });
    const parsed = parse(text);
    if (status < 200 || status >= 300) {
      const body =
        parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : { message: text };
      throw new KubeApiError(method, new URL(this.server + path).pathname, status, body);
    }
    return parsed as T;
  }

  /**
   * One page of a list (GET of a collection), decoded as it arrives (list-decoder.ts):
   * `onItem` gets each item as soon as its bytes are in, so that a page of big objects is
   * never held whole. Resolves with the list's other fields (its metadata: resourceVersion,
   * continue). A refusal rejects with a KubeApiError, as request() does; a malformed body,
   * or an exception from `onItem`, rejects with that error and closes the connection.
   * Pages travel with the watches, not in line behind requests (see Pool). `omit` names
   * members of each item left out undecoded; `protobuf` asks for the page in Kubernetes'
   * protobuf encoding (ListPageOptions).
   */
  async listPage(
    path: string,
    req: Pick<RestRequest, 'query' | 'headers' | 'signal'>,
    onItem: (item: unknown) => void,
    options: ListPageOptions = {},
  ): Promise<ListFields> {
    // The decoder reaches the caller through `sink` alone, let go of once the page is read:
    // Node keeps the last request made on a kept-alive connection reachable from the
    // connection's listeners, and through it this page's closures. Holding `onItem` there
    // held an informer's whole relist (every Node as listed, 16 MiB at 5,000 Nodes) for as
    // long as the connection lived, beside the newer Nodes the watch had brought since.
    // The other callbacks likewise: a closure holds whatever its neighbours in the caller hold.
    let sink: { onItem: typeof onItem; options: ListPageOptions } | undefined = { onItem, options };
    try {
      return await this.readPage(path, req, (item) => sink?.onItem(item), {
        ...options,
        ...(options.onEncoding ? { onEncoding: (encoding) => sink?.options.onEncoding?.(encoding) } : {}),
      });
    } finally {
      sink = undefined;
    }
  }

  private async readPage(
    path: string,
    req: Pick<RestRequest, 'query' | 'headers' | 'signal'>,
    onItem: (item: unknown) => void,
    { protobuf, onEncoding, ...options }: ListPageOptions,
  ): Promise<ListFields> {
    const asked = protobuf
      ? { ...req, headers: { Accept: `${PROTOBUF_CONTENT_TYPE}, application/json`, ...req.headers } }
      : req;
    const { status, body } = await this.exchange<{
      text?: string;
      status?: Record<string, unknown>;
      fields?: ListFields;
    }>(
      path,
      asked,
      (res) => {
        // The server answers in either encoding it was offered, refusals (a Status) too.
        const isProtobuf = mediaType(res.headers['content-type']) === PROTOBUF_CONTENT_TYPE;
        if ((res.statusCode ?? 0) < 200 || (res.statusCode ?? 0) >= 300) {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          return new Promise((resolve, reject) => {
            res.on('end', () => {
              const bytes = Buffer.concat(chunks);
              resolve(isProtobuf ? { status: decodeStatus(bytes) } : { text: bytes.toString('utf8') });
            });
            res.on('error', reject);
          });
        }
        const decoder: { write(chunk: Buffer): void; end(): unknown } =
          isProtobuf && protobuf
            ? new ProtobufListDecoder(protobuf, onItem, options)
            : new ListDecoder(onItem, options);
        onEncoding?.(isProtobuf && protobuf ? 'protobuf' : 'json');
        return new Promise((resolve, reject) => {
          res.on('data', (chunk: Buffer) => {
            try {
              decoder.write(chunk);
            } catch (error) {
              res.destroy(error instanceof Error ? error : new Error(String(error)));
            }
          });
          res.on('end', () => {
            try {
              resolve({ fields: decoder.end() as ListFields });
            } catch (error) {
              reject(error instanceof Error ? error : new Error(String(error)));
            }
          });
          res.on('error', reject);
          res.on('aborted', () => reject(new Error(`list ${path} aborted by the server`)));
        });
      },
      'streams',
    );
    if (body.fields) return body.fields;
    const text = body.text ?? '';
    const parsed = body.status ?? parse(text);
    throw new KubeApiError(
      'GET',
      new URL(this.server + path).pathname,
      status,
      parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : { message: text },
    );
  }

  /**
   * Sends a request and hands its response to `read`, which resolves once the body has been
   * read. A kept-alive connection the server closed as we reused it never got the request:
   * a read is sent again on a new connection, a write never is (never twice).
   */
  private async exchange<R>(
    path: string,
    req: RestRequest,
    read: (res: IncomingMessage) => Promise<R>,
    pool: PoolName = 'requests',
  ): Promise<{ status: number; body: R }> {
    const method = req.method ?? 'GET';
    const url = new URL(this.server + path);
    for (const [k, v] of Object.entries(req.query ?? {}))
      if (v !== undefined) url.searchParams.set(k, String(v));
    const payload =
      req.body === undefined ? undefined : typeof req.body === 'string' ? req.body : JSON.stringify(req.body);
    const options = await this.options(
      url,
      {
        method,
        headers: {
          Accept: 'application/json',
          // Content-Length always: Node frames no body of a DELETE by itself, so its
          // DeleteOptions (propagationPolicy, preconditions) went unread by the API server
          // and were taken, on a kept-alive connection, for the start of the next request.
          ...(payload !== undefined
            ? {
                'Content-Type': req.contentType ?? 'application/json',
                'Content-Length': String(Buffer.byteLength(payload)),
              }
            : {}),
          ...req.headers,
        },
        ...(req.signal ? { signal: req.signal } : {}),
      },
      pool,
    );
    const send = (retried: boolean) =>
      new Promise<{ status: number; body: R }>((resolve, reject) => {
        let responded = false;
        const r = this.send(url, options, (res) => {
          responded = true;
          read(res).then((body) => resolve({ status: res.statusCode ?? 0, body }), reject);
        });
        r.on('error', (error: NodeJS.ErrnoException) => {
          if (!responded && r.reusedSocket && error.code === 'ECONNRESET' && method === 'GET' && !retried) {
            send(true).then(resolve, reject);
          } else reject(error);
        });
        r.end(payload);
      });
    return send(false);
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
  private async options(url: URL, base: RequestOptions, use: PoolName): Promise<RequestOptions> {
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
      // One TLS context for every connection of the pool: otherwise each connection parses
      // the CA, certificate and key again into a context of its own.
      const secureContext = createSecureContext(tls);
      const agent = (maxSockets: number) =>
        new HttpsAgent({ ...tls, secureContext, keepAlive: true, timeout: IDLE_CONNECTION_MS, maxSockets });
      this.pool = { key, requests: agent(MAX_REQUESTS_IN_FLIGHT), streams: agent(Infinity) };
    }
    options.agent = this.pool[use];
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
    const options = await this.options(
      url,
      { method: 'GET', headers: { Accept: 'application/json' }, ...(signal ? { signal } : {}) },
      'streams',
    );
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

/** How listPage reads a page. */
export interface ListPageOptions extends ListDecoderOptions {
  /**
   * Ask for the page in Kubernetes' protobuf encoding, read by this list's tables
   * (protobuf.ts), into the same objects as its JSON: faster to decode, and smaller. The
   * server may answer JSON all the same (a kind it has no protobuf for), read as JSON.
   * A field the tables lack rejects with a ProtobufUnknownFieldError.
   */
  protobuf?: ProtobufList;
  /** Told which encoding the server answered in, before the first item. */
  onEncoding?: (encoding: 'json' | 'protobuf') => void;
}

/** The media type of a Content-Type header, without its parameters. */
function mediaType(header: string | undefined): string {
  return (header ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

/** A list's fields besides its items. */
export interface ListFields {
  kind?: string;
  apiVersion?: string;
  metadata?: { resourceVersion?: string; continue?: string; remainingItemCount?: number };
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
