// What the gate's integration tests (test/integration/gate-*.test.ts) share: their own
// kwok nodes, their own controller instance, NodeActions, and playing the requester
// and the node (a reboot is a new boot ID).
//
// Test files run concurrently against one sandbox. Each one starts a controller with an
// instance name of its own and labels its NodeActions with it, so no other controller
// acts on them; its hooks, checks and policies select only the nodes it created.
import type { TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { NodeAction, NodeActionSpec } from '../../src/api/node-action.ts';
import { Controller, type ControllerOptions } from '../../src/controller.ts';
import { KubeApiError, type RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { talosNode } from '../../sandbox/nodes.ts';
import {
  freshNamespace,
  rest,
  serverSideApply,
  testKubeConfig,
  uniqueName,
  waitFor,
  waitForEstablished,
} from './kube.ts';
import { randomUUID } from 'node:crypto';

export const API = '/apis/talos.dev/v1alpha1';
/** The taint on nodes the gate tests create. */
export const TEST_NODE_TAINT = 'gatehouse.test/gate';
export type ActionObject = NodeAction & { metadata: { name: string; uid: string; resourceVersion: string } };

export async function whoami(client: RestClient): Promise<string> {
  const review = await client.request<{ status: { userInfo: { username: string } } }>(
    '/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { method: 'POST', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
  );
  return review.status.userInfo.username;
}

/**
 * Creates kwok-simulated Talos worker nodes with `labels`, waits until they are Ready,
 * and deletes them when the test ends. Returns their names.
 */
export async function createTestNodes(
  t: TestContext,
  client: RestClient,
  prefix: string,
  count: number,
  labels: Record<string, string>,
): Promise<string[]> {
  const cp = await client.request<{ status: { nodeInfo: { kubeletVersion: string } } }>('/api/v1/nodes/cp-1');
  const names = Array.from({ length: count }, (_, i) => `${prefix}-${i + 1}`);
  t.after(async () => {
    await Promise.all(
      names.map((n) => client.request(`/api/v1/nodes/${n}`, { method: 'DELETE' }).catch(() => undefined)),
    );
  });
  await Promise.all(
    names.map(async (name, i) => {
      const node = talosNode(
        { name, role: 'worker', internalIP: `10.77.${Math.floor(i / 250)}.${(i % 250) + 2}` },
        cp.status.nodeInfo.kubeletVersion,
      );
      node.metadata = Object.assign({}, node.metadata, { labels: { ...node.metadata?.labels, ...labels } });
      // Other test files' DaemonSets stay off these nodes, which come, go and reboot.
      // Hook Jobs run away from their target anyway, on the sandbox's own workers.
      node.spec = { taints: [{ key: TEST_NODE_TAINT, effect: 'NoSchedule' }] };
      await client.request('/api/v1/nodes', { method: 'POST', body: node });
    }),
  );
  await Promise.all(
    names.map((name) =>
      waitFor(
        `node ${name} to become Ready`,
        async () => ((await nodeState(client, name)).ready ? true : undefined),
        { timeoutMs: 60_000, intervalMs: 250 },
      ),
    ),
  );
  return names;
}

export async function nodeState(
  client: RestClient,
  name: string,
): Promise<{ ready: boolean; bootID: string }> {
  const node = await client.request<{
    status?: { nodeInfo?: { bootID?: string }; conditions?: { type: string; status: string }[] };
  }>(`/api/v1/nodes/${name}`);
  return {
    ready: node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    bootID: node.status?.nodeInfo?.bootID ?? '',
  };
}

/**
 * What a reboot looks like from the API: a new boot ID, and NotReady until kwok makes
 * the node Ready again (within a second). One write, so that kwok, which rewrites the
 * status from what it last read, cannot bring the old boot ID back.
 */
export async function rebootNode(client: RestClient, name: string): Promise<string> {
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
  const bootID = randomUUID();
  await client.request(`/api/v1/nodes/${name}/status`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: {
      status: {
        nodeInfo: { bootID },
        conditions: [
          {
            type: 'Ready',
            status: 'False',
            reason: 'KubeletNotReady',
            message: 'rebooting',
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ],
      },
    },
  });
  return bootID;
}

/** Starts a controller for this test file alone, stopped when the suite ends. */
export async function startGateController(
  instance: string,
  extra: Partial<ControllerOptions> = {},
): Promise<Controller> {
  const controller = await Controller.start({
    kubeConfig: testKubeConfig(),
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
    instance,
    // Its own checks only (labelled with the instance): other files' checks are theirs.
    checkSelector: `${INSTANCE_LABEL}=${instance}`,
    // Each file's control-plane nodes are an etcd cluster of its own: another file's
    // control-plane action must not hold this one's (test/integration/gate-instances.test.ts
    // names the instances whose actions share its etcd, as a real cluster has it for all).
    controlPlaneAcrossInstances: [],
    ...extra,
  });
  await controller.waitForSync();
  return controller;
}

/** Where a test's hooks act: a node of its own, labelled with its group, and a namespace. */
export interface Place {
  namespace: string;
  node: string;
  group: string;
}

export async function testPlace(
  t: TestContext,
  client: RestClient,
  prefix: string,
  labels: Record<string, string> = {},
): Promise<Place> {
  const group = uniqueName(prefix);
  const [node = ''] = await createTestNodes(t, client, group, 1, {
    'gatehouse.test/group': group,
    ...labels,
  });
  return { namespace: await freshNamespace(t), node, group };
}

export interface ActionRequest extends Partial<NodeActionSpec> {
  nodeName: string;
}

export async function createAction(
  client: RestClient,
  instance: string,
  requestedBy: string,
  request: ActionRequest,
  name = uniqueName(`${request.action ?? 'reboot'}-${request.nodeName}`),
): Promise<ActionObject> {
  return client.request<ActionObject>(`${API}/nodeactions`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NodeAction',
      metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
      spec: { action: 'Reboot', execution: 'External', requestedBy, ...request },
    },
  });
}

