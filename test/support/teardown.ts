// A suite's teardown runs after a setup that may have failed half-way: whatever it got
// to start must stop, and whatever it never started is not there to stop. One failing
// stop must not keep the next from running (a controller or a sandbox left running keeps
// the test process, and the whole `npm test`, alive).

export interface Stoppable {
  stop(): Promise<unknown>;
}

/**
 * Stops each part, in order, those that are there (a `let` the setup never assigned is
 * undefined at run time, whatever its declared type), each even if one before it threw;
 * then throws the first failure.
 */
export async function stopAll(...parts: readonly (Stoppable | undefined)[]): Promise<void> {
  const failures: unknown[] = [];
  for (const part of parts) {
    try {
      await part?.stop();
    } catch (error) {
      failures.push(error);
    }
  }
  if (failures.length > 0) throw failures[0];
}
