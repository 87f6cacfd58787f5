// The drain forecast in a rollout's plan (issue 28, items 1 and 6): for each node the plan
// will act on, what its drain would meet as things stand — Pods a PodDisruptionBudget
// holds, Pods nothing recreates, and, for the first PLAN_PLACEMENT_NODES nodes in the
// plan's order, Pods no other node could take (the action's own forecast, at its health
// gate, judges every node again with fresh facts). The same rules as the action's
// forecast (../actions/drain-forecast.ts); one read of every unfinished Pod serves the
// whole plan (plan-drain-read.ts). Pure.
import type { PlannedNode } from '../api/node-rollout.ts';
import type { LabelSelector } from '../kube/labels.ts';
import { forecastDrain, blocks, type BudgetObject, type PodVerdict } from '../actions/drain-forecast.ts';
import { forecastPodWords } from '../actions/drain-forecast-record.ts';
import type { CandidateNode, PodObject, Room } from '../actions/pod-placement.ts';

/** How many nodes, first in the plan's order, have their Pods' placement simulated. */
export const PLAN_PLACEMENT_NODES = 100;

/** Nodes whose troubles are named in words (the rest are counted): a status has a size limit. */
const PLAN_DRAIN_NAMED_NODES = 100;

export interface PlanDrainFacts {
  /** The unfinished Pods of the cluster, by node. */
  podsByNode: ReadonlyMap<string, readonly PodObject[]>;
  budgets: readonly BudgetObject[];
  nodes: readonly CandidateNode[];
  /** What the Pods on each node request. */
  used: ReadonlyMap<string, Room>;
  podSelector?: LabelSelector;
}

/** The plan's drain facts, or why they could not be read (said as a finding). */
export type PlanDrainRead = { facts: PlanDrainFacts } | { error: string };

const troubled = (v: PodVerdict) => blocks(v) || v.unmanaged === true;

/**
 * The drain forecast of each node the plan acts on, in the plan's order, and the plan's
 * finding about them (undefined when no drain would meet anything).
 */
export function planDrains(
  planned: readonly PlannedNode[],
  facts: PlanDrainFacts,
): { drains: Map<string, NonNullable<PlannedNode['drain']>>; finding: string | undefined } {
  const drains = new Map<string, NonNullable<PlannedNode['drain']>>();
  const acting = planned.filter((p) => p.skip === undefined);
  let named = 0;
  let held = 0;
  const examples: string[] = [];
  for (const [i, p] of acting.entries()) {
    const result = forecastDrain({
      nodeName: p.node,
      pods: facts.podsByNode.get(p.node) ?? [],
      budgets: facts.budgets,
      nodes: facts.nodes,
      used: facts.used,
      ...(facts.podSelector ? { podSelector: facts.podSelector } : {}),
      placement: i < PLAN_PLACEMENT_NODES,
    });
    const bad = result.verdicts.filter(troubled);
    if (bad.length === 0) continue;
    if (bad.some(blocks)) held++;
    const words =
      named < PLAN_DRAIN_NAMED_NODES ? bad.slice(0, 2).map((v) => forecastPodWords(v).slice(0, 256)) : [];
    if (words.length) named++;
    if (examples.length < 3 && words[0]) examples.push(`${p.node}: ${words[0]}`);
    drains.set(p.node, { pods: bad.length, ...(words.length ? { words } : {}) });
  }
  if (drains.size === 0) return { drains, finding: undefined };
  const placementNote =
    acting.length > PLAN_PLACEMENT_NODES
      ? `; where Pods could go was simulated for the first ${String(PLAN_PLACEMENT_NODES)} nodes, the rest are judged at their own health gate`
      : '';
  const finding = `drain forecast: ${String(drains.size)} node${drains.size === 1 ? '' : 's'} would meet trouble draining now${held ? ` (${String(held)} held by a PodDisruptionBudget or with Pods that fit nowhere else)` : ''}: ${examples.join('; ')}${placementNote}`;
  return { drains, finding };
}
