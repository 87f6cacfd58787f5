// The node's events, as MachineService.Events gives them, and what they can tell about a
// call. Talos keeps its events in memory, in a ring of 1000 with a gap of 10: a watch
// from the start (tail_events -1) sees the last 990 at most, not every event since boot
// (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_events.go). Every event counts
// toward those 990 — service states, tasks, phases — so a node up for a while may have
// forgotten the start of a sequence, and "no such sequence among its events" then says
// nothing. Event IDs are xids, whose first four bytes are the Unix time in seconds: the
// oldest event still kept says how far back the history reaches.

/** How many events a watch from the start can see at most (capacity 1000, gap 10). */
export const EVENT_HISTORY = 990;

/** One SequenceEvent (reboot, shutdown, reset, upgrade, stageUpgrade…) as the node sent it. */
export interface SequenceEventInfo {
  id: string;
  sequence: string;
  action: 'start' | 'stop' | 'noop';
  /** A NOOP's error: the sequence failed, or never started. */
  error?: string;
}

/** What a node still keeps of its events, as read from the start. */
export interface NodeEventHistory {
  sequences: SequenceEventInfo[];
  /** Events of every kind received (the empty first event aside). */
  kept: number;
  /** When the oldest of them was published (from its xid), if it could be read. */
  oldest: Date | undefined;
}

const BASE32HEX = '0123456789abcdefghijklmnopqrstuv';

/**
 * The time an xid encodes (its first four bytes, Unix seconds), or undefined for a
 * string that is no xid.
 *
 * @example xidTime('9m4e2mr0ui3e8a215n4g')?.toISOString() // '2011-03-22T17:50:19.000Z'
 */
export function xidTime(id: string): Date | undefined {
  if (!/^[0-9a-v]{20}$/.test(id)) return undefined;
  // The first 4 bytes (32 bits) are in the first 7 characters (35 bits) of the 20.
  let value = 0n;
  for (const c of id.slice(0, 7)) value = (value << 5n) | BigInt(BASE32HEX.indexOf(c));
  const seconds = Number(value >> 3n);
  return new Date(seconds * 1000);
}

export type CallReached =
  /** The node's events show the call's sequence started (or failed to start): it came. */
  | { reached: true; message: string }
  /** The node's history reaches back to before the call and shows no such sequence: it never came. */
  | { reached: false; message: string }
  /** The history the node still keeps may not reach back to the call: nothing can be said. */
  | { reached: undefined; message: string };

/**
 * How far before the call was recorded the oldest kept event must be, for its absence
 * to count: the controller's and the node's clocks differ a little, and an xid counts
 * whole seconds.
 */
export const CLOCK_MARGIN_MS = 30_000;

/**
 * Whether the node's events show that a call starting `sequence`, recorded at
 * `callTime`, reached it. A sequence the call starts appears as START, or as NOOP with
 * an error when it could not start (another sequence held the node): either way the
 * call came. Absent, it never came — only when nothing was forgotten (fewer events kept
 * than the ring holds) or the oldest event kept is older than the call.
 */
export function callReached(history: NodeEventHistory, sequence: string, callTime: Date): CallReached {
  const seen = history.sequences.find(
    (e) => e.sequence === sequence && (e.action === 'start' || e.action === 'noop'),
  );
  if (seen)
    return {
      reached: true,
      message:
        seen.action === 'start'
          ? `the node's events show a ${sequence} sequence started (event ${seen.id})`
          : `the node's events show a ${sequence} sequence that could not run (event ${seen.id}: ${seen.error ?? 'no error given'})`,
    };
  const complete = history.kept < EVENT_HISTORY;
  const reachesBack =
    history.oldest !== undefined && history.oldest.getTime() <= callTime.getTime() - CLOCK_MARGIN_MS;
  if (complete || reachesBack)
    return {
      reached: false,
      message: complete
        ? `the node's ${String(history.kept)} events since it booted show no ${sequence} sequence`
        : `the node's last ${String(history.kept)} events, back to ${history.oldest?.toISOString() ?? '?'} (before the call), show no ${sequence} sequence`,
    };
  return {
    reached: undefined,
    message: `the node keeps only its last ${String(history.kept)} events, ${history.oldest ? `back to ${history.oldest.toISOString()}` : 'of unknown age'}, which may not reach back to the call (${callTime.toISOString()}): whether it came is unknown`,
  };
}
