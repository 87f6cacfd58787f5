// What holds a Managed action's drain, as its status shows it: status.drain (a bounded
// list of the pods whose eviction PodDisruptionBudgets refuse) and the condition
// DrainBlocked. Pure, so that the CLI and the dashboard word it as the controller does.
//
// The record is written only when it changes: it carries when each pod was first
// refused, never how long ago, so a drain held for an hour by the same budget writes
// its status once, not once per retry. Readers compute "waiting 3m12s" themselves.
import { DRAIN_BLOCKERS_LISTED, type DrainBlocker, type DrainRecord } from '../api/node-action.ts';

const key = (b: DrainBlocker) => `${b.namespace}/${b.pod}`;

/**
 * The record for the blockers the drain reports now, keeping the first-refused time an
 * earlier record had for the same pod (a drain made again after a restart is the same
 * wait); undefined when nothing is refused. At most DRAIN_BLOCKERS_LISTED are listed,
 * longest refused first; the rest are counted.
 */
export function drainRecord(
  recorded: DrainRecord | undefined,
  blockers: readonly DrainBlocker[],
): DrainRecord | undefined {
  if (blockers.length === 0) return undefined;
  const earlier = new Map((recorded?.blockers ?? []).map((b) => [key(b), b.since]));
  const merged = blockers.map((b) => {
    const since = earlier.get(key(b));
    return since !== undefined && since < b.since ? { ...b, since } : b;
  });
  merged.sort(
    (a, b) =>
      a.since.localeCompare(b.since) || a.namespace.localeCompare(b.namespace) || a.pod.localeCompare(b.pod),
  );
  const more = merged.length - DRAIN_BLOCKERS_LISTED;
  return { blockers: merged.slice(0, DRAIN_BLOCKERS_LISTED), ...(more > 0 ? { moreBlockers: more } : {}) };
}

/** "rook-ceph-osd-2 blocked by PodDisruptionBudget rook-ceph/osd-host-2 (0 disruptions allowed)" */
export function blockerWords(b: DrainBlocker): string {
  if (b.podDisruptionBudget === undefined)
    return `${b.namespace}/${b.pod} refused: ${b.message ?? 'no reason given'}`;
  const allowed = b.disruptionsAllowed ?? 0;
  return `${b.pod} blocked by PodDisruptionBudget ${b.namespace}/${b.podDisruptionBudget} (${String(allowed)} disruption${allowed === 1 ? '' : 's'} allowed)`;
}

/** How many pods the record says are refused, listed or not. */
export function blockedCount(record: DrainRecord | undefined): number {
  return (record?.blockers?.length ?? 0) + (record?.moreBlockers ?? 0);
}

/** When the longest-refused pod was first refused: since when the drain has been held. */
export function blockedSince(record: DrainRecord | undefined): string | undefined {
  return record?.blockers?.[0]?.since;
}

/** The record in words, naming at most `named` pods: the condition's message. */
export function drainHoldWords(record: DrainRecord | undefined, named = 3): string {
  const listed = record?.blockers ?? [];
  const rest = blockedCount(record) - Math.min(named, listed.length);
  return [
    ...listed.slice(0, named).map(blockerWords),
    ...(rest > 0 ? [`and ${String(rest)} more pod${rest === 1 ? '' : 's'}`] : []),
  ].join('; ');
}
