// Whether ActionPolicies allow one more action to start now: a pure function of the
// policies, the nodes' labels, the actions already holding a slot, and the time.
//
// An action is allowed only if every policy matching its node and action allows it:
// a free slot under the policy's maxConcurrent, and an open maintenance window. Three
// rules hold whatever the policies say (see docs/decisions.md):
//   - an action that no policy matches falls under the default: one action at a time
//     cluster-wide (what DESIGN.md prescribes for a cluster without policies);
//   - never two control-plane nodes at once (two lost etcd members of three lose quorum);
//   - never two actions on one node at once.
// Budgets count the slot holders of the controller instance judging; the last two rules
// count every instance's: a node, and etcd, are one whatever the labels say.
import type { ActionPolicySpec } from '../api/action-policy.ts';
import type { Action } from '../api/common.ts';
import { CONTROL_PLANE_LABEL } from '../api/names.ts';
import { matchesSelector } from '../kube/labels.ts';
import { activeFreeze, frozenMessage } from './freeze.ts';
import { windowState, type WindowState } from './window.ts';

export interface PolicyFacts {
  name: string;
  spec: ActionPolicySpec;
}

/** An action as policies see it. */
export interface ActionRef {
  name: string;
  node: string;
  action: Action;
  /** The controller instance it belongs to, when it is another's (for messages). */
  instance?: string;
}

/** Labels of every node the controller knows; a node not in the map does not exist (any more). */
export type NodeLabels = ReadonlyMap<string, Record<string, string>>;

export interface PolicyInput {
  candidate: ActionRef;
  /** Actions of this instance holding a slot now (admitted and unfinished), not including the candidate. */
  holders: readonly ActionRef[];
  /**
   * Other controller instances' actions holding a slot: their budgets are theirs, but they
   * count for the one-node and the control-plane rules.
   */
  elsewhere?: readonly ActionRef[];
  /**
   * The ones of `elsewhere` that count for the control-plane rule (default: all). Only
   * test beds narrow it: test files that share one API server each simulate an etcd of
   * their own.
   */
  controlPlaneElsewhere?: readonly ActionRef[];
  policies: readonly PolicyFacts[];
  nodes: NodeLabels;
  now: Date;
}

export interface PolicyVerdict {
  allowed: boolean;
  /** Why not, one sentence per refusing rule; empty when allowed. */
  reasons: string[];
  /** Names of the policies that govern the candidate (empty: the default applies). */
  governedBy: string[];
  /** When a closed window that blocks the candidate opens next, for requeueing. */
  nextWindowStart?: Date;
}

export function policyMatches(
  spec: ActionPolicySpec,
  ref: ActionRef,
  labels: Record<string, string>,
): boolean {
  const actions = spec.actions ?? [];
  return (actions.length === 0 || actions.includes(ref.action)) && matchesSelector(spec.nodeSelector, labels);
}

/**
 * The policies governing an action of this kind on a node with these labels, by name: what
 * the per-action settings beyond admission (doNotDisruptMax, allowForeignCordon,
 * pauseRemediation) are judged on.
 */
