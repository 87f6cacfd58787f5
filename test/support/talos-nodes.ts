// Simulated Talos nodes of one test's own: labelled with its group, tainted so that no
// other suite's pods land there, each at an address the Talos simulator routes to it
// alone, Ready before the test goes on, and deleted when it ends.
import type { TestContext } from 'node:test';
import { talosNode } from '../../sandbox/nodes.ts';
import { ETCD_CLUSTER_LABEL } from '../../sandbox/talos-etcd.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { waitFor } from '../../src/wait.ts';

export const GROUP_LABEL = 'gatehouse.test/group';

export interface NodeView {
  metadata: { name: string; annotations?: Record<string, string> };
  status?: {
    conditions?: { type: string; status: string }[];
    addresses?: { type: string; address: string }[];
    nodeInfo?: { bootID?: string; osImage?: string };
  };
}

export const isReady = (n: NodeView) =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

export interface TalosNodesRequest {
  group: string;
  count: number;
  /** The NoSchedule taint the nodes carry (the suite's own). */
  taint: string;
  kubernetesVersion: string;
  talosVersion: string;
  /**
   * The third octet range of their addresses, 10.5.<from…from+49>.x: each suite its own,
   * away from the sandbox's 10.5.0.x and the Talos client tests' 10.5.200+.
   */
  addressBlock: number;
  annotations?: Record<string, string>;
  /** Control-plane nodes of a simulated etcd cluster of this name (ETCD_CLUSTER_LABEL). */
  etcdCluster?: string;
}

async function freeAddress(client: RestClient, block: number): Promise<string> {
  const list = await client.request<{ items: NodeView[] }>('/api/v1/nodes');
  const taken = new Set(list.items.flatMap((n) => n.status?.addresses?.map((a) => a.address) ?? []));
  for (;;) {
    const ip = `10.5.${String(block + Math.floor(Math.random() * 50))}.${String(2 + Math.floor(Math.random() * 250))}`;
    if (!taken.has(ip)) return ip;
  }
}

/** Creates the nodes `${group}-1` … `${group}-${count}` and waits until they are Ready. */
export async function createTalosNodes(
  t: TestContext,
  client: RestClient,
  request: TalosNodesRequest,
): Promise<string[]> {
  const { group, count, etcdCluster } = request;
  const names = Array.from({ length: count }, (_, i) => `${group}-${String(i + 1)}`);
  t.after(() =>
    Promise.all(
      names.map((n) => client.request(`/api/v1/nodes/${n}`, { method: 'DELETE' }).catch(() => undefined)),
    ),
  );
  for (const name of names) {
    const node = talosNode(
      {
        name,
        role: etcdCluster === undefined ? 'worker' : 'control-plane',
        internalIP: await freeAddress(client, request.addressBlock),
        talosVersion: request.talosVersion,
      },
      request.kubernetesVersion,
    );
    const metadata = node.metadata ?? {};
    // Not type=kwok: suites that look at the sandbox's own nodes never see these.
    const { type: _sandboxLabel, ...labels } = metadata.labels ?? {};
    metadata.labels = {
      ...labels,
      [GROUP_LABEL]: group,
      ...(etcdCluster === undefined ? {} : { [ETCD_CLUSTER_LABEL]: etcdCluster }),
    };
    metadata.annotations = { ...metadata.annotations, ...request.annotations };
    node.metadata = metadata;
    node.spec = { taints: [{ key: request.taint, effect: 'NoSchedule' }] };
    await client.request('/api/v1/nodes', { method: 'POST', body: node });
  }
  await Promise.all(
    names.map((name) =>
      waitFor(
        `node ${name} to become Ready`,
        async () => (isReady(await client.request<NodeView>(`/api/v1/nodes/${name}`)) ? true : undefined),
        { timeoutMs: 60_000, intervalMs: 250 },
      ),
    ),
  );
  return names;
}
