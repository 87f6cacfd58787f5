// The Cluster API management-cluster mode: a second sandbox plays the management
// cluster, holding Machines of a CRD made here (cluster.x-k8s.io/v1beta2, with the fields
// gatehouse reads: metadata.deletionTimestamp, annotations, status.nodeRef). A finalizer
// of the test stands in for Cluster API's machine controller, so a deleted Machine stays
// (deletionTimestamp set) while gatehouse's hook holds it. The controller runs in the
// workload sandbox (the shared one) and reaches the management cluster through a
// kubeconfig Secret in its namespace, with a token allowed to read and patch Machines and
// to create Events only; the controller starts before that Secret exists, and keeps reading
// it until it can.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import { startSandbox, type Sandbox } from '../../sandbox/cluster.ts';
import {
  CLUSTER_NAME_LABEL,
  INSTANCE_LABEL,
  MACHINE_HOOK_OWNER,
  MACHINE_PRE_DRAIN_HOOK,
  MACHINE_SKIP_REMEDIATION_ANNOTATION,
  MACHINE_UID_LABEL,
  REMEDIATION_PAUSED_BY_ANNOTATION,
} from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createGroupHook,
  createTestNodes,
  deleteActionsAfter,
  getAction,
  hookTemplate,
  startGateController,
  waitForPhase,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import {
  freshNamespace,
  rest,
  serverSideApply,
  serviceAccountToken,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  waitFor,
  waitForEstablished,
} from '../support/kube.ts';

const NAMESPACE = 'gatehouse-system';
const MACHINES = '/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines';
/** Stands in for Cluster API's machine controller, which keeps a deleted Machine until it is done. */
const TEST_FINALIZER = 'gatehouse.test/machine-controller';
const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('capi');
const clusterName = uniqueName('workload');
const secretName = uniqueName('mgmt-kubeconfig');
let dir: string;
let mgmt: Sandbox | undefined;
let mgmtKc: KubeConfig;
let mgmtClient: RestClient;
let me = '';

const MACHINE_CRD = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'machines.cluster.x-k8s.io' },
  spec: {
    group: 'cluster.x-k8s.io',
    scope: 'Namespaced',
    names: { plural: 'machines', singular: 'machine', kind: 'Machine' },
    versions: [
      {
        name: 'v1beta2',
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: {
              spec: { type: 'object', properties: { clusterName: { type: 'string' } } },
              status: {
                type: 'object',
                properties: {
                  nodeRef: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
                },
              },
            },
          },
        },
      },
    ],
  },
};

interface MachineView {
  metadata: {
    name: string;
    uid: string;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
    finalizers?: string[];
  };
}

function kubeconfigText(server: string, ca: string, bearer: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'current-context: mgmt',
    `clusters: [{name: mgmt, cluster: {server: "${server}", certificate-authority-data: "${ca}"}}]`,
    `users: [{name: gatehouse, user: {token: "${bearer}"}}]`,
    'contexts: [{name: mgmt, context: {cluster: mgmt, user: gatehouse}}]',
    '',
  ].join('\n');
}

/** A Machine of the test's Cluster (or `cluster`), held by the test's finalizer, its Node named in status.nodeRef. */
async function createMachine(
  t: TestContext,
  name: string,
  node: string | undefined,
  options: { annotations?: Record<string, string>; cluster?: string } = {},
): Promise<MachineView> {
  const path = `${MACHINES}/${name}`;
  t.after(async () => {
    await mgmtClient
      .request(path, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { finalizers: null } },
      })
      .catch(() => undefined);
    await mgmtClient.request(path, { method: 'DELETE' }).catch(() => undefined);
  });
  const created = await mgmtClient.request<MachineView & { metadata: { resourceVersion: string } }>(
    MACHINES,
    {
      method: 'POST',
      body: {
        apiVersion: 'cluster.x-k8s.io/v1beta2',
        kind: 'Machine',
        metadata: {
          name,
          labels: { [CLUSTER_NAME_LABEL]: options.cluster ?? clusterName },
          finalizers: [TEST_FINALIZER],
          ...(options.annotations ? { annotations: options.annotations } : {}),
        },
        spec: { clusterName: options.cluster ?? clusterName },
      },
    },
  );
  if (node)
    await mgmtClient.request(`${path}/status`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { status: { nodeRef: { name: node } } },
    });
  return created;
}

