// Who is calling, and may they: bearer tokens are authenticated by the API server
// (TokenReview) and callers authorised by it (SubjectAccessReview), so the HTTP API
// grants exactly what RBAC grants — the same roles (gatehouse:requester,
// gatehouse:bypass) as for kubectl.
//
// Both answers are cached briefly (see docs/decisions.md, "HTTP API authentication"):
// a client polling an action does not cost the API server two reviews per request,
// and a revoked permission stops working within seconds.
import { createHash } from 'node:crypto';
import { GROUP } from '../api/common.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';
import { ApiError } from './api-error.ts';

/** An authenticated caller, as the API server knows it. */
export interface Caller {
  username: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
}

export interface ResourceAttributes {
  verb: string;
  resource: string;
  group?: string;
  name?: string;
  namespace?: string;
  subresource?: string;
}

const CHALLENGE = 'Bearer realm="gatehouse"';

function unauthenticated(message: string, invalidToken: boolean): ApiError {
  return new ApiError(401, message, {
    headers: { 'WWW-Authenticate': invalidToken ? `${CHALLENGE}, error="invalid_token"` : CHALLENGE },
  });
}

/** The API server could not answer: not the caller's fault, and worth retrying. */
export function apiServerUnavailable(what: string, error: unknown): ApiError {
  return new ApiError(
    503,
    `cannot ${what}: the Kubernetes API server did not answer (${errorMessage(error)}); retry shortly`,
    { headers: { 'Retry-After': '2' } },
  );
}

// RFC 6750 b64token. Anything else cannot be a Kubernetes token and is refused without
// asking the API server.
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;
const MAX_TOKEN_LENGTH = 8192;

/** The token of an `Authorization: Bearer` header; throws 401 with what to send instead. */
export function bearerToken(header: string | undefined): string {
  if (header === undefined || header.trim() === '') {
    throw unauthenticated(
      'authentication required: send "Authorization: Bearer <token>" with a Kubernetes token (e.g. from kubectl create token <serviceaccount>)',
      false,
    );
  }
  const match = BEARER.exec(header);
  if (!match?.[1]) {
    throw unauthenticated(
      'the Authorization header must be "Bearer <token>", with a Kubernetes token made of letters, digits and -._~+/',
      true,
    );
  }
  if (match[1].length > MAX_TOKEN_LENGTH) {
    throw unauthenticated(`the bearer token is longer than ${String(MAX_TOKEN_LENGTH)} characters`, true);
  }
  return match[1];
}

interface Cached<T> {
  value: T;
  expiresAt: number;
}

/** A small time-bounded cache with a size bound (oldest entries go first). */
class TtlCache<T> {
  private readonly entries = new Map<string, Cached<T>>();
  private readonly maxEntries: number;

  constructor(maxEntries: number) {
    this.maxEntries = maxEntries;
  }

  get(key: string, now: number): T | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: T, ttlMs: number, now: number): void {
    if (ttlMs <= 0) return;
    this.entries.delete(key);
    while (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (oldest.done) break;
      this.entries.delete(oldest.value);
    }
    this.entries.set(key, { value, expiresAt: now + ttlMs });
  }

  clear(): void {
    this.entries.clear();
  }
}

export interface AuthOptions {
  rest: RestClient;
  log: Logger;
  /** How long an accepted token is trusted without asking again. Default 10s. */
  authenticatedTtlMs?: number;
  /** How long a refused token stays refused. Default 2s. */
  unauthenticatedTtlMs?: number;
  /** How long an allowed (caller, verb, object) stays allowed. Default 10s. */
  allowedTtlMs?: number;
  /** How long a denial stands, so a fresh RoleBinding takes effect quickly. Default 2s. */
  deniedTtlMs?: number;
  maxEntries?: number;
  now?: () => number;
}

type ResolvedAuthOptions = Required<Omit<AuthOptions, 'rest' | 'log'>> & Pick<AuthOptions, 'rest' | 'log'>;

/** The cache lifetimes and limits both reviewers share, unless the caller sets them. */
function withDefaults(options: AuthOptions): ResolvedAuthOptions {
  return {
    authenticatedTtlMs: 10_000,
    unauthenticatedTtlMs: 2_000,
    allowedTtlMs: 10_000,
    deniedTtlMs: 2_000,
    maxEntries: 4096,
    now: () => performance.now(),
    ...options,
  };
}

type Review = { authenticated: true; caller: Caller } | { authenticated: false; error: string };

interface TokenReviewStatus {
  authenticated?: boolean;
  error?: string;
  user?: { username?: string; uid?: string; groups?: string[]; extra?: Record<string, string[]> };
}

export class Authenticator {
  private readonly options: ResolvedAuthOptions;
  private readonly cache: TtlCache<Review>;
  /** Concurrent requests with one token share one TokenReview. */
  private readonly inflight = new Map<string, Promise<Review>>();
  readonly stats = { reviews: 0, cacheHits: 0 };

  constructor(options: AuthOptions) {
    this.options = withDefaults(options);
    this.cache = new TtlCache(this.options.maxEntries);
  }

