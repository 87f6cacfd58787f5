// The NodeAction state machine, as a pure function of what the controller observes:
// the action, its node, the checks, the hooks, the hook Jobs and webhook calls, and the
// time (observations.ts). It returns the next status and the effects that carry it out
// (decision.ts); the reconciler (reconciler.ts) only gathers the observations and
// applies the decision. Each phase has its handler (phases/table.ts):
//
//   Pending ─(admission: policies allow it; admission.ts)→ WaitingForHealth ─(fresh
//   checks all healthy)→ RunningPreHooks ─(every matching pre-hook succeeded)→ Approved
//   ─(executed mark, or the node changes)→ WaitingForNode ─(new boot, Ready)→
//   RunningPostHooks ─(the boot reconciler's record: the node's boot hooks done)→ Succeeded
//   (Managed, with the Talos executor: Approved → Executing ─(prepare, drain, install,
//   then the Talos call, recorded before it is made)→ WaitingForNode; phases/executing.ts)
//   and Failed (a deadline, a failed hook, a vanished node), Denied (no such node),
//   Cancelled (deleted before it finished). An action that ended so without having
//   touched its node undoes what its pre-action hooks prepared (phases/undo.ts).
//
// Leaving Pending is the one transition this function never makes: it takes a slot of
// the policies' budgets, and budgets are judged across actions, one admission at a
// time (admission.ts). Everything else about one action is decided here.
import { NODE_ACTION_FINALIZER } from '../api/names.ts';
import type { NodeActionPhase } from '../api/node-action.ts';
import { isTerminal } from '../api/phases.ts';
import { clip } from '../hooks/plan.ts';
import { formatDuration } from '../duration.ts';
import { DecisionBuilder, type ActionDecision } from './decision.ts';
import { doNotDisruptAllowance } from './do-not-disrupt.ts';
import type { ActionInput } from './observations.ts';
import { PHASE_DEADLINES, phaseDeadlineMs } from './phases/deadlines.ts';
import { postChecksAllowance } from './phases/post-checks.ts';
import { requested } from './phases/pending.ts';
import { approvalAllowance } from './phases/person-approval.ts';
import { PHASE_HANDLERS } from './phases/table.ts';
import { settle } from './phases/undo.ts';
import { keepMedik8sLease, releaseMedik8sLease } from './medik8s-lease.ts';
import { keepRemediationPaused, resumeRemediation } from './remediation.ts';

export type { ActionDecision, ActionEffect } from './decision.ts';
export type { ActionInput, CheckFacts, FreshChecks, NodeFacts } from './observations.ts';

/** How many phases one pass may go through: more than the longest chain, less than a loop. */
const MAX_STEPS = 12;

export function decide(input: ActionInput): ActionDecision {
  const b = new DecisionBuilder(input);
  const { action, now, status } = b;
  const hasFinalizer = (action.metadata.finalizers ?? []).includes(NODE_ACTION_FINALIZER);

  // Deleted: cancel what is unfinished, stop its Jobs, then let it go.
  if (action.metadata.deletionTimestamp) {
    if (!isTerminal(status.phase))
      b.end('Cancelled', `deleted before it finished (it was ${status.phase ?? 'new'})`);
    const clean = b.cleanUp();
    // The finalizer also waits for the undo of the pre-action hooks (phases/undo.ts); the
    // remediation pause comes off the node before it goes (remediation.ts).
    const undone = settle(b);
    resumeRemediation(b, hasFinalizer);
    releaseMedik8sLease(b, hasFinalizer);
    return b.build({ removeFinalizer: hasFinalizer && clean && undone });
  }
  if (isTerminal(status.phase)) {
    const clean = b.cleanUp();
    const undone = settle(b);
    resumeRemediation(b, hasFinalizer);
    releaseMedik8sLease(b, hasFinalizer);
    return b.build({ removeFinalizer: hasFinalizer && clean && undone });
  }
  if (!hasFinalizer) return b.build({ addFinalizer: true });

  if (status.phase === undefined) requested(b);
  status.observedGeneration = action.metadata.generation;

  for (let steps = 0; steps < MAX_STEPS; steps++) {
    const phase = status.phase as NodeActionPhase;
    if (isTerminal(phase)) break;
    const deadlineMs = phaseDeadlineMs(
      b.spec,
      phase,
      phase === 'WaitingForHealth'
        ? doNotDisruptAllowance(input)
        : phase === 'RunningPreHooks'
          ? approvalAllowance(input)
          : phase === 'RunningPostHooks'
            ? postChecksAllowance(b.spec)
            : 0,
    );
    const since = Date.parse(status.phaseTime ?? status.startTime ?? now.toISOString());
    if (deadlineMs !== undefined && now.getTime() - since >= deadlineMs) {
      const d = PHASE_DEADLINES[phase];
      b.end(
        'Failed',
        `${d?.what ?? phase} for longer than deadlines.${d?.field ?? phase} (${formatDuration(deadlineMs)}): ${status.message ?? ''}`,
      );
      break;
    }
    if (deadlineMs !== undefined) b.wake(since + deadlineMs - now.getTime());
    PHASE_HANDLERS[phase](b);
    // Approved is always written as it is: a requester waits to see it before acting.
    if (status.phase === phase || status.phase === 'Approved' || b.evaluating) break;
  }
  // The CRD bounds messages; a long one (a Job the API server refused, with every field
  // error) must not make the status unwritable.
  if (status.message !== undefined) status.message = clip(status.message, 32768);
  if (isTerminal(status.phase)) {
    const clean = b.cleanUp();
    const undone = settle(b);
    resumeRemediation(b, true);
    releaseMedik8sLease(b, true);
    return b.build({ removeFinalizer: clean && undone });
  }
  if (!b.evaluating) {
    keepRemediationPaused(b);
    keepMedik8sLease(b);
  }
  return b.build();
}
