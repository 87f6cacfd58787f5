// The probe of a ClusterHealthCheck: exactly one of the probe types is set in its spec.
import { PROBES, type ClusterHealthCheckSpec } from '../../api/cluster-health-check.ts';
import type { ProbeContext, ProbeResult } from '../probe.ts';
import { httpGetProbe } from './http-get.ts';
import { nodesProbe } from './nodes.ts';
import { podDisruptionBudgetsProbe } from './pod-disruption-budgets.ts';
import { prometheusProbe } from './prometheus.ts';
import { resourceProbe } from './resource.ts';
import { tcpSocketProbe } from './tcp-socket.ts';
import { workloadsProbe } from './workloads.ts';

/**
 * Runs the one probe the spec sets. Resolves with the finding (healthy or not); rejects
 * only when the probe could not look (unreachable, discovery failed, a CEL expression
 * that does not compile), which the caller reports as a probe error.
 */
export async function runProbe(spec: ClusterHealthCheckSpec, context: ProbeContext): Promise<ProbeResult> {
  const set = PROBES.filter((p) => spec[p] !== undefined);
  if (set.length !== 1)
    throw new Error(
      `a ClusterHealthCheck must set exactly one probe (${PROBES.join(', ')}); this one sets ${set.length ? set.join(', ') : 'none'}`,
    );
  context.signal.throwIfAborted();
  if (spec.httpGet) return httpGetProbe(spec.httpGet, context);
  if (spec.tcpSocket) return tcpSocketProbe(spec.tcpSocket, context);
  if (spec.resource) return resourceProbe(spec.resource, context);
  if (spec.workloads) return workloadsProbe(spec.workloads, context);
  if (spec.podDisruptionBudgets) return podDisruptionBudgetsProbe(spec.podDisruptionBudgets, context);
  if (spec.nodes) return nodesProbe(spec.nodes, context);
  if (spec.prometheus) return prometheusProbe(spec.prometheus, context);
  throw new Error('unreachable: no probe set');
}
