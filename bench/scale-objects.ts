// The scale benchmark's cluster: Nodes as big as a busy kubelet makes them, `nodes`
// ClusterHealthChecks selecting one each, and a wait for the cluster to settle after
// they were made.
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import { talosNode } from '../sandbox/nodes.ts';
import type { RestClient } from '../src/kube/rest.ts';
import { sleep } from '../src/wait.ts';
import { served, serverCounters } from './api-requests.ts';

const API = '/apis/talos.dev/v1alpha1';
/** Every scale check carries it, with the size class it was made for (growth removes the larger ones). */
const CLASS_LABEL = 'bench.gatehouse.dev/scale-class';

export function nodeName(i: number): string {
  return `scale-${String(i).padStart(5, '0')}`;
}

/**
 * What a kubelet of a busy node adds to its status: 50 images (its default cap) and
 * volumes. No kubelet posts these Nodes' status, and kube-controller-manager's node
 * lifecycle controller would mark each one Unknown and taint it, 50 s after it first saw
 * it, at its own pace: for 5,000 Nodes, thousands of Node writes over many minutes, which
 * every controller watching Nodes would receive in the middle of its measurement. So they
 * are made as that controller leaves them, and it has nothing to change.
 */
function busyNodeStatus(n: number) {
  return {
    conditions: ['MemoryPressure', 'DiskPressure', 'PIDPressure', 'Ready'].map((type) => ({
      type,
      status: 'Unknown',
      reason: 'NodeStatusUnknown',
      message: 'Kubelet stopped posting node status.',
      lastHeartbeatTime: '2026-11-30T00:00:00Z',
      lastTransitionTime: '2026-11-30T00:00:00Z',
    })),
    images: Array.from({ length: 50 }, (_, i) => ({
      names: [
        `registry.example.com/team-${String((n + i) % 40)}/service-${String(i)}@sha256:${i.toString(16).padStart(64, '0')}`,
        `registry.example.com/team-${String((n + i) % 40)}/service-${String(i)}:v1.${String(i)}.0`,
      ],
      sizeBytes: 50_000_000 + i * 1_000_000,
    })),
    volumesInUse: Array.from(
      { length: 8 },
      (_, i) => `kubernetes.io/csi/rbd.csi.ceph.com^0001-${String(n)}-${String(i)}`,
    ),
    volumesAttached: Array.from({ length: 8 }, (_, i) => ({
      name: `kubernetes.io/csi/rbd.csi.ceph.com^0001-${String(n)}-${String(i)}`,
      devicePath: '',
    })),
  };
}

async function inBatches(from: number, to: number, create: (i: number) => Promise<unknown>): Promise<void> {
  for (let i = from; i < to; i += 100)
    await Promise.all(Array.from({ length: Math.min(100, to - i) }, (_, j) => create(i + j)));
}

/** Creates Nodes `from`..`to`-1. Not simulated by kwok: the point is the controllers' caches, not 5,000 kubelets. */
export async function createNodes(
  sandbox: Sandbox,
  api: RestClient,
  from: number,
  to: number,
): Promise<void> {
  await inBatches(from, to, (i) => {
    const name = nodeName(i);
    const node = talosNode(
      { name, role: 'worker', internalIP: `10.99.${String(Math.floor(i / 250))}.${String((i % 250) + 2)}` },
      sandbox.state.kubernetesVersion,
    );
    node.metadata = { name, labels: node.metadata?.labels ?? {} };
    // The node lifecycle controller's taint for a node whose Ready is Unknown (busyNodeStatus).
    node.spec = { taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }] };
    Object.assign(node.status ?? {}, busyNodeStatus(i));
    return api.request('/api/v1/nodes', { method: 'POST', body: node });
  });
}

function sizeClass(i: number): string {
  return i < 100 ? 'first-100' : i < 1000 ? 'to-1000' : 'beyond-1000';
}

/** Creates checks `from`..`to`-1; check i selects node i modulo `nodes` by its hostname label. */
export async function createChecks(
  api: RestClient,
  from: number,
  to: number,
  nodes: number,
  interval: string,
): Promise<void> {
  await inBatches(from, to, (i) =>
    api.request(`${API}/clusterhealthchecks`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ClusterHealthCheck',
        metadata: { name: `scale-${String(i)}`, labels: { [CLASS_LABEL]: sizeClass(i) } },
        spec: {
          interval,
          nodes: { selector: { matchLabels: { 'kubernetes.io/hostname': nodeName(i % nodes) } } },
        },
      },
    }),
  );
}

/** Deletes every scale check from `keep` on (keep is 100 or 1,000). */
export async function deleteChecksFrom(api: RestClient, keep: 100 | 1000): Promise<void> {
  const classes = keep === 100 ? 'to-1000,beyond-1000' : 'beyond-1000';
  await api.request(`${API}/clusterhealthchecks`, {
    method: 'DELETE',
    query: { labelSelector: `${CLASS_LABEL} in (${classes})` },
  });
}

/** The TTL controller's annotation for a cluster of `count` Nodes (its ttlBoundaries, as they grow). */
function nodeTtlSeconds(count: number): number {
  return count <= 100 ? 0 : count <= 500 ? 15 : count <= 1000 ? 30 : count <= 2000 ? 60 : 300;
}

/**
 * Writes Nodes `from`..`to`-1 as kube-controller-manager would leave them, so that it has
 * nothing left to write: at its own request rate (~10 a second here) it took 25 minutes
 * for 5,000 Nodes. The node lifecycle controller adds the beta OS and architecture labels
 * and swaps the not-ready taint (which admission adds to every new Node) for the
 * unreachable one; the TTL controller annotates each Node by the cluster's size.
 */
async function converge(api: RestClient, from: number, to: number): Promise<void> {
  const list = await api.request<{ metadata: { remainingItemCount?: number } }>('/api/v1/nodes', {
    query: { limit: 1 },
  });
  const ttl = String(nodeTtlSeconds((list.metadata.remainingItemCount ?? 0) + 1));
  await inBatches(from, to, (i) =>
    api.request(`/api/v1/nodes/${nodeName(i)}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: {
        metadata: {
          labels: { 'beta.kubernetes.io/arch': 'amd64', 'beta.kubernetes.io/os': 'linux' },
          annotations: { 'node.alpha.kubernetes.io/ttl': ttl },
        },
        spec: { taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }] },
      },
    }),
  );
}

/**
 * Waits until the cluster has stopped reacting to the Nodes just made (busyNodeStatus,
 * converge): no Node written for 10 s, the node lifecycle controller's grace period
 * (50 s) past. `made` are the Nodes made since the last settle.
 */
export async function settle(
  api: RestClient,
  made: { from: number; to: number },
  log: (line: string) => void,
): Promise<void> {
  const t0 = performance.now();
  await converge(api, made.from, made.to);
  await sleep(Math.max(0, 60_000 - (performance.now() - t0)));
  for (;;) {
    const before = await serverCounters(api);
    await sleep(10_000);
    const writes = [...served(before, await serverCounters(api)).requests]
      .filter(([key]) => /^(PUT|PATCH|POST|DELETE|APPLY) nodes\b/.test(key))
      .reduce((sum, [, n]) => sum + n, 0);
    if (writes === 0) break;
    log(`  the cluster still writes Nodes (${String(writes)} in 10 s): waiting`);
  }
  log(`  cluster settled in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
}
