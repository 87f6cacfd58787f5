// The gate's writes and reads of NodeActions (the imperative side of decide.ts): the
// node's actions, an External action created for a caller, the claim before a call is
// forwarded (conditional on the version decided upon, so two replicas never both
// forward), and a cancellation. All state lives in NodeActions: a restarted or second
// gate replica carries on from them.
import { createHash } from 'node:crypto';
import { IDEMPOTENCY_LABEL, INSTANCE_LABEL, REQUESTED_VIA_ANNOTATION } from '../api/names.ts';
import type { NodeActionSpec, ObservedNodeAction } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { GATE_CALL_ANNOTATION, REQUESTED_VIA_GATE, type GatedCall } from './decide.ts';
import { API_VERSION } from '../api/common.ts';

export interface NodeObject {
  metadata: { name: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  status?: {
    addresses?: { type: string; address: string }[];
    nodeInfo?: { osImage?: string; bootID?: string };
  };
}

/** The Node a call's `node` metadata names: by address (InternalIP, ExternalIP, Hostname) or name. */
export async function findNode(rest: RestClient, target: string): Promise<NodeObject | undefined> {
  const list = await rest.request<{ items: NodeObject[] }>('/api/v1/nodes', {
    sharedSince: performance.now() - 1000,
  });
  return (
    list.items.find((n) => n.metadata.name === target) ??
    list.items.find((n) => n.status?.addresses?.some((a) => a.address === target))
  );
}

export async function nodeActions(rest: RestClient, node: string): Promise<ObservedNodeAction[]> {
  const list = await rest.request<{ items: ObservedNodeAction[] }>(NODE_ACTIONS_PATH, {
    query: { fieldSelector: `spec.nodeName=${node}` },
  });
  return list.items;
}

export async function readAction(rest: RestClient, name: string): Promise<ObservedNodeAction | undefined> {
  try {
    return await rest.request<ObservedNodeAction>(`${NODE_ACTIONS_PATH}/${name}`);
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 404) return undefined;
    throw error;
  }
}

/** A digest naming the caller's request (user, node, action, parameters): the label the gate's actions carry. */
export function callKey(call: GatedCall): string {
  return createHash('sha256')
    .update(JSON.stringify([call.caller, call.node, call.ask]))
    .digest('hex')
    .slice(0, 40);
}

/** A DNS-1123 name for the n-th action of this key: `talos-reboot-<node>-<key>-<n>`. */
function actionName(call: GatedCall, key: string, n: number): string {
  const node = call.node
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .slice(0, 30)
    .replace(/-+$/, '');
  return `talos-${call.ask.action.toLowerCase()}-${node}-${key.slice(0, 8)}-${String(n)}`;
}

export interface CreateOptions {
  /** The controller instance whose budget the action counts against (its label); none: the default instance. */
  instance?: string;
  /** The Talos call, in words, recorded on the action. */
  description: string;
  /** How long the caller has, once approved, to repeat the call (deadlines.approved). */
  approvedDeadline: string;
}

/**
 * Creates the External NodeAction a call needs. Its name follows from the call, so two
 * replicas (or two attempts of one talosctl) creating it at once make one: the second
 * gets a conflict and reads the first's.
 */
export async function createAction(
  rest: RestClient,
  call: GatedCall,
  existing: readonly ObservedNodeAction[],
  options: CreateOptions,
): Promise<ObservedNodeAction> {
  const key = callKey(call);
  // After the highest index in use: an earlier one may be gone (garbage-collected).
  const n = existing
    .filter((a) => a.metadata.labels?.[IDEMPOTENCY_LABEL] === key)
    .reduce((max, a) => Math.max(max, Number(/-(\d+)$/.exec(a.metadata.name)?.[1] ?? -1) + 1), 0);
  const name = actionName(call, key, n);
  const spec: NodeActionSpec = {
    nodeName: call.node,
    execution: 'External',
    requestedBy: call.caller,
    ...call.ask,
    deadlines: { approved: options.approvedDeadline },
  };
  try {
    return await rest.request<ObservedNodeAction>(NODE_ACTIONS_PATH, {
      method: 'POST',
      body: {
        apiVersion: API_VERSION,
        kind: 'NodeAction',
        metadata: {
          name,
          labels: {
            [IDEMPOTENCY_LABEL]: key,
            ...(options.instance ? { [INSTANCE_LABEL]: options.instance } : {}),
          },
          annotations: {
            [REQUESTED_VIA_ANNOTATION]: REQUESTED_VIA_GATE,
            [GATE_CALL_ANNOTATION]: options.description,
          },
        },
        spec,
      },
    });
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 409) {
      const other = await readAction(rest, name);
      if (other) return other;
    }
    throw error;
  }
}

/**
 * Claims an action for the call about to be forwarded: the annotations written only if
 * the action is still the version the decision read. False when it changed meanwhile
 * (decide again).
 */
export async function claim(
  rest: RestClient,
  action: ObservedNodeAction,
  annotations: Record<string, string>,
): Promise<boolean> {
  try {
    await rest.request(`${NODE_ACTIONS_PATH}/${action.metadata.name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { resourceVersion: action.metadata.resourceVersion, annotations } },
    });
    return true;
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 409) return false;
    throw error;
  }
}

/**
 * Cancels (deletes) an action the caller gave up on, unless it was executed meanwhile:
 * the delete is conditional on the version read, read again on a conflict.
 */
export async function cancelUnexecuted(
  rest: RestClient,
  name: string,
  isExecuted: (a: ObservedNodeAction) => boolean,
): Promise<boolean> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const action = await readAction(rest, name);
    if (!action || isExecuted(action) || action.metadata.deletionTimestamp) return false;
    try {
      await rest.request(`${NODE_ACTIONS_PATH}/${name}`, {
        method: 'DELETE',
        body: {
          apiVersion: 'v1',
          kind: 'DeleteOptions',
          preconditions: { uid: action.metadata.uid, resourceVersion: action.metadata.resourceVersion },
        },
      });
      return true;
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409) continue;
      if (error instanceof KubeApiError && error.code === 404) return false;
      throw error;
    }
  }
  return false;
}
