// The HTTP store etcd snapshots go to (ActionPolicy spec.etcdSnapshot.http): one PUT per
// snapshot, streamed as it comes from Talos (chunked transfer encoding: its size is known
// only at its end), read back with HEAD, and DELETE when it falls out of the last `keep`.
// node:http rather than fetch: a request body written chunk by chunk with back-pressure
// (write() → 'drain'), and a request that can be cut off before its last chunk — a store
// never completes an upload whose terminating chunk did not come, which is how a snapshot
// that fails its integrity check is kept out of it.
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { once } from 'node:events';
import { redactURLs } from '../redact.ts';

/** A failure of the store (refused, unreachable, wrong read-back), as opposed to one of the snapshot's source. */
export class SnapshotStoreError extends Error {
  override readonly name = 'SnapshotStoreError';
}

/** How much of a store's answer a message quotes. */
const QUOTED = 512;

function send(url: URL, method: string, signal: AbortSignal | undefined): ClientRequest {
  const make = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return make(url, {
    method,
    ...(signal ? { signal } : {}),
    headers: method === 'PUT' ? { 'content-type': 'application/octet-stream' } : {},
  });
}

async function bodyOf(res: IncomingMessage): Promise<string> {
  let text = '';
  for await (const chunk of res as AsyncIterable<Buffer>) {
    if (text.length < QUOTED) text += chunk.toString('utf8');
  }
  return text.trim().slice(0, QUOTED);
}

const shown = (url: URL) => redactURLs(url.href);

async function answer(url: URL, method: string, req: ClientRequest): Promise<IncomingMessage> {
  try {
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    return res;
  } catch (error) {
    throw new SnapshotStoreError(
      `${method} ${shown(url)} failed: ${redactURLs(error instanceof Error ? error.message : String(error))}`,
      { cause: error },
    );
  }
}

/** Throws unless the store answered 2xx (or one of `also`), quoting what it said. */
async function expectOk(url: URL, method: string, res: IncomingMessage, also: number[] = []): Promise<void> {
  const status = res.statusCode ?? 0;
  const body = await bodyOf(res);
  if ((status >= 200 && status < 300) || also.includes(status)) return;
  throw new SnapshotStoreError(
    `the store refused ${method} ${shown(url)}: ${String(status)} ${res.statusMessage ?? ''}${body ? ` (${redactURLs(body)})` : ''}`.trim(),
  );
}

/**
 * One PUT of a snapshot, written chunk by chunk. `write` waits while the store is slower
 * than the source; an answer that comes before the body is done (a refusal) ends it.
 * `finish` sends the last bytes and waits for the answer; `abort` cuts the request off.
 */
export class SnapshotUpload {
  readonly url: URL;
  private readonly req: ClientRequest;
  private readonly answered: Promise<IncomingMessage>;
  private early: IncomingMessage | undefined;

  constructor(url: URL, signal?: AbortSignal) {
    this.url = url;
    this.req = send(url, 'PUT', signal);
    this.answered = answer(url, 'PUT', this.req);
    this.answered.then(
      (res) => (this.early = res),
      () => undefined,
    );
  }

  async write(chunk: Uint8Array): Promise<void> {
    if (this.answeredEarly()) return this.refused();
    if (this.req.write(chunk)) return;
    // Back-pressure: wait for the store, or for its answer (a refusal mid-body), or a failure.
    await Promise.race([once(this.req, 'drain'), this.answered]);
    if (this.answeredEarly()) return this.refused();
  }

  /** Whether the store answered before the body was done (it read no more of it). */
  private answeredEarly(): boolean {
    return this.early !== undefined;
  }

  async finish(last: Uint8Array): Promise<void> {
    this.req.end(last);
    await expectOk(this.url, 'PUT', await this.answered);
  }

  abort(): void {
    this.req.destroy();
  }

  private async refused(): Promise<never> {
    this.req.destroy();
    const res = this.early as IncomingMessage;
    await expectOk(this.url, 'PUT', res);
    throw new SnapshotStoreError(
      `the store answered PUT ${shown(this.url)} with ${String(res.statusCode)} before the snapshot was sent`,
    );
  }
}

/** HEAD of a stored snapshot: its size as the store reports it (Content-Length). */
export async function storedSize(url: URL, signal?: AbortSignal): Promise<number> {
  const req = send(url, 'HEAD', signal);
  req.end();
  const res = await answer(url, 'HEAD', req);
  await expectOk(url, 'HEAD', res);
  const length = Number(res.headers['content-length']);
  if (!Number.isSafeInteger(length))
    throw new SnapshotStoreError(
      `HEAD ${shown(url)} tells no Content-Length: the stored size cannot be checked`,
    );
  return length;
}

/** DELETE of a stored snapshot; one already gone (404) counts as deleted. */
export async function deleteStored(url: URL, signal?: AbortSignal): Promise<void> {
  const req = send(url, 'DELETE', signal);
  req.end();
  await expectOk(url, 'DELETE', await answer(url, 'DELETE', req), [404]);
}
