// Node-scoped checks against the sandbox: a check evaluated for the node of the action it
// gates (a database primary on that node holds it, one elsewhere does not), $(NODE_NAME)
// replaced in an httpGet URL, and the periodic per-node summary in status and /v1/health.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { ClusterHealthCheckStatus } from '../../src/api/cluster-health-check.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI, readManifests, repoRoot } from '../support/install.ts';
import {
  API,
  createAction,
  createTestNodes,
  deleteActionsAfter,
  deleteAfter,
  startGateController,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import {
  freshNamespace,
  rest,
  serverSideApply,
  testKubeConfig,
  uniqueName,
  waitFor,
  waitForEstablished,
} from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('node-checks');
let controller: Controller;
let me = '';

async function createCheck(t: TestContext, name: string, spec: Record<string, unknown>): Promise<void> {
  await client.request(`${API}/clusterhealthchecks`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ClusterHealthCheck',
      metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
      spec,
    },
  });
  deleteAfter(t, client, `${API}/clusterhealthchecks/${name}`);
}

async function checkStatus(name: string): Promise<ClusterHealthCheckStatus> {
  const check = await client.request<{ status?: ClusterHealthCheckStatus }>(
    `${API}/clusterhealthchecks/${name}`,
  );
  return check.status ?? {};
}

interface HealthAnswer {
  healthy: boolean;
  checks: { name: string; state: string; message: string; node?: string; nodes?: { unsafe: number } }[];
}

async function health(path: string): Promise<{ status: number; body: HealthAnswer }> {
  const res = await fetch(`${controller.url}${path}`);
  return { status: res.status, body: (await res.json()) as HealthAnswer };
}

/** A Pod bound to `node` (the scheduler is not asked), labelled as a CloudNativePG instance. */
async function instancePod(namespace: string, name: string, node: string, role: string): Promise<void> {
  await client.request(`/api/v1/namespaces/${namespace}/pods`, {
    method: 'POST',
    body: {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, labels: { 'cnpg.io/cluster': 'pg', 'cnpg.io/instanceRole': role } },
      spec: {
        nodeName: node,
        tolerations: [{ operator: 'Exists' }],
        containers: [{ name: 'postgres', image: 'postgres:17' }],
      },
    },
  });
}

/**
 * A stand-in for Longhorn's Replica kind under its real name (the shipped recipe names
 * longhorn.io/v1beta2), without a status subresource: tests write status with the object.
 */
async function installLonghornReplicaKind(): Promise<void> {
  await serverSideApply(kc, [
    {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: 'replicas.longhorn.io' },
      spec: {
        group: 'longhorn.io',
        scope: 'Namespaced',
        names: { plural: 'replicas', singular: 'replica', kind: 'Replica' },
        versions: [
          {
            name: 'v1beta2',
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
          },
        ],
      },
    } as never,
  ]);
  await waitForEstablished(kc, ['replicas.longhorn.io']);
}

/** A Longhorn Replica of `volume` on `node`: running (healthy), or failed. */
async function replica(namespace: string, name: string, volume: string, node: string, healthy: boolean) {
  await client.request(`/apis/longhorn.io/v1beta2/namespaces/${namespace}/replicas`, {
    method: 'POST',
    body: {
      apiVersion: 'longhorn.io/v1beta2',
      kind: 'Replica',
      metadata: { name },
      spec: { nodeID: node, volumeName: volume, failedAt: healthy ? '' : '2026-12-01T10:00:00Z' },
      status: { currentState: healthy ? 'running' : 'stopped' },
    },
  });
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await stopAll(controller);
});

