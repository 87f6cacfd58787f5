// Another cluster's API for a probe (`cluster.kubeconfigSecretRef`): the kubeconfig is
// read from a Secret in the controller's namespace, and the client made of it is kept
// until the Secret changes (its resourceVersion), so a probe run costs one GET of the
// Secret, not a new TLS session. Every failure names the cluster and the Secret, and
// fails closed; no message carries the Secret's data (docs/security.md).
import type { Static } from 'typebox';
import type { RemoteCluster } from '../api/cluster-health-check.ts';
import { inlineKubeconfig } from '../kube/kubeconfig.ts';
import { KubeApiError, RestClient } from '../kube/rest.ts';
import type { ProbeContext, ProbeResult } from './probe.ts';

export type RemoteClusterSpec = Static<typeof RemoteCluster>;

interface CachedClient {
  resourceVersion: string;
  rest: RestClient;
  clusterName: string;
}

/** One client per Secret key, replaced when the Secret's resourceVersion moves. */
const clients = new Map<string, CachedClient>();

/** `Secret gatehouse/mgmt-kubeconfig`, the words every message about it starts from. */
function secretWords(namespace: string, name: string): string {
  return `Secret ${namespace}/${name}`;
}

/** What the API server said, without the request line (whose path is ours, not news). */
function refusal(error: unknown): string {
  if (error instanceof KubeApiError) {
    const reason = error.reason || (error.code === 401 ? 'Unauthorized' : '');
    return `${String(error.code)}${reason ? ` ${reason}` : ''}: ${error.serverMessage || error.message}`;
  }
  return error instanceof Error ? error.message : String(error);
}

/** The client for the cluster a Secret's kubeconfig names; throws with a message naming the Secret. */
async function clientFor(
  spec: RemoteClusterSpec,
  context: ProbeContext,
): Promise<CachedClient & { where: string }> {
  const ref = spec.kubeconfigSecretRef;
  const namespace = ref.namespace ?? context.namespace;
  const secret = secretWords(namespace, ref.name);
  if (namespace !== context.namespace)
    throw new Error(
      `cluster (from ${secret}): gatehouse reads Secrets only in its own namespace ${context.namespace}; move the kubeconfig Secret there`,
    );
  let object: { metadata?: { resourceVersion?: string }; data?: Record<string, string> };
  try {
    object = await context.rest.request(
      `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets/${encodeURIComponent(ref.name)}`,
      { signal: context.signal },
    );
  } catch (error) {
    throw new Error(`cluster (from ${secret}): cannot read the Secret: ${refusal(error)}`, { cause: error });
  }
  const resourceVersion = object.metadata?.resourceVersion ?? '';
  const key = `${namespace}/${ref.name}/${ref.key}`;
  const cached = clients.get(key);
  if (cached && cached.resourceVersion === resourceVersion && resourceVersion !== '')
    return { ...cached, where: `cluster ${cached.clusterName} (from ${secret})` };

  const encoded = object.data?.[ref.key];
  if (encoded === undefined)
    // Key names are not secret; their values are.
    throw new Error(
      `cluster (from ${secret}): the Secret has no key ${ref.key} (it has ${Object.keys(object.data ?? {}).join(', ') || 'no keys'})`,
    );
  let made: CachedClient;
  try {
    const { credentials, clusterName } = inlineKubeconfig(Buffer.from(encoded, 'base64').toString('utf8'));
    made = { resourceVersion, rest: new RestClient(credentials), clusterName: clusterName || ref.name };
  } catch (error) {
    // inlineKubeconfig's messages never quote the text; RestClient's name no content either.
    throw new Error(
      `cluster (from ${secret}): key ${ref.key} ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  clients.set(key, made);
  return { ...made, where: `cluster ${made.clusterName} (from ${secret})` };
}

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
  const client = await clientFor(spec, context);
  let result: ProbeResult;
  try {
    result = await probe({ ...context, rest: client.rest });
  } catch (error) {
    throw new Error(`${client.where}: ${refusal(error)}`, { cause: error });
  }
  return { ...result, message: `${client.where}: ${result.message}` };
}
