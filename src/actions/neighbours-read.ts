// The read behind the health gate's neighbours (neighbours.ts): the Pods of a node that
// still run and carry talos.dev/do-not-disrupt, and the medik8s NodeMaintenances of the
// node. Made for the gate's decision, never from a cache of every Pod in the cluster.
//
// The Pods: their metadata only (a node's Pods may be many and large; only the annotation
// and the name matter), served by the API server's watch cache (resourceVersion 0,
// indexed by node): cheap, and at most a moment behind — a "not now" asked ahead of time,
// not a lock. The NodeMaintenances: every one (one per node under maintenance at most, a
// handful), none where the CRD is not installed.
import { DO_NOT_DISRUPT_ANNOTATION, LEASE_HELD_FOR_ANNOTATION } from '../api/names.ts';
import { KubeApiError } from '../kube/rest.ts';
import type { RestClient } from '../kube/rest.ts';
import type { MaintenanceLeaseFacts, NodeMaintenanceFacts, NodeNeighbours } from './neighbours.ts';

interface PodMetadata {
  metadata: {
    name: string;
    namespace?: string;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
  };
}

interface NodeMaintenanceObject {
  metadata: { name: string; deletionTimestamp?: string };
  spec?: { nodeName?: string; reason?: string };
  status?: { phase?: string };
}

/** Where medik8s operators keep their per-node Leases (their common library's default). */
export const MEDIK8S_LEASE_NAMESPACE = 'medik8s-leases';

/** medik8s node-maintenance-operator's NodeMaintenances (cluster-scoped). */
export const NODE_MAINTENANCES_PATH = '/apis/nodemaintenance.medik8s.io/v1beta1/nodemaintenances';

const METADATA_ONLY = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json';

async function doNotDisruptPods(rest: RestClient, node: string): Promise<NodeNeighbours['pods']> {
  // An empty PartialObjectMetadataList has `items: null`.
  const list = await rest.request<{ items: PodMetadata[] | null }>('/api/v1/pods', {
    query: {
      fieldSelector: `spec.nodeName=${node},status.phase!=Succeeded,status.phase!=Failed`,
      resourceVersion: '0',
    },
    headers: { Accept: METADATA_ONLY },
  });
  const pods = (list.items ?? []).flatMap((p) => {
    const value = p.metadata.annotations?.[DO_NOT_DISRUPT_ANNOTATION];
    // A Pod being deleted is leaving anyway: it holds nothing.
    if (value === undefined || p.metadata.deletionTimestamp !== undefined) return [];
    return [{ what: `Pod ${p.metadata.namespace ?? ''}/${p.metadata.name}`, value }];
  });
  return pods.sort((a, b) => a.what.localeCompare(b.what));
}

async function nodeMaintenances(rest: RestClient, node: string): Promise<NodeMaintenanceFacts[]> {
  let list: { items: NodeMaintenanceObject[] };
  try {
    list = await rest.request<{ items: NodeMaintenanceObject[] }>(NODE_MAINTENANCES_PATH);
  } catch (error) {
    // The CRD is not installed: nobody maintains nodes that way here.
    if (error instanceof KubeApiError && error.code === 404) return [];
    throw error;
  }
  return list.items
    .filter((m) => m.spec?.nodeName === node)
    .map((m) => ({
      name: m.metadata.name,
      deleting: m.metadata.deletionTimestamp !== undefined,
      ...(m.spec?.reason ? { note: m.spec.reason } : {}),
      ...(m.status?.phase ? { phase: m.status.phase } : {}),
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** A coordination.k8s.io/v1 Lease, as far as gatehouse reads and writes it. */
export interface LeaseObject {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

/** When a Lease lapses unless renewed: (renewTime or acquireTime) + leaseDurationSeconds; undefined: it has no term. */
export function leaseExpiry(lease: LeaseObject): Date | undefined {
  const spec = lease.spec ?? {};
  const since = Date.parse(spec.renewTime ?? spec.acquireTime ?? '');
  return Number.isNaN(since) || spec.leaseDurationSeconds === undefined
    ? undefined
    : new Date(since + spec.leaseDurationSeconds * 1000);
}

/** The node's medik8s Lease as the API server has it; undefined when there is none. */
export async function readMedik8sLease(rest: RestClient, node: string): Promise<LeaseObject | undefined> {
  try {
    return await rest.request<LeaseObject>(medik8sLeasePath(node));
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 404) return undefined;
    throw error;
  }
}

/** The path of the node's medik8s Lease. */
export function medik8sLeasePath(node: string): string {
  return `/apis/coordination.k8s.io/v1/namespaces/${MEDIK8S_LEASE_NAMESPACE}/leases/${encodeURIComponent(`node-${node}`)}`;
}

/** Whether medik8s's Lease namespace exists (asked only when the node has no Lease). */
async function medik8sPresent(rest: RestClient): Promise<boolean> {
  try {
    await rest.request(`/api/v1/namespaces/${MEDIK8S_LEASE_NAMESPACE}`);
    return true;
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 404) return false;
    throw error;
  }
}

/** The node's medik8s Lease (node-<node>), undefined when there is none. */
async function maintenanceLease(rest: RestClient, node: string): Promise<MaintenanceLeaseFacts | undefined> {
  const lease = await readMedik8sLease(rest, node);
  if (!lease) return undefined;
  const heldFor = lease.metadata.annotations?.[LEASE_HELD_FOR_ANNOTATION];
  const holder = lease.spec?.holderIdentity;
  const expires = leaseExpiry(lease);
  return {
    lease: `${MEDIK8S_LEASE_NAMESPACE}/node-${node}`,
    ...(holder ? { holder } : {}),
    ...(heldFor ? { heldFor } : {}),
    ...(expires ? { expires: expires.toISOString() } : {}),
  };
}

export async function readNeighbours(rest: RestClient, node: string): Promise<NodeNeighbours> {
  const [pods, maintenances, lease] = await Promise.all([
    doNotDisruptPods(rest, node),
    nodeMaintenances(rest, node),
    maintenanceLease(rest, node),
  ]);
  const medik8s = lease !== undefined || (await medik8sPresent(rest));
  return { at: new Date(), pods, maintenances, medik8s, ...(lease ? { lease } : {}) };
}
