// Remediation paused while an action takes its node away (issue 27, item 1). A bare-metal
// node rebooting into an upgrade sits in POST for minutes, NotReady, and a remediation
// controller (medik8s NodeHealthCheck) would take that for a dead node and power-cycle or
// reprovision it mid-upgrade. From its approval to its end, an action whose work takes
// its node away keeps the medik8s exclusion label on the node, marked as its own
// (talos.dev/remediation-paused-by), and takes it off at any end — Succeeded, Failed,
// Cancelled, undone — before it lets its finalizer go, so a controller killed in between
// takes it off when it resumes. A label it did not set is never touched, and none is put
// on for an action that has ended (the writer asks the API server, not the cache).
import type { NodeActionSpec, NodeActionStatus } from '../api/node-action.ts';
import { PHASES, isTerminal } from '../api/phases.ts';
import { governingPolicies, type PolicyFacts } from '../policies/evaluate.ts';
import { takesNodeAway } from './completions.ts';
import type { DecisionBuilder } from './decision.ts';

/**
 * The ActionPolicy that turns the pause off for this action (pauseRemediation: false),
 * if one of those governing it does; undefined: the pause is on (the default).
 */
export function remediationPauseOff(
  policies: readonly PolicyFacts[],
  spec: Pick<NodeActionSpec, 'action' | 'nodeName'>,
  labels: Record<string, string>,
): string | undefined {
  return governingPolicies(policies, spec, labels).find((p) => p.spec.pauseRemediation === false)?.name;
}

/**
 * Whether an action keeps remediation off its node now: approved, unfinished, and its work
 * takes the node away. The Node's label (below) and, in Cluster API mode, the Machine's
 * annotation (src/cluster-api) follow it.
 */
export function pausesRemediation(spec: NodeActionSpec, status: NodeActionStatus, osImage?: string): boolean {
  const phase = status.phase;
  return (
    phase !== undefined &&
    PHASES[phase].approved &&
    !isTerminal(phase) &&
    takesNodeAway(spec, status.execution, osImage)
  );
}

/**
 * In a pass that leaves the action unfinished: asks for the pause once the action is
 * approved and its node carries no exclusion label yet (one someone else set keeps the
 * node excluded already, and stays theirs).
 */
export function keepRemediationPaused(b: DecisionBuilder): void {
  const { node, status } = b;
  if (!node || b.input.remediationPauseOff !== undefined) return;
  if (!pausesRemediation(b.spec, status, node.osImage)) return;
  if (node.remediationExcluded) return;
  // Recorded before it is written (the status is written before the effects), so that an
  // end after a crash knows there may be a pause to take off.
  status.remediationPaused = true;
  b.effect({ type: 'remediation', op: 'pause' });
}

/**
 * For a finished (or deleted) action that still holds its finalizer: asks to take off the
 * pause it recorded putting on. The cache may not show a pause set in the pass before, so
 * the writer reads the node afresh (and takes off only this action's); the finalizer goes
 * after the effects, in the same pass, only if the write went through.
 */
export function resumeRemediation(b: DecisionBuilder, hasFinalizer: boolean): void {
  if (!hasFinalizer || b.status.remediationPaused !== true || b.node === undefined) return;
  b.effect({ type: 'remediation', op: 'resume' });
}
