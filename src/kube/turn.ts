// The turn: one coordination.k8s.io Lease that every controller instance of a cluster
// passes around, so that the steps the safety invariants need serialised across
// instances — an admission (never two actions on one node, never two control-plane
// nodes at once) and a control-plane approval (the etcd guard) — never run in two
// instances at once, and each holder sees every earlier holder's writes.
//
// The holder keeps the turn while nobody else asks for it (a lone instance pays nothing
// per gate), renews it like a leader lease, and hands it to an instance that asks once
// its own steps in flight are done. An instance that asks writes its name in an
// annotation; the holder writes the asker's name as the next holder, which the asker
// confirms by renewing. Time works as in client-go's leader election: a holder stops
// at its renew deadline; anyone else takes over only after watching the lease go
// unchanged for a whole lease duration on its own clock.
//
// This file is the protocol's pure core: what to do next, and whether the turn is ours.
// src/kube/turn-lease.ts carries it out.

/** The annotation on the turn's Lease naming the replica that asks for the turn next. */
export const TURN_WANTED_ANNOTATION = 'talos.dev/turn-wanted-by';

/** The turn's Lease, as the protocol reads it. */
export interface TurnRecord {
  /** spec.holderIdentity: `<instance>/<replica>`; empty or absent: free. */
  holder?: string;
  /** Who asks for the turn next (TURN_WANTED_ANNOTATION). */
  wanted?: string;
  /** spec.leaseDurationSeconds, in milliseconds. */
  durationMs: number;
}

export interface TurnTiming {
  /** How long others wait, watching the lease unchanged, before they take it over. */
  leaseDurationMs: number;
  /** How long after our last renewal we still count the turn as ours (shorter). */
  renewDeadlineMs: number;
  /** How often the holder renews. */
  retryPeriodMs: number;
  /**
   * How long a new holder keeps the turn for the steps that waited for it, even if
   * another asks meanwhile: without it, two busy instances could hand it back and forth
   * before either's waiting step began.
   */
  graceMs: number;
}

export const DEFAULT_TURN_TIMING: TurnTiming = {
  leaseDurationMs: 15_000,
  renewDeadlineMs: 10_000,
  retryPeriodMs: 2_000,
  graceMs: 500,
};

export interface TurnView {
  /** This replica: `<instance>/<replica>`. */
  identity: string;
  /** Whether this replica takes part: it leads its instance (or runs alone). */
  active: boolean;
  /** Whether something of ours waits for the turn. */
  wanting: boolean;
  /** Whether steps of ours that need the turn are in flight. */
  busy: boolean;
  /** The lease as last read; undefined: there is none. */
  lease: TurnRecord | undefined;
  /** When (our clock, ms) the lease's holder or duration last changed as we saw it. */
  observedAt: number;
  /** When we sent our last write that the API server took while holding (our clock); undefined: none. */
  renewedAt?: number;
  /** When (our clock) the turn last became ours; undefined: it is not. */
  acquiredAt?: number;
  now: number;
  timing: TurnTiming;
}

export type TurnStep =
  /** No lease yet: create it, held by us. */
  | { type: 'create' }
  /** Ours: renew it (the first renewal after a handover to us is how we take it). */
  | { type: 'renew' }
  /** Free, expired, or held by another replica of our own instance: take it. */
  | { type: 'take' }
  /** Ours, and someone else asks (or we stop taking part): hand it to them (`to` empty: free). */
  | { type: 'handOver'; to: string }
  /** Another's: ask for it. */
  | { type: 'ask' }
  /** Nothing to do until then, or until the lease or our needs change. */
  | { type: 'wait'; inMs: number };

/** The instance part of an identity: `(default)` for the unnamed instance. */
export function instanceOf(identity: string | undefined): string | undefined {
  if (!identity) return undefined;
  const slash = identity.lastIndexOf('/');
  return slash < 0 ? identity : identity.slice(0, slash);
}

/** A replica's identity in the turn: its instance, then something unique to the replica. */
export function turnIdentity(instance: string | undefined, replica: string): string {
  // Parentheses are in no label value, so no named instance can pass for the default one.
  return `${instance ?? '(default)'}/${replica}`;
}

/**
 * Whether the turn is ours now, by our own clock: we hold the lease and renewed it
 * within the renew deadline, and we take part. A step begun under it checks this again
 * just before the write that needs it.
 */
export function holdsTurn(v: TurnView): boolean {
  return (
    v.active &&
    v.lease?.holder === v.identity &&
    v.renewedAt !== undefined &&
    v.now - v.renewedAt < v.timing.renewDeadlineMs
  );
}

/** Whether the turn became ours less than graceMs ago: the steps that waited for it go first. */
function inGrace(v: TurnView): boolean {
  return v.acquiredAt !== undefined && v.now - v.acquiredAt < v.timing.graceMs;
}

/** Whether a new step may begin under the turn: ours, and nobody else asks for it (or it is just ours). */
export function mayBegin(v: TurnView): boolean {
  const wanted = v.lease?.wanted;
  return holdsTurn(v) && (!wanted || wanted === v.identity || inGrace(v));
}

/**
 * Whether the lease's holder is another replica of our instance. Leader election lets
 * only one replica of an instance act at a time (and a replica started without it
 * promises to be alone), so a new leader — or a restarted lone replica — takes over at
 * once what its predecessor held, instead of waiting for the lease to expire.
 */
function heldByOurInstance(v: TurnView): boolean {
  const holder = v.lease?.holder;
  return !!holder && holder !== v.identity && instanceOf(holder) === instanceOf(v.identity);
}

export function turnStep(v: TurnView): TurnStep {
  const { lease, timing } = v;
  const mine = lease?.holder === v.identity;
  if (!v.active) {
    // Not leading (any more): what we hold goes to whoever asked, or is freed.
    if (mine && !v.busy)
      return { type: 'handOver', to: lease.wanted === v.identity ? '' : (lease.wanted ?? '') };
    return { type: 'wait', inMs: timing.retryPeriodMs };
  }
  if (!lease) return { type: 'create' };
  if (mine) {
    const wanted = lease.wanted;
    const asked = wanted && wanted !== v.identity;
    if (asked && !v.busy && !inGrace(v)) return { type: 'handOver', to: wanted };
    const since = v.renewedAt === undefined ? Infinity : v.now - v.renewedAt;
    if (since >= timing.retryPeriodMs) return { type: 'renew' };
    const graceLeft =
      asked && v.acquiredAt !== undefined ? timing.graceMs - (v.now - v.acquiredAt) : Infinity;
    return { type: 'wait', inMs: Math.max(1, Math.min(timing.retryPeriodMs - since, graceLeft)) };
  }
  const expiresIn = lease.durationMs - (v.now - v.observedAt);
  // Free, expired, or our own instance's: taken whether or not we need it now, so that
  // a lone instance holds it before its first gate.
  if (!lease.holder || expiresIn < 0 || heldByOurInstance(v)) return { type: 'take' };
  if (v.wanting && lease.wanted !== v.identity) return { type: 'ask' };
  return { type: 'wait', inMs: Math.min(timing.retryPeriodMs, expiresIn + 1) };
}
