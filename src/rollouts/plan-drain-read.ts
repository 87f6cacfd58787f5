// The reads behind the drain forecast of a rollout's plan (plan-drain.ts): every unfinished
// Pod of the cluster and every PodDisruptionBudget, one LIST each, served by the API
// server's watch cache (resourceVersion 0), made only when a dry run is planned (on a
// spec change, then every PLAN_REFRESH_MS), never for a running rollout. Each Pod is
// kept only for the fields the forecast reads, so a large cluster's list is held whole
// only while it is parsed (docs/decisions.md, "The drain forecast in a plan").
import type { KubeObject } from '../kube/informer.ts';
import type { LabelSelector } from '../kube/labels.ts';
import type { RestClient } from '../kube/rest.ts';
import { errorMessage } from '../wait.ts';
import type { BudgetObject } from '../actions/drain-forecast.ts';
import { usedBy } from '../actions/drain-forecast-read.ts';
import { candidateNode, type PodObject } from '../actions/pod-placement.ts';
import type { PlanDrainRead } from './plan-drain.ts';

const UNFINISHED = 'status.phase!=Succeeded,status.phase!=Failed';

/** A Pod with only what the forecast reads. */
function slimPod(p: PodObject): PodObject {
  const { name, namespace, labels, annotations, ownerReferences, deletionTimestamp } = p.metadata;
  const s = p.spec ?? {};
  const resources = (cs: NonNullable<PodObject['spec']>['containers']) =>
    cs?.map((c) => ({
      ...(c.restartPolicy ? { restartPolicy: c.restartPolicy } : {}),
      ...(c.resources?.requests ? { resources: { requests: c.resources.requests } } : {}),
    }));
  return {
    metadata: {
      name,
      namespace,
      ...(labels ? { labels } : {}),
      ...(annotations ? { annotations } : {}),
      ...(ownerReferences ? { ownerReferences } : {}),
      ...(deletionTimestamp ? { deletionTimestamp } : {}),
    },
    spec: {
      ...(s.nodeName ? { nodeName: s.nodeName } : {}),
      ...(s.nodeSelector ? { nodeSelector: s.nodeSelector } : {}),
      ...(s.affinity?.nodeAffinity ? { affinity: { nodeAffinity: s.affinity.nodeAffinity } } : {}),
      ...(s.tolerations ? { tolerations: s.tolerations } : {}),
      ...(s.containers ? { containers: resources(s.containers) } : {}),
      ...(s.initContainers ? { initContainers: resources(s.initContainers) } : {}),
      ...(s.overhead ? { overhead: s.overhead } : {}),
    },
    ...(p.status?.phase ? { status: { phase: p.status.phase } } : {}),
  };
}

/** The plan's drain facts; a failed read is returned as its error, for the plan to say. */
export async function readPlanDrain(
  rest: RestClient,
  nodes: readonly KubeObject[],
  podSelector: LabelSelector | undefined,
): Promise<PlanDrainRead> {
  try {
    const [pods, budgets] = await Promise.all([
      rest.request<{ items: PodObject[] | null }>('/api/v1/pods', {
        query: { fieldSelector: UNFINISHED, resourceVersion: '0' },
      }),
      rest.request<{ items: BudgetObject[] | null }>('/apis/policy/v1/poddisruptionbudgets', {
        query: { resourceVersion: '0' },
      }),
    ]);
    const podsByNode = new Map<string, PodObject[]>();
    for (const pod of pods.items ?? []) {
      const node = pod.spec?.nodeName;
      if (!node) continue;
      const list = podsByNode.get(node) ?? [];
      list.push(slimPod(pod));
      podsByNode.set(node, list);
    }
    const used = new Map([...podsByNode].map(([node, list]) => [node, usedBy(list)] as const));
    return {
      facts: {
        podsByNode,
        budgets: budgets.items ?? [],
        nodes: nodes.map((n) => candidateNode(n as Parameters<typeof candidateNode>[0])),
        used,
        ...(podSelector ? { podSelector } : {}),
      },
    };
  } catch (error) {
    return { error: errorMessage(error) };
  }
}