export async function getAction(client: RestClient, name: string): Promise<ActionObject> {
  return client.request<ActionObject>(`${API}/nodeactions/${name}`);
}

/**
 * Creates a hook of `kind` (PreRebootJob, NodeReadyJob, …) selecting the nodes labelled
 * gatehouse.test/group=<group>; `spec` adds to (or replaces) the selector.
 */
export async function createGroupHook(
  client: RestClient,
  where: { namespace: string; group: string },
  kind: string,
  name: string,
  spec: Record<string, unknown>,
): Promise<{ uid: string }> {
  const hook = await client.request<{ metadata: { uid: string } }>(
    `${API}/namespaces/${where.namespace}/${kind.toLowerCase()}s`,
    {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind,
        metadata: { name, namespace: where.namespace },
        spec: { nodeSelector: { matchLabels: { 'gatehouse.test/group': where.group } }, ...spec },
      },
    },
  );
  return hook.metadata;
}

/** Waits until the NodeAction is gone (its finalizer released, or garbage-collected). */
export async function waitForActionGone(client: RestClient, name: string, what: string, timeoutMs = 30_000) {
  await waitFor(
    what,
    async () => {
      try {
        await getAction(client, name);
        return undefined;
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 404) return true;
        throw error;
      }
    },
    { timeoutMs },
  );
}

