// The controller's router: method and path (with `{name}` segments) to a handler. Every
// resource module registers its routes on one; server.ts mounts them all and serves it.
import type { IncomingMessage, ServerResponse } from 'node:http';

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
