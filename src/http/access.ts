// Every authenticated route of the /v1 API goes through here: who is calling
// (TokenReview), whether they are within their rate, may they (SubjectAccessReview),
// and how many long-running requests they hold open. Refusals become replies with the
// headers a client needs (WWW-Authenticate, Retry-After), counted by route and status.
import type { ServerResponse } from 'node:http';
import { Counter } from 'prom-client';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { errorMessage } from '../wait.ts';
import { ApiError, errorReply } from './api-error.ts';
import { Authenticator, Authorizer, type AuthOptions, type Caller, type ResourceAttributes } from './auth.ts';
import { ConcurrencyLimiter, RateLimiter, type RateLimit } from './rate-limit.ts';
import { HttpError, type Handler, type Reply, type Request } from './router.ts';

export interface ApiLimits {
  /** Largest request body accepted (413 beyond). Default 64 KiB. */
  bodyBytes: number;
  /** Requests per authenticated caller. Default 20/s, bursts of 40. */
  requests: RateLimit;
  /** NodeActions created per caller. Default one every 2s, bursts of 10. */
  creations: RateLimit;
  /** Failed authentications per client address, before it is refused without asking the API server. */
  authenticationFailures: RateLimit;
  /** Long-polls and event streams open at once per caller. Default 8. */
  streamsPerCaller: number;
  /** Longest ?wait= of a long-poll. Default 60s. */
  maxWaitMs: number;
}

export const DEFAULT_LIMITS: ApiLimits = {
  bodyBytes: 64 * 1024,
  requests: { perSecond: 20, burst: 40 },
  creations: { perSecond: 0.5, burst: 10 },
  authenticationFailures: { perSecond: 2, burst: 20 },
  streamsPerCaller: 8,
  maxWaitMs: 60_000,
};

export type AuthCacheOptions = Pick<
  AuthOptions,
  'authenticatedTtlMs' | 'unauthenticatedTtlMs' | 'allowedTtlMs' | 'deniedTtlMs' | 'maxEntries'
>;

export interface AccessOptions {
  rest: RestClient;
  log: Logger;
  metrics?: Metrics;
  limits?: Partial<ApiLimits>;
  auth?: AuthCacheOptions;
}

export type ApiHandler = (req: Request, res: ServerResponse) => Promise<Reply | undefined>;

function tooMany(retryAfterSeconds: number, what: string): ApiError {
  return new ApiError(429, `${what}; retry in ${String(retryAfterSeconds)}s`, {
    headers: { 'Retry-After': String(retryAfterSeconds) },
  });
}

export class Access {
  readonly limits: ApiLimits;
  readonly authenticator: Authenticator;
  readonly authorizer: Authorizer;
  private readonly requests: RateLimiter;
  private readonly creations: RateLimiter;
  private readonly failures: RateLimiter;
  private readonly streams: ConcurrencyLimiter;
  private readonly log: Logger;
  private readonly counter: Counter<'route' | 'code'> | undefined;

  constructor(options: AccessOptions) {
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.log = options.log;
    const auth = { rest: options.rest, log: options.log, ...options.auth };
    this.authenticator = new Authenticator(auth);
    this.authorizer = new Authorizer(auth);
    this.requests = new RateLimiter(this.limits.requests);
    this.creations = new RateLimiter(this.limits.creations);
    this.failures = new RateLimiter(this.limits.authenticationFailures);
    this.streams = new ConcurrencyLimiter(this.limits.streamsPerCaller);
    const registry = options.metrics?.registry;
    this.counter = registry
      ? ((registry.getSingleMetric('gatehouse_http_api_requests_total') as
          Counter<'route' | 'code'> | undefined) ??
        new Counter({
          name: 'gatehouse_http_api_requests_total',
          help: 'Requests to the authenticated /v1 HTTP API, by route and status code.',
          labelNames: ['route', 'code'],
          registers: [registry],
        }))
      : undefined;
  }

  /** The authenticated caller, within its request rate; throws 401, 429 or 503. */
  async caller(req: Request): Promise<Caller> {
    const address = req.raw.socket.remoteAddress ?? 'unknown';
    const failing = this.failures.peek(`addr:${address}`);
    if (!failing.ok)
      throw tooMany(failing.retryAfterSeconds, 'too many failed authentications from this address');
    let caller: Caller;
    try {
      caller = await this.authenticator.authenticate(req.raw.headers.authorization);
    } catch (error) {
      if (error instanceof HttpError && error.status === 401) this.failures.take(`addr:${address}`);
      throw error;
    }
    const admission = this.requests.take(`user:${caller.username}`);
    if (!admission.ok)
      throw tooMany(admission.retryAfterSeconds, `${caller.username} is over its request rate`);
    return caller;
  }

  async authorize(caller: Caller, attributes: ResourceAttributes, role: string): Promise<void> {
    await this.authorizer.require(caller, attributes, role);
  }

  /** Takes a creation from the caller's budget; throws 429 when it is spent. */
  takeCreation(caller: Caller): void {
    const admission = this.creations.take(`user:${caller.username}`);
    if (!admission.ok) {
      throw tooMany(
        admission.retryAfterSeconds,
        `${caller.username} is creating NodeActions faster than allowed`,
      );
    }
  }

  /** Holds one of the caller's long-running request slots until the returned function is called. */
  openStream(caller: Caller): () => void {
    const release = this.streams.acquire(`user:${caller.username}`);
    if (!release) {
      throw tooMany(
        1,
        `${caller.username} already has ${String(this.limits.streamsPerCaller)} long-polls or event streams open`,
      );
    }
    return release;
  }

  /**
   * Wraps a handler: refusals (ApiError, HttpError) become replies with their headers
   * and details; anything else is logged and answered 500 without internals. Either
   * way the request is counted under `route`.
   */
  guard(route: string, handler: ApiHandler): Handler {
    return async (req, res) => {
      let reply: Reply | undefined;
      try {
        reply = await handler(req, res);
      } catch (error) {
        if (error instanceof HttpError) reply = errorReply(error);
        else {
          this.log.error({ err: errorMessage(error), route, url: req.url.pathname }, 'request failed');
          reply = { status: 500, body: { error: 'internal error; see the controller log' } };
        }
      }
      this.counter?.inc({ route, code: String(reply?.status ?? res.statusCode) });
      return reply;
    };
  }
}
