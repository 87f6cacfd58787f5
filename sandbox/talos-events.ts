// The simulated node's events, as Talos keeps them (internal/app/machined/pkg/runtime/
// v1alpha1/v1alpha1_events.go): in memory, a ring of 1000 with a gap of 10, so a watch
// from the start sees the last 990 at most — not every event since boot. Each sequence
// publishes START when it begins, STOP when it ends, and NOOP with an error when it
// failed or could not start. IDs are xids: 12 bytes, the first four the Unix time in
// seconds, written in base32hex (20 characters), so they sort by time.
//
// The simulator records the sequences its calls start; other events a node publishes
// (service states, tasks, phases) it records only when a test puts them there, e.g. to
// play a node whose history no longer reaches back to a call.
import { randomBytes } from 'node:crypto';

/** How many events a watch from the start can still see (capacity 1000 minus the gap of 10). */
export const EVENT_HISTORY = 990;

/**
 * The node's events since it booted, as JSON (most recent last, at most EVENT_HISTORY):
 * `[{"id":"…","sequence":"reboot","action":"start"}]`, or `{"id":"…","type":"ServiceStateEvent"}`
 * for an event of another kind. Talos keeps events in memory: a boot starts anew.
 */
export const EVENTS_ANNOTATION = 'sandbox.gatehouse.dev/events';

export interface EventRecord {
  id: string;
  /** A SequenceEvent's sequence (`boot`, `reboot`, `stageUpgrade`, …). */
  sequence?: string;
  action?: 'start' | 'stop' | 'noop';
  /** A NOOP's error (the sequence failed or never started). */
  error?: string;
  /** The machine.* message of an event that is no SequenceEvent (`ServiceStateEvent`). */
  type?: string;
}

const BASE32HEX = '0123456789abcdefghijklmnopqrstuv';

/** An xid for `at`, as Talos's event IDs are: time-ordered, 20 base32hex characters. */
export function xidAt(at: Date = new Date()): string {
  const bytes = Buffer.alloc(12);
  bytes.writeUInt32BE(Math.floor(at.getTime() / 1000) >>> 0, 0);
  randomBytes(8).copy(bytes, 4);
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32HEX.charAt((value >>> (bits - 5)) & 31);
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32HEX.charAt((value << (5 - bits)) & 31);
  return out;
}

/** The events of a fresh boot: its boot sequence, started and done. */
export function bootEvents(): EventRecord[] {
  return [
    { id: xidAt(), sequence: 'boot', action: 'start' },
    { id: xidAt(), sequence: 'boot', action: 'stop' },
  ];
}

/** The events a Node records (EVENTS_ANNOTATION); a node never recorded on has only booted. */
export function nodeEvents(annotations: Record<string, string> | undefined): EventRecord[] {
  const text = annotations?.[EVENTS_ANNOTATION];
  if (text === undefined) return bootEvents();
  try {
    const parsed = JSON.parse(text) as unknown;
    return Array.isArray(parsed) ? (parsed as EventRecord[]) : bootEvents();
  } catch {
    return bootEvents();
  }
}

/** `events` with `added` published after them, as the ring keeps them. */
export function published(events: EventRecord[], ...added: Omit<EventRecord, 'id'>[]): EventRecord[] {
  return [...events, ...added.map((e) => ({ id: xidAt(), ...e }))].slice(-EVENT_HISTORY);
}
