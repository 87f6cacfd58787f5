// The places a rollout stops on its own, before a node starts: the canary nodes run
// alone, then a soak watches the rollout's checks; each stage (groupBy value, control
// plane) may be soaked after too; and pauseBefore stops before chosen nodes. A soak ends
// by itself when its checks stayed healthy throughout; a pause only by a promotion (the
// talos.dev/promote annotations, which only a holder of the verb promote may write),
// which also ends a soak early or overrides a failed one. Passed gates are remembered in
// status.passedGates: never waited at again, whatever restarts.
import { PROMOTE_ANNOTATION, PROMOTED_BY_ANNOTATION, PROMOTE_REASON_ANNOTATION } from '../api/names.ts';
import type { NodeRolloutStatus, RolloutGate } from '../api/node-rollout.ts';
import { checkGates } from '../checks/selection.ts';
import { formatDuration, parseDuration } from '../duration.ts';
import type { EventSpec } from '../kube/event-spec.ts';
import {
  isDone,
  type Entry,
  type RolloutCheckFacts,
  type RolloutInput,
  type RolloutNodeFacts,
} from './facts.ts';
import { canaryNodes, pausesBefore } from './plan.ts';

/** How often a soak looks at its checks (besides being woken when it ends). */
export const SOAK_RECHECK_MS = 15_000;

/** Why a gate halts the rollout (its Halted condition's reason). */
type HaltReason = 'CanaryFailed' | 'SoakFailed' | 'RolledBack';

/** Where the rollout stands at its gates on this pass. */
export interface GateStanding {
  /** Which nodes may start now (all when no gate holds). */
  mayStart: (entry: Entry) => boolean;
  /** The gate it waits at (or stopped at), if any. */
  gate?: RolloutGate;
  /** A gate that halts it (a failed canary or soak), in words, with its condition reason. */
  halt?: { reason: HaltReason; message: string };
  passedGates: string[];
  promotions: NonNullable<NodeRolloutStatus['promotions']>;
  events: EventSpec[];
  requeueAfterMs?: number;
}

/** The promotion the rollout's annotations carry, if whole. */
function promotionOf(input: RolloutInput): { gate: string; by: string; reason: string } | undefined {
  const a = input.rollout.metadata.annotations ?? {};
  const gate = a[PROMOTE_ANNOTATION]?.trim();
  const by = a[PROMOTED_BY_ANNOTATION]?.trim();
  const reason = a[PROMOTE_REASON_ANNOTATION]?.trim();
  return gate && by && reason ? { gate, by, reason } : undefined;
}

/** The checks that gate the rollout's action on any of its nodes that are not done. */
function soakChecks(
  input: RolloutInput,
  entries: readonly Entry[],
  nodes: ReadonlyMap<string, RolloutNodeFacts>,
) {
  const labels = entries.flatMap((e) => {
    const n = nodes.get(e.node);
    return n ? [n.labels] : [];
  });
  return (input.checks ?? []).filter((c) =>
    labels.some((l) => checkGates(c.spec, input.rollout.spec.action, l)),
  );
}

/** Why the soak begun at `since` failed, or undefined while its checks stayed healthy. */
function soakFailure(checks: readonly RolloutCheckFacts[], since: Date): string | undefined {
  const bad = checks.filter(
    (c) => c.healthy !== true || (c.changedAt !== undefined && Date.parse(c.changedAt) > since.getTime()),
  );
  if (bad.length === 0) return undefined;
  return bad
    .slice(0, 5)
    .map((c) =>
      c.healthy === true
        ? `ClusterHealthCheck ${c.name} was not healthy throughout (it changed at ${c.changedAt ?? '?'})`
        : `ClusterHealthCheck ${c.name} is ${c.healthy === false ? 'unhealthy' : 'not evaluated'}`,
    )
    .join('; ');
}

class Gates {
  readonly passed: Set<string>;
  readonly standing: GateStanding;
  private readonly input: RolloutInput;
  private readonly now: Date;

  constructor(input: RolloutInput) {
    this.input = input;
    this.now = input.now;
    const status = input.rollout.status;
    this.passed = new Set(status?.passedGates ?? []);
    this.standing = {
      mayStart: () => true,
      passedGates: [],
      promotions: [...(status?.promotions ?? [])],
      events: [],
    };
    this.takePromotion();
  }

  /** A promotion of the gate the rollout waits at: that gate is passed, on the record. */
  private takePromotion(): void {
    const promotion = promotionOf(this.input);
    const waiting = this.input.rollout.status?.gate;
    if (!promotion || !waiting || promotion.gate !== waiting.id || this.passed.has(waiting.id)) return;
    this.passed.add(waiting.id);
    this.standing.promotions = [
      ...this.standing.promotions,
      { gate: waiting.id, by: promotion.by, reason: promotion.reason, time: this.now.toISOString() },
    ].slice(-64);
    this.standing.events.push({
      type: 'Warning',
      reason: 'Promoted',
      message: `${waiting.id}: promoted by ${promotion.by}: ${promotion.reason}`,
    });
  }

  /** The rollout stops at `id` (a failed canary): it halts until promoted past it. */
  stop(id: string, why: string, condition: HaltReason): void {
    const previous = this.input.rollout.status?.gate;
    const message = `${why}; no other node starts: promote to go on anyway (gatehouse rollout promote)`;
    this.standing.gate = {
      id,
      kind: condition === 'RolledBack' ? 'Rollback' : 'Soak',
      since: previous?.id === id ? previous.since : this.now.toISOString(),
      failed: why.slice(0, 1024),
      message: message.slice(0, 1024),
    };
    this.standing.halt = { reason: condition, message };
    if (previous?.id !== id || !previous.failed)
      this.standing.events.push({ type: 'Warning', reason: condition, message });
    this.standing.mayStart = () => false;
  }

