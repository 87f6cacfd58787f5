// The controller's HTTP server: a small router over node:http. Every answer is JSON
// (or Prometheus text); bad input gets a 4xx that says what to fix, never a 5xx.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';

export interface Request {
  method: string;
  url: URL;
  params: Record<string, string>;
  raw: IncomingMessage;
}

export interface Reply {
  status: number;
  body?: unknown;
  contentType?: string;
  headers?: Record<string, string>;
}

export type Handler = (req: Request, res: ServerResponse) => Promise<Reply | undefined> | Reply | undefined;

interface Route {
  method: string;
  pattern: RegExp;
  keys: string[];
  handler: Handler;
}

export class HttpError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

export class Router {
  private readonly routes: Route[] = [];

  /** `path` may hold `{name}` segments, which arrive decoded in `req.params`. */
  on(method: string, path: string, handler: Handler): this {
    const keys: string[] = [];
    const pattern = new RegExp(
      `^${path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{(\w+)\\?\}/g, (_, key: string) => {
        keys.push(key);
        return '([^/]+)';
      })}$`,
    );
    this.routes.push({ method, pattern, keys, handler });
    return this;
  }

  async handle(raw: IncomingMessage, res: ServerResponse): Promise<Reply | undefined> {
    let url: URL;
    try {
      url = new URL(raw.url ?? '/', 'http://gatehouse.invalid');
    } catch {
      return { status: 400, body: { error: 'the request target is not a valid URL path' } };
    }
    const method = raw.method ?? 'GET';
    let pathMatched = false;
    for (const route of this.routes) {
      const match = route.pattern.exec(url.pathname);
      if (!match) continue;
      pathMatched = true;
      if (route.method !== method && !(route.method === 'GET' && method === 'HEAD')) continue;
      const params: Record<string, string> = {};
      try {
        route.keys.forEach((key, i) => {
          params[key] = decodeURIComponent(match[i + 1] ?? '');
        });
      } catch {
        // A malformed escape (e.g. %zz) is the client's mistake, not a server error.
        return { status: 400, body: { error: `the path ${url.pathname} has a malformed %-escape` } };
      }
      return route.handler({ method, url, params, raw }, res);
    }
    if (pathMatched) {
      const allowed = this.routes.filter((r) => r.pattern.test(url.pathname)).map((r) => r.method);
      return {
        status: 405,
        body: { error: `${method} is not allowed here; use ${allowed.join(' or ')}` },
        headers: { Allow: allowed.join(', ') },
      };
    }
    return { status: 404, body: { error: `no such endpoint: ${url.pathname}` } };
  }
}

function send(res: ServerResponse, reply: Reply, head: boolean): void {
  if (res.headersSent) return;
  // Bodies are objects (sent as JSON) or strings (sent as they are, with their contentType).
  const payload =
    reply.body === undefined
      ? ''
      : typeof reply.body === 'string'
        ? reply.body
        : `${JSON.stringify(reply.body)}\n`;
  res.writeHead(reply.status, {
    'Content-Type': reply.contentType ?? 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(payload),
    'Cache-Control': 'no-store',
    ...reply.headers,
  });
  res.end(head ? undefined : payload);
}

export function startServer(
  router: Router,
  options: { host: string; port: number; log: Logger },
): Promise<Server> {
  const server = createServer((req, res) => {
    router.handle(req, res).then(
      (reply) => {
        if (reply) send(res, reply, req.method === 'HEAD');
      },
      (error: unknown) => {
        if (error instanceof HttpError) {
          send(res, { status: error.status, body: { error: error.message } }, false);
          return;
        }
        // A bug of ours: logged in full, reported without internals, and still not a crash.
        options.log.error({ err: errorMessage(error), url: req.url }, 'request failed');
        send(res, { status: 500, body: { error: 'internal error; see the controller log' } }, false);
      },
    );
  });
  server.keepAliveTimeout = 65_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}

export function serverUrl(server: Server): string {
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${String(address.port)}`;
}
