// Other maintainers against the sandbox: a medik8s NodeMaintenance of a node (its CRD
// installed here with the fields gatehouse reads: spec.nodeName, spec.reason,
// status.phase) holds a Reboot of that node at the health gate, naming it and its
// reason; deleting it lets the action go. A NodeMaintenance of another node holds nothing.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { MAINTAINERS_CHECK } from '../../src/actions/maintainers.ts';
import { LEASE_HELD_FOR_ANNOTATION, MEDIK8S_LEASE_HOLDER } from '../../src/api/names.ts';
import { MEDIK8S_LEASE_NAMESPACE, NODE_MAINTENANCES_PATH } from '../../src/actions/neighbours-read.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  createAction,
  deleteActionsAfter,
  getAction,
  markExecuted,
  rebootNode,
  startGateController,
  testPlace,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import {
  rest,
  serverSideApply,
  testKubeConfig,
  uniqueName,
  waitFor,
  waitForEstablished,
} from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('maintainers');
let controller: Controller | undefined;
let me = '';

const NODE_MAINTENANCE_CRD = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'nodemaintenances.nodemaintenance.medik8s.io' },
  spec: {
    group: 'nodemaintenance.medik8s.io',
    scope: 'Cluster',
    names: {
      plural: 'nodemaintenances',
      singular: 'nodemaintenance',
      kind: 'NodeMaintenance',
      shortNames: ['nm'],
    },
    versions: [
      {
        name: 'v1beta1',
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: {
              spec: {
                type: 'object',
                required: ['nodeName'],
                properties: { nodeName: { type: 'string' }, reason: { type: 'string' } },
              },
              status: { type: 'object', properties: { phase: { type: 'string' } } },
            },
          },
        },
      },
    ],
  },
};

before(async () => {
  await installGatehouseAPI(kc);
  await serverSideApply(kc, [NODE_MAINTENANCE_CRD]);
  await waitForEstablished(kc, [NODE_MAINTENANCE_CRD.metadata.name]);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await controller?.stop();
  // The namespace the tests made for medik8s's Leases: other files' actions would take Leases there.
  await client
    .request(`/api/v1/namespaces/${MEDIK8S_LEASE_NAMESPACE}`, { method: 'DELETE' })
    .catch(() => undefined);
});

async function nodeMaintenance(name: string, nodeName: string, reason: string): Promise<void> {
  await client.request(NODE_MAINTENANCES_PATH, {
    method: 'POST',
    body: {
      apiVersion: 'nodemaintenance.medik8s.io/v1beta1',
      kind: 'NodeMaintenance',
      metadata: { name },
      spec: { nodeName, reason },
    },
  });
  await client.request(`${NODE_MAINTENANCES_PATH}/${name}/status`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { status: { phase: 'Succeeded' } },
  });
}

/** A Lease like the one medik8s operators share for a node, held by `holder` for an hour. */
async function medik8sLease(t: TestContext, node: string, holder: string): Promise<string> {
  await client
    .request('/api/v1/namespaces', { method: 'POST', body: { metadata: { name: MEDIK8S_LEASE_NAMESPACE } } })
    .catch(() => undefined); // there already
  const path = `/apis/coordination.k8s.io/v1/namespaces/${MEDIK8S_LEASE_NAMESPACE}/leases`;
  const now = new Date().toISOString().replace('Z', '000Z');
  await client.request(path, {
    method: 'POST',
    body: {
      metadata: { name: `node-${node}` },
      spec: { holderIdentity: holder, leaseDurationSeconds: 3600, acquireTime: now, renewTime: now },
    },
  });
  const lease = `${path}/node-${node}`;
  t.after(() => client.request(lease, { method: 'DELETE' }).catch(() => undefined));
  return lease;
}

