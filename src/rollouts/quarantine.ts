// A node that cannot be drained (a PodDisruptionBudget that allows no eviction, a Pod
// nobody manages) must not stall a pool, and must never be forced. spec.onDrainTimeout
// says what such a node becomes once its NodeAction's drain timed out — which ends the
// action before any Talos call, with its pre-action hooks undone:
//
//   Fail        it counts against maxFailures (the default, as before);
//   Skip        its cordon is lifted (the action's own undo does it) and the rollout
//               moves on: the node is Skipped, with what blocked it;
//   Quarantine  it stays cordoned (the rollout's actions ask for drain.onTimeout:
//               KeepCordoned) and labelled talos.dev/quarantined, the rollout moves on,
//               and once every other node is done it is tried once more, under a second
//               derived name (naming.ts), so never twice. A retry that cannot drain either
//               leaves it Quarantined for a person; at most maxQuarantined are set aside,
//               an undrainable node beyond them fails.
//
// The cordon passes from the first action to the retry before the retry exists: the
// rollout re-marks talos.dev/cordoned-by with the retry's name, so the retry finds the
// cordon its own (not someone else's, which would hold it) and lifts it when it succeeds.
// Pure: the reconciler applies the node marks this module asks for.
import type { RolloutNode, RolloutQuarantine } from '../api/node-rollout.ts';
import type { Entry, RolloutActionFacts, RolloutInput } from './facts.ts';
import { rolloutRetryName } from './naming.ts';

export type DrainTimeoutMode = 'Fail' | 'Quarantine' | 'Skip';

export function drainTimeoutMode(input: Pick<RolloutInput, 'rollout'>): DrainTimeoutMode {
  return input.rollout.spec.onDrainTimeout ?? 'Fail';
}

/** Most nodes set aside at once: spec.maxQuarantined, else maxParallel. */
export function maxQuarantined(input: Pick<RolloutInput, 'rollout'>): number {
  const spec = input.rollout.spec;
  return spec.maxQuarantined ?? spec.maxParallel ?? 1;
}

/** A node's NodeActions from this rollout: the first, and its one retry. */
export interface NodeActions {
  first?: RolloutActionFacts;
  retry?: RolloutActionFacts;
}

/** The actions of each node, split into first and retry by their derived names. */
export function actionsByNode(input: RolloutInput): Map<string, NodeActions> {
  const byNode = new Map<string, NodeActions>();
  for (const a of input.actions) {
    const own = byNode.get(a.node) ?? {};
    if (a.name === rolloutRetryName(input.rollout.metadata.name, a.node)) own.retry = a;
    else own.first = a;
    byNode.set(a.node, own);
  }
  return byNode;
}

/** Whether an action ended because its drain timed out (before anything was done to the node). */
export function undrained(action: RolloutActionFacts | undefined): boolean {
  return action?.phase === 'Failed' && action.drainTimedOut === true;
}

type Outcome = Pick<RolloutNode, 'phase' | 'message' | 'quarantine'>;

/**
 * What an action whose drain timed out makes of its node, by onDrainTimeout; undefined
 * under Fail (it is a failure like any other).
 */
export function undrainedOutcome(
  input: RolloutInput,
  action: RolloutActionFacts,
  first: string,
  remembered: RolloutQuarantine | undefined,
  retried: boolean,
): Outcome | undefined {
  const mode = drainTimeoutMode(input);
  const blockedBy = (action.blockedBy ?? action.message ?? 'the drain timed out').slice(0, 1024);
  if (mode === 'Skip')
    return {
      phase: 'Skipped',
      message: `could not be drained in time, skipped (onDrainTimeout: Skip), its cordon lifted: ${blockedBy}`,
    };
  if (mode !== 'Quarantine') return undefined;
  return {
    phase: 'Quarantined',
    message: retried
      ? `still could not be drained at its retry: left cordoned and labelled for a person: ${blockedBy}`
      : `could not be drained in time: set aside, cordoned and labelled, to be tried again at the end: ${blockedBy}`,
    quarantine: {
      action: first,
      since: remembered?.since ?? input.now.toISOString(),
      blockedBy,
      ...(retried ? { retried: true } : {}),
    },
  };
}

