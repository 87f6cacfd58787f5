// The gate's side of the Talos API: HTTP/2 sessions over mutual TLS to apid, with
// gatehouse's own Talos credentials (the talosconfig Managed execution uses). Calls go
// to the talosconfig's endpoints, the caller's `node`/`nodes` metadata unchanged, and
// apid proxies them to the node as it does for talosctl. One session per endpoint,
// opened on first use and again after it closes; the endpoint that last connected is
// tried first.
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type OutgoingHttpHeaders } from 'node:http2';
import { isIP } from 'node:net';
import tls, { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { TalosClient } from '../talos/client.ts';
import type { TalosContext } from '../talos/config.ts';

// apid does not choose its certificate by server name; TLS forbids an IP address as one
// (RFC 6066), so an IP endpoint is checked against the IP with a placeholder name sent.
const SERVER_NAME_FOR_IP = 'talos-api';

/** HTTP/2 flow-control window the gate offers on each side: large enough for a bulk stream at full speed. */
export const STREAM_WINDOW = 4 * 1024 * 1024;

/**
 * The gate's TLS cipher suites: AES-128-GCM first. Every byte of a forwarded stream is
 * decrypted and encrypted again in the gate's one thread, and AES-128-GCM costs about 0.75×
 * of Node's default first choice, AES-256-GCM (1.1 GB/s against 0.86 GB/s on the bench
 * machine). talosctl (Go) asks for it first anyway on hardware with AES, and apid (Go)
 * picks it; both suites are TLS 1.3's, equally strong for this use.
 */
export const GATE_CIPHERS = [
  'TLS_AES_128_GCM_SHA256',
  ...tls.DEFAULT_CIPHERS.split(':').filter((c) => c !== 'TLS_AES_128_GCM_SHA256'),
].join(':');
/**
 * The largest HTTP/2 frame the gate accepts: peers that honour it (Node's HTTP/2, which
 * grpc-js uses) then send a bulk stream in fewer, larger DATA frames, and the gate
 * handles fewer chunks per megabyte. 64 KiB rather than more: with 1 MiB frames each
 * chunk is a large buffer of its own and the gate spent ~30 % more CPU per 100 MB, most
 * of it collecting them (bench talos-gate, 370–410 against 230–310 ms). Go's gRPC (apid)
 * keeps its own 16 KiB.
 */
export const MAX_FRAME = 64 * 1024;

export class UpstreamUnavailableError extends Error {
  override readonly name = 'UpstreamUnavailableError';
}

function splitAddress(address: string): { host: string; port: number } {
  const match = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  if (!match?.[1] || !match[2]) throw new Error(`endpoint "${address}" is not host:port`);
  return { host: match[1], port: Number(match[2]) };
}

export class Upstream {
  private context: TalosContext;
  private readonly sessions = new Map<string, ClientHttp2Session>();
  private preferred = 0;
  private readonly connectTimeoutMs: number;

  constructor(context: TalosContext, options: { connectTimeoutMs?: number } = {}) {
    this.context = context;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 5000;
  }

  private client: TalosClient | undefined;

  /** A Talos API client with the same credentials, for the gate's own questions (whose etcd member is this?). */
  talosClient(): TalosClient {
    this.client ??= new TalosClient(this.context, { timeoutMs: 10_000 });
    return this.client;
  }

  /** Uses new credentials (a reloaded talosconfig) for the sessions opened from now on. */
  replaceContext(context: TalosContext): void {
    this.client?.close();
    this.client = undefined;
    this.context = context;
    for (const session of this.sessions.values()) session.close();
    this.sessions.clear();
  }

  get endpoints(): readonly string[] {
    return this.context.endpoints;
  }

  private connect(address: string): Promise<ClientHttp2Session> {
    const existing = this.sessions.get(address);
    if (existing && !existing.closed && !existing.destroyed) return Promise.resolve(existing);
    const { host, port } = splitAddress(address);
    const ip = isIP(host) !== 0;
    const session = http2.connect(
      `https://${ip && host.includes(':') ? `[${host}]` : host}:${String(port)}`,
      {
        ca: this.context.ca,
        cert: this.context.crt,
        key: this.context.key,
        servername: ip ? SERVER_NAME_FOR_IP : host,
        checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(host, cert),
        ciphers: GATE_CIPHERS,
        settings: { initialWindowSize: STREAM_WINDOW, maxFrameSize: MAX_FRAME },
      },
    );
    this.sessions.set(address, session);
    session.on('close', () => {
      if (this.sessions.get(address) === session) this.sessions.delete(address);
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        session.destroy();
        reject(
          new UpstreamUnavailableError(
            `no connection to ${address} within ${String(this.connectTimeoutMs)}ms`,
          ),
        );
      }, this.connectTimeoutMs);
      session.once('connect', () => {
        clearTimeout(timer);
        session.setLocalWindowSize(STREAM_WINDOW * 4);
        resolve(session);
      });
      session.once('error', (error: Error) => {
        clearTimeout(timer);
        reject(
          new UpstreamUnavailableError(`cannot connect to the Talos API at ${address}: ${error.message}`),
        );
      });
    });
  }

  /**
   * Opens a stream to apid for `path` with the caller's metadata, through the first
   * endpoint that connects (only a connection that could not be made moves on, so
   * nothing is ever sent twice).
   */
  async open(path: string, metadata: OutgoingHttpHeaders): Promise<ClientHttp2Stream> {
    const order = this.context.endpoints.map((_, i) => (this.preferred + i) % this.context.endpoints.length);
    let lastError: unknown;
    for (const index of order) {
      const address = this.context.endpoints[index] as string;
      try {
        const session = await this.connect(address);
        this.preferred = index;
        return session.request(
          { ...metadata, ':method': 'POST', ':path': path, ':scheme': 'https', ':authority': address },
          { endStream: false },
        );
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError instanceof Error ? lastError : new UpstreamUnavailableError(String(lastError));
  }

  close(): void {
    for (const session of this.sessions.values()) session.close();
    this.sessions.clear();
    this.client?.close();
    this.client = undefined;
  }
}
