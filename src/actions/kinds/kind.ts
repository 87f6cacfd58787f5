// What an action kind is: everything that differs between Upgrade, Reboot, Shutdown,
// Reset and ConfigChange, in one descriptor per kind (one file each, beside this one),
// collected in a table the compiler checks (index.ts). Adding a kind to the API
// (ACTIONS in src/api/common.ts) fails to compile there until its descriptor exists, and
// every place that needs a fact about a kind reads it from its descriptor: none asks
// `spec.action === …` (docs/decisions.md, "One descriptor per action kind").
import type { Action } from '../../api/common.ts';
import type { PreActionHookKind } from '../../api/hooks.ts';
import type { ExecutionRecord, NodeActionSpec, NodeActionStatus } from '../../api/node-action.ts';
import type { EtcdDisruption } from '../../talos/etcd-health.ts';
import type { TalosStepsPlanner } from '../../talos/plan.ts';
import type { NodeFacts } from '../observations.ts';

/**
 * How the controller knows an action has done its work to the node. Each has its rule
 * (src/actions/completions.ts) and its WaitingForNode handler (phases/waiting-for-node.ts),
 * both tables keyed by Completion: a new one does not compile until it has both.
 */
export type Completion =
  /** The node boots again: a new boot ID, then Ready; then the boot hooks run. */
  | 'reboot'
  /** The node goes down: NotReady, gone, or (powered on again) a new boot ID. */
  | 'down'
  /** The requester's executed mark alone (or Talos's answer), once the node is Ready. */
  | 'mark'
  /** Held out of service (phase Held) until released: the annotation, or maxDuration. */
  | 'release';

/** How the controller performs a Managed action of the kind. */
export type Performer =
  /**
   * Through the Talos API (src/talos/executor.ts), with these typed steps: it needs a
   * talosconfig, and a controller without one approves the action for its requester to
   * perform (condition Executed, reason ExecutorNotInstalled).
   */
  | { by: 'talos'; steps: TalosStepsPlanner }
  /**
   * By the controller alone: it cordons and drains the node (as spec.drain says), and the
   * action's work is what people then do to the node while it is held (Maintenance).
   */
  | { by: 'controller' };

/** The words an action of the kind is described with, in its status and Events. */
export interface ActionWords {
  /** The External requester's instruction once approved, before " node N": "perform the Reboot of". */
  perform: string;
  /** How a Managed action's execution is described: "through the Talos API". */
  managed: string;
  /** How an action whose completion is the mark says it is done: "configuration change done". */
  done: string;
  /** Why its etcd member is gone for good, when etcdMember says so: "a graceful reset leaves etcd". */
  goneForGood?: (spec: NodeActionSpec) => string;
}

export interface ActionKind {
  /** The hook kind that runs before the action. */
  preHookKind: PreActionHookKind;
  /** How a Managed action of this kind is performed. */
  managed: Performer;
  /**
   * Why a Managed action of this kind on a node running `osImage` is not cordoned and
   * drained before its work; undefined: it is (unless spec.drain.enabled is false).
   * `status` holds what was decided before the health gate (a ConfigChange's class).
   */
  noDrain: (spec: NodeActionSpec, osImage?: string, status?: NodeActionStatus) => string | undefined;
  /**
   * Whether, on a control-plane node, the etcd guard holds the action (src/actions/
   * etcd-guard.ts) and, once approved, counts the node's member as away for the others.
   */
  etcdGuard: (spec: NodeActionSpec, osImage?: string, status?: NodeActionStatus) => boolean;
  /**
   * What the action does to the node's etcd member (src/talos/etcd-health.ts): down for a
   * while, or for good — leaving the cluster (`leaves`) or left listed and dead (`dead`),
   * as a Reset does. The etcd guard judges each so, and refuses (Denied) rather than
   * holds an action whose member etcd can never spare for good.
   */
  etcdMember: (spec: NodeActionSpec) => EtcdDisruption;
  /**
   * Whether a successful end lifts the cordon the action made (the node is back and
   * fine), or keeps it (the node is down or wiped: `kubectl uncordon` once it is fine).
   */
  cordonAtEnd: 'lift' | 'keep';
  /**
   * How the action finishes. `execution` is the record of a Managed action's Talos call:
   * once Talos answered, what it does is known rather than guessed.
   */
  completion: (spec: NodeActionSpec, execution?: ExecutionRecord, osImage?: string) => Completion;
  /**
   * Whether the action restarts every pod on its node without taking the node away (a
   * ConfigChange classified CRIRestart): the pods' do-not-disrupt, other maintainers and
   * the drain forecast hold it as they hold an action that takes the node away.
   */
  restartsPods?: (spec: NodeActionSpec, osImage?: string, status?: NodeActionStatus) => boolean;
  /** Whether the node, once back, shows the action did not take (an upgrade booted the old version). */
  missed?: (spec: NodeActionSpec, status: NodeActionStatus, node: NodeFacts) => string | undefined;
  words: ActionWords;
  /** The image an action of the kind installs, for its hooks (GATEHOUSE_TARGET_IMAGE). */
  targetImage?: (spec: NodeActionSpec) => string | undefined;
}

/** Every kind's descriptor, by the action it describes. */
export type ActionKinds = { readonly [A in Action]: ActionKind };

/** The words of every kind performed through the Talos API. */
export const THROUGH_TALOS = 'through the Talos API';
