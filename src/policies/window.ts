// Maintenance windows: a cron expression says when a window opens (read in an IANA time
// zone), a duration how long it stays open. Cron matching and time-zone arithmetic
// (daylight saving included) are croner's; this file only asks it "when did the last
// window open" and "when does the next one open".
import { Cron } from 'croner';
import { parseDuration } from '../duration.ts';

export interface MaintenanceWindowSpec {
  schedule: string;
  duration: string;
  timeZone?: string;
}

export interface WindowState {
  /** Whether some window is open at `now` (true when there are no windows). */
  open: boolean;
  /** When the open window closes (the latest closing among open windows). */
  closesAt?: Date;
  /** When the next window opens, if none is open now (or the next after the open one). */
  nextStart?: Date;
  /**
   * Windows that cannot be understood or never open (no date matches the schedule, or
   * none within WINDOW_HORIZON_MS), each with what is wrong. They never open.
   */
  problems: string[];
}

interface CompiledWindow {
  cron: Cron;
  durationMs: number;
}

/** Compiles a window, or explains what is wrong with it (an unknown time zone, a value out of range). */
export function compileWindow(window: MaintenanceWindowSpec): CompiledWindow | string {
  const timeZone = window.timeZone ?? 'UTC';
  let durationMs: number;
  try {
    durationMs = parseDuration(window.duration);
  } catch (error) {
    return `duration ${JSON.stringify(window.duration)}: ${(error as Error).message}`;
  }
  try {
    // Validates the time zone the way croner will use it.
    new Intl.DateTimeFormat('en-US', { timeZone }).format(0);
  } catch {
    return `timeZone ${JSON.stringify(timeZone)} is not an IANA time zone this controller knows (e.g. Europe/Berlin)`;
  }
  try {
    const cron = new Cron(window.schedule, { timezone: timeZone, mode: '5-part', paused: true });
    return { cron, durationMs };
  } catch (error) {
    return `schedule ${JSON.stringify(window.schedule)}: ${(error as Error).message.replace(/^CronPattern: /, '')}`;
  }
}

/** How far ahead a window must open at least once: past that, it is reported as one that never opens. */
export const WINDOW_HORIZON_MS = 366 * 24 * 3600_000;

/**
 * Schedules croner finds no time for at all (31 February), by schedule and time zone.
 * Looking costs it tens of milliseconds, on the admission pass's path, and the answer
 * never changes; a few are remembered.
 */
const matchesNever = new Map<string, true>();
const MATCHES_NEVER_KEPT = 64;

/**
 * When the window opens next after `now`; null when it never does (croner finds no date
 * matching its schedule).
 */
function nextOpening(window: MaintenanceWindowSpec, cron: Cron, now: Date): Date | null {
  const key = `${window.timeZone ?? 'UTC'} ${window.schedule}`;
  if (matchesNever.has(key)) return null;
  const next = cron.nextRun(now);
  if (next === null) {
    if (matchesNever.size >= MATCHES_NEVER_KEPT) matchesNever.clear();
    matchesNever.set(key, true);
  }
  return next;
}

/**
 * Whether any of the windows is open at `now`. A window is open from each time its
 * schedule matches until its duration has passed. No windows: always open. A window
 * that cannot be understood never opens (fail closed) and is reported in `problems`.
 */
export function windowState(windows: readonly MaintenanceWindowSpec[] | undefined, now: Date): WindowState {
  if (!windows || windows.length === 0) return { open: true, problems: [] };
  const problems: string[] = [];
  let closesAt: Date | undefined;
  let nextStart: Date | undefined;
  windows.forEach((window, i) => {
    const compiled = compileWindow(window);
    if (typeof compiled === 'string') {
      problems.push(`windows[${i}]: ${compiled}`);
      return;
    }
    const next = nextOpening(window, compiled.cron, now);
    if (next === null) {
      // No date matches the schedule: it never opened either (and asking croner for the
      // last opening would search as long again).
      problems.push(
        `windows[${i}]: schedule ${JSON.stringify(window.schedule)} never opens: no date matches it (such as 31 February); fix spec.windows[${i}].schedule`,
      );
      return;
    }
    // croner's previousRuns excludes its reference; a window opening at exactly `now` is open.
    const [lastStart] = compiled.cron.previousRuns(1, new Date(now.getTime() + 1000));
    let open = false;
    if (lastStart && lastStart.getTime() <= now.getTime()) {
      const end = new Date(lastStart.getTime() + compiled.durationMs);
      open = end.getTime() > now.getTime();
      if (open && (!closesAt || end > closesAt)) closesAt = end;
    }
    if (!open && next.getTime() - now.getTime() > WINDOW_HORIZON_MS) {
      // 29 February, or a weekday that falls on a date only in some years: an action
      // would wait years with nobody told. It never opens as far as anyone should wait.
      problems.push(
        `windows[${i}]: schedule ${JSON.stringify(window.schedule)} never opens within the next 366 days (next at ${next.toISOString()}); fix spec.windows[${i}].schedule`,
      );
      return;
    }
    if (!nextStart || next < nextStart) nextStart = next;
  });
  return {
    open: closesAt !== undefined,
    ...(closesAt ? { closesAt } : {}),
    ...(nextStart ? { nextStart } : {}),
    problems,
  };
}

export interface WindowInterval {
  start: Date;
  end: Date;
}

/**
 * Most openings of one window listed for a range (croner takes some 0.1 ms each): a
 * schedule of every minute shades its first 200 openings of the range, not days of them.
 */
const OPENINGS_LISTED = 200;

/**
 * The times between `from` and `to` when some of the windows is open, as intervals
 * clipped to that range, overlapping ones merged, in order: what the dashboard shades.
 * A window that cannot be understood never opens (as for windowState). No windows:
 * one interval, the whole range (always open).
 *
 * @example windowIntervals([{ schedule: '0 2 * * *', duration: '4h' }], from, to)
 */
export function windowIntervals(
  windows: readonly MaintenanceWindowSpec[] | undefined,
  from: Date,
  to: Date,
): WindowInterval[] {
  if (to.getTime() <= from.getTime()) return [];
  if (!windows || windows.length === 0) return [{ start: from, end: to }];
  const raw: { start: number; end: number }[] = [];
  for (const window of windows) {
    const compiled = compileWindow(window);
    if (typeof compiled === 'string' || nextOpening(window, compiled.cron, from) === null) continue;
    const { cron, durationMs } = compiled;
    // The openings that reach into the range: those since `from - duration`, up to `to`.
    let cursor = new Date(from.getTime() - durationMs - 1000);
    for (let i = 0; i < OPENINGS_LISTED; i++) {
      const start = cron.nextRun(cursor);
      if (!start || start.getTime() >= to.getTime()) break;
      const end = start.getTime() + durationMs;
      if (end > from.getTime())
        raw.push({ start: Math.max(start.getTime(), from.getTime()), end: Math.min(end, to.getTime()) });
      cursor = start;
    }
  }
  raw.sort((a, b) => a.start - b.start);
  const merged: { start: number; end: number }[] = [];
  for (const r of raw) {
    const last = merged.at(-1);
    if (last && r.start <= last.end) last.end = Math.max(last.end, r.end);
    else merged.push({ ...r });
  }
  return merged.map((m) => ({ start: new Date(m.start), end: new Date(m.end) }));
}
