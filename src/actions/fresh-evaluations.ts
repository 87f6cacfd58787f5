// Fresh evaluations of the checks that gate an action, begun before the action reaches
// the health gate: when it is first seen, and when an admission pass expects to admit
// it (in parallel with the pass's quorum list). The gate then judges on an evaluation
// that is already under way or done instead of starting one — still one made for this
// action, after it was requested, and taken at most once and only while young (still
// under way, or finished at most PREFETCH_FRESH_MS ago); anything else is evaluated
// anew, as before. A gate on a checker Job (minutes) leaves its evaluation under way
// here and is decided again when it has finished.
import type { CheckRunner } from '../checks/runner.ts';
import type { FreshChecks } from './observations.ts';

/** How long after it finished an evaluation may still be what an action is judged on. */
export const PREFETCH_FRESH_MS = 2000;

interface Begun {
  names: ReadonlySet<string>;
  result: Promise<FreshChecks>;
  done: boolean;
  doneAt?: number;
}

export class FreshEvaluations {
  private readonly begun = new Map<string, Begun>();
  private readonly checks: Pick<CheckRunner, 'evaluateNow'>;
  private readonly clock: () => number;

  constructor(checks: Pick<CheckRunner, 'evaluateNow'>, clock: () => number = Date.now) {
    this.checks = checks;
    this.clock = clock;
  }

  /**
   * Begins evaluating these checks for the action (by uid) on its node (what Node-scoped
   * checks are evaluated for), unless a young one of the same checks is under way.
   */
  begin(uid: string, names: readonly string[], node?: string): void {
    const current = this.begun.get(uid);
    if (current && this.young(current) && sameSet(current.names, names)) return;
    const entry: Begun = {
      names: new Set(names),
      done: false,
      result: this.checks.evaluateNow(names, node).then((states) => {
        entry.done = true;
        entry.doneAt = this.clock();
        return { at: new Date(entry.doneAt), states };
      }),
    };
    // A failed evaluation is nobody's to report: the gate evaluates anew.
    entry.result.catch(() => this.begun.get(uid) === entry && this.begun.delete(uid));
    this.begun.set(uid, entry);
  }

  /**
   * The evaluation begun for the action of exactly these checks, if still young: taken,
   * so a later pass through the gate evaluates anew. Undefined: evaluate now.
   */
  take(uid: string, names: readonly string[]): Promise<FreshChecks> | undefined {
    const entry = this.begun.get(uid);
    this.begun.delete(uid);
    if (!entry || !this.young(entry) || !sameSet(entry.names, names)) return undefined;
    return entry.result;
  }

  /** Whether the action's evaluation has finished (so taking it does not wait on probes). */
  finished(uid: string): boolean {
    return this.begun.get(uid)?.done === true;
  }

  /** Resolves when the action's evaluation finishes, or after `ms`, whichever is first. */
  async settle(uid: string, ms: number): Promise<void> {
    const entry = this.begun.get(uid);
    if (!entry || entry.done) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      entry.result.then(
        () => undefined,
        () => undefined,
      ),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
    ]);
    clearTimeout(timer);
  }

  forget(uid: string): void {
    this.begun.delete(uid);
  }

  /** Resolves when the action's evaluation finishes (at once if there is none). */
  async done(uid: string): Promise<void> {
    await this.begun.get(uid)?.result.then(
      () => undefined,
      () => undefined,
    );
  }

  private young(entry: Begun): boolean {
    return this.clock() - (entry.doneAt ?? this.clock()) <= PREFETCH_FRESH_MS;
  }
}

function sameSet(a: ReadonlySet<string>, b: readonly string[]): boolean {
  return a.size === new Set(b).size && b.every((n) => a.has(n));
}
