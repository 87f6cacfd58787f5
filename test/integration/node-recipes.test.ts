// The shipped Node-scoped recipes (examples/node-safety.yaml), probed as the controller
// probes them — for one node at a time — against real Pods and Nodes in the sandbox.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { before, describe, it, type TestContext } from 'node:test';
import type { ClusterHealthCheckSpec } from '../../src/api/cluster-health-check.ts';
import { nodeTarget } from '../../src/checks/node-target.ts';
import { runProbe } from '../../src/checks/probes/index.ts';
import type { ProbeResult } from '../../src/checks/probe.ts';
import type { KubeObject } from '../../src/kube/informer.ts';
import { createTestNodes } from '../support/gate.ts';
import { readManifests, repoRoot } from '../support/install.ts';
import { freshNamespace, rest, testKubeConfig, uniqueName } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const recipes = new Map<string, ClusterHealthCheckSpec>();

before(async () => {
  const objects = await readManifests(join(repoRoot, 'examples', 'node-safety.yaml'));
  for (const o of objects as (KubeObject & { spec: ClusterHealthCheckSpec })[])
    if (o.kind === 'ClusterHealthCheck') recipes.set(o.metadata.name, o.spec);
});

function recipe(name: string): ClusterHealthCheckSpec {
  const spec = recipes.get(name);
  assert.ok(spec, `examples/node-safety.yaml has no check ${name}`);
  assert.equal(spec.scope, 'Node');
  return spec;
}

/** The recipe's probe for one node, with the controller's Node as the runner gives it. */
async function probeFor(spec: ClusterHealthCheckSpec, nodeName: string): Promise<ProbeResult> {
  const node = await client.request<KubeObject>(`/api/v1/nodes/${nodeName}`);
  return runProbe(spec, {
    rest: client,
    signal: AbortSignal.timeout(10_000),
    serviceResolution: 'endpoints',
    namespace: 'gatehouse-system',
    node: nodeTarget(node),
  });
}

async function instancePod(t: TestContext, namespace: string, name: string, node: string, role: string) {
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
  t.after(() => client.request(`/api/v1/namespaces/${namespace}/pods/${name}`, { method: 'DELETE' }));
}

describe('the Node-scoped recipes', () => {
  it('CloudNativePG: a node hosting a primary is held, naming it; a replica node is not', async (t) => {
    const group = uniqueName('pg');
    const [primary, replica, empty] = await createTestNodes(t, client, group, 3, {
      'gatehouse.test/group': group,
    });
    assert.ok(primary && replica && empty);
    const namespace = await freshNamespace(t, kc);
    await instancePod(t, namespace, 'pg-1', primary, 'primary');
    await instancePod(t, namespace, 'pg-2', replica, 'replica');
    const spec = recipe('no-postgres-primary-here');

    const held = await probeFor(spec, primary);
    assert.equal(held.healthy, false, held.message);
    assert.match(
      held.message,
      new RegExp(`1/1 Pod object .*spec\\.nodeName=${primary} .*: ${namespace}/pg-1$`),
    );
    const onReplica = await probeFor(spec, replica);
    assert.equal(onReplica.healthy, true, onReplica.message);
    assert.match(onReplica.message, /^0\/1 Pod object/);
    // No instance at all on the node: nothing matches, which maxMatching: 0 allows.
    const onEmpty = await probeFor(spec, empty);
    assert.equal(onEmpty.healthy, true, onEmpty.message);
  });

  it('topology: the last Ready node of its zone is held; one with a Ready peer is not', async (t) => {
    const zone = uniqueName('zone');
    const zoneKey = 'topology.kubernetes.io/zone';
    const [a1, a2] = await createTestNodes(t, client, `${zone}-a`, 2, { [zoneKey]: `${zone}-a` });
    const [b1] = await createTestNodes(t, client, `${zone}-b`, 1, { [zoneKey]: `${zone}-b` });
    assert.ok(a1 && a2 && b1);
    const spec = recipe('not-last-in-zone');

    const withPeer = await probeFor(spec, a1);
    assert.equal(withPeer.healthy, true, withPeer.message);
    const last = await probeFor(spec, b1);
    assert.equal(last.healthy, false, last.message);
    assert.match(last.message, /0\/\d+ Node objects .* \(at least 1 must\)/);

    // The peer cordoned: a1 becomes the last schedulable Ready node of zone a.
    await client.request(`/api/v1/nodes/${a2}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { unschedulable: true } },
    });
    const cordonedPeer = await probeFor(spec, a1);
    assert.equal(cordonedPeer.healthy, false, cordonedPeer.message);
  });
});
