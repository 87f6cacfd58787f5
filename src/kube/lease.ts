// What leader election (leader.ts) and the turn (turn-lease.ts) share of a
// coordination.k8s.io Lease: where it is, and one as its first holder creates it.

/** The collection of Leases in a namespace, or one of them. */
export function leasesPath(namespace: string, name?: string): string {
  const base = `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`;
  return name ? `${base}/${name}` : base;
}

/** A new Lease, held by `identity` from `now` (RFC 3339 with microseconds). */
export function newLease(o: {
  namespace: string;
  name: string;
  identity: string;
  durationSeconds: number;
  now: string;
}): Record<string, unknown> {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name: o.name, namespace: o.namespace },
    spec: {
      holderIdentity: o.identity,
      leaseDurationSeconds: o.durationSeconds,
      acquireTime: o.now,
      renewTime: o.now,
      leaseTransitions: 0,
    },
  };
}
