// The writes of the medik8s Lease gatehouse holds for an action (medik8s-lease.ts): taken
// (created, or updated when free, expired or already gatehouse's), renewed, and deleted
// when given back — each conditional on the version read, and never over a Lease another
// operator holds unexpired, nor deleting one held for another action.
import { LEASE_HELD_FOR_ANNOTATION, MEDIK8S_LEASE_HOLDER } from '../api/names.ts';
import type { RestClient } from '../kube/rest.ts';
import { MEDIK8S_LEASE_SECONDS } from './medik8s-lease.ts';
import {
  MEDIK8S_LEASE_NAMESPACE,
  leaseExpiry,
  medik8sLeasePath,
  readMedik8sLease as read,
  type LeaseObject,
} from './neighbours-read.ts';

/** A Lease's MicroTime: RFC 3339 with microseconds. */
function microTime(at: Date): string {
  return at.toISOString().replace(/Z$/, '000Z');
}

function expired(lease: LeaseObject, now: Date): boolean {
  return (leaseExpiry(lease)?.getTime() ?? 0) <= now.getTime();
}

export type LeaseOutcome = 'held' | 'theirs';

/**
 * Takes (or renews) the node's Lease for `action`. 'theirs': another operator holds it
 * unexpired, and it is left alone. A conflict (someone wrote in between) throws.
 */
export async function holdMedik8sLease(
  rest: RestClient,
  node: string,
  action: string,
): Promise<LeaseOutcome> {
  const now = new Date();
  const lease = await read(rest, node);
  const ours = lease?.spec?.holderIdentity === MEDIK8S_LEASE_HOLDER;
  if (lease && !ours && !expired(lease, now)) return 'theirs';
  const sameHolder = ours && lease.metadata.annotations?.[LEASE_HELD_FOR_ANNOTATION] === action;
  const spec = {
    holderIdentity: MEDIK8S_LEASE_HOLDER,
    leaseDurationSeconds: MEDIK8S_LEASE_SECONDS,
    acquireTime: sameHolder ? (lease.spec?.acquireTime ?? microTime(now)) : microTime(now),
    renewTime: microTime(now),
    leaseTransitions: (lease?.spec?.leaseTransitions ?? 0) + (lease && !sameHolder ? 1 : 0),
  };
  const metadata = {
    name: `node-${node}`,
    namespace: MEDIK8S_LEASE_NAMESPACE,
    annotations: { ...lease?.metadata.annotations, [LEASE_HELD_FOR_ANNOTATION]: action },
  };
  if (!lease) {
    await rest.request(`/apis/coordination.k8s.io/v1/namespaces/${MEDIK8S_LEASE_NAMESPACE}/leases`, {
      method: 'POST',
      body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata, spec },
    });
    return 'held';
  }
  await rest.request(medik8sLeasePath(node), {
    method: 'PUT',
    body: {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { ...metadata, resourceVersion: lease.metadata.resourceVersion },
      spec,
    },
  });
  return 'held';
}

/** Deletes the node's Lease if it is held for `action`; returns whether it did. */
export async function releaseMedik8sLeaseFor(
  rest: RestClient,
  node: string,
  action: string,
): Promise<boolean> {
  const lease = await read(rest, node);
  if (
    lease?.spec?.holderIdentity !== MEDIK8S_LEASE_HOLDER ||
    lease.metadata.annotations?.[LEASE_HELD_FOR_ANNOTATION] !== action
  )
    return false;
  await rest.request(medik8sLeasePath(node), {
    method: 'DELETE',
    body: {
      apiVersion: 'v1',
      kind: 'DeleteOptions',
      preconditions: { resourceVersion: lease.metadata.resourceVersion },
    },
  });
  return true;
}