export async function waitForPhase(
  client: RestClient,
  name: string,
  phases: string | readonly string[],
  timeoutMs = 90_000,
): Promise<ActionObject> {
  const wanted = typeof phases === 'string' ? [phases] : phases;
  return waitFor(
    `NodeAction ${name} to reach ${wanted.join(' or ')}`,
    async (observe) => {
      const a = await getAction(client, name);
      observe(`${a.status?.phase ?? '(none)'}: ${a.status?.message ?? ''}`);
      return wanted.includes(a.status?.phase ?? '') ? a : undefined;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

export async function markExecuted(client: RestClient, name: string): Promise<void> {
  await client.request(`${API}/nodeactions/${name}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { metadata: { annotations: { 'talos.dev/executed': 'true' } } },
  });
}

/**
 * Creates an ActionPolicy labelled with a controller instance (whose controller then
 * reports its status), deleted when the test ends; returns its name.
 */
export async function createPolicy(
  t: TestContext,
  client: RestClient,
  instance: string,
  spec: Record<string, unknown>,
  name = uniqueName('policy'),
): Promise<string> {
  await client.request(`${API}/actionpolicies`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ActionPolicy',
      metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
      spec,
    },
  });
  deleteAfter(t, client, `${API}/actionpolicies/${name}`);
  return name;
}

/** Deletes cluster-scoped gatehouse objects when the test ends. */
export function deleteAfter(t: TestContext, client: RestClient, ...paths: string[]): void {
  t.after(async () => {
    await Promise.all(paths.map((p) => client.request(p, { method: 'DELETE' }).catch(() => undefined)));
  });
}

/**
 * Deletes NodeActions when the test ends and waits until their controller (still
 * running then) has cancelled them and let them go. One still there after that (its
 * controller gone) has its finalizer removed, so that nothing is left behind.
 */
export function deleteActionsAfter(t: TestContext, client: RestClient, ...names: string[]): void {
  t.after(async () => {
    await Promise.all(
      names.map(async (name) => {
        const path = `${API}/nodeactions/${name}`;
        await client.request(path, { method: 'DELETE' }).catch(() => undefined);
        const gone = await waitFor(
          `NodeAction ${name} to be gone`,
          async () => {
            try {
              await client.request(path);
              return undefined;
            } catch {
              return true;
            }
          },
          { timeoutMs: 20_000, intervalMs: 200 },
        ).catch(() => false);
        if (!gone) {
          await client
            .request(path, {
              method: 'PATCH',
              contentType: 'application/merge-patch+json',
              body: { metadata: { finalizers: null } },
            })
            .catch(() => undefined);
        }
      }),
    );
  });
}

/** A Job template for hooks: a pod the sandbox runs for a while and then ends as asked. */
export function hookTemplate(outcome: 'Succeeded' | 'Failed' | 'Hang' = 'Succeeded', runDuration = '1s') {
  return {
    spec: {
      backoffLimit: 0,
      template: {
        metadata: {
          annotations: {
            'sandbox.gatehouse.dev/outcome': outcome,
            'sandbox.gatehouse.dev/run-duration': runDuration,
          },
        },
        spec: { restartPolicy: 'Never', containers: [{ name: 'hook', image: 'busybox', command: ['true'] }] },
      },
    },
  };
}

export async function events(
  client: RestClient,
  name: string,
): Promise<{ reason: string; message: string; type: string }[]> {
  const list = await client.request<{
    items: { reason: string; message: string; type: string; firstTimestamp?: string }[];
  }>('/api/v1/namespaces/default/events', {
    query: { fieldSelector: `involvedObject.name=${name},involvedObject.kind=NodeAction` },
  });
  return list.items;
}

export { rest, uniqueName, waitFor };

export interface PhaseLog {
  /** Every phase each action was seen in, in order (consecutive repeats collapsed). */
  phases: Map<string, string[]>;
  /** Watch errors (a 410 Gone would mean versions were missed: tests assert there are none). */
  errors: string[];
  stop: () => Promise<void>;
}

/**
 * Watches NodeActions (from `resourceVersion` on, so no version is missed) and calls
 * `onChange` with every version seen; returns the phases each action went through.
 */
export function watchActions(
  client: RestClient,
  labelSelector: string,
  resourceVersion: string,
  onChange: (action: ActionObject, type: string) => void = () => undefined,
): PhaseLog {
  const phases = new Map<string, string[]>();
  const errors: string[] = [];
  const abort = new AbortController();
  const stopped = () => abort.signal.aborted;
  let rv = resourceVersion;
  const loop = (async () => {
    while (!abort.signal.aborted) {
      try {
        await client.watch(
          `${API}/nodeactions`,
          { labelSelector, resourceVersion: rv, allowWatchBookmarks: true },
          (event) => {
            const action = event.object as unknown as ActionObject;
            if (action.metadata.resourceVersion) rv = action.metadata.resourceVersion;
            if (event.type === 'ERROR') {
              errors.push(JSON.stringify(event.object));
              return;
            }
            if (event.type === 'BOOKMARK') return;
            const list = phases.get(action.metadata.name) ?? [];
            const phase = action.status?.phase ?? '(new)';
            if (list.at(-1) !== phase) list.push(phase);
            phases.set(action.metadata.name, list);
            onChange(action, event.type);
          },
          abort.signal,
        );
      } catch {
        if (stopped()) break;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  })();
  return {
    phases,
    errors,
    stop: async () => {
      abort.abort();
      await loop;
    },
  };
}

/**
 * A stand-in for Rook's CephCluster in a group of the test file's own (so files do not
 * share it), without a status subresource: tests set its health by applying status.
 */
export async function installCephClusterKind(group: string): Promise<void> {
  const kc = testKubeConfig();
  await serverSideApply(kc, [
    {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: `cephclusters.${group}` },
      spec: {
        group,
        scope: 'Namespaced',
        names: { plural: 'cephclusters', singular: 'cephcluster', kind: 'CephCluster' },
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
          },
        ],
      },
    } as never,
  ]);
  await waitForEstablished(kc, [`cephclusters.${group}`]);
}

/** Sets the stand-in CephCluster rook-ceph's health, as Rook reports it (with a detail when not OK). */
export async function setCephHealth(
  client: RestClient,
  group: string,
  namespace: string,
  health: string,
  fieldManager: string,
): Promise<void> {
  await client.apply(
    `/apis/${group}/v1/namespaces/${namespace}/cephclusters/rook-ceph`,
    {
      apiVersion: `${group}/v1`,
      kind: 'CephCluster',
      metadata: { name: 'rook-ceph', namespace },
      status: {
        ceph: { health, details: health === 'HEALTH_OK' ? {} : { OSD_DOWN: { severity: 'HEALTH_WARN' } } },
      },
    },
    fieldManager,
  );
}
