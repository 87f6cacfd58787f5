// Who else has a say about a node, read for the health gate's decision (neighbours-read.ts):
// workload owners, through the do-not-disrupt annotation of its Pods (do-not-disrupt.ts),
// and other maintainers, through medik8s NodeMaintenances and the per-node Lease medik8s
// operators share (maintainers.ts).

/** Something on the node that asks not to be disrupted: "Pod NS/NAME" or "Node NAME", and its value. */
export interface DoNotDisruptHolder {
  what: string;
  value: string;
}

/** A medik8s NodeMaintenance of the node (nodemaintenance.medik8s.io/v1beta1). */
export interface NodeMaintenanceFacts {
  name: string;
  /** spec.reason, in its author's words. */
  note?: string;
  /** status.phase: Running, Succeeded or Failed. */
  phase?: string;
  /** Being deleted: its maintenance is ending. */
  deleting: boolean;
}

/**
 * The per-node Lease medik8s operators share (namespace medik8s-leases, name
 * node-<node>): whoever holds it, unexpired, is maintaining the node.
 */
export interface MaintenanceLeaseFacts {
  /** namespace/name */
  lease: string;
  holder?: string;
  /** The action gatehouse holds it for (annotation talos.dev/held-for), when it does. */
  heldFor?: string;
  /** When it lapses unless renewed: (renewTime or acquireTime) + leaseDurationSeconds. */
  expires?: string;
}

export interface NodeNeighbours {
  at: Date;
  /** The node's running Pods that carry talos.dev/do-not-disrupt. */
  pods: readonly DoNotDisruptHolder[];
  /** The NodeMaintenances of the node (none where the CRD is not installed). */
  maintenances?: readonly NodeMaintenanceFacts[];
  /** The node's medik8s maintenance Lease, when there is one. */
  lease?: MaintenanceLeaseFacts;
  /** The medik8s Lease namespace exists: gatehouse takes the node's Lease while it works. */
  medik8s?: boolean;
  /** Why the node's neighbours could not be read: the gate holds this action (fail closed) and says so. */
  error?: string;
}
