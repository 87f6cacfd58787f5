// What the Managed execution suites share: a controller with the sandbox's talosconfig,
// simulated Talos nodes of a test's own, the Talos calls the simulator counted on a node
// (sandbox.gatehouse.dev/talos-calls: how a test knows a call was made exactly once),
// and Managed actions deleted when the test ends.
import type { TestContext } from 'node:test';
import type { Controller } from '../../src/controller.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import { loadTalosConfig, type TalosContext } from '../../src/talos/config.ts';
import { createAction, deleteActionsAfter, startGateController, type ActionObject } from './gate.ts';
import { rest, testKubeConfig, testSandboxState } from './kube.ts';
import { createTalosNodes } from './talos-nodes.ts';

export const kc = testKubeConfig();
export const client = rest(kc);
export const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(
    `the sandbox in ${sandbox.dir} runs no Talos simulator (started with --no-talos?): restart it`,
  );
export const talos: TalosContext = await loadTalosConfig({ path: sandbox.talosconfig });
/** Keeps everyone else's pods off the Managed suites' nodes, which reboot and go away. */
export const MANAGED_TAINT = 'gatehouse.test/managed';

/** A controller of `instance` that performs Managed actions through the sandbox's simulator. */
export function managedController(
  instance: string,
  talosOptions: Record<string, unknown> = {},
): Promise<Controller> {
  return startGateController(instance, { talos: { config: talos, drainRetryMs: 500, ...talosOptions } });
}

export interface NodeView {
  metadata: { name: string; annotations?: Record<string, string> };
  spec?: { unschedulable?: boolean };
  status?: {
    nodeInfo?: { bootID?: string; osImage?: string };
    conditions?: { type: string; status: string }[];
    addresses?: { type: string; address: string }[];
  };
}

export const readNode = (name: string) => client.request<NodeView>(`/api/v1/nodes/${name}`);

/** The Talos calls the simulator counted on the node, by method. */
export async function callsOn(name: string): Promise<Record<string, number>> {
  return talosCallCounts((await readNode(name)).metadata.annotations);
}

/** Simulated Talos nodes of the test's own, labelled with `group`, at 10.5.<addressBlock–+49>.x. */
export function managedNodes(
  t: TestContext,
  group: string,
  count: number,
  options: {
    talosVersion: string;
    addressBlock: number;
    annotations?: Record<string, string>;
    etcdCluster?: string;
  },
): Promise<string[]> {
  return createTalosNodes(t, client, {
    group,
    count,
    taint: MANAGED_TAINT,
    kubernetesVersion: sandbox.kubernetesVersion,
    talosVersion: options.talosVersion,
    addressBlock: options.addressBlock,
    ...(options.annotations ? { annotations: options.annotations } : {}),
    ...(options.etcdCluster !== undefined ? { etcdCluster: options.etcdCluster } : {}),
  });
}

export const conditionOf = (a: ActionObject, type: string) =>
  a.status?.conditions?.find((c) => c.type === type);

/** A Managed NodeAction of `instance`, requested by `requester`, deleted when the test ends. */
export async function createManagedAction(
  t: TestContext,
  instance: string,
  requester: string,
  spec: Parameters<typeof createAction>[3],
): Promise<string> {
  const created = await createAction(client, instance, requester, { execution: 'Managed', ...spec });
  deleteActionsAfter(t, client, created.metadata.name);
  return created.metadata.name;
}