const getMachine = (name: string) => mgmtClient.request<MachineView>(`${MACHINES}/${name}`);
const deleteMachine = (name: string) => mgmtClient.request(`${MACHINES}/${name}`, { method: 'DELETE' });

async function waitForHook(
  name: string,
  value: string | undefined,
  timeoutMs = 30_000,
): Promise<MachineView> {
  return waitFor(
    `Machine ${name} to ${value === undefined ? 'lose' : 'carry'} the hook`,
    async (observe) => {
      const m = await getMachine(name);
      const hook = m.metadata.annotations?.[MACHINE_PRE_DRAIN_HOOK];
      observe(`hook ${hook ?? '(none)'}, deleting ${String(m.metadata.deletionTimestamp !== undefined)}`);
      return hook === value ? m : undefined;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

async function machineEvents(name: string): Promise<{ reason: string; message: string; type: string }[]> {
  const list = await mgmtClient.request<{ items: { reason: string; message: string; type: string }[] }>(
    '/api/v1/namespaces/default/events',
    { query: { fieldSelector: `involvedObject.name=${name},involvedObject.kind=Machine` } },
  );
  return list.items;
}

async function actionsOf(uid: string): Promise<ActionObject[]> {
  const list = await client.request<{ items: ActionObject[] }>(`${API}/nodeactions`, {
    query: { labelSelector: `${MACHINE_UID_LABEL}=${uid}` },
  });
  return list.items;
}

function heldCondition(a: ActionObject) {
  return a.status?.conditions?.find((c) => c.type === 'MachineHeld');
}

async function waitForHeld(
  name: string,
  status: string,
  reason: string,
  timeoutMs = 30_000,
): Promise<ActionObject> {
  return waitFor(
    `NodeAction ${name} to say MachineHeld ${status} ${reason}`,
    async (observe) => {
      const a = await getAction(client, name).catch(() => undefined);
      const c = a && heldCondition(a);
      observe(`${a?.status?.phase ?? '(no action)'}: MachineHeld ${c?.status ?? '-'} ${c?.reason ?? '-'}`);
      return a && c?.status === status && c.reason === reason ? a : undefined;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

async function startController(): Promise<Controller> {
  return startGateController(instance, {
    clusterApi: {
      kubeconfigSecretRef: { name: secretName, key: 'value' },
      cluster: { namespace: 'default', name: clusterName },
      resyncMs: 1000,
    },
  });
}

/** A kwok Node of the workload cluster and a check gating Reset on it, unhealthy at first. */
async function gatedNode(t: TestContext, prefix: string) {
  const group = uniqueName(prefix);
  const [node = ''] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });
  const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance }, ['Reset']);
  return { node, check, group };
}

let controller: Controller | undefined;

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-capi-'));
  mgmt = await startSandbox({ dir: join(dir, 'sandbox'), nodes: 1, talos: false, ownerPid: process.pid });
  mgmtKc = mgmt.kubeConfig();
  mgmtClient = rest(mgmtKc);
  await serverSideApply(mgmtKc, [MACHINE_CRD]);
  await waitForEstablished(mgmtKc, [MACHINE_CRD.metadata.name]);
  // In the management cluster: what gatehouse needs there, nothing more (docs/integrations.md).
  await serverSideApply(mgmtKc, [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'gatehouse-machines' },
      rules: [
        {
          apiGroups: ['cluster.x-k8s.io'],
          resources: ['machines'],
          verbs: ['get', 'list', 'watch', 'patch'],
        },
        { apiGroups: [''], resources: ['events'], verbs: ['create'] },
      ],
    } as never,
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: 'gatehouse-machines', namespace: 'default' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'gatehouse-machines' },
      subjects: [{ kind: 'ServiceAccount', name: 'gatehouse-workload', namespace: 'default' }],
    } as never,
  ]);
  // Started before its kubeconfig Secret exists: it keeps reading it until it can.
  controller = await startController();
  const token = await serviceAccountToken(mgmtKc, 'default', 'gatehouse-workload');
  const cluster = mgmtKc.getCurrentCluster();
  assert.ok(cluster?.caData);
  await client.apply(
    `/api/v1/namespaces/${NAMESPACE}/secrets/${secretName}`,
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: secretName, namespace: NAMESPACE },
      data: { value: Buffer.from(kubeconfigText(cluster.server, cluster.caData, token)).toString('base64') },
    },
    'test',
  );
});