  /**
   * A soak at `id`: passed once its time is over with its checks healthy throughout;
   * failed (the rollout halts, until promoted) as soon as one is not. True while it holds.
   */
  soak(id: string, what: string, ms: number, checks: readonly RolloutCheckFacts[]): boolean {
    if (this.passed.has(id)) return false;
    const previous = this.input.rollout.status?.gate;
    const since = previous?.id === id ? new Date(previous.since) : this.now;
    const until = new Date(since.getTime() + ms);
    // A soak that failed stays failed (a check that recovered does not undo it) until promoted.
    const failedBefore = previous?.id === id ? previous.failed : undefined;
    const found = failedBefore === undefined ? soakFailure(checks, since) : undefined;
    const failed = failedBefore ?? (found !== undefined ? `${what} failed: ${found}` : undefined);
    if (!failed && this.now >= until) {
      this.passed.add(id);
      this.standing.events.push({
        type: 'Normal',
        reason: 'SoakPassed',
        message: `${what}: ${formatDuration(ms)}, checks healthy throughout`,
      });
      return false;
    }
    if (failed) {
      this.stop(id, failed, 'SoakFailed');
      return true;
    }
    const message = `${what}: watching ${String(checks.length)} check${checks.length === 1 ? '' : 's'} until ${until.toISOString()}`;
    this.standing.gate = {
      id,
      kind: 'Soak',
      since: since.toISOString(),
      until: until.toISOString(),
      message,
    };
    this.standing.requeueAfterMs = Math.max(
      1000,
      Math.min(SOAK_RECHECK_MS, until.getTime() - this.now.getTime()),
    );
    this.standing.mayStart = () => false;
    return true;
  }
}

/**
 * The rollout's gates on this pass: which nodes may start, what it waits at, and what to
 * record. pauseBefore is judged per node as it is reached (gateBefore).
 */
export function gateStanding(
  input: RolloutInput,
  entries: readonly Entry[],
  nodes: ReadonlyMap<string, RolloutNodeFacts>,
): GateStanding {
  const gates = new Gates(input);
  const spec = input.rollout.spec;
  const checks = soakChecks(input, entries, nodes);
  const canary = canaryNodes(input, entries);
  const held = (): GateStanding => ({ ...gates.standing, passedGates: [...gates.passed].slice(-256) });
  // A node rolled back after its post-checks failed: the target is suspect; stop until promoted.
  const rolled = entries.find((e) => e.rolledBack === true && !gates.passed.has(`rollback/${e.node}`));
  if (rolled) {
    gates.stop(
      `rollback/${rolled.node}`,
      `node ${rolled.node} was rolled back after its post-checks failed: ${rolled.message ?? ''}`,
      'RolledBack',
    );
    return held();
  }
  if (spec.canary && !gates.passed.has('canary-soak')) {
    // The canary's own outcome first: a failure among them stops the rest, whatever
    // maxFailures says; a promotion past canary-soak goes on anyway (the budget still counts it).
    const failed = entries.find(
      (e) => canary.has(e.node) && (e.phase === 'Failed' || e.phase === 'Quarantined'),
    );
    if (failed) {
      // A canary set aside undrained proves nothing about the target: it stops the rest too.
      const what = failed.phase === 'Failed' ? 'failed' : 'could not be drained (quarantined)';
      gates.stop(
        'canary-soak',
        `canary node ${failed.node} ${what}: ${failed.message ?? ''}`,
        'CanaryFailed',
      );
      return held();
    }
    if (!entries.every((e) => !canary.has(e.node) || isDone(e.phase))) {
      gates.standing.mayStart = (e) => canary.has(e.node);
      return held();
    }
    const soakMs = parseDuration(spec.canary.soak ?? '1h');
    if (gates.soak('canary-soak', `canary soak after ${[...canary].join(', ')}`, soakMs, checks))
      return held();
  }
  if (spec.soakBetweenGroups) {
    const current = entries.find((e) => !isDone(e.phase))?.stage;
    const before = entries.filter((e) => e.stage !== current && e.action !== undefined).at(-1)?.stage;
    const started = entries.some((e) => e.stage === current && e.action !== undefined);
    if (current !== undefined && before !== undefined && !started) {
      const label = entries.find((e) => e.stage === before)?.group ?? before;
      gates.soak(
        `soak/${before}`,
        `soak after stage ${label}`,
        parseDuration(spec.soakBetweenGroups),
        checks,
      );
    }
  }
  return held();
}

/**
 * The pause before `entry`, if the rollout must stop there now (spec.pauseBefore, not
 * promoted yet): the gate to record; nothing after it starts either.
 */
export function gateBefore(
  input: RolloutInput,
  entry: Entry,
  node: RolloutNodeFacts,
  passed: ReadonlySet<string>,
): RolloutGate | undefined {
  const id = `pause/${entry.node}`;
  if (passed.has(id) || !pausesBefore(input, entry.node, node.labels)) return undefined;
  const previous = input.rollout.status?.gate;
  return {
    id,
    kind: 'PauseBefore',
    since: previous?.id === id ? previous.since : input.now.toISOString(),
    message: `paused before ${entry.node} (spec.pauseBefore): gatehouse rollout promote ${input.rollout.metadata.name} --reason ...`,
  };
}
