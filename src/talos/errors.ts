// Errors from the Talos API that say which call failed, on which node, through which
// endpoint, and why — in Talos' own words when Talos answered, and in plain words when
// the TLS handshake failed (the usual cause: a talosconfig for another cluster).
import type { InstallerExit } from './installer-exit.ts';
import { connect, type ConnectionOptions } from 'node:tls';
import { formatDuration } from '../duration.ts';
import { GrpcStatus } from './grpc-status.ts';

export type TalosFailure =
  /** Talos answered with an error status (its message is in `talosMessage`). */
  | 'status'
  /** No answer before the call's deadline. */
  | 'deadline'
  /** The caller cancelled the call. */
  | 'cancelled'
  /** No connection to the endpoint (refused, unroutable, reset). */
  | 'unreachable'
  /** The endpoint's certificate is not signed by the talosconfig's CA (or does not name it). */
  | 'tls-server-certificate'
  /** The endpoint refused the talosconfig's client certificate. */
  | 'tls-client-certificate'
  /** The installer ran and exited non-zero (LifecycleService.Upgrade). */
  | 'exit-code';

const codeNames = new Map<number, string>(Object.entries(GrpcStatus).map(([name, code]) => [code, name]));

export function grpcCodeName(code: number): string {
  return codeNames.get(code) ?? `code ${String(code)}`;
}

export interface TalosErrorDetails {
  /** The method, e.g. `MachineService.Reboot`. */
  call: string;
  /** The node the call targeted (the `node` metadata), if any. */
  node: string | undefined;
  endpoint: string;
  failure: TalosFailure;
  /** The gRPC status code, when there was one. */
  code?: number;
  /** Talos' own message, or what the transport said. */
  talosMessage: string;
}

export class TalosApiError extends Error {
  override readonly name: string = 'TalosApiError';
  readonly call: string;
  readonly node: string | undefined;
  readonly endpoint: string;
  readonly failure: TalosFailure;
  readonly code: number | undefined;
  readonly talosMessage: string;

  constructor(details: TalosErrorDetails, explanation: string, options?: ErrorOptions) {
    const target = details.node ? `node ${details.node}` : 'the endpoint itself';
    super(`Talos ${details.call} on ${target} via ${details.endpoint} failed: ${explanation}`, options);
    this.call = details.call;
    this.node = details.node;
    this.endpoint = details.endpoint;
    this.failure = details.failure;
    this.code = details.code;
    this.talosMessage = details.talosMessage;
  }

  get codeName(): string | undefined {
    return this.code === undefined ? undefined : grpcCodeName(this.code);
  }
}

/**
 * LifecycleService.Upgrade ran the installer, which failed: its exit code, what the code
 * means (installer-exit.ts), and its last output.
 */
export class TalosUpgradeFailedError extends TalosApiError {
  override readonly name = 'TalosUpgradeFailedError';
  readonly exitCode: number;
  readonly exit: InstallerExit | undefined;
  readonly output: string[];

  constructor(
    details: Omit<TalosErrorDetails, 'failure' | 'talosMessage'>,
    exitCode: number,
    output: string[],
    exit?: InstallerExit,
  ) {
    const last = output.at(-1) ?? '(no output)';
    super(
      { ...details, failure: 'exit-code', talosMessage: last },
      `the installer exited with code ${String(exitCode)}${exit ? ` (${exit.name}: ${exit.meaning})` : ''}: ${last}`,
    );
    this.exitCode = exitCode;
    this.exit = exit;
    this.output = output;
  }
}

const DEADLINE_EXCEEDED: number = GrpcStatus.DEADLINE_EXCEEDED;
const CANCELLED: number = GrpcStatus.CANCELLED;

