// A policy's receiver, its URL and signing key read from Secrets in the controller's own
// namespace (the only one it may read Secrets in). Read when a message needs them and
// kept a minute, so a rotated Secret is used within a minute and a burst of messages
// reads each Secret once.
import type { NotificationPolicySpec } from '../api/notification-policy.ts';
import { parseDuration } from '../duration.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import type { Receiver } from './delivery.ts';

/** How long a Secret's value is used before it is read again. */
export const SECRET_CACHE_MS = 60_000;

/** How long a Secret found missing is not read again: every message of a burst would. */
export const MISSING_SECRET_CACHE_MS = 10_000;

/** A Secret that cannot be used: the message says which, and what to do. */
export class SecretMissingError extends Error {}

interface SecretKeyRef {
  name: string;
  key: string;
}

export class SecretReader {
  private readonly cache = new Map<string, { value: string; until: number }>();
  private readonly missing = new Map<string, { error: SecretMissingError; until: number }>();
  private readonly rest: RestClient;
  readonly namespace: string;

  constructor(rest: RestClient, namespace: string) {
    this.rest = rest;
    this.namespace = namespace;
  }

  /** The value of one key, from the cache while it is fresh. */
  async value(ref: SecretKeyRef, field: string): Promise<string> {
    const cacheKey = `${ref.name}\0${ref.key}`;
    const cached = this.cache.get(cacheKey);
    if (cached && cached.until > Date.now()) return cached.value;
    const known = this.missing.get(cacheKey);
    if (known && known.until > Date.now()) throw known.error;
    try {
      const value = await this.read(ref, field);
      this.cache.set(cacheKey, { value, until: Date.now() + SECRET_CACHE_MS });
      this.missing.delete(cacheKey);
      return value;
    } catch (error) {
      if (error instanceof SecretMissingError)
        this.missing.set(cacheKey, { error, until: Date.now() + MISSING_SECRET_CACHE_MS });
      throw error;
    }
  }

  private async read(ref: SecretKeyRef, field: string): Promise<string> {
    const what = `Secret ${this.namespace}/${ref.name} (${field})`;
    let secret: { data?: Record<string, string> };
    try {
      secret = await this.rest.request(
        `/api/v1/namespaces/${encodeURIComponent(this.namespace)}/secrets/${encodeURIComponent(ref.name)}`,
      );
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404)
        throw new SecretMissingError(`${what} does not exist: create it in ${this.namespace}`);
      if (error instanceof KubeApiError && error.code === 403)
        throw new SecretMissingError(`${what} may not be read by the controller: ${error.serverMessage}`);
      throw error;
    }
    const encoded = secret.data?.[ref.key];
    const value = encoded === undefined ? '' : Buffer.from(encoded, 'base64').toString('utf8').trim();
    if (!value) throw new SecretMissingError(`${what} has no key ${ref.key}, or it is empty`);
    return value;
  }

  /** Forget what was read, so that the next message reads the Secrets again (a policy changed). */
  forget(): void {
    this.cache.clear();
    this.missing.clear();
  }

  /** The policy's receiver: its URL and key read from their Secrets where it names them. */
  async receiver(spec: NotificationPolicySpec): Promise<Receiver> {
    const w = spec.webhook;
    const url = w.urlSecretRef ? await this.value(w.urlSecretRef, 'webhook.urlSecretRef') : (w.url ?? '');
    if (!/^https?:\/\//i.test(url))
      throw new SecretMissingError(
        `the webhook URL ${w.urlSecretRef ? `in Secret ${this.namespace}/${w.urlSecretRef.name} key ${w.urlSecretRef.key} ` : ''}is not an http:// or https:// URL`,
      );
    const signingKey = w.signingSecretRef
      ? await this.value(w.signingSecretRef, 'webhook.signingSecretRef')
      : undefined;
    return {
      format: w.format ?? 'Generic',
      url,
      ...(signingKey !== undefined ? { signingKey } : {}),
      timeoutMs: parseDuration(w.timeout ?? '5s'),
    };
  }
}
