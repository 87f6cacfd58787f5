// The CLI talking to the controller's HTTP API (--server, --token): what Talos or a
// script without a kubeconfig would do. Creation carries an Idempotency-Key so that a
// retry after a lost answer never asks twice; progress comes as server-sent events.
import { randomUUID } from 'node:crypto';
import { isTerminal } from '../api/phases.ts';
import { errorMessage, sleep } from '../wait.ts';
import type {
  ActionObject,
  Backend,
  CheckSummary,
  CreateOptions,
  NodeView,
  PolicyObject,
  Progress,
  RequestSpec,
} from './backend.ts';
import { CliError, EXIT } from './exit.ts';

interface Answer {
  status: number;
  body: unknown;
  headers: Headers;
}

function messageOf(body: unknown): string {
  if (body && typeof body === 'object' && 'error' in body && typeof body.error === 'string')
    return body.error;
  return typeof body === 'string' ? body.slice(0, 300) : JSON.stringify(body);
}

export interface HttpBackendOptions {
  server: string;
  token: string;
  /** Per request, except long-polls and event streams. Default 30s. */
  timeoutMs?: number;
}

export class HttpBackend implements Backend {
  readonly mode = 'http';
  readonly target: string;
  private readonly base: URL;
  private readonly token: string;
  private readonly timeoutMs: number;

