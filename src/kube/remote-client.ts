// A client for another cluster's API, made of a kubeconfig kept in a Secret of the
// controller's own namespace: used by probes (`cluster.kubeconfigSecretRef`,
// src/checks/remote-cluster.ts) and by the Cluster API mode (src/cluster-api), which
// watches the management cluster's Machines. The client made of a Secret is kept until
// the Secret changes (its resourceVersion), so asking for it costs one GET of the
// Secret, not a new TLS session. Every failure names the cluster and the Secret; no
// message carries the Secret's data (docs/security.md).
import { inlineKubeconfig } from './kubeconfig.ts';
import { KubeApiError, RestClient } from './rest.ts';

/** Where the kubeconfig is: a key of a Secret (absent namespace: the controller's own). */
export interface KubeconfigSecretRef {
  namespace?: string;
  name: string;
  key: string;
}

export interface RemoteClient {
  /** The Secret's resourceVersion the client was made of. */
  resourceVersion: string;
  rest: RestClient;
  /** The kubeconfig's cluster name, else the Secret's name. */
  clusterName: string;
  /** `cluster mgmt (from Secret gatehouse-system/mgmt-kubeconfig)`: how messages name it. */
  where: string;
}

/** One client per Secret key, replaced when the Secret's resourceVersion moves. */
const clients = new Map<string, Omit<RemoteClient, 'where'>>();

/** `Secret gatehouse/mgmt-kubeconfig`, the words every message about it starts from. */
function secretWords(namespace: string, name: string): string {
  return `Secret ${namespace}/${name}`;
}

/** What the API server said, without the request line (whose path is ours, not news). */
export function refusal(error: unknown): string {
  if (error instanceof KubeApiError) {
    const reason = error.reason || (error.code === 401 ? 'Unauthorized' : '');
    return `${String(error.code)}${reason ? ` ${reason}` : ''}: ${error.serverMessage || error.message}`;
  }
  return error instanceof Error ? error.message : String(error);
}

/**
 * The client for the cluster a Secret's kubeconfig names, read through `local` (this
 * cluster's client) in `ownNamespace`, the only namespace gatehouse reads Secrets in.
 * Throws with a message naming the Secret (and never its content).
 *
 * @example
 *   const mgmt = await remoteClient(rest, 'gatehouse-system', { name: 'mgmt-kubeconfig', key: 'value' });
 *   await mgmt.rest.request('/apis/cluster.x-k8s.io/v1beta2/machines');
 */
export async function remoteClient(
  local: RestClient,
  ownNamespace: string,
  ref: KubeconfigSecretRef,
  signal?: AbortSignal,
): Promise<RemoteClient> {
  const namespace = ref.namespace ?? ownNamespace;
  const secret = secretWords(namespace, ref.name);
  if (namespace !== ownNamespace)
    throw new Error(
      `cluster (from ${secret}): gatehouse reads Secrets only in its own namespace ${ownNamespace}; move the kubeconfig Secret there`,
    );
  let object: { metadata?: { resourceVersion?: string }; data?: Record<string, string> };
  try {
    object = await local.request(
      `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets/${encodeURIComponent(ref.name)}`,
      signal ? { signal } : {},
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
  let made: Omit<RemoteClient, 'where'>;
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
