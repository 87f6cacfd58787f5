// The probe of a ClusterHealthCheck: exactly one of the probe types is set in its spec.
import {
  PROBES,
  type ClusterHealthCheckSpec,
  type ProbeName,
  type ProbeSpecs,
} from '../../api/cluster-health-check.ts';
import type { Probe, ProbeContext, ProbeResult } from '../probe.ts';
import { onRemoteCluster, type RemoteClusterSpec } from '../remote-cluster.ts';
import { httpGetProbe } from './http-get.ts';
import { jobProbe } from './job.ts';
import { nodesProbe } from './nodes.ts';
import { podDisruptionBudgetsProbe } from './pod-disruption-budgets.ts';
import { prometheusProbe } from './prometheus.ts';
import { resourceProbe } from './resource.ts';
import { tcpSocketProbe } from './tcp-socket.ts';
import { workloadsProbe } from './workloads.ts';

/** Every probe type's implementation. A type added to the schema without one does not compile. */
export type ProbeRegistry = { [K in ProbeName]: Probe<ProbeSpecs[K]> };

export const PROBE_REGISTRY: ProbeRegistry = {
  httpGet: httpGetProbe,
  tcpSocket: tcpSocketProbe,
  resource: resourceProbe,
  workloads: workloadsProbe,
  podDisruptionBudgets: podDisruptionBudgetsProbe,
  nodes: nodesProbe,
  prometheus: prometheusProbe,
  job: jobProbe,
};

/** The probe of type `name` on its part of the spec (a generic, so the two cannot mismatch). */
function probeOf<K extends ProbeName>(name: K, part: ProbeSpecs[K], context: ProbeContext) {
  const probe: Probe<ProbeSpecs[K]> = PROBE_REGISTRY[name];
  return probe(part, context);
}

/**
 * Runs the one probe the spec sets. Resolves with the finding (healthy or not); rejects
 * only when the probe could not look (unreachable, discovery failed, a CEL expression
 * that does not compile), which the caller reports as a probe error.
 */
export async function runProbe(spec: ClusterHealthCheckSpec, context: ProbeContext): Promise<ProbeResult> {
  const set = PROBES.filter((p) => spec[p] !== undefined);
  const name = set[0];
  if (set.length !== 1 || name === undefined)
    throw new Error(
      `a ClusterHealthCheck must set exactly one probe (${PROBES.join(', ')}); this one sets ${set.length ? set.join(', ') : 'none'}`,
    );
  context.signal.throwIfAborted();
  const part = spec[name] as ProbeSpecs[typeof name];
  const cluster = remoteClusterOf(part);
  return cluster
    ? onRemoteCluster(cluster, context, (remote) => probeOf(name, part, remote))
    : probeOf(name, part, context);
}

/** The other cluster a probe reads (resource, workloads, nodes may), if it names one. */
function remoteClusterOf(part: ProbeSpecs[ProbeName]): RemoteClusterSpec | undefined {
  return 'cluster' in part ? part.cluster : undefined;
}