/** A node set aside and not tried again yet. */
export function awaitsRetry(e: Pick<RolloutNode, 'phase' | 'quarantine'>): boolean {
  return e.phase === 'Quarantined' && e.quarantine?.retried !== true;
}

/** A node set aside now: quarantined, or being tried again. */
function setAside(e: Entry): boolean {
  return e.quarantine !== undefined && (e.phase === 'Quarantined' || e.phase === 'Running');
}

/**
 * maxQuarantined: the nodes the status already shows set aside stay so; newly undrainable
 * ones are set aside in order while there is room, and fail beyond it.
 */
export function applyQuarantineBudget(input: RolloutInput, entries: Entry[]): void {
  const max = maxQuarantined(input);
  const before = new Set(
    (input.rollout.status?.nodes ?? []).filter((e) => e.quarantine !== undefined).map((e) => e.node),
  );
  let count = entries.filter((e) => setAside(e) && before.has(e.node)).length;
  for (const entry of entries) {
    if (!setAside(entry) || before.has(entry.node)) continue;
    if (count < max) {
      count++;
      continue;
    }
    entry.phase = 'Failed';
    entry.message =
      `could not be drained in time, and ${String(max)} node${max === 1 ? ' is' : 's are'} already set aside (maxQuarantined): ${entry.quarantine?.blockedBy ?? ''}`.slice(
        0,
        1024,
      );
    delete entry.quarantine;
  }
}

/** What the rollout writes on a Node: its quarantine label, and who its cordon belongs to. */
export interface NodeMark {
  node: string;
  /** Whether the node carries talos.dev/quarantined naming this rollout. */
  labelled: boolean;
  /** A cordon marked by one of `from` passes to `to` (null: lifted). */
  cordon?: { from: string[]; to: string | null };
}

/**
 * The marks the entries ask for. A node set aside is labelled, and its cordon passes to
 * its retry; a retry that succeeded took the cordon away with it and the label goes; an
 * undrainable node that is not set aside (Skip, or beyond maxQuarantined) has the cordon
 * its action kept lifted, as an action lifts its own when nothing was done to the node —
 * never one whose last action ended otherwise (it may have disrupted the node).
 */
export function nodeMarks(
  input: RolloutInput,
  entries: readonly Entry[],
  actions: ReadonlyMap<string, NodeActions>,
): NodeMark[] {
  const rollout = input.rollout.metadata.name;
  const marks: NodeMark[] = [];
  for (const e of entries) {
    const own = actions.get(e.node);
    // Only the cordon of an action that ended for its drain is lifted: nothing was done to
    // the node. One that ended otherwise (after a Talos call, say) keeps its own rule.
    const latest = own?.retry ?? own?.first;
    if (e.phase === 'Quarantined' && e.quarantine) {
      const retry = rolloutRetryName(rollout, e.node);
      marks.push({
        node: e.node,
        labelled: true,
        ...(e.quarantine.retried ? {} : { cordon: { from: [e.quarantine.action], to: retry } }),
      });
    } else if (e.phase === 'Running' && e.quarantine) {
      // Its retry: the cordon passes to it even when it was set aside and retried in the
      // same pass (the last undrainable node); a no-op once the mark names the retry.
      const handOver = e.quarantine.retried
        ? {}
        : { cordon: { from: [e.quarantine.action], to: rolloutRetryName(rollout, e.node) } };
      marks.push({ node: e.node, labelled: true, ...handOver });
    } else if (e.quarantine || undrained(own?.retry) || undrained(own?.first))
      marks.push({
        node: e.node,
        labelled: false,
        ...((e.phase === 'Failed' || e.phase === 'Skipped') && latest && undrained(latest)
          ? { cordon: { from: [latest.name], to: null } }
          : {}),
      });
  }
  return marks;
}
