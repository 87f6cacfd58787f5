// tcpSocket: healthy when a TCP connection to the host (or Service) and port opens.
import { connect } from 'node:net';
import type { Static } from 'typebox';
import type { TcpSocketProbe } from '../../api/cluster-health-check.ts';
import { errorMessage } from '../../wait.ts';
import type { Probe } from '../probe.ts';
import { resolveHost, resolveService, type ServiceAddress } from '../service-address.ts';
import { describeNetworkError } from './network-error.ts';

export type TcpSocketProbeSpec = Static<typeof TcpSocketProbe>;

export const tcpSocketProbe: Probe<TcpSocketProbeSpec> = async (spec, context) => {
  let address: ServiceAddress;
  let what: string;
  if (spec.service !== undefined) {
    address = await resolveService(spec.service, spec.port, context);
    what = `Service ${spec.service.namespace}/${spec.service.name} port ${spec.port}`;
  } else if (spec.host !== undefined) {
    address = await resolveHost(spec.host, spec.port, context);
    what = hostPort(spec.host, spec.port);
  } else {
    throw new Error('tcpSocket needs either host or service');
  }
  const target = hostPort(address.host, address.port);
  const where = address.via ? `${what} (via ${address.via})` : target === what ? what : `${what} (${target})`;

  const started = performance.now();
  const outcome = await new Promise<{ error?: Error }>((resolve, reject) => {
    const { signal } = context;
    if (signal.aborted) {
      reject(abortError(where, signal));
      return;
    }
    const socket = connect({ host: address.host, port: address.port });
    const onAbort = () => {
      socket.destroy();
      reject(abortError(where, signal));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    socket.once('connect', () => {
      signal.removeEventListener('abort', onAbort);
      socket.destroy();
      resolve({});
    });
    socket.once('error', (error) => {
      signal.removeEventListener('abort', onAbort);
      socket.destroy();
      resolve({ error });
    });
  });
  const took = Math.round(performance.now() - started);
  // A refused or unreachable target is exactly what this probe looks for: a finding.
  return outcome.error
    ? { healthy: false, message: `TCP connection to ${where} failed: ${describeNetworkError(outcome.error)}` }
    : { healthy: true, message: `TCP connection to ${where} opened in ${took}ms` };
};

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function abortError(where: string, signal: AbortSignal): Error {
  return new Error(`TCP connection to ${where} cut off before it opened (${errorMessage(signal.reason)})`);
}
