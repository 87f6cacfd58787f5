// Which handler decides each phase. A phase added to the API (NODE_ACTION_PHASES in
// src/api/node-action.ts) does not compile until it has one here.
import type { NodeActionPhase } from '../../api/node-action.ts';
import type { DecisionBuilder } from '../decision.ts';
import { approved, executing } from './approved.ts';
import { held } from './held.ts';
import { pending } from './pending.ts';
import { runningPostHooks } from './running-post-hooks.ts';
import { runningPreHooks } from './running-pre-hooks.ts';
import { waitingForHealth } from './waiting-for-health.ts';
import { waitingForNode } from './waiting-for-node.ts';

/** Decides one step of an action in its phase, through the builder; may transition it. */
export type PhaseHandler = (b: DecisionBuilder) => void;

/** A terminal phase: nothing more happens (decide() cleans up after it). */
const over: PhaseHandler = () => undefined;

export const PHASE_HANDLERS: Record<NodeActionPhase, PhaseHandler> = {
  Pending: pending,
  WaitingForHealth: waitingForHealth,
  RunningPreHooks: runningPreHooks,
  Approved: approved,
  Executing: executing,
  WaitingForNode: waitingForNode,
  Held: held,
  RunningPostHooks: runningPostHooks,
  Succeeded: over,
  Failed: over,
  Denied: over,
  Cancelled: over,
};