  constructor(options: HttpBackendOptions) {
    let base: URL;
    try {
      base = new URL(options.server);
    } catch {
      throw new CliError(
        `--server must be a URL such as http://gatehouse.example:8080, not "${options.server}"`,
        EXIT.usage,
      );
    }
    if (base.protocol !== 'http:' && base.protocol !== 'https:') {
      throw new CliError(`--server must be an http:// or https:// URL, not "${options.server}"`, EXIT.usage);
    }
    this.base = base;
    this.target = `gatehouse API ${base.origin}`;
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  private url(path: string): URL {
    return new URL(
      path.replace(/^\//, ''),
      this.base.href.endsWith('/') ? this.base.href : `${this.base.href}/`,
    );
  }

  private async send(
    method: string,
    path: string,
    options: {
      body?: unknown;
      headers?: Record<string, string>;
      signal?: AbortSignal;
      timeoutMs?: number;
    } = {},
  ): Promise<Answer> {
    const signals = [
      AbortSignal.timeout(options.timeoutMs ?? this.timeoutMs),
      ...(options.signal ? [options.signal] : []),
    ];
    let response: Response;
    try {
      response = await fetch(this.url(path), {
        method,
        headers: {
          Authorization: `Bearer ${this.token}`,
          Accept: 'application/json',
          ...(options.body !== undefined ? { 'Content-Type': 'application/json' } : {}),
          ...options.headers,
        },
        ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
        signal: AbortSignal.any(signals),
      });
    } catch (error) {
      options.signal?.throwIfAborted();
      throw new CliError(
        `cannot reach the ${this.target}: ${errorMessage((error as { cause?: unknown }).cause ?? error)}`,
        EXIT.unreachable,
      );
    }
    const text = await response.text();
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON (a proxy's error page, say): kept as text for the message.
    }
    return { status: response.status, body, headers: response.headers };
  }

  /** The answer's body when it is one of `ok`; otherwise a CliError saying what went wrong. */
  private expect(answer: Answer, what: string, ok: number[] = [200]): unknown {
    if (ok.includes(answer.status)) return answer.body;
    const message = `cannot ${what}: ${messageOf(answer.body)}`;
    switch (true) {
      case answer.status === 401:
        throw new CliError(`${message} (check --token)`, EXIT.unreachable);
      case answer.status === 400 || answer.status === 413 || answer.status === 415 || answer.status === 422:
        throw new CliError(message, EXIT.usage);
      case answer.status >= 500:
        throw new CliError(message, EXIT.unreachable);
      default:
        throw new CliError(message, EXIT.failed);
    }
  }

  /** Sends, retrying what is safe to retry: rate limits (after Retry-After) and an API server blip. */
  private async request(
    method: string,
    path: string,
    what: string,
    options: {
      body?: unknown;
      headers?: Record<string, string>;
      ok?: number[];
      signal?: AbortSignal;
      timeoutMs?: number;
    } = {},
  ): Promise<{ body: unknown; status: number }> {
    for (let attempt = 1; ; attempt++) {
      const answer = await this.send(method, path, options);
      if ((answer.status === 429 || answer.status === 503) && attempt < 5) {
        const after = Number(answer.headers.get('retry-after') ?? '1');
        await sleep(Math.min(Number.isFinite(after) ? after : 1, 30) * 1000, options.signal);
        continue;
      }
      return { body: this.expect(answer, what, options.ok), status: answer.status };
    }
  }

  async whoami(): Promise<string> {
    const { body } = await this.request('GET', '/v1/whoami', 'learn who the token belongs to');
    return (body as { username: string }).username;
  }

  /** A Talos API gate certificate for the owner of the token; the chain's PEM (certificate, then the gate CA). */
  async talosCertificate(certificateRequest: string, durationSeconds: number): Promise<string> {
    const { body } = await this.request(
      'POST',
      '/v1/talos/certificates',
      'get a Talos API gate certificate',
      {
        body: { certificateRequest, durationSeconds },
        ok: [201],
        timeoutMs: 90_000,
      },
    );
    return (body as { certificate: string }).certificate;
  }

  async checks(): Promise<CheckSummary[]> {
    const { body } = await this.request('GET', '/v1/health', 'read the checks', { ok: [200, 503] });
    return (body as { checks: CheckSummary[] }).checks;
  }

  async check(name: string, node?: string): Promise<{ summary: CheckSummary; fresh: boolean } | undefined> {
    const query = node === undefined ? '' : `?node=${encodeURIComponent(node)}`;
    const answer = await this.send('POST', `/v1/checks/${encodeURIComponent(name)}/evaluate${query}`, {
      timeoutMs: 120_000,
    });
    if (answer.status === 404) return undefined;
    return { summary: this.expect(answer, `evaluate check ${name}`) as CheckSummary, fresh: true };
  }

  async policies(): Promise<PolicyObject[]> {
    const { body } = await this.request('GET', '/v1/policies', 'list ActionPolicies');
    return (body as { items: PolicyObject[] }).items;
  }

  async actions(): Promise<ActionObject[]> {
    const { body } = await this.request('GET', '/v1/actions', 'list NodeActions');
    return (body as { items: ActionObject[] }).items;
  }

  async action(name: string): Promise<ActionObject | undefined> {
    const answer = await this.send('GET', `/v1/actions/${encodeURIComponent(name)}`);
    if (answer.status === 404) return undefined;
    return this.expect(answer, `read NodeAction ${name}`) as ActionObject;
  }

  async node(): Promise<NodeView | undefined> {
    // The API shows nodes only along with an action's progress.
    return Promise.resolve(undefined);
  }

  async createAction(spec: RequestSpec, options: CreateOptions = {}): Promise<ActionObject> {
    if (options.configFile) {
      throw new CliError(
        'the gatehouse API does not take machine configurations: with --server, apply-config needs --config-secret (a Secret already in the controller namespace) or --external',
        EXIT.usage,
      );
    }
    const key = options.idempotencyKey ?? randomUUID();
    const what = `request ${spec.action} of node ${spec.nodeName}`;
    for (let attempt = 1; ; attempt++) {
      try {
        // Same key on every attempt: a retry after a lost answer gets the first action back.
        const { body } = await this.request('POST', '/v1/actions', what, {
          body: { spec },
          headers: { 'Idempotency-Key': key },
          ok: [200, 201],
        });
        return body as ActionObject;
      } catch (error) {
        if (error instanceof CliError && error.code === EXIT.unreachable && attempt < 3) {
          await sleep(1000 * attempt);
          continue;
        }
        throw error;
      }
    }
  }

  async cancel(name: string): Promise<void> {
    await this.request(
      'POST',
      `/v1/actions/${encodeURIComponent(name)}/cancel`,
      `cancel NodeAction ${name}`,
      {
        ok: [202],
      },
    );
  }

  async markExecuted(name: string): Promise<ActionObject> {
    const path = `/v1/actions/${encodeURIComponent(name)}/executed`;
    const { body } = await this.request('POST', path, `mark NodeAction ${name} executed`);
    return body as ActionObject;
  }

  async approve(name: string, decision: 'Approve' | 'Refuse', reason: string): Promise<ActionObject> {
    const path = `/v1/actions/${encodeURIComponent(name)}/approve`;
    const { body } = await this.request('POST', path, `answer the approval of NodeAction ${name}`, {
      body: { decision, reason },
    });
    return body as ActionObject;
  }

  async release(name: string): Promise<ActionObject> {
    const path = `/v1/actions/${encodeURIComponent(name)}/release`;
    const { body } = await this.request('POST', path, `release NodeAction ${name}`);
    return body as ActionObject;
  }

  async follow(
    name: string,
    onProgress: (progress: Progress) => void,
    options: { until?: (progress: Progress) => boolean; signal?: AbortSignal },
  ): Promise<Progress> {
    let latest: Progress = { action: undefined, node: undefined };
    let failures = 0;
    for (;;) {
      options.signal?.throwIfAborted();
      const outcome = await this.stream(name, options, (progress) => {
        latest = progress;
        failures = 0;
        onProgress(progress);
      });
      if (outcome === 'done') return latest;
      // The stream broke (a restart of the controller, a proxy timeout): reconnect; the
      // first event of the new stream is the action as it is now.
      failures++;
      if (failures > 30) {
        throw new CliError(`lost the event stream of ${name} and could not get it back`, EXIT.unreachable);
      }
      await sleep(Math.min(1000 * failures, 5000), options.signal);
    }
  }

  /** One event stream; 'done' once the action is final, deleted, or `until` holds. */
  private async stream(
    name: string,
    options: { until?: (progress: Progress) => boolean; signal?: AbortSignal },
    onProgress: (progress: Progress) => void,
  ): Promise<'done' | 'broken'> {
    const abort = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
    let response: Response;
    try {
      response = await fetch(this.url(`/v1/actions/${encodeURIComponent(name)}/events`), {
        headers: { Authorization: `Bearer ${this.token}`, Accept: 'text/event-stream' },
        signal,
      });
    } catch {
      options.signal?.throwIfAborted();
      return 'broken';
    }
    if (response.status === 404) {
      onProgress({ action: undefined, node: undefined });
      return 'done';
    }
    if (response.status === 429 || response.status >= 500 || !response.body) {
      await response.body?.cancel();
      return 'broken';
    }
    if (response.status !== 200) {
      const text = await response.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // kept as text
      }
      this.expect({ status: response.status, body, headers: response.headers }, `follow NodeAction ${name}`);
    }
    const decoder = new TextDecoder();
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    let buffer = '';
    let outcome: 'done' | 'broken' = 'broken';
    try {
      reading: for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let boundary: number;
        while ((boundary = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, boundary);
          buffer = buffer.slice(boundary + 2);
          let event = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) event = line.slice(6).trim();
            else if (line.startsWith('data:')) data += line.slice(5).trim();
          }
          if (event === 'progress' && data) {
            const progress = JSON.parse(data) as { action: ActionObject; node: NodeView };
            onProgress(progress);
            if (isTerminal(progress.action.status?.phase) || options.until?.(progress)) {
              outcome = 'done';
              break reading;
            }
          } else if (event === 'deleted') {
            onProgress({ action: undefined, node: undefined });
            outcome = 'done';
            break reading;
          } else if (event === 'end') {
            outcome = 'done';
            break reading;
          }
        }
      }
    } catch {
      options.signal?.throwIfAborted();
    } finally {
      // Closing our end ends the stream on the server too (and frees its slot there).
      await reader.cancel().catch(() => undefined);
      abort.abort();
    }
    return outcome;
  }
}
