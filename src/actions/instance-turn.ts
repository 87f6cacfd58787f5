// What the action reconciler does with the turn (src/kube/turn.ts): the steps that must
// never run in two controller instances at once — an admission pass, and the etcd
// guard's read through to the approval written on it — run under it; an instance
// without the turn asks for it, and its actions say what they wait for.
import type { TurnLease, TurnSection } from '../kube/turn-lease.ts';
import { ADMISSION_RESYNC_MS, type AdmissionPlan } from './admission.ts';

/**
 * How soon an action whose etcd guard waits for the turn looks again, should the turn's
 * arrival (which brings it back at once) not come first.
 */
export const TURN_RETRY_MS = 2000;

/** The section of a controller without a turn (alone by construction: tests of one reconciler). */
export const ALONE: TurnSection = { valid: () => true, release: () => undefined };

/** Enters the turn, or undefined (and asks for it) when another instance has it. */
export function enterTurn(turn: TurnLease | undefined): TurnSection | undefined {
  return turn ? turn.enter() : ALONE;
}

/** Why a step waits for the turn, in words. */
export function turnHeldElsewhere(turn: TurnLease | undefined): string {
  const holder = turn?.holderInstance();
  return `controller instance ${holder ?? '(none yet)'} has the turn (Lease ${turn?.where ?? '?'}) that every instance takes to admit actions and approve control-plane ones; asked for it`;
}

/**
 * The plan of a pass made without the turn: nothing admitted, and the actions it would
 * have admitted told that they wait for their turn (their policies allow them).
 */
export function waitingForTurn(plan: AdmissionPlan, turn: TurnLease | undefined): AdmissionPlan {
  const message = `allowed by its policies; waiting for its turn to take a slot: ${turnHeldElsewhere(turn)}`;
  // The action as listed (a new one: as its own decision records it, requested and
  // Pending), with the message; the admission's status is not written.
  const told = plan.admit
    .filter(({ action }) => action.status?.message !== message)
    .map(({ action }) => ({ action, status: { ...action.status, phase: 'Pending' as const, message } }));
  const admitted = new Set(plan.admit.map((u) => u.action.metadata.name));
  return {
    admit: [],
    wait: [...plan.wait, ...told],
    holders: plan.holders.filter((h) => !admitted.has(h.name)),
    requeueAfterMs: Math.min(plan.requeueAfterMs ?? ADMISSION_RESYNC_MS, ADMISSION_RESYNC_MS),
  };
}
