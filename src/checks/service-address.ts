// Where a probe connects to reach a Service. In a cluster (`dns`) that is simply the
// Service's DNS name. A controller running outside the cluster (`endpoints`: the
// sandbox, a laptop) cannot resolve or route to cluster DNS names and Service IPs, so
// it reads the Service instead: an ExternalName's host, or a ready endpoint from the
// Service's EndpointSlices, on the target port that backs the requested Service port.
import { KubeApiError } from '../kube/rest.ts';
import { consistency, type ProbeContext } from './probe.ts';

export interface ServiceReference {
  name: string;
  namespace: string;
}

export interface ServiceAddress {
  /** Host name or IP address to connect to. */
  host: string;
  port: number;
  /** The Service's DNS name, `<name>.<namespace>.svc`: the Host header and TLS server name. */
  serviceHost: string;
  /** How the address was found, for messages; empty when it is just the DNS name. */
  via: string;
}

interface Service {
  spec?: {
    type?: string;
    externalName?: string;
    ports?: { name?: string; port: number; protocol?: string; targetPort?: number | string }[];
  };
}

interface EndpointSlice {
  metadata?: { name?: string };
  ports?: { name?: string; port?: number; protocol?: string }[] | null;
  endpoints?: { addresses: string[]; conditions?: { ready?: boolean } }[] | null;
}

/** Cluster DNS names of Services: <name>.<namespace>.svc, optionally .cluster.local. */
const SERVICE_HOST =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?\.?$/;

export function serviceHost({ name, namespace }: ServiceReference): string {
  return `${name}.${namespace}.svc`;
}

/** The Service a cluster DNS name refers to, e.g. prometheus.monitoring.svc:9090. */
export function serviceOfHost(host: string): ServiceReference | undefined {
  const match = SERVICE_HOST.exec(host.toLowerCase());
  return match?.[1] && match[3] ? { name: match[1], namespace: match[3] } : undefined;
}

/** Where to connect for `port` (a port of the Service, as clients in the cluster use it). */
export async function resolveService(
  service: ServiceReference,
  port: number,
  context: ProbeContext,
): Promise<ServiceAddress> {
  const dnsName = serviceHost(service);
  if (context.serviceResolution === 'dns') return { host: dnsName, port, serviceHost: dnsName, via: '' };

  const { name, namespace } = service;
  const what = `Service ${namespace}/${name}`;
  let object: Service;
  try {
    object = await context.rest.request<Service>(`/api/v1/namespaces/${namespace}/services/${name}`, {
      query: consistency(context.cached !== undefined),
      signal: context.signal,
    });
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 404)
      throw new Error(`${what} not found`, { cause: error });
    throw error;
  }
  const spec = object.spec ?? {};
  if (spec.type === 'ExternalName') {
    if (!spec.externalName) throw new Error(`${what} is of type ExternalName but has no externalName`);
    return { host: spec.externalName, port, serviceHost: dnsName, via: `ExternalName ${spec.externalName}` };
  }

  const ports = spec.ports ?? [];
  const servicePort = ports.find((p) => p.port === port && (p.protocol ?? 'TCP') === 'TCP');
  if (!servicePort) {
    const has = ports.map((p) => `${p.port}/${p.protocol ?? 'TCP'}${p.name ? ` (${p.name})` : ''}`);
    throw new Error(`${what} has no TCP port ${port}; it has ${has.length ? has.join(', ') : 'no ports'}`);
  }
  const portName = servicePort.name ?? '';

  const slices = await context.rest.request<{ items?: EndpointSlice[] }>(
    `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`,
    {
      query: {
        labelSelector: `kubernetes.io/service-name=${name}`,
        ...consistency(context.cached !== undefined),
      },
      signal: context.signal,
    },
  );
  let notReady = 0;
  for (const slice of slices.items ?? []) {
    const slicePort = (slice.ports ?? []).find(
      (p) => (p.name ?? '') === portName && (p.protocol ?? 'TCP') === 'TCP',
    );
    if (slicePort?.port === undefined) continue;
    for (const endpoint of slice.endpoints ?? []) {
      const address = endpoint.addresses[0];
      // An absent ready condition means ready (discovery.k8s.io/v1 API reference).
      if (endpoint.conditions?.ready === false || address === undefined) {
        notReady++;
        continue;
      }
      return {
        host: address,
        port: slicePort.port,
        serviceHost: dnsName,
        via: `endpoint ${address.includes(':') ? `[${address}]` : address}:${slicePort.port} of EndpointSlice ${slice.metadata?.name ?? '?'}`,
      };
    }
  }
  const count = slices.items?.length ?? 0;
  throw new Error(
    `${what} has no ready endpoint for port ${port}` +
      (count === 0
        ? ' (no EndpointSlice: does its selector match any pod?)'
        : ` (${count} EndpointSlice${count === 1 ? '' : 's'}, ${notReady} endpoint${notReady === 1 ? '' : 's'} not ready)`),
  );
}

/**
 * Where to connect for a host and port taken from a URL or a host field. With
 * `endpoints` resolution a cluster DNS name (`<name>.<namespace>.svc`) is resolved
 * through its Service, since it would not resolve outside the cluster; any other host
 * is used as it is.
 */
export async function resolveHost(
  host: string,
  port: number,
  context: ProbeContext,
): Promise<ServiceAddress> {
  const service = context.serviceResolution === 'endpoints' ? serviceOfHost(host) : undefined;
  if (service) return resolveService(service, port, context);
  return { host, port, serviceHost: host, via: '' };
}
