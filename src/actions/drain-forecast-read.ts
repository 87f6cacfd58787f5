// The reads behind the drain forecast (drain-forecast.ts), made for the health gate's
// decision of an action that drains its node, never from a cache of every Pod:
//   - the node's Pods, whole (their requests, selectors, tolerations, owners), unfinished;
//   - the PodDisruptionBudgets of their namespaces;
//   - the other nodes, from the controller's Node cache (slimNode keeps taints and
//     allocatable);
//   - the Pods of at most FORECAST_NODE_READS of those nodes, for the room they have left.
// Every list is served by the API server's watch cache (resourceVersion 0), the Pod lists
// by its index on spec.nodeName: a moment behind at most, and cheap whatever the size of
// the cluster (docs/decisions.md, "The drain forecast").
import type { KubeObject } from '../kube/informer.ts';
import type { LabelSelector } from '../kube/labels.ts';
import type { RestClient } from '../kube/rest.ts';
import { errorMessage } from '../wait.ts';
import {
  forecastDrain,
  nodesToRead,
  type BudgetObject,
  type DrainForecastRead,
  type DrainForecastResult,
} from './drain-forecast.ts';
import { addRoom, candidateNode, podRequests, type PodObject, type Room } from './pod-placement.ts';

/** How many other nodes' Pods a forecast reads, at most, for the room those nodes have left. */
export const FORECAST_NODE_READS = 16;

const UNFINISHED = 'status.phase!=Succeeded,status.phase!=Failed';

async function podsOn(rest: RestClient, node: string): Promise<PodObject[]> {
  const list = await rest.request<{ items: PodObject[] | null }>('/api/v1/pods', {
    query: { fieldSelector: `spec.nodeName=${node},${UNFINISHED}`, resourceVersion: '0' },
  });
  return list.items ?? [];
}

async function budgetsIn(rest: RestClient, namespaces: readonly string[]): Promise<BudgetObject[]> {
  const lists = await Promise.all(
    namespaces.map((ns) =>
      rest.request<{ items: BudgetObject[] | null }>(
        `/apis/policy/v1/namespaces/${encodeURIComponent(ns)}/poddisruptionbudgets`,
        { query: { resourceVersion: '0' } },
      ),
    ),
  );
  // A list's items carry no namespace of their own when it is implied: set it.
  return lists.flatMap((l, i) =>
    (l.items ?? []).map((b) => ({ ...b, metadata: { ...b.metadata, namespace: namespaces[i] ?? '' } })),
  );
}

/** What the Pods on a node request, together (the scheduler counts every unfinished one). */
export function usedBy(pods: readonly PodObject[]): Room {
  return pods.map(podRequests).reduce(addRoom, { cpu: 0, memory: 0, pods: 0 });
}

async function forecast(
  rest: RestClient,
  nodeName: string,
  nodes: readonly KubeObject[],
  podSelector: LabelSelector | undefined,
): Promise<DrainForecastResult> {
  const pods = await podsOn(rest, nodeName);
  const namespaces = [...new Set(pods.map((p) => p.metadata.namespace))].sort();
  const facts = {
    nodeName,
    pods,
    budgets: await budgetsIn(rest, namespaces),
    nodes: nodes.map((n) => candidateNode(n as Parameters<typeof candidateNode>[0])),
    used: new Map<string, Room>(),
    ...(podSelector ? { podSelector } : {}),
  };
  const read = nodesToRead(facts, FORECAST_NODE_READS);
  const used = await Promise.all(read.map(async (n) => [n, usedBy(await podsOn(rest, n))] as const));
  return forecastDrain({ ...facts, used: new Map(used) });
}

/** The drain forecast of `nodeName`; a failed read is returned as its error, for the gate to say. */
export async function readDrainForecast(
  rest: RestClient,
  nodeName: string,
  nodes: readonly KubeObject[],
  podSelector?: LabelSelector,
): Promise<DrainForecastRead> {
  try {
    return { at: new Date(), result: await forecast(rest, nodeName, nodes, podSelector) };
  } catch (error) {
    return { at: new Date(), error: errorMessage(error) };
  }
}
