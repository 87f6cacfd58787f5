// What the rollout's core reads (the facts the reconciler gathers) and the small rules
// every part of it shares: the order entry of a node, when a node is done, the target
// version, the policies and windows that govern a node. decide.ts, plan.ts and gates.ts
// build on it.
import type { ActionPolicySpec } from '../api/action-policy.ts';
import type { ClusterHealthCheckSpec } from '../api/cluster-health-check.ts';
import type { Action } from '../api/common.ts';
import type { NodeActionPhase } from '../api/node-action.ts';
import type { ObservedNodeRollout, RolloutNode, RolloutNodePhase } from '../api/node-rollout.ts';
import { policyMatches } from '../policies/evaluate.ts';
import {
  compareTalosVersions,
  formatTalosVersion,
  installerVersion,
  parseTalosVersion,
  talosVersionFromOsImage,
} from '../talos/version.ts';
import type { HistoryEntry } from './expected-duration.ts';
import type { Impostor } from './membership.ts';
import type { PlanDrainRead } from './plan-drain.ts';

export interface RolloutNodeFacts {
  name: string;
  labels: Record<string, string>;
  /** status.nodeInfo.osImage: `Talos (v1.13.0)`. */
  osImage?: string;
  /** status.nodeInfo.kubeletVersion: `v1.35.2`. */
  kubeletVersion?: string;
}

/** One of the rollout's own NodeActions (made by it: membership.ts). */
export interface RolloutActionFacts {
  name: string;
  node: string;
  phase?: NodeActionPhase;
  message?: string;
  /** It failed because its drain timed out (its condition Drained: DrainTimedOut). */
  drainTimedOut?: boolean;
  /** What refused the evictions, in words (its status.drain), when it recorded any. */
  blockedBy?: string;
  /** Its post-checks failed and it rolled the node back (status.rollback): the target is suspect. */
  rolledBack?: boolean;
}

export interface RolloutPolicyFacts {
  name: string;
  spec: ActionPolicySpec;
}

export interface RolloutInput {
  rollout: ObservedNodeRollout;
  nodes: readonly RolloutNodeFacts[];
  /** The rollout's NodeActions. */
  actions: readonly RolloutActionFacts[];
  /**
   * Names of actions the status remembers and that are confirmed gone from the API server
   * (not merely missing from a cache): only those may be reported as deleted.
   */
  deletedActions?: ReadonlySet<string>;
  /**
   * NodeActions that claim the rollout, or hold the name of one of its actions, without
   * being one it made (membership.ts): never counted; their node waits while they exist.
   */
  impostors?: readonly Impostor[];
  policies: readonly RolloutPolicyFacts[];
  history: readonly HistoryEntry[];
  /** The ClusterHealthChecks, for the soaks (gates.ts). */
  checks?: readonly RolloutCheckFacts[];
  /** A dry run's drain forecast facts (plan-drain.ts), read when the plan is made. */
  planDrain?: PlanDrainRead;
  now: Date;
}

export interface Entry extends RolloutNode {
  /** Order: the stage (control-plane rank, group), then the name. */
  stage: string;
}

/** The Talos version upgrade.image installs, if the rollout upgrades. */
export function targetVersion(rollout: ObservedNodeRollout): string | undefined {
  if (rollout.spec.action !== 'Upgrade' || !rollout.spec.upgrade) return undefined;
  const version = installerVersion(rollout.spec.upgrade.image);
  return version ? formatTalosVersion(version) : undefined;
}

/**
 * Whether the node already runs the target: its osImage names the version the image's tag
 * names. (The schematic, i.e. the extensions, is not visible on the Node; see
 * docs/decisions.md.) Unknown either way: not at target, the upgrade is made.
 */
export function atTarget(node: RolloutNodeFacts, target: string | undefined): boolean {
  if (target === undefined) return false;
  const running = talosVersionFromOsImage(node.osImage);
  const wanted = parseTalosVersion(target);
  return running !== undefined && wanted !== undefined && compareTalosVersions(running, wanted) === 0;
}

/**
 * Whether a node's phase is final for its stage: the rollout goes on past it. A node set
 * aside (Quarantined) is, though it may be tried once more at the end (quarantine.ts).
 */
export function isDone(phase: RolloutNodePhase): boolean {
  return (
    phase === 'Succeeded' ||
    phase === 'Failed' ||
    phase === 'Skipped' ||
    phase === 'Vanished' ||
    phase === 'Quarantined'
  );
}

/** The policies governing a node's action, as the rollout weighs them. */
export function governingPolicies(
  input: Pick<RolloutInput, 'policies'>,
  node: RolloutNodeFacts,
  action: Action,
): RolloutPolicyFacts[] {
  return input.policies.filter((p) =>
    policyMatches(p.spec, { name: '', node: node.name, action }, node.labels),
  );
}

/** Each governing policy's own windows, and those of its per-kind limits for this action. */
export function governingWindows(
  matching: readonly RolloutPolicyFacts[],
  action: Action,
): { name: string; windows: NonNullable<ActionPolicySpec['windows']> }[] {
  return matching.flatMap((p) =>
    [
      p.spec.windows,
      ...(p.spec.perAction ?? []).filter((l) => l.actions.includes(action)).map((l) => l.windows),
    ]
      .filter((w): w is NonNullable<typeof w> => (w?.length ?? 0) > 0)
      .map((windows) => ({ name: p.name, windows })),
  );
}

export function poolOf(entries: readonly Entry[], entry: Entry): Set<string> {
  return new Set(
    entries
      .filter((e) => e.controlPlane === entry.controlPlane && e.group === entry.group)
      .map((e) => e.node),
  );
}

/** A ClusterHealthCheck as a soak weighs it. */
export interface RolloutCheckFacts {
  name: string;
  spec: ClusterHealthCheckSpec;
  healthy: boolean | undefined;
  /** When its Healthy condition last changed. */
  changedAt?: string;
}