export function governingPolicies(
  policies: readonly PolicyFacts[],
  action: { action: Action; nodeName: string },
  labels: Record<string, string>,
): PolicyFacts[] {
  const ref = { name: '', node: action.nodeName, action: action.action };
  return policies
    .filter((p) => policyMatches(p.spec, ref, labels))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * Whether a slot holder counts against a policy. A holder whose node is gone (its
 * labels unknown) counts against every policy: the safe side, until it finishes.
 */
function countsAgainst(spec: ActionPolicySpec, holder: ActionRef, nodes: NodeLabels): boolean {
  const labels = nodes.get(holder.node);
  return labels === undefined || policyMatches(spec, holder, labels);
}

/** The nodes a policy governs, by its node selector. */
export function governedNodes(spec: ActionPolicySpec, nodes: NodeLabels): number {
  let n = 0;
  for (const labels of nodes.values()) if (matchesSelector(spec.nodeSelector, labels)) n++;
  return n;
}

/**
 * maxConcurrent resolved against the governed nodes: a whole number as it is, a
 * percentage rounded down but at least 1. Absent: 1. Anything else (which the CRD's
 * validation refuses) also means 1: the safe side.
 */
export function allowedConcurrent(maxConcurrent: number | string | undefined, governed: number): number {
  if (maxConcurrent === undefined) return 1;
  if (typeof maxConcurrent === 'number')
    return Number.isInteger(maxConcurrent) && maxConcurrent >= 1 ? maxConcurrent : 1;
  const match = /^(\d{1,3})%$/.exec(maxConcurrent);
  if (!match) return 1;
  const percent = Math.min(Number(match[1]), 100);
  return Math.max(1, Math.floor((governed * percent) / 100));
}

function names(refs: readonly ActionRef[]): string {
  const shown = refs
    .slice(0, 5)
    .map(
      (r) =>
        `${r.name} on ${r.node}${r.instance !== undefined ? ` (controller instance ${r.instance})` : ''}`,
    );
  return refs.length > 5 ? `${shown.join(', ')} and ${refs.length - 5} more` : shown.join(', ');
}

export function isControlPlane(labels: Record<string, string> | undefined): boolean {
  return labels !== undefined && Object.hasOwn(labels, CONTROL_PLANE_LABEL);
}

export function evaluatePolicies(input: PolicyInput): PolicyVerdict {
  const { candidate, holders, policies, nodes, now } = input;
  const labels = nodes.get(candidate.node);
  const reasons: string[] = [];
  if (labels === undefined) {
    return { allowed: false, reasons: [`node ${candidate.node} does not exist`], governedBy: [] };
  }

  const everyHolder = [...holders, ...(input.elsewhere ?? [])];
  const sameNode = everyHolder.filter((h) => h.node === candidate.node);
  if (sameNode.length > 0)
    reasons.push(`another action on ${candidate.node} is in progress: ${names(sameNode)}`);

  if (isControlPlane(labels)) {
    const counted = input.controlPlaneElsewhere ? [...holders, ...input.controlPlaneElsewhere] : everyHolder;
    const otherControlPlanes = counted.filter(
      (h) =>
        h.node !== candidate.node && (nodes.get(h.node) === undefined || isControlPlane(nodes.get(h.node))),
    );
    if (otherControlPlanes.length > 0) {
      reasons.push(`never two control-plane nodes at once: ${names(otherControlPlanes)} in progress`);
    }
  }

  const matching = policies.filter((p) => policyMatches(p.spec, candidate, labels));
  let nextWindowStart: Date | undefined;
  if (matching.length === 0) {
    if (holders.length > 0) {
      reasons.push(
        `no ActionPolicy governs ${candidate.action} on ${candidate.node}, so the default applies: one action at a time cluster-wide (in progress: ${names(holders)})`,
      );
    }
  }
  for (const policy of matching) {
    const governed = governedNodes(policy.spec, nodes);
    const allowed = allowedConcurrent(policy.spec.maxConcurrent, governed);
    const using = holders.filter((h) => countsAgainst(policy.spec, h, nodes));
    if (using.length >= allowed) {
      reasons.push(
        `ActionPolicy ${policy.name} allows ${allowed} at once and ${using.length} ${using.length === 1 ? 'is' : 'are'} in progress (${names(using)})`,
      );
    }
    for (const limits of policy.spec.perAction ?? []) {
      if (!limits.actions.includes(candidate.action)) continue;
      const kinds = limits.actions.join(', ');
      if (limits.maxConcurrent !== undefined) {
        const allowedOfKind = allowedConcurrent(limits.maxConcurrent, governed);
        const usingOfKind = using.filter((h) => limits.actions.includes(h.action));
        if (usingOfKind.length >= allowedOfKind)
          reasons.push(
            `ActionPolicy ${policy.name} allows ${allowedOfKind} ${kinds} at once and ${usingOfKind.length} ${usingOfKind.length === 1 ? 'is' : 'are'} in progress (${names(usingOfKind)})`,
          );
      }
      const kindWindow = windowState(limits.windows, now);
      if (!kindWindow.open) {
        reasons.push(
          `ActionPolicy ${policy.name}: no maintenance window for ${kinds} is open${kindWindow.nextStart ? ` (the next opens at ${kindWindow.nextStart.toISOString()})` : ''}${kindWindow.problems.length ? `; ${kindWindow.problems.join('; ')} (InvalidWindow)` : ''}`,
        );
        if (kindWindow.nextStart && (!nextWindowStart || kindWindow.nextStart < nextWindowStart))
          nextWindowStart = kindWindow.nextStart;
      }
    }
    const frozen = activeFreeze(policy.spec.freezes, candidate.action, now);
    if (frozen) {
      reasons.push(frozenMessage(policy.name, frozen));
      if (!nextWindowStart || frozen.end < nextWindowStart) nextWindowStart = frozen.end;
    }
    const window: WindowState = windowState(policy.spec.windows, now);
    if (!window.open) {
      // Windows that never open are named, so that the action says why it may wait forever.
      const problems = window.problems.length
        ? `${window.nextStart ? '; and' : ', and none ever will:'} ${window.problems.join('; ')} (InvalidWindow)`
        : '';
      reasons.push(
        `ActionPolicy ${policy.name}: no maintenance window is open${window.nextStart ? ` (the next opens at ${window.nextStart.toISOString()})` : ''}${problems}`,
      );
      if (window.nextStart && (!nextWindowStart || window.nextStart < nextWindowStart)) {
        nextWindowStart = window.nextStart;
      }
    }
  }
  return {
    allowed: reasons.length === 0,
    reasons,
    governedBy: matching.map((p) => p.name),
    ...(nextWindowStart ? { nextWindowStart } : {}),
  };
}

/** What an ActionPolicy's status says about it now. */
export interface PolicyReport {
  matchingNodes: number;
  allowedConcurrent: number;
  activeActions: number;
  windowOpen: boolean;
  nextWindowStart?: Date;
  /** When the freeze in force now ends, for some action the policy governs. */
  frozenUntil?: Date;
  problems: string[];
}

export function reportPolicy(
  spec: ActionPolicySpec,
  holders: readonly ActionRef[],
  nodes: NodeLabels,
  now: Date,
): PolicyReport {
  const matchingNodes = governedNodes(spec, nodes);
  const window = windowState(spec.windows, now);
  const frozen = activeFreeze(spec.freezes, undefined, now);
  const kindProblems = (spec.perAction ?? []).flatMap((limits, i) =>
    windowState(limits.windows, now).problems.map((p) => `perAction[${String(i)}].${p}`),
  );
  return {
    matchingNodes,
    allowedConcurrent: allowedConcurrent(spec.maxConcurrent, matchingNodes),
    activeActions: holders.filter((h) => countsAgainst(spec, h, nodes)).length,
    windowOpen: window.open,
    ...(window.nextStart ? { nextWindowStart: window.nextStart } : {}),
    ...(frozen ? { frozenUntil: frozen.end } : {}),
    problems: [...window.problems, ...kindProblems],
  };
}
