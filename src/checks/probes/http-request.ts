// One HTTP GET for a probe, over node:http(s) rather than fetch: a probe may have to
// connect to an address other than the URL's host (a Service resolved to an endpoint)
// while keeping the URL's Host header and TLS server name, and may have to skip
// certificate verification for one request only.
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { isIP } from 'node:net';
import { redactURL } from '../../redact.ts';
import { errorMessage } from '../../wait.ts';
import type { ServiceAddress } from '../service-address.ts';
import { describeNetworkError } from './network-error.ts';

export interface HttpGetOptions {
  headers?: Record<string, string>;
  insecureSkipTLSVerify?: boolean;
  /** Read at most this many bytes of the body. */
  maxBodyBytes: number;
  /** What to do with a longer body: keep its start (for messages), or fail. */
  overflow: 'truncate' | 'fail';
  signal: AbortSignal;
}

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** The body was longer than maxBodyBytes and was cut (overflow `truncate`). */
  truncated: boolean;
}

/** Thrown when the request could not be made or answered; the message names the URL. */
export class HttpGetError extends Error {
  override readonly name = 'HttpGetError';
}

/** How a target is named in messages: the URL, and where it was reached if elsewhere. */
export function describeTarget(url: URL, address: ServiceAddress): string {
  const shown = redactURL(url);
  return address.via ? `${shown} (via ${address.via})` : shown;
}

/**
 * GETs `url`, connecting to `address` (which may differ from the URL's host). Resolves
 * with any HTTP status; rejects only when there is no answer (refused, reset, TLS,
 * aborted by the signal).
 */
export function httpGet(url: URL, address: ServiceAddress, options: HttpGetOptions): Promise<HttpResponse> {
  const { signal } = options;
  const https = url.protocol === 'https:';
  const connectHost = address.host.replace(/^\[|\]$/g, '');
  const requestOptions: RequestOptions = {
    method: 'GET',
    hostname: connectHost,
    port: address.port,
    path: `${url.pathname}${url.search}`,
    // The URL's host unless the probe sets Host itself (as Kubernetes httpGet probes allow).
    headers: { Host: url.host, 'User-Agent': 'gatehouse-probe', ...options.headers },
    signal,
    ...(https
      ? {
          // A server name (SNI) must be a name, never an IP address.
          ...(isIP(url.hostname.replace(/^\[|\]$/g, '')) ? {} : { servername: url.hostname }),
          rejectUnauthorized: options.insecureSkipTLSVerify !== true,
        }
      : {}),
  };
  const send = https ? httpsRequest : httpRequest;
  return new Promise<HttpResponse>((resolve, reject) => {
    const fail = (error: unknown) => {
      const reason = signal.aborted
        ? `cut off before an answer came (${errorMessage(signal.reason)})`
        : describeNetworkError(error);
      reject(new HttpGetError(`GET ${describeTarget(url, address)}: ${reason}`));
    };
    const req = send(requestOptions, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let truncated = false;
      const finish = () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          truncated,
        });
      res.on('data', (chunk: Buffer) => {
        if (truncated) return;
        const room = options.maxBodyBytes - size;
        if (chunk.length > room) {
          if (options.overflow === 'fail') {
            res.destroy();
            reject(
              new HttpGetError(
                `GET ${describeTarget(url, address)}: the body is larger than ${options.maxBodyBytes} bytes`,
              ),
            );
            return;
          }
          chunks.push(chunk.subarray(0, room));
          truncated = true;
          // Enough for a message; a streaming endpoint would otherwise never end.
          res.destroy();
          finish();
          return;
        }
        chunks.push(chunk);
        size += chunk.length;
      });
      res.on('end', finish);
      res.on('error', (error) => {
        if (!truncated) fail(error);
      });
    });
    req.on('error', fail);
    req.end();
  });
}

/** The start of a body, on one line, for a message. */
export function bodyExcerpt(body: string, max = 200): string {
  const oneLine = body.replace(/\s+/g, ' ').trim();
  if (!oneLine) return '(empty body)';
  return oneLine.length > max ? `${oneLine.slice(0, max - 1)}…` : oneLine;
}
