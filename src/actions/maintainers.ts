// Other maintainers (issue 27, item 2). A node someone else is maintaining is not taken by
// gatehouse: an action that would take it away waits at the health gate, beside the
// checks (as builtin:maintainers in status.checks), naming the holder —
//   - a medik8s NodeMaintenance of the node (node-maintenance-operator cordons, drains and
//     holds the node while one exists), until it is deleted;
//   - the per-node Lease medik8s operators share, held by one of them and not expired;
//   - a node cordoned by someone else, for an action gatehouse would cordon and drain
//     itself (Managed), unless every ActionPolicy governing it says allowForeignCordon —
//     and then the cordon stays theirs: gatehouse never lifts a cordon it did not make.
// Pure: the NodeMaintenances are read for the gate (neighbours-read.ts).
import { MEDIK8S_LEASE_HOLDER } from '../api/names.ts';
import type { NodeActionSpec, NodeActionStatus } from '../api/node-action.ts';
import { governingPolicies, type PolicyFacts } from '../policies/evaluate.ts';
import type { MaintenanceLeaseFacts, NodeMaintenanceFacts } from './neighbours.ts';

export const MAINTAINERS_CHECK = 'builtin:maintainers';

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

/**
 * Whether a Managed action may cordon and drain a node someone else cordoned: only when
 * ActionPolicies govern it and every one says allowForeignCordon (the most restrictive
 * wins, as for budgets); never without a policy.
 */
export function foreignCordonAllowed(
  policies: readonly PolicyFacts[],
  spec: Pick<NodeActionSpec, 'action' | 'nodeName'>,
  labels: Record<string, string>,
): boolean {
  const governing = governingPolicies(policies, spec, labels);
  return governing.length > 0 && governing.every((p) => p.spec.allowForeignCordon === true);
}

export interface MaintainersInput {
  nodeName: string;
  maintenances: readonly NodeMaintenanceFacts[];
  lease?: MaintenanceLeaseFacts;
  /** Why the node's neighbours could not be read: nobody can tell who holds it (fail closed). */
  readError?: string;
  /** The node is cordoned, and not by this action. */
  foreignCordon: boolean;
  /** The action would cordon and drain the node itself (Managed). */
  drainsItself: boolean;
  allowForeignCordon: boolean;
  /** The record of an earlier pass, if any. */
  recorded?: CheckResult;
  now: Date;
}

/** Who else holds the node, in words; empty when nobody does. */
export function otherMaintainers(input: MaintainersInput): string[] {
  const { nodeName } = input;
  const held = input.maintenances
    .filter((m) => !m.deleting)
    .map(
      (m) =>
        `NodeMaintenance ${m.name}${m.note ? ` ("${m.note}")` : ''}${m.phase ? ` (${m.phase})` : ''} holds node ${nodeName}: gatehouse waits until it is deleted`,
    );
  if (input.readError !== undefined)
    held.push(`who else maintains node ${nodeName} could not be read: ${input.readError}`);
  const lease = input.lease;
  if (
    lease?.holder !== undefined &&
    lease.holder !== MEDIK8S_LEASE_HOLDER &&
    lease.expires !== undefined &&
    Date.parse(lease.expires) > input.now.getTime()
  )
    held.push(
      `Lease ${lease.lease} is held by ${lease.holder} until ${lease.expires}: a medik8s operator maintains node ${nodeName}`,
    );
  if (input.foreignCordon && input.drainsItself && !input.allowForeignCordon)
    held.push(
      `node ${nodeName} is cordoned, not by gatehouse: someone may be working on it (kubectl uncordon ${nodeName} when they are done, or let an ActionPolicy say allowForeignCordon: true, which leaves their cordon in place)`,
    );
  return held;
}

/** The builtin:maintainers result for status.checks; undefined when nobody holds the node, nor did. */
export function judgeMaintainers(input: MaintainersInput): CheckResult | undefined {
  const held = otherMaintainers(input);
  const at = input.now.toISOString();
  if (held.length > 0)
    return {
      name: MAINTAINERS_CHECK,
      healthy: false,
      probeTime: at,
      message: held.join('; ').slice(0, 4096),
    };
  if (input.recorded === undefined) return undefined;
  return {
    name: MAINTAINERS_CHECK,
    healthy: true,
    probeTime: at,
    message: `no other maintainer holds node ${input.nodeName} any more`,
  };
}
