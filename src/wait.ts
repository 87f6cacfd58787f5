// Polling with a deadline. Every wait names what it waits for, so a timeout says
// what never happened and what was last seen instead of a bare "timed out".
import { formatDuration } from './duration.ts';

export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
  signal?: AbortSignal;
}

export class WaitTimeoutError extends Error {
  override readonly name = 'WaitTimeoutError';
}

/** Thrown by a probe when waiting longer cannot help (the process it waits on died). */
export class WaitAbortedError extends Error {
  override readonly name = 'WaitAbortedError';
}

/**
 * Calls `probe` until it returns something other than `undefined`, and returns that.
 * A probe reports what it saw last through `observe`; a probe that throws is retried
 * and its last error reported on timeout, unless it throws a WaitAbortedError.
 */
export async function waitFor<T>(
  what: string,
  probe: (observe: (seen: string) => void) => Promise<T | undefined> | T | undefined,
  { timeoutMs = 30_000, intervalMs = 100, signal }: WaitOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastSeen: string | undefined;
  let lastError: unknown;
  for (;;) {
    signal?.throwIfAborted();
    try {
      const value = await probe((seen) => {
        lastSeen = seen;
      });
      if (value !== undefined) return value;
      lastError = undefined;
    } catch (error) {
      if (error instanceof WaitAbortedError) throw error;
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const details = [
        lastSeen !== undefined ? `last seen: ${lastSeen}` : undefined,
        lastError !== undefined ? `last error: ${errorMessage(lastError)}` : undefined,
      ].filter(Boolean);
      throw new WaitTimeoutError(
        `timed out after ${formatDuration(timeoutMs)} waiting for ${what}${details.length ? ` (${details.join('; ')})` : ''}`,
      );
    }
    await sleep(Math.min(intervalMs, Math.max(0, deadline - Date.now())), signal);
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