/** Explains a gRPC status that Talos (or the transport) ended a call with. */
export function statusError(
  details: Omit<TalosErrorDetails, 'failure'>,
  timeoutMs: number,
  aborted: boolean,
  cause?: unknown,
): TalosApiError {
  const { talosMessage } = details;
  const code: number = details.code ?? GrpcStatus.UNKNOWN;
  if (code === DEADLINE_EXCEEDED)
    return new TalosApiError(
      { ...details, failure: 'deadline' },
      `no answer within ${formatDuration(timeoutMs)} (DEADLINE_EXCEEDED)`,
      { cause },
    );
  if (code === CANCELLED && aborted)
    return new TalosApiError({ ...details, failure: 'cancelled' }, 'cancelled by the caller', { cause });
  return new TalosApiError({ ...details, failure: 'status' }, `${talosMessage} (${grpcCodeName(code)})`, {
    cause,
  });
}

/** What a direct TLS handshake with an endpoint showed. */
export type ConnectionDiagnosis =
  | { failure: 'none' }
  | { failure: 'unreachable' | 'tls-server-certificate' | 'tls-client-certificate'; detail: string };

const SERVER_CERTIFICATE_CODES = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REJECTED',
  'INVALID_CA',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

// TLS alerts a server sends when it does not accept the client's certificate.
const CLIENT_CERTIFICATE_ALERT =
  /alert (bad certificate|unknown ca|certificate required|certificate unknown|certificate revoked|certificate expired|unsupported certificate|access denied|decrypt error)|alert number (42|43|44|45|46|48|49|51|116)\b/i;

/**
 * Classifies how a TLS connection attempt ended. `stage` is how far it got: the TCP
 * connection, the handshake, or past it (the client spoke first and waited).
 */
export function classifyConnection(
  stage: 'connect' | 'handshake' | 'established',
  outcome: { error?: { code?: string; message: string }; receivedData: boolean },
): ConnectionDiagnosis {
  const { error } = outcome;
  if (outcome.receivedData) return { failure: 'none' };
  if (error && CLIENT_CERTIFICATE_ALERT.test(error.message))
    return { failure: 'tls-client-certificate', detail: error.message };
  if (error?.code && SERVER_CERTIFICATE_CODES.has(error.code))
    return { failure: 'tls-server-certificate', detail: `${error.message} (${error.code})` };
  if (stage === 'established')
    // Under TLS 1.3 the server checks the client's certificate after the client has
    // finished its handshake; a server that refuses it hangs up before answering.
    return {
      failure: 'tls-client-certificate',
      detail: error ? error.message : 'the endpoint closed the connection right after the TLS handshake',
    };
  if (stage === 'handshake' && error?.code === 'ECONNRESET')
    return { failure: 'tls-client-certificate', detail: error.message };
  return {
    failure: 'unreachable',
    detail: error?.message ?? 'the connection closed during the TLS handshake',
  };
}

const HTTP2_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';

/**
 * Connects to `host:port` with the same credentials a call used, says the HTTP/2
 * preface and waits for the server's first frame, to tell a refused client
 * certificate from an untrusted server certificate from a plain network failure.
 * gRPC itself only reports "failed to connect".
 */
export function diagnoseConnection(
  host: string,
  port: number,
  tls: Pick<ConnectionOptions, 'ca' | 'cert' | 'key' | 'servername' | 'checkServerIdentity'>,
  timeoutMs = 5000,
): Promise<ConnectionDiagnosis> {
  return new Promise((resolve) => {
    let stage: 'connect' | 'handshake' | 'established' = 'connect';
    let settled = false;
    const socket = connect({ host, port, ALPNProtocols: ['h2'], ...tls });
    const finish = (error?: NodeJS.ErrnoException, receivedData = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(
        classifyConnection(stage, {
          receivedData,
          ...(error
            ? { error: { message: error.message, ...(error.code ? { code: error.code } : {}) } }
            : {}),
        }),
      );
    };
    const timer = setTimeout(() => {
      if (stage === 'established')
        finish(undefined, true); // silent but open: TLS is not the problem
      else finish(new Error(`no TLS handshake within ${formatDuration(timeoutMs)}`));
    }, timeoutMs);
    socket.once('connect', () => (stage = 'handshake'));
    socket.once('secureConnect', () => {
      stage = 'established';
      socket.write(HTTP2_PREFACE);
    });
    socket.on('data', () => finish(undefined, true));
    socket.once('error', (error: NodeJS.ErrnoException) => finish(error));
    socket.once('close', () => finish());
  });
}