describe('Node-scoped checks', () => {
  it('a primary Pod on the node holds its action; an action on another node passes', async (t) => {
    const group = uniqueName('cnpg');
    const [primaryNode, otherNode] = await createTestNodes(t, client, group, 2, {
      'gatehouse.test/group': group,
    });
    assert.ok(primaryNode && otherNode);
    const namespace = await freshNamespace(t, kc);
    await instancePod(namespace, 'pg-1', primaryNode, 'primary');
    await instancePod(namespace, 'pg-2', otherNode, 'replica');
    const check = uniqueName('no-primary-here');
    await createCheck(t, check, {
      scope: 'Node',
      interval: '2s',
      timeout: '3s',
      failureThreshold: 1,
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      resource: {
        apiVersion: 'v1',
        kind: 'Pod',
        namespace,
        labelSelector: { matchLabels: { 'cnpg.io/cluster': 'pg' } },
        fieldSelector: 'spec.nodeName=$(NODE_NAME)',
        expression: "self.metadata.labels['cnpg.io/instanceRole'] == 'primary'",
        maxMatching: 0,
      },
    });

    // The other node first: one action at a time without a policy, and a held one keeps its slot.
    const other = await createAction(client, instance, me, { nodeName: otherNode, action: 'Reboot' });
    deleteActionsAfter(t, client, other.metadata.name);
    const passed = await waitForPhase(client, other.metadata.name, ['Approved', 'Failed', 'Denied']);
    assert.equal(passed.status?.phase, 'Approved', passed.status?.message);
    assert.deepEqual(
      passed.status.checks?.map((c) => [c.name, c.healthy]),
      [[check, true]],
    );
    await client.request(`${API}/nodeactions/${other.metadata.name}`, { method: 'DELETE' });

    const held = await createAction(client, instance, me, { nodeName: primaryNode, action: 'Reboot' });
    deleteActionsAfter(t, client, held.metadata.name);
    const waiting = await waitFor(
      `the action on ${primaryNode} to be held by ${check}`,
      async (observe) => {
        const a = await client.request<typeof held>(`${API}/nodeactions/${held.metadata.name}`);
        observe(`${a.status?.phase ?? '(none)'}: ${a.status?.message ?? ''}`);
        return a.status?.phase === 'WaitingForHealth' && a.status.checks?.length ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const result = waiting.status?.checks?.[0];
    assert.equal(result?.name, check);
    assert.equal(result.healthy, false);
    assert.match(
      result.message ?? '',
      /1\/1 Pod object .*with spec\.nodeName=.* match .*\(at most 0 may\): \S*\/pg-1$/,
    );

    // /v1/health answers per node; without a node the check has no verdict of its own.
    const onPrimary = await health(`/v1/health?action=Reboot&node=${primaryNode}`);
    assert.equal(onPrimary.status, 503);
    assert.equal(onPrimary.body.checks.find((c) => c.name === check)?.node, primaryNode);
    const onOther = await health(`/v1/health/${check}?node=${otherNode}`);
    assert.equal(onOther.status, 200, JSON.stringify(onOther.body));
    const summary = await health(`/v1/health/${check}`);
    assert.equal(summary.status, 200, 'a per-node summary is no verdict');
    assert.equal(summary.body.checks[0]?.state, 'PerNode');

    // The switchover: the primary moves, and the held action passes.
    await client.request(`/api/v1/namespaces/${namespace}/pods/pg-1`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { labels: { 'cnpg.io/instanceRole': 'replica' } } },
    });
    const approved = await waitForPhase(client, held.metadata.name, ['Approved', 'Failed', 'Denied']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
  });

  it("Longhorn: the node with a volume's only healthy replica is held; another node passes", async (t) => {
    await installLonghornReplicaKind();
    const objects = await readManifests(join(repoRoot, 'examples', 'node-safety.yaml'));
    const recipe = (
      objects as { kind?: string; metadata?: { name?: string }; spec?: Record<string, unknown> }[]
    ).find((o) => o.kind === 'ClusterHealthCheck' && o.metadata?.name === 'not-last-longhorn-replica')?.spec;
    assert.ok(recipe, 'examples/node-safety.yaml has the Longhorn recipe');
    const group = uniqueName('longhorn');
    const [lastNode, otherNode, thirdNode] = await createTestNodes(t, client, group, 3, {
      'gatehouse.test/group': group,
    });
    assert.ok(lastNode && otherNode && thirdNode);
    const namespace = await freshNamespace(t, kc);
    // pvc-a: healthy only on lastNode (its copy on otherNode failed); pvc-b: on otherNode and thirdNode.
    await replica(namespace, 'pvc-a-r1', 'pvc-a', lastNode, true);
    await replica(namespace, 'pvc-a-r2', 'pvc-a', otherNode, false);
    await replica(namespace, 'pvc-b-r1', 'pvc-b', otherNode, true);
    await replica(namespace, 'pvc-b-r2', 'pvc-b', thirdNode, true);
    const check = uniqueName('not-last-replica');
    await createCheck(t, check, {
      ...recipe,
      interval: '2s',
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      resource: { ...(recipe.resource as object), namespace },
    });

    const other = await createAction(client, instance, me, { nodeName: otherNode, action: 'Reboot' });
    deleteActionsAfter(t, client, other.metadata.name);
    const passed = await waitForPhase(client, other.metadata.name, ['Approved', 'Failed', 'Denied']);
    assert.equal(passed.status?.phase, 'Approved', passed.status?.message);
    assert.deepEqual(
      passed.status.checks?.map((c) => [c.name, c.healthy]),
      [[check, true]],
    );
    await client.request(`${API}/nodeactions/${other.metadata.name}`, { method: 'DELETE' });

    const held = await createAction(client, instance, me, { nodeName: lastNode, action: 'Reboot' });
    deleteActionsAfter(t, client, held.metadata.name);
    const waiting = await waitFor(
      `the action on ${lastNode} to be held by ${check}`,
      async (observe) => {
        const a = await client.request<typeof held>(`${API}/nodeactions/${held.metadata.name}`);
        observe(`${a.status?.phase ?? '(none)'}: ${a.status?.message ?? ''}`);
        return a.status?.phase === 'WaitingForHealth' && a.status.checks?.length ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const result = waiting.status?.checks?.[0];
    assert.equal(result?.name, check);
    assert.equal(result.healthy, false);
    assert.equal(result.message, 'volume pvc-a has its only healthy replica on this node');

    // Longhorn rebuilds pvc-a's replica elsewhere: the held action passes.
    await replica(namespace, 'pvc-a-r3', 'pvc-a', thirdNode, true);
    const approved = await waitForPhase(client, held.metadata.name, ['Approved', 'Failed', 'Denied']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
  });
  it('replaces $(NODE_NAME) in an httpGet URL, and keeps a per-node summary in status', async (t) => {
    const group = uniqueName('osd');
    const [busyNode, idleNode] = await createTestNodes(t, client, group, 2, {
      'gatehouse.test/group': group,
    });
    assert.ok(busyNode && idleNode);
    const paths: string[] = [];
    const server: Server = createServer((req, res) => {
      paths.push(req.url ?? '');
      const ok = !(req.url ?? '').includes(busyNode);
      res.setHeader('Content-Type', 'application/json');
      res.statusCode = ok ? 200 : 503;
      res.end(JSON.stringify(ok ? { ok } : { ok, why: '2 PGs would become inactive' }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as AddressInfo).port;
    const check = uniqueName('ok-to-stop');
    await createCheck(t, check, {
      scope: 'Node',
      interval: '1s',
      nodeInterval: '10s',
      timeout: '2s',
      failureThreshold: 1,
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      httpGet: {
        url: `http://127.0.0.1:${String(port)}/ok-to-stop/$(NODE_NAME)?ip=$(NODE_IP)`,
        httpHeaders: [{ name: 'X-Node', value: '$(NODE_NAME)' }],
        bodyExpression: 'body.ok && node.metadata.name != ""',
      },
    });

    // Every selected node is evaluated once soon (never probed counts as due).
    const status = await waitFor(
      `${check}'s status to summarise both nodes`,
      async (observe) => {
        const s = await checkStatus(check);
        observe(JSON.stringify(s.nodes));
        return s.nodes?.evaluated === 2 ? s : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    assert.equal(status.nodes?.safe, 1);
    assert.equal(status.nodes.unsafe, 1);
    assert.equal(status.nodes.unsafeNodes?.[0]?.name, busyNode);
    assert.match(status.nodes.unsafeNodes[0].message, /2 PGs would become inactive/);
    assert.equal(status.healthy, undefined, 'a Node-scoped check has no verdict of its own');
    assert.match(status.message ?? '', new RegExp(`1 of 2 evaluated nodes safe; ${busyNode}: `));
    assert.ok(
      paths.some((p) => /^\/ok-to-stop\/[^/?]+\?ip=10\.77\.0\.\d+$/.test(p) && p.includes(`/${busyNode}?`)),
      paths.join(' '),
    );

    // A gate's fresh evaluation is for its own node, and the URL names that node.
    paths.length = 0;
    const states = await controller.checks.evaluateNow([check], idleNode);
    assert.equal(states.get(check)?.healthy, true, states.get(check)?.message);
    assert.deepEqual(
      paths.map((p) => p.split('?')[0]),
      [`/ok-to-stop/${idleNode}`],
    );
    // Not every interval for a node without an unfinished action: only every nodeInterval.
    paths.length = 0;
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assert.deepEqual(paths, [], 'no node was due within nodeInterval');
  });
});
