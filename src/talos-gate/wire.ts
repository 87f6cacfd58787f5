// gRPC on HTTP/2 as the gate handles it: a call forwarded frame for frame (headers,
// DATA in both directions with HTTP/2 flow control, trailers, resets), a status answered
// by the gate itself (trailers-only), and the one request message of a gated call read
// in full. Nothing here decodes a message; gRPC framing is read only to find where the
// first request message ends.
import http2, {
  type ClientHttp2Stream,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Stream,
} from 'node:http2';
import type { Readable, Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';

const { NGHTTP2_CANCEL, NGHTTP2_NO_ERROR } = http2.constants;

// Headers HTTP/2 forbids (connection-specific) or the gate sets itself (pseudo-headers).
export const NOT_FORWARDED: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'host',
]);

/** The caller's metadata: every header but the pseudo-headers and connection-specific ones. */
export function metadataOf(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [key, value] of Object.entries(headers))
    if (!key.startsWith(':') && !NOT_FORWARDED.has(key) && value !== undefined) out[key] = value;
  return out;
}

/** The values of one metadata key (`node`, `nodes`), comma-separated values split as gRPC does. */
export function metadataValues(headers: IncomingHttpHeaders, key: string): string[] {
  const raw = headers[key];
  const values = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
  return values
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

/** Percent-encodes a grpc-message as the gRPC HTTP/2 protocol asks. */
function grpcMessage(message: string): string {
  return Buffer.from(message, 'utf8')
    .toString('latin1')
    .replace(
      /[^\x20-\x24\x26-\x7e]/g,
      (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`,
    );
}

/** Ends a call with a status of the gate's own (trailers-only response). */
export function answerStatus(stream: ServerHttp2Stream, code: number, message: string): void {
  if (stream.destroyed || stream.closed) return;
  if (stream.headersSent) {
    stream.close(NGHTTP2_CANCEL);
    return;
  }
  stream.respond(
    {
      ':status': 200,
      'content-type': 'application/grpc',
      'grpc-status': String(code),
      'grpc-message': grpcMessage(message),
    },
    { endStream: true },
  );
  // The request body is not read: drain it so that flow control never stalls the session.
  stream.resume();
}

/**
 * Joins the caller's stream to apid's, byte for byte both ways, until both are done:
 * response headers as received (trailers-only included), DATA piped with back-pressure
 * (HTTP/2 flow control on each side), trailers as received, and a reset on either side
 * passed to the other (a cancellation, a deadline).
 *
 * `firstBytes` is what the gate already read of the request (a gated call's message).
 */
export function join(
  downstream: ServerHttp2Stream,
  upstream: ClientHttp2Stream,
  firstBytes?: Buffer,
  /** Rewrites a unary reply before it goes back (a fan-out's held nodes, fan-out.ts); the reply is then read whole. */
  rewriteReply?: (reply: Buffer) => Buffer,
): Promise<void> {
  return new Promise((resolve) => {
    let trailers: OutgoingHttpHeaders | undefined;
    let wantTrailers = false;
    const sendTrailers = () => {
      if (!wantTrailers || !trailers || downstream.destroyed) return;
      wantTrailers = false;
      downstream.sendTrailers(trailers);
    };
    upstream.on('response', (headers, flags) => {
      if (downstream.destroyed || downstream.closed) return;
      const out: OutgoingHttpHeaders = { ...metadataOf(headers), ':status': headers[':status'] ?? 200 };
      // Trailers-only: the status came with the headers and ends the stream.
      if ((flags & http2.constants.NGHTTP2_FLAG_END_STREAM) !== 0) {
        downstream.respond(out, { endStream: true });
        return;
      }
      downstream.respond(out, { waitForTrailers: true });
      if (!rewriteReply) {
        forward(upstream, downstream);
        return;
      }
      const chunks: Buffer[] = [];
      upstream.on('data', (chunk: Buffer) => chunks.push(chunk));
      upstream.on('end', () => downstream.end(rewriteReply(Buffer.concat(chunks))));
    });
    upstream.on('trailers', (headers: IncomingHttpHeaders) => {
      trailers = metadataOf(headers);
      sendTrailers();
    });
    downstream.on('wantTrailers', () => {
      wantTrailers = true;
      // A stream ended without trailers is an error in gRPC: say so rather than hang.
      if (!trailers && upstream.closed)
        trailers = {
          'grpc-status': '13',
          'grpc-message': 'talos gate: the Talos API ended the call without a status',
        };
      sendTrailers();
    });
    if (firstBytes && firstBytes.length > 0) upstream.write(firstBytes);
    forward(downstream, upstream);
    let done = 0;
    const finish = () => {
      if (++done === 2) resolve();
    };
    downstream.on('close', () => {
      // The caller went (cancelled, deadline, connection lost): so does the call upstream.
      if (!upstream.closed)
        upstream.close(downstream.rstCode === NGHTTP2_NO_ERROR ? NGHTTP2_CANCEL : downstream.rstCode);
      finish();
    });
    upstream.on('close', () => {
      if (!downstream.closed && !downstream.destroyed) {
        if (upstream.rstCode !== NGHTTP2_NO_ERROR) downstream.close(upstream.rstCode);
        else if (wantTrailers || !trailers) sendTrailers();
      }
      finish();
    });
    upstream.on('error', () => undefined);
    downstream.on('error', () => undefined);
  });
}

/**
 * How much one direction of a call may have written and not yet sent before the gate stops
 * reading the other side. `pipe()` stops at the writable's high-water mark (16 KiB), so each
 * side waited for the other's every few frames and a long stream ran at about 0.7× of the
 * direct path; a bound as large as the stream's HTTP/2 window keeps both sides busy while
 * still passing back-pressure (the reader paused leaves the sender's window unrenewed).
 */
export const FORWARD_BUFFER = 4 * 1024 * 1024;

/**
 * Copies `from` into `to` with back-pressure at FORWARD_BUFFER, ending `to` when `from`
 * ends — or at once, if it already has (a request the gate read whole before deciding).
 */
function forward(from: Readable, to: Writable): void {
  if (from.readableEnded) {
    to.end();
    return;
  }
  const resume = () => from.resume();
  from.on('data', (chunk: Buffer) => {
    to.write(chunk);
    // Past the high-water mark the write asked for a drain, so one will come.
    if (to.writableLength >= FORWARD_BUFFER) {
      from.pause();
      to.once('drain', resume);
    }
  });
  from.once('end', () => to.end());
}

/** The request message could not be read: too large, compressed in a way the gate does not know, cut short. */
export class RequestReadError extends Error {
  override readonly name = 'RequestReadError';
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

/**
 * Reads the first gRPC message of a request (the only one of a unary or server-streaming
 * call) without consuming more than it: returns the bytes read (frame and all, to be
 * forwarded unchanged) and the message, decompressed when the caller used gzip.
 */
export async function readFirstMessage(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  maxBytes: number,
): Promise<{ raw: Buffer; message: Buffer }> {
  const chunks: Buffer[] = [];
  let length = 0;
  let need: number | undefined;
  for await (const chunk of stream.iterator({ destroyOnReturn: false })) {
    const buffer = chunk as Buffer;
    chunks.push(buffer);
    length += buffer.length;
    if (need === undefined && length >= 5) {
      const head = Buffer.concat(chunks, length);
      need = 5 + head.readUInt32BE(1);
      if (need > maxBytes + 5)
        throw new RequestReadError(
          8,
          `talos gate: the request is ${String(need - 5)} bytes, more than the gate reads (${String(maxBytes)})`,
        );
    }
    if (need !== undefined && length >= need) break;
  }
  const raw = Buffer.concat(chunks, length);
  if (need === undefined || raw.length < need)
    throw new RequestReadError(13, 'talos gate: the request ended before its message');
  const compressed = raw[0] === 1;
  const body = raw.subarray(5, need);
  if (!compressed) return { raw, message: body };
  const encoding = headers['grpc-encoding'];
  if (encoding !== 'gzip')
    throw new RequestReadError(
      12,
      `talos gate: request compressed with ${String(encoding)}, which the gate does not read (use gzip or none)`,
    );
  return { raw, message: gunzipSync(body, { maxOutputLength: maxBytes }) };
}
