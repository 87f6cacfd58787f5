// The drain forecast (issue 28, item 6): before approval, what a drain of the node would
// meet. For each Pod the drain would evict (the drain's own rule, ../talos/drain-scope.ts:
// DaemonSet, mirror, finished and hook Pods stay), whether
//   - a PodDisruptionBudget selecting it allows no disruption now (its eviction would be
//     refused, and the drain would wait);
//   - it is unmanaged: no controller owns it, so the drain deletes it for good;
//   - it fits on no other node: a first-fit placement of the node's Pods, largest first,
//     on the other nodes by the rules pod-placement.ts simulates, each Pod placed taking
//     its room so that two Pods never count the same free room.
// The room a node has left needs the requests of the Pods on it: those are read for a
// bounded number of nodes (nodesToRead); a Pod that fits on none of the nodes read while
// unread nodes could take it is "not judged", never named as fitting nowhere.
//
// Pure: the facts are read for the gate (drain-forecast-read.ts), judged there
// (drain-forecast-gate.ts).
import type { LabelSelector } from '../kube/labels.ts';
import { matchesSelector } from '../kube/labels.ts';
import { whyLeftInPlace } from '../talos/drain-scope.ts';
import {
  addRoom,
  lessRoom,
  podRequests,
  shortOf,
  whyNotPlaced,
  type CandidateNode,
  type PodObject,
  type Room,
} from './pod-placement.ts';

/** A policy/v1 PodDisruptionBudget, as far as the forecast reads it. */
export interface BudgetObject {
  metadata: { name: string; namespace: string };
  spec?: { selector?: LabelSelector };
  status?: { disruptionsAllowed?: number };
}

export interface DrainForecastFacts {
  nodeName: string;
  /** The Pods on the node (finished ones may be among them: the drain's rule leaves them). */
  pods: readonly PodObject[];
  /** The PodDisruptionBudgets of the Pods' namespaces. */
  budgets: readonly BudgetObject[];
  /** The nodes of the cluster; the drained one among them is skipped. */
  nodes: readonly CandidateNode[];
  /** What the Pods already on a node request, for the nodes whose Pods were read. */
  used: ReadonlyMap<string, Room>;
  /** spec.drain.podSelector: the drain evicts only the Pods it selects. */
  podSelector?: LabelSelector;
  /**
   * false: budgets and owners only, no placement (a rollout's plan past the nodes it
   * simulates placement for): no Pod is said to fit nowhere, none is "not judged".
   */
  placement?: boolean;
}

/** One Pod with something wrong about its leaving. */
export interface PodVerdict {
  namespace: string;
  pod: string;
  /** A budget selecting it allows no disruption now. */
  podDisruptionBudget?: string;
  /** No controller owns it. */
  unmanaged?: true;
  /** Why no other node takes it; absent: one does, or it was not judged. */
  fitsNowhere?: string;
  /** It fits on none of the nodes read, and unread ones could take it. */
  notJudged?: true;
}

export interface DrainForecastResult {
  /** The Pods the drain would evict. */
  evicted: number;
  /** The Pods it leaves in place. */
  leftInPlace: number;
  /** The Pods with something wrong, by name. */
  verdicts: PodVerdict[];
  /** The other nodes, and how many of them had their Pods read. */
  otherNodes: number;
  nodesRead: number;
}

/** The forecast made for a decision (drain-forecast-read.ts), or why it could not be made. */
export interface DrainForecastRead {
  at: Date;
  result?: DrainForecastResult;
  error?: string;
}

/** An evicted Pod, what it asks for, the nodes that could ever take it, and why the others cannot. */
interface Leaving {
  pod: PodObject;
  needs: Room;
  feasible: CandidateNode[];
  refusals: Map<string, number>;
}

const podKey = (p: PodObject) => `${p.metadata.namespace}/${p.metadata.name}`;

/** The Pods the drain would evict (not those already leaving), largest requests first. */
function leaving(facts: DrainForecastFacts): { pods: PodObject[]; left: number } {
  const present = facts.pods.filter((p) => p.metadata.deletionTimestamp === undefined);
  const pods = present.filter((p) => whyLeftInPlace(p, facts.podSelector) === undefined);
  return { pods, left: present.length - pods.length };
}

/** Each evicted Pod against every other node, with the filters that do not depend on what runs there. */
function judgePlaces(facts: DrainForecastFacts, pods: readonly PodObject[]): Leaving[] {
  const others = (facts.placement === false ? [] : facts.nodes)
    .filter((n) => n.name !== facts.nodeName)
    .sort((a, b) => a.name.localeCompare(b.name));
  const judged = pods.map((pod) => {
    const needs = podRequests(pod);
    const feasible: CandidateNode[] = [];
    const refusals = new Map<string, number>();
    for (const node of others) {
      const why = whyNotPlaced(pod, needs, node);
      if (why === undefined) feasible.push(node);
      else refusals.set(why, (refusals.get(why) ?? 0) + 1);
    }
    return { pod, needs, feasible, refusals };
  });
  // First fit, largest first: fewer Pods left out than in any fixed order.
  return judged.sort(
    (a, b) =>
      b.needs.cpu - a.needs.cpu ||
      b.needs.memory - a.needs.memory ||
      podKey(a.pod).localeCompare(podKey(b.pod)),
  );
}