describe('other maintainers', () => {
  it('a NodeMaintenance holds a Reboot of its node, named, until it is deleted; one of another node holds nothing', async (t) => {
    const place = await testPlace(t, client, 'nm-held');
    const other = await testPlace(t, client, 'nm-other');
    const mine = uniqueName('nm');
    const theirs = uniqueName('nm');
    t.after(async () => {
      for (const n of [mine, theirs])
        await client.request(`${NODE_MAINTENANCES_PATH}/${n}`, { method: 'DELETE' }).catch(() => undefined);
    });
    await nodeMaintenance(mine, place.node, 'replace a DIMM');
    await nodeMaintenance(theirs, other.node, 'firmware');

    const action = await createAction(client, instance, me, { nodeName: place.node, action: 'Reboot' });
    deleteActionsAfter(t, client, action.metadata.name);
    const held = await waitFor(
      `${action.metadata.name} to be held by NodeMaintenance ${mine}`,
      async (observe) => {
        const a = await getAction(client, action.metadata.name);
        observe(JSON.stringify(a.status?.checks ?? a.status?.message));
        const r = a.status?.checks?.find((c) => c.name === MAINTAINERS_CHECK);
        return r && !r.healthy ? { a, r } : undefined;
      },
    );
    assert.equal(
      held.r.message,
      `NodeMaintenance ${mine} ("replace a DIMM") (Succeeded) holds node ${place.node}: gatehouse waits until it is deleted`,
    );
    assert.equal(held.a.status?.phase, 'WaitingForHealth');
    assert.doesNotMatch(held.a.status.message ?? '', new RegExp(theirs));

    await client.request(`${NODE_MAINTENANCES_PATH}/${mine}`, { method: 'DELETE' });
    const approved = await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
    const r = approved.status?.checks?.find((c) => c.name === MAINTAINERS_CHECK);
    assert.equal(r?.healthy, true);
  });

  it('the node’s medik8s Lease, held by another operator, holds a Reboot until it is released', async (t) => {
    const place = await testPlace(t, client, 'nm-lease');
    const lease = await medik8sLease(t, place.node, 'node-maintenance');
    const action = await createAction(client, instance, me, { nodeName: place.node, action: 'Reboot' });
    deleteActionsAfter(t, client, action.metadata.name);
    const held = await waitFor(`${action.metadata.name} to be held by the Lease`, async () => {
      const a = await getAction(client, action.metadata.name);
      const r = a.status?.checks?.find((c) => c.name === MAINTAINERS_CHECK);
      return r && !r.healthy ? r : undefined;
    });
    assert.match(
      held.message ?? '',
      new RegExp(`Lease ${MEDIK8S_LEASE_NAMESPACE}/node-${place.node} is held by node-maintenance until`),
    );
    await client.request(lease, { method: 'DELETE' });
    await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
  });

  it('holds the node’s medik8s Lease from its approval to its end, so that medik8s operators wait for it', async (t) => {
    await client
      .request('/api/v1/namespaces', {
        method: 'POST',
        body: { metadata: { name: MEDIK8S_LEASE_NAMESPACE } },
      })
      .catch(() => undefined); // there already
    const place = await testPlace(t, client, 'nm-ours');
    const path = `/apis/coordination.k8s.io/v1/namespaces/${MEDIK8S_LEASE_NAMESPACE}/leases/node-${place.node}`;
    t.after(() => client.request(path, { method: 'DELETE' }).catch(() => undefined));
    const action = await createAction(client, instance, me, { nodeName: place.node, action: 'Reboot' });
    deleteActionsAfter(t, client, action.metadata.name);
    await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
    const lease = await waitFor('the Lease gatehouse takes', () =>
      client
        .request<{ metadata: { annotations?: Record<string, string> }; spec: { holderIdentity?: string } }>(
          path,
        )
        .catch(() => undefined),
    );
    assert.equal(lease.spec.holderIdentity, MEDIK8S_LEASE_HOLDER);
    assert.equal(lease.metadata.annotations?.[LEASE_HELD_FOR_ANNOTATION], action.metadata.name);
    assert.equal((await getAction(client, action.metadata.name)).status?.medik8sLease !== undefined, true);

    await markExecuted(client, action.metadata.name);
    await rebootNode(client, place.node);
    await waitForPhase(client, action.metadata.name, 'Succeeded', 60_000);
    await waitFor('the Lease to be given back', async () =>
      (await client.request(path).then(
        () => false,
        () => true,
      ))
        ? true
        : undefined,
    );
  });
});