after(async () => {
  await controller?.stop();
  await client
    .request(`/api/v1/namespaces/${NAMESPACE}/secrets/${secretName}`, { method: 'DELETE' })
    .catch(() => undefined);
  await mgmt?.stop();
  await rm(dir, { recursive: true, force: true });
});

/**
 * A Machine of `node`, annotated by gatehouse, then deleted: the NodeAction named after
 * it is what each holding test watches (and deletes afterwards).
 */
async function deletedMachine(
  t: TestContext,
  node: string,
): Promise<{ name: string; machine: Awaited<ReturnType<typeof createMachine>>; actionName: string }> {
  const name = uniqueName('machine');
  const machine = await createMachine(t, name, node);
  await waitForHook(name, MACHINE_HOOK_OWNER);
  await deleteMachine(name);
  const actionName = `machine-${machine.metadata.uid}`;
  deleteActionsAfter(t, client, actionName);
  return { name, machine, actionName };
}

describe('Cluster API mode: gatehouse holds deleting Machines on its pre-drain hook', () => {
  it('holds a deleted Machine until its Reset NodeAction is Approved, saying why on both', async (t) => {
    const { node, check } = await gatedNode(t, 'capi-hold');
    const { name, machine, actionName } = await deletedMachine(t, node);
    const held = await waitForHeld(actionName, 'True', 'WaitingForApproval');
    assert.equal(held.spec.action, 'Reset');
    assert.equal(held.spec.execution, 'External');
    assert.equal(held.spec.nodeName, node);
    assert.equal(held.spec.requestedBy, me);
    assert.equal(held.metadata.labels?.[INSTANCE_LABEL], instance);
    assert.match(
      heldCondition(held)?.message ?? '',
      new RegExp(`holding the deletion of Machine default/${name}`),
    );
    // The check is unhealthy: the hook stays, and the Machine's Events say why.
    const events = await waitFor(
      `an Event on Machine ${name} naming the check`,
      async () => {
        const list = await machineEvents(name);
        return list.some((e) => e.reason === 'MachineHeld' && e.message.includes(check.name))
          ? list
          : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    assert.ok(events.some((e) => e.reason === 'MachineHeld' && e.message.includes(actionName)));
    const during = await getMachine(name);
    assert.equal(during.metadata.annotations?.[MACHINE_PRE_DRAIN_HOOK], MACHINE_HOOK_OWNER);
    assert.ok(during.metadata.deletionTimestamp);

    await check.set(true);
    await waitForPhase(client, actionName, 'Approved', 30_000);
    await waitForHook(name, undefined);
    const released = await waitForHeld(actionName, 'False', 'Approved');
    assert.match(heldCondition(released)?.message ?? '', /Cluster API may drain and delete it/);
    await waitFor(
      `a MachineReleased Event on ${name}`,
      async () =>
        (await machineEvents(name)).some((e) => e.reason === 'MachineReleased') ? true : undefined,
      { timeoutMs: 10_000, intervalMs: 200 },
    );
    // Cluster API deletes the Node last: the External Reset then ends.
    await client.request(`/api/v1/nodes/${node}`, { method: 'DELETE' });
    await waitForPhase(client, actionName, 'Succeeded', 30_000);
    assert.equal((await actionsOf(machine.metadata.uid)).length, 1);
  });

  it('never touches a Machine it did not annotate, and lets one without a Node, or whose Node is gone, go at once', async (t) => {
    const { node } = await gatedNode(t, 'capi-foreign');
    // Someone else's hook of the same name (another owner value): gatehouse adds none.
    const foreign = uniqueName('foreign');
    const other = await createMachine(t, foreign, node, {
      annotations: { [MACHINE_PRE_DRAIN_HOOK]: 'someone-else' },
    });
    // A Machine of another Cluster: not watched at all.
    const elsewhere = uniqueName('elsewhere');
    const otherCluster = await createMachine(t, elsewhere, node, { cluster: uniqueName('other-cluster') });
    // No Node yet: annotated, then let go at once when deleted.
    const nodeless = uniqueName('nodeless');
    const bare = await createMachine(t, nodeless, undefined);
    // Its Node already gone from the workload cluster: let go at once too.
    const orphan = uniqueName('orphan');
    const orphaned = await createMachine(t, orphan, uniqueName('gone-node'));
    await waitForHook(nodeless, MACHINE_HOOK_OWNER);
    await waitForHook(orphan, MACHINE_HOOK_OWNER);
    await Promise.all([foreign, elsewhere, nodeless, orphan].map(deleteMachine));
    await waitForHook(nodeless, undefined);
    await waitForHook(orphan, undefined);
    assert.ok((await machineEvents(nodeless)).some((e) => e.message.includes('it has no Node')));
    assert.ok(
      (await machineEvents(orphan)).some((e) => e.message.includes('is gone from the workload cluster')),
    );
    assert.deepEqual(await actionsOf(orphaned.metadata.uid), []);

    // Several resyncs later, nothing was done to the other two.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const a = await getMachine(foreign);
    assert.ok(a.metadata.deletionTimestamp);
    assert.deepEqual(a.metadata.annotations, { [MACHINE_PRE_DRAIN_HOOK]: 'someone-else' });
    const b = await getMachine(elsewhere);
    assert.ok(b.metadata.deletionTimestamp);
    assert.equal(b.metadata.annotations?.[MACHINE_PRE_DRAIN_HOOK], undefined);
    for (const m of [other, otherCluster, bare]) assert.deepEqual(await actionsOf(m.metadata.uid), []);
    assert.deepEqual(await machineEvents(foreign), []);
    assert.deepEqual(await machineEvents(elsewhere), []);
  });

  it('keeps MachineHealthCheck remediation off while an action takes the node away, across a restart; never touches someone else’s', async (t) => {
    const group = uniqueName('capi-rem');
    const [node = '', other = ''] = await createTestNodes(t, client, group, 2, {
      'gatehouse.test/group': group,
    });
    const name = uniqueName('machine');
    await createMachine(t, name, node);
    await waitForHook(name, MACHINE_HOOK_OWNER);
    const theirs = uniqueName('machine');
    await createMachine(t, theirs, other, {
      annotations: { [MACHINE_SKIP_REMEDIATION_ANNOTATION]: 'by hand' },
    });
    const skip = (machine: string, by: string | undefined) =>
      waitFor(
        `Machine ${machine}'s skip-remediation ${by ? `marked for ${by}` : 'to come off'}`,
        async (observe) => {
          const a = (await getMachine(machine)).metadata.annotations ?? {};
          const value = a[MACHINE_SKIP_REMEDIATION_ANNOTATION];
          const mark = a[REMEDIATION_PAUSED_BY_ANNOTATION];
          observe(`skip ${value ?? '(none)'}, mark ${mark ?? '(none)'}`);
          return (by === undefined ? value === undefined && mark === undefined : value === '' && mark === by)
            ? true
            : undefined;
        },
      );

    const reboot = await createAction(client, instance, me, { nodeName: node, action: 'Reboot' });
    deleteActionsAfter(t, client, reboot.metadata.name);
    await waitForPhase(client, reboot.metadata.name, 'Approved');
    await skip(name, reboot.metadata.name);

    // Stopped while it holds remediation off, and the action cancelled meanwhile: the
    // controller that comes back ends it and takes the annotation off.
    await controller?.stop();
    await client.request(`${API}/nodeactions/${reboot.metadata.name}`, { method: 'DELETE' });
    controller = await startController();
    await skip(name, undefined);

    // Someone else's annotation: left as it is while an action takes that node away, and after.
    const second = await createAction(client, instance, me, { nodeName: other, action: 'Reboot' });
    deleteActionsAfter(t, client, second.metadata.name);
    await waitForPhase(client, second.metadata.name, 'Approved');
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const kept = (await getMachine(theirs)).metadata.annotations ?? {};
    assert.equal(kept[MACHINE_SKIP_REMEDIATION_ANNOTATION], 'by hand');
    assert.equal(kept[REMEDIATION_PAUSED_BY_ANNOTATION], undefined);
  });

  it('keeps holding across a controller restart, with the same single NodeAction', async (t) => {
    const { node, check } = await gatedNode(t, 'capi-restart');
    const { name, machine, actionName } = await deletedMachine(t, node);
    const first = await waitForHeld(actionName, 'True', 'WaitingForApproval');

    await controller?.stop();
    controller = await startController();
    // The new controller sees the Machine again (it resyncs every second) and decides on it.
    await waitFor('the new controller to watch the Machines', () =>
      controller?.machines?.machines?.get(`default/${name}`) ? true : undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const actions = await actionsOf(machine.metadata.uid);
    assert.deepEqual(
      actions.map((a) => [a.metadata.name, a.metadata.uid]),
      [[actionName, first.metadata.uid]],
    );
    assert.equal((await getMachine(name)).metadata.annotations?.[MACHINE_PRE_DRAIN_HOOK], MACHINE_HOOK_OWNER);

    await check.set(true);
    await waitForHook(name, undefined);
    assert.equal((await actionsOf(machine.metadata.uid)).length, 1);
  });

  it('keeps holding a Machine whose PreResetJob failed; a new action, once the failed one is deleted, lets it go', async (t) => {
    const { node, check, group } = await gatedNode(t, 'capi-failed');
    await check.set(true);
    const namespace = await freshNamespace(t, kc);
    await createGroupHook(client, { namespace, group }, 'PreResetJob', 'purge-osds', {
      failurePolicy: 'Fail',
      template: hookTemplate('Failed'),
    });
    const { name, machine, actionName } = await deletedMachine(t, node);
    const failed = await waitForHeld(actionName, 'True', 'ActionFailed', 90_000);
    assert.equal(failed.status?.phase, 'Failed');
    assert.match(heldCondition(failed)?.message ?? '', /delete the NodeAction to try again/);
    await waitFor(
      `a Warning Event on Machine ${name}`,
      async () =>
        (await machineEvents(name)).some((e) => e.type === 'Warning' && e.message.includes('ended Failed'))
          ? true
          : undefined,
      { timeoutMs: 10_000, intervalMs: 200 },
    );
    // Several resyncs later, still held.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assert.equal((await getMachine(name)).metadata.annotations?.[MACHINE_PRE_DRAIN_HOOK], MACHINE_HOOK_OWNER);

    // The operator fixes the hook and deletes the failed action: gatehouse makes a new one.
    await client.request(`${API}/namespaces/${namespace}/preresetjobs/purge-osds`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { template: hookTemplate('Succeeded') } },
    });
    await client.request(`${API}/nodeactions/${actionName}`, { method: 'DELETE' });
    await waitForHook(name, undefined, 90_000);
    const [again, ...more] = await actionsOf(machine.metadata.uid);
    assert.deepEqual(more, []);
    assert.notEqual(again?.metadata.uid, failed.metadata.uid);
    assert.equal(heldCondition(again as ActionObject)?.reason, 'Approved');
  });
});
