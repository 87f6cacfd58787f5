// Which Events are steps a NotificationPolicy reports. Every phase change of a NodeAction
// is an Event whose reason is the new phase (src/actions/decision.ts transition()), and a
// NodeRollout records an Event for each node started or ended and for its halt and end
// (src/rollouts/decide.ts): the notifier reads those, so the steps sent are the steps
// `kubectl describe` shows, and no reconciler knows notifications exist.
import type { NotificationStep } from '../api/notification-policy.ts';

/** The kinds whose Events can be steps. */
export type SubjectKind = 'NodeAction' | 'NodeRollout';

export interface StepRule {
  step: NotificationStep;
  /** The subject's last step: never dropped by the rate limit, and marked final in the message. */
  final?: boolean;
  /**
   * A wait every action passes through, usually for an instant (Pending, then
   * WaitingForHealth): reported as Held only if the action is still there after the
   * hold grace, with the reason it waits then (its status message).
   */
  tentative?: boolean;
}

/** A NodeAction's Events that are steps, by reason; every other reason is not sent. */
export const ACTION_STEPS: Readonly<Record<string, StepRule>> = {
  Requested: { step: 'Started' },
  // Waiting for its policies (a budget, a window, a freeze) or for its health checks.
  Pending: { step: 'Held', tentative: true },
  WaitingForHealth: { step: 'Held', tentative: true },
  // A Pod or the Node asks not to be disrupted; a Maintenance is held out of service.
  DoNotDisrupt: { step: 'Held' },
  Held: { step: 'Held' },
  // An approval hook waits for a person: the message names who may approve, which is
  // what the people told need (a refusal ends it Denied, reported as Failed).
  ApprovalRequested: { step: 'Held' },
  Approved: { step: 'Approved' },
  Succeeded: { step: 'Done', final: true },
  // Denied (the node does not exist, the etcd guard refused) and Cancelled (deleted
  // before it ended) are failures to the people told: the reason says which.
  Failed: { step: 'Failed', final: true },
  Denied: { step: 'Failed', final: true },
  Cancelled: { step: 'Failed', final: true },
};

/**
 * A NodeRollout's Events that are steps: per node (the message starts with the node's
 * name), its halt, and its end.
 */
export const ROLLOUT_STEPS: Readonly<Record<string, StepRule>> = {
  NodeStarted: { step: 'Started' },
  Halted: { step: 'Held' },
  PreflightFailed: { step: 'Held' },
  NodeSucceeded: { step: 'Done' },
  NodeFailed: { step: 'Failed' },
  NodeVanished: { step: 'Failed' },
  // Undrainable nodes the rollout went on without: held for a person, with what blocked them.
  NodeQuarantined: { step: 'Held' },
  NodeSkipped: { step: 'Held' },
  Completed: { step: 'Done', final: true },
};

const RULES: Readonly<Record<SubjectKind, Readonly<Record<string, StepRule>>>> = {
  NodeAction: ACTION_STEPS,
  NodeRollout: ROLLOUT_STEPS,
};

/**
 * The step an Event of this kind and reason is, or undefined when it is not one.
 *
 * @example stepOf('NodeAction', 'Approved') // { step: 'Approved' }
 */
export function stepOf(kind: string | undefined, reason: string): StepRule | undefined {
  if (kind !== 'NodeAction' && kind !== 'NodeRollout') return undefined;
  return Object.hasOwn(RULES[kind], reason) ? RULES[kind][reason] : undefined;
}

/** The node a rollout's per-node Event is about: its message starts with `<node>: `. */
export function rolloutEventNode(reason: string, message: string): string | undefined {
  if (!reason.startsWith('Node')) return undefined;
  const colon = message.indexOf(': ');
  return colon > 0 ? message.slice(0, colon) : undefined;
}