  /** The caller behind an Authorization header; throws a 401 (or 503) HttpError otherwise. */
  async authenticate(header: string | undefined): Promise<Caller> {
    const token = bearerToken(header);
    // Tokens are credentials: only their digest is ever kept.
    const key = createHash('sha256').update(token).digest('base64url');
    let review = this.cache.get(key, this.options.now());
    if (review) this.stats.cacheHits++;
    else {
      let pending = this.inflight.get(key);
      if (!pending) {
        pending = this.review(token).finally(() => this.inflight.delete(key));
        this.inflight.set(key, pending);
      }
      review = await pending;
      this.cache.set(
        key,
        review,
        review.authenticated ? this.options.authenticatedTtlMs : this.options.unauthenticatedTtlMs,
        this.options.now(),
      );
    }
    if (!review.authenticated) {
      throw unauthenticated(
        `the Kubernetes API server did not accept the bearer token${review.error ? `: ${review.error}` : ''}; get a fresh one (e.g. kubectl create token <serviceaccount>)`,
        true,
      );
    }
    return review.caller;
  }

  private async review(token: string): Promise<Review> {
    this.stats.reviews++;
    let status: TokenReviewStatus | undefined;
    try {
      const answer = await this.options.rest.request<{ status?: TokenReviewStatus }>(
        '/apis/authentication.k8s.io/v1/tokenreviews',
        {
          method: 'POST',
          body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } },
        },
      );
      status = answer.status;
    } catch (error) {
      // A token the API server cannot even parse is refused with a 4xx status of its own
      // on some versions; anything else (unreachable, 5xx) is not the caller's fault.
      if (error instanceof KubeApiError && error.code >= 400 && error.code < 500 && error.code !== 429) {
        return { authenticated: false, error: error.serverMessage };
      }
      this.options.log.warn({ err: errorMessage(error) }, 'TokenReview failed');
      throw apiServerUnavailable('authenticate the request', error);
    }
    const username = status?.user?.username;
    if (status?.authenticated !== true || !username) {
      return { authenticated: false, error: status?.error ?? '' };
    }
    const user = status.user ?? {};
    return {
      authenticated: true,
      caller: {
        username,
        groups: user.groups ?? [],
        ...(user.uid ? { uid: user.uid } : {}),
        ...(user.extra ? { extra: user.extra } : {}),
      },
    };
  }
}

interface Decision {
  allowed: boolean;
  reason: string;
}

export class Authorizer {
  private readonly options: ResolvedAuthOptions;
  private readonly cache: TtlCache<Decision>;
  private readonly inflight = new Map<string, Promise<Decision>>();
  readonly stats = { reviews: 0, cacheHits: 0 };

  constructor(options: AuthOptions) {
    this.options = withDefaults(options);
    this.cache = new TtlCache(this.options.maxEntries);
  }

  /** Whether RBAC (or whatever authorizes the API server) lets `caller` do this. */
  async decide(caller: Caller, attributes: ResourceAttributes): Promise<Decision> {
    const resourceAttributes = { group: GROUP, ...attributes };
    const key = JSON.stringify([
      caller.username,
      caller.uid,
      caller.groups,
      caller.extra,
      resourceAttributes,
    ]);
    const cached = this.cache.get(key, this.options.now());
    if (cached) {
      this.stats.cacheHits++;
      return cached;
    }
    let pending = this.inflight.get(key);
    if (!pending) {
      pending = this.review(caller, resourceAttributes).finally(() => this.inflight.delete(key));
      this.inflight.set(key, pending);
    }
    const decision = await pending;
    this.cache.set(
      key,
      decision,
      decision.allowed ? this.options.allowedTtlMs : this.options.deniedTtlMs,
      this.options.now(),
    );
    return decision;
  }

  /** Throws a 403 naming who, what, and the role that would grant it. */
  async require(caller: Caller, attributes: ResourceAttributes, role: string): Promise<void> {
    const decision = await this.decide(caller, attributes);
    if (decision.allowed) return;
    const object = `${attributes.resource}.${attributes.group ?? GROUP}${attributes.name ? ` "${attributes.name}"` : ''}`;
    throw new ApiError(
      403,
      `${caller.username} may not ${attributes.verb} ${object}${decision.reason ? ` (${decision.reason})` : ''}; ask an administrator for the ClusterRole ${role}`,
    );
  }

  private async review(caller: Caller, resourceAttributes: ResourceAttributes): Promise<Decision> {
    this.stats.reviews++;
    try {
      const answer = await this.options.rest.request<{
        status?: { allowed?: boolean; denied?: boolean; reason?: string; evaluationError?: string };
      }>('/apis/authorization.k8s.io/v1/subjectaccessreviews', {
        method: 'POST',
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: {
            user: caller.username,
            groups: caller.groups,
            ...(caller.uid ? { uid: caller.uid } : {}),
            ...(caller.extra ? { extra: caller.extra } : {}),
            resourceAttributes,
          },
        },
      });
      return { allowed: answer.status?.allowed === true, reason: answer.status?.reason ?? '' };
    } catch (error) {
      this.options.log.warn({ err: errorMessage(error) }, 'SubjectAccessReview failed');
      throw apiServerUnavailable('authorise the request', error);
    }
  }
}