/**
 * The nodes whose Pods to read for the forecast, at most `limit`: each evicted Pod's first
 * possible nodes in turn (the first of every Pod, then the second of every Pod, …), so
 * that every Pod has its first chances read however many nodes the cluster has.
 */
export function nodesToRead(facts: DrainForecastFacts, limit: number): string[] {
  const places = judgePlaces(facts, leaving(facts).pods);
  const chosen = new Set<string>();
  for (let i = 0; chosen.size < limit && places.some((p) => i < p.feasible.length); i++) {
    for (const p of places) {
      const node = p.feasible[i];
      if (node && chosen.size < limit) chosen.add(node.name);
    }
  }
  return [...chosen];
}

/** "2 nodes: cordoned; 1 node: taint …": why the other nodes cannot take the Pod, most common first. */
function refusalWords(refusals: ReadonlyMap<string, number>): string {
  if (refusals.size === 0) return 'there is no other node';
  return [...refusals.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([why, n]) => `${String(n)} node${n === 1 ? '' : 's'}: ${why}`)
    .join('; ');
}

/** The first node read with room left for the Pod (that room is then taken), or why there was none. */
function place(
  p: Leaving,
  facts: DrainForecastFacts,
  taken: Map<string, Room>,
): { placed: true } | { placed: false; unread: boolean; refusals: Map<string, number> } {
  const refusals = new Map(p.refusals);
  let unread = false;
  for (const node of p.feasible) {
    const used = facts.used.get(node.name);
    if (!used) {
      unread = true;
      continue;
    }
    const before = taken.get(node.name) ?? used;
    const short = shortOf(p.needs, lessRoom(node.allocatable, before));
    if (short === undefined) {
      taken.set(node.name, addRoom(before, p.needs));
      return { placed: true };
    }
    const why = `too little free ${short}`;
    refusals.set(why, (refusals.get(why) ?? 0) + 1);
  }
  return { placed: false, unread, refusals };
}

/**
 * The forecast of a drain of `facts.nodeName`: which of the Pods it would evict a budget
 * holds, nothing recreates, or no other node could take.
 */
export function forecastDrain(facts: DrainForecastFacts): DrainForecastResult {
  const { pods, left } = leaving(facts);
  const taken = new Map<string, Room>();
  const verdicts = new Map<string, PodVerdict>();
  for (const p of judgePlaces(facts, pods)) {
    const v: PodVerdict = { namespace: p.pod.metadata.namespace, pod: p.pod.metadata.name };
    const budget = facts.budgets
      .filter(
        (b) =>
          b.metadata.namespace === v.namespace &&
          b.spec?.selector !== undefined &&
          matchesSelector(b.spec.selector, p.pod.metadata.labels ?? {}) &&
          (b.status?.disruptionsAllowed ?? 0) <= 0,
      )
      .map((b) => b.metadata.name)
      .sort()[0];
    if (budget !== undefined) v.podDisruptionBudget = budget;
    if (!p.pod.metadata.ownerReferences?.some((o) => o.controller === true)) v.unmanaged = true;
    const placement = facts.placement === false ? { placed: true as const } : place(p, facts, taken);
    if (!placement.placed && placement.unread) v.notJudged = true;
    else if (!placement.placed) v.fitsNowhere = refusalWords(placement.refusals);
    if (v.podDisruptionBudget !== undefined || v.unmanaged || v.fitsNowhere !== undefined || v.notJudged)
      verdicts.set(podKey(p.pod), v);
  }
  return {
    evicted: pods.length,
    leftInPlace: left,
    verdicts: [...verdicts.values()].sort(verdictOrder),
    otherNodes: facts.nodes.filter((n) => n.name !== facts.nodeName).length,
    nodesRead: facts.used.size,
  };
}

/** What holds a drain first (a budget, nowhere to go), then what is lost, then by name. */
function verdictOrder(a: PodVerdict, b: PodVerdict): number {
  const weight = (v: PodVerdict) =>
    (v.podDisruptionBudget !== undefined || v.fitsNowhere !== undefined ? 0 : 2) + (v.unmanaged ? 0 : 1);
  return weight(a) - weight(b) || a.namespace.localeCompare(b.namespace) || a.pod.localeCompare(b.pod);
}

/** Whether the verdict would hold the drain (or leave a Pod with nowhere to go): what Block waits for. */
export function blocks(v: PodVerdict): boolean {
  return v.podDisruptionBudget !== undefined || v.fitsNowhere !== undefined;
}
