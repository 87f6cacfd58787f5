// What a Node-scoped check says as a whole: how many of its selected nodes it holds for,
// and the unsafe ones by name (a bounded list, so a thousand nodes keep a small status).
// Pure: the runner keeps the per-node states and calls this after each round.
import { MAX_UNSAFE_NODES } from '../api/cluster-health-check.ts';
import type { CheckState } from './state.ts';

export interface UnsafeNode {
  name: string;
  message: string;
  lastProbeTime?: Date;
}

export interface NodeResults {
  evaluated: number;
  safe: number;
  unsafe: number;
  /** The first MAX_UNSAFE_NODES unsafe nodes, by name. */
  unsafeNodes: UnsafeNode[];
}

/** Status messages per node stay short: the summary names up to twenty of them. */
const MAX_NODE_MESSAGE = 2048;

export function summarizeNodes(states: ReadonlyMap<string, CheckState>): NodeResults {
  let safe = 0;
  const unsafe: UnsafeNode[] = [];
  let unsafeCount = 0;
  for (const name of [...states.keys()].sort()) {
    const state = states.get(name);
    if (!state || state.healthy === undefined) continue;
    if (state.healthy) {
      safe++;
      continue;
    }
    unsafeCount++;
    if (unsafe.length < MAX_UNSAFE_NODES)
      unsafe.push({
        name,
        message: state.message.slice(0, MAX_NODE_MESSAGE),
        ...(state.lastProbeTime ? { lastProbeTime: state.lastProbeTime } : {}),
      });
  }
  return { evaluated: safe + unsafeCount, safe, unsafe: unsafeCount, unsafeNodes: unsafe };
}

/** One line for the check's message: "2 of 3 nodes safe; worker-2: 1/1 Pod objects …". */
export function describeNodes(results: NodeResults): string {
  if (results.evaluated === 0) return 'not evaluated for any node yet';
  const head = `${String(results.safe)} of ${String(results.evaluated)} evaluated node${results.evaluated === 1 ? '' : 's'} safe`;
  if (results.unsafe === 0) return head;
  const shown = results.unsafeNodes.slice(0, 3).map((n) => `${n.name}: ${n.message}`);
  const more = results.unsafe - shown.length;
  return `${head}; ${shown.join('; ')}${more > 0 ? `; and ${String(more)} more` : ''}`;
}

/**
 * The check's own state, for status and for readers without a node: it has no verdict
 * of its own (a Node-scoped check gates each action by its node's result), so `healthy`
 * stays undefined; the message and reason summarise the nodes.
 */
export function nodeSummaryState(results: NodeResults, previous: CheckState, now: Date): CheckState {
  return {
    healthy: undefined,
    reason: results.evaluated === 0 ? 'NotProbed' : results.unsafe === 0 ? 'ProbeSucceeded' : 'ProbeFailed',
    message: describeNodes(results),
    consecutiveSuccesses: 0,
    consecutiveFailures: 0,
    ...(results.evaluated > 0 ? { lastProbeTime: now } : {}),
    ...(previous.lastTransitionTime ? { lastTransitionTime: previous.lastTransitionTime } : {}),
  };
}
