// Others wait for gatehouse (issue 27, item 2): medik8s operators coordinate through one
// Lease per node (medik8s-leases/node-<node>); while an action of gatehouse's takes its
// node away, gatehouse holds that Lease (holder "gatehouse", annotated with the action),
// so that node-maintenance-operator and the remediators wait in turn.
//
// Taken at approval, after a last read of the node's neighbours (another maintainer who
// came during the pre-action hooks holds the approval), renewed every 20 minutes of its
// hour, and given back at any end before the finalizer goes; recorded in the status
// before it is written, like the remediation pause. Only where the namespace exists
// (medik8s is installed). Pure: the writes are medik8s-lease-writes.ts's.
import { isTerminal, PHASES } from '../api/phases.ts';
import type { DecisionBuilder } from './decision.ts';
import { otherMaintainers } from './maintainers.ts';
import { maintainersInput, neighboursApply } from './phases/neighbour-holds.ts';

/** How long the Lease runs without a renewal (as medik8s operators take theirs). */
export const MEDIK8S_LEASE_SECONDS = 3600;
/** How often it is renewed while the action runs. */
export const MEDIK8S_LEASE_RENEW_MS = 20 * 60_000;
/** How often an approval held by another maintainer looks again. */
const APPROVAL_RETRY_MS = 5000;

/**
 * At approval: nobody else maintains the node now (a fresh read), and the action takes
 * the node's medik8s Lease with its approval. False: the approval waits (for the read, or
 * for the other maintainer).
 */
export function approvalTakesLease(b: DecisionBuilder): boolean {
  const { input, status, now } = b;
  if (!neighboursApply(b)) return true;
  const read = input.neighbours;
  if (!read) {
    b.readNeighbours();
    return false;
  }
  if (!b.spec.bypass?.healthChecks) {
    const others = otherMaintainers(maintainersInput(b));
    if (others.length > 0) {
      b.say(`pre-action hooks done; waiting for another maintainer before approval: ${others.join('; ')}`);
      b.wake(APPROVAL_RETRY_MS);
      return false;
    }
  }
  if (read.medik8s === true) {
    status.medik8sLease = { renewTime: now.toISOString() };
    b.effect({ type: 'medik8sLease', op: 'take' });
  }
  return true;
}

/** While the approved action runs: renews the Lease it holds when a renewal is due. */
export function keepMedik8sLease(b: DecisionBuilder): void {
  const { status, now } = b;
  const held = status.medik8sLease;
  if (!held || status.phase === undefined || !PHASES[status.phase].approved || isTerminal(status.phase))
    return;
  const due = Date.parse(held.renewTime) + MEDIK8S_LEASE_RENEW_MS;
  if (now.getTime() < due) {
    b.wake(due - now.getTime());
    return;
  }
  status.medik8sLease = { renewTime: now.toISOString() };
  b.effect({ type: 'medik8sLease', op: 'renew' });
  b.wake(MEDIK8S_LEASE_RENEW_MS);
}

/** For a finished (or deleted) action that still holds its finalizer: gives the Lease back. */
export function releaseMedik8sLease(b: DecisionBuilder, hasFinalizer: boolean): void {
  if (!hasFinalizer || b.status.medik8sLease === undefined) return;
  b.effect({ type: 'medik8sLease', op: 'release' });
}
