// Another cluster's API for a probe (`cluster.kubeconfigSecretRef`): the client is made
// of a kubeconfig Secret in the controller's namespace (src/kube/remote-client.ts, which
// keeps it until the Secret changes). Every failure names the cluster and the Secret,
// and fails closed; no message carries the Secret's data (docs/security.md).
import type { Static } from 'typebox';
import type { RemoteCluster } from '../api/cluster-health-check.ts';
import { refusal, remoteClient } from '../kube/remote-client.ts';
import type { ProbeContext, ProbeResult } from './probe.ts';

export type RemoteClusterSpec = Static<typeof RemoteCluster>;

/**
 * Runs `probe` against the cluster of `spec`'s kubeconfig Secret: the context's REST
 * client replaced by that cluster's. Its finding is prefixed with the cluster's name; its
 * errors (unreachable, 401 for expired credentials, 403 forbidden) become probe errors
 * naming the cluster, which fail the check closed.
 *
 * @example
 *   await onRemoteCluster({ kubeconfigSecretRef: { name: 'mgmt-kubeconfig', key: 'value' } }, context,
 *     (remote) => resourceProbe(spec, remote));
 */
export async function onRemoteCluster(
  spec: RemoteClusterSpec,
  context: ProbeContext,
  probe: (context: ProbeContext) => Promise<ProbeResult>,
): Promise<ProbeResult> {
  const client = await remoteClient(
    context.rest,
    context.namespace,
    spec.kubeconfigSecretRef,
    context.signal,
  );
  let result: ProbeResult;
  try {
    // This controller's Node cache is not that cluster's; reads from its watch cache stay.
    const cached = context.cached && { nodes: () => undefined };
    result = await probe({ ...context, rest: client.rest, ...(cached ? { cached } : {}) });
  } catch (error) {
    throw new Error(`${client.where}: ${refusal(error)}`, { cause: error });
  }
  return { ...result, message: `${client.where}: ${result.message}` };
}
