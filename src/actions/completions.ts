// What each way an action can finish (Completion, src/actions/kinds/kind.ts) means to the
// rest of the gate, in one table the compiler checks: a new Completion does not compile
// until every fact about it is written here (and its WaitingForNode handler, in
// phases/waiting-for-node.ts).
import type {
  ExecutionRecord,
  NodeActionPhase,
  NodeActionSpec,
  NodeActionStatus,
} from '../api/node-action.ts';
import { completionOf, type Completion } from './kinds/index.ts';
import type { NodeFacts } from './observations.ts';

export interface CompletionRule {
  /** The phase an action waits in once its work is under way (performed, or marked so). */
  waitsIn: Extract<NodeActionPhase, 'WaitingForNode' | 'Held'>;
  /** What an action whose work is under way waits for, in words for its status. */
  waiting: string;
  /**
   * Whether the node boots again, or goes down and boots again later: its next boot is
   * the action's, announced on the node before approval (src/boots) so that its boot hooks
   * (and the preready taint) know whose it is.
   */
  boots: boolean;
  /** Whether the node's etcd member is away while the approved action runs (etcd-guard.ts etcdAway). */
  away: boolean;
  /**
   * Whether the node itself shows that the work happened (a boot, going down): a Talos
   * call whose outcome is unknown is then followed on the node rather than given up.
   */
  shows: boolean;
  /**
   * What the node shows of an External action performed without (or before) the executed
   * mark, undefined when nothing does. NotReady alone does not show a reboot (a node can
   * blip); it does show a shutdown.
   */
  seen: (node: NodeFacts | undefined, nodeName: string, status: NodeActionStatus) => string | undefined;
}

/** A new boot ID, or the node gone: what every completion but the mark sees. */
function changed(
  node: NodeFacts | undefined,
  nodeName: string,
  status: NodeActionStatus,
): string | undefined {
  if (!node) return `node ${nodeName} is gone`;
  if (status.bootIDBefore !== undefined && node.bootID !== status.bootIDBefore)
    return `node ${nodeName} has a new boot ID`;
  return undefined;
}

export const COMPLETIONS: { readonly [C in Completion]: CompletionRule } = {
  reboot: {
    waitsIn: 'WaitingForNode',
    waiting: 'waiting for the node to come back with a new boot ID',
    boots: true,
    away: true,
    shows: true,
    seen: changed,
  },
  down: {
    waitsIn: 'WaitingForNode',
    waiting: 'waiting for the node to go down',
    boots: true,
    away: true,
    shows: true,
    seen: (node, nodeName, status) =>
      changed(node, nodeName, status) ?? (node && !node.ready ? `node ${nodeName} is NotReady` : undefined),
  },
  mark: {
    waitsIn: 'WaitingForNode',
    waiting: 'waiting for the node to be Ready',
    // A change applied live (Talos said it does not reboot) takes nothing down.
    boots: false,
    away: false,
    shows: false,
    // Nothing about the node shows a change applied live: only the mark tells.
    seen: () => undefined,
  },
  release: {
    waitsIn: 'Held',
    waiting: 'held out of service until released',
    // Nothing is announced: whether the work boots the node is not known (a boot while
    // held is the action's all the same: an approved action is in flight on the node).
    boots: false,
    // The work it is held for may power the node off.
    away: true,
    shows: false,
    // Only the mark tells that a requester drained the node.
    seen: () => undefined,
  },
};

/** What an action whose work is under way waits for, in words for its status. */
export function waitingMessage(completion: Completion): string {
  return COMPLETIONS[completion].waiting;
}

/**
 * Whether the action's work takes its node away — a boot, going down, held out of
 * service — and with it every Pod on the node: what pauses remediation and what a Pod's
 * do-not-disrupt holds.
 */
export function takesNodeAway(spec: NodeActionSpec, execution?: ExecutionRecord, osImage?: string): boolean {
  const rule = COMPLETIONS[completionOf(spec, execution, osImage)];
  return rule.away || rule.boots;
}
