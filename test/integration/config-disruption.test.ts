// The disruption class of a configuration change (issue 30, item 1), against the sandbox
// and its Talos simulator: a 1.14 change that restarts CRI is classified CRIRestart from
// the node's configuration read through the Talos API, drained first, and its pods
// restart with the Node staying Ready; a change classified None is not drained.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { Controller } from '../../src/controller.ts';
import { CRI_RESTARTS_ANNOTATION } from '../../sandbox/talos-simulator.ts';
import { defaultMachineConfig } from '../../sandbox/talos-machine-config.ts';
import type { ActionObject } from '../../src/api/node-action.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { deleteAfter, events, getAction, waitForPhase, whoami } from '../support/gate.ts';
import { uniqueName, waitFor } from '../support/kube.ts';
import { GROUP_LABEL } from '../support/talos-nodes.ts';
import {
  callsOn,
  client,
  conditionOf,
  createManagedAction,
  kc,
  managedController,
  managedNodes,
  readNode,
  MANAGED_TAINT,
} from '../support/managed.ts';
import { stopAll } from '../support/teardown.ts';

const instance = uniqueName('config-disruption');
let controller: Controller;
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await managedController(instance);
});

after(async () => {
  await stopAll(controller);
});

interface PodView {
  metadata: { name: string; ownerReferences?: { kind: string }[] };
  status?: { phase?: string; containerStatuses?: { restartCount?: number }[] };
}

/** A namespace of the test's own with a DaemonSet and a Deployment, one Pod each, on the group's node. */
async function workloads(t: TestContext, group: string, node: string): Promise<string> {
  const namespace = uniqueName('cd');
  await client.request('/api/v1/namespaces', { method: 'POST', body: { metadata: { name: namespace } } });
  deleteAfter(t, client, `/api/v1/namespaces/${namespace}`);
  const template = (app: string) => ({
    metadata: { labels: { app } },
    spec: {
      nodeSelector: { [GROUP_LABEL]: group },
      tolerations: [{ key: MANAGED_TAINT, operator: 'Exists' }],
      terminationGracePeriodSeconds: 0,
      containers: [{ name: 'app', image: 'registry.k8s.io/pause:3.10' }],
    },
  });
  await client.request(`/apis/apps/v1/namespaces/${namespace}/daemonsets`, {
    method: 'POST',
    body: {
      metadata: { name: 'agent' },
      spec: { selector: { matchLabels: { app: 'agent' } }, template: template('agent') },
    },
  });
  await client.request(`/apis/apps/v1/namespaces/${namespace}/deployments`, {
    method: 'POST',
    body: {
      metadata: { name: 'web' },
      spec: { replicas: 1, selector: { matchLabels: { app: 'web' } }, template: template('web') },
    },
  });
  await waitFor(
    `both Pods running on ${node}`,
    async () => {
      const pods = await podsOn(namespace, node);
      return pods.length === 2 && pods.every((p) => p.status?.phase === 'Running') ? true : undefined;
    },
    { timeoutMs: 60_000 },
  );
  return namespace;
}

async function podsOn(namespace: string, node: string): Promise<PodView[]> {
  const list = await client.request<{ items: PodView[] }>(`/api/v1/namespaces/${namespace}/pods`, {
    query: { fieldSelector: `spec.nodeName=${node}` },
  });
  return list.items;
}

const restarts = (p: PodView | undefined) => p?.status?.containerStatuses?.[0]?.restartCount;
const ownedBy = (kind: string) => (p: PodView) => p.metadata.ownerReferences?.some((o) => o.kind === kind);

/** A Secret holding the machine configuration, in the controller's namespace. */
async function configSecret(t: TestContext, text: string): Promise<string> {
  const name = uniqueName('machine-config');
  await client.request('/api/v1/namespaces/gatehouse-system/secrets', {
    method: 'POST',
    body: { metadata: { name }, stringData: { 'config.yaml': text } },
  });
  deleteAfter(t, client, `/api/v1/namespaces/gatehouse-system/secrets/${name}`);
  return name;
}

/** Watches the node while the action runs: whether it was ever NotReady or cordoned, and its boot IDs. */
function watchNode(node: string): {
  stop: () => Promise<{ notReady: number; cordoned: number; boots: Set<string> }>;
} {
  const state = { running: true };
  const seen = { notReady: 0, cordoned: 0, boots: new Set<string>() };
  const loop = (async () => {
    while (state.running) {
      const n = await readNode(node);
      if (!n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) seen.notReady++;
      if (n.spec?.unschedulable === true) seen.cordoned++;
      if (n.status?.nodeInfo?.bootID) seen.boots.add(n.status.nodeInfo.bootID);
      await new Promise((r) => setTimeout(r, 150));
    }
  })();
  return {
    stop: async () => {
      state.running = false;
      await loop;
      return seen;
    },
  };
}

const WORKER = defaultMachineConfig(false);

describe('ConfigChange disruption classes', () => {
  it('classifies a 1.14 change of the base runtime spec CRIRestart, drains first; its pods restart, the Node stays Ready', async (t) => {
    const group = uniqueName('cd-cri');
    const [node = ''] = await managedNodes(t, group, 1, { talosVersion: 'v1.14.0', addressBlock: 200 });
    const namespace = await workloads(t, group, node);
    const [daemon] = (await podsOn(namespace, node)).filter(ownedBy('DaemonSet'));
    const [web] = (await podsOn(namespace, node)).filter(ownedBy('ReplicaSet'));
    assert.equal(restarts(daemon), 0);
    const secret = await configSecret(
      t,
      WORKER.replace(
        '  type: worker\n',
        '  type: worker\n  baseRuntimeSpecOverrides:\n    process:\n      rlimits: []\n',
      ),
    );
    const watch = watchNode(node);
    const name = await createManagedAction(t, instance, me, {
      nodeName: node,
      action: 'ConfigChange',
      configChange: { mode: 'NoReboot', configSecretRef: { name: secret } },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    const seen = await watch.stop();
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);

    const disruption = done.status.configDisruption;
    assert.equal(disruption?.class, 'CRIRestart', disruption?.message);
    assert.equal(disruption.basis, 'Compared');
    assert.deepEqual(disruption.paths, ['machine.baseRuntimeSpecOverrides']);
    assert.equal(disruption.talosVersion, 'v1.14.0');
    assert.ok((await events(client, name)).some((e) => e.reason === 'Classified'));

    // Drained before the call: the Deployment's Pod was evicted, the DaemonSet's left.
    assert.equal(conditionOf(done, 'Drained')?.reason, 'Drained', conditionOf(done, 'Drained')?.message);
    const execution = done.status.execution;
    assert.ok(execution?.drainTime !== undefined && execution.callTime !== undefined);
    assert.ok(Date.parse(execution.drainTime) <= Date.parse(execution.callTime), 'drained before the call');
    assert.ok(seen.cordoned > 0, 'cordoned while it ran');
    assert.ok(
      !(await podsOn(namespace, node)).some((p) => p.metadata.name === web?.metadata.name),
      'the Deployment Pod was evicted',
    );

    // CRI restarted: the Pod left on the node restarted, the Node never went NotReady nor rebooted.
    const after = await readNode(node);
    assert.equal(after.metadata.annotations?.[CRI_RESTARTS_ANNOTATION], '1');
    const [daemonAfter] = (await podsOn(namespace, node)).filter(ownedBy('DaemonSet'));
    assert.equal(daemonAfter?.metadata.name, daemon?.metadata.name);
    assert.equal(restarts(daemonAfter), 1, 'the DaemonSet Pod restarted with CRI');
    assert.equal(seen.notReady, 0, 'the Node stayed Ready');
    assert.equal(seen.boots.size, 1, 'the Node did not reboot');
    assert.equal((await callsOn(node)).Reboot, undefined);
  });

  it('does not drain a change classified None, and records why', async (t) => {
    const group = uniqueName('cd-none');
    const [node = ''] = await managedNodes(t, group, 1, { talosVersion: 'v1.14.0', addressBlock: 200 });
    const namespace = await workloads(t, group, node);
    const before = (await podsOn(namespace, node)).map((p) => p.metadata.name).sort();
    const secret = await configSecret(
      t,
      WORKER.replace('  type: worker\n', '  type: worker\n  nodeLabels:\n    zone: a\n'),
    );
    const watch = watchNode(node);
    const name = await createManagedAction(t, instance, me, {
      nodeName: node,
      action: 'ConfigChange',
      configChange: { mode: 'Auto', configSecretRef: { name: secret } },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    const seen = await watch.stop();
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    const disruption = done.status.configDisruption;
    assert.equal(disruption?.class, 'None', disruption?.message);
    assert.equal(disruption.basis, 'Compared');
    assert.deepEqual(disruption.paths, ['machine.nodeLabels']);
    const drained = conditionOf(done, 'Drained');
    assert.equal(drained?.reason, 'NotNeeded');
    assert.match(drained.message, /classified None/);
    assert.equal(seen.cordoned, 0, 'never cordoned');
    assert.deepEqual((await podsOn(namespace, node)).map((p) => p.metadata.name).sort(), before);
    assert.equal((await readNode(node)).metadata.annotations?.[CRI_RESTARTS_ANNOTATION], undefined);
    assert.deepEqual(
      (await podsOn(namespace, node)).map((p) => restarts(p)),
      [0, 0],
    );
  });

  it('takes an External change at its stated class, raised to what its mode needs', async (t) => {
    const [node = ''] = await managedNodes(t, uniqueName('cd-ext'), 1, {
      talosVersion: 'v1.14.0',
      addressBlock: 200,
    });
    const stated = await createManagedAction(t, instance, me, {
      nodeName: node,
      execution: 'External',
      action: 'ConfigChange',
      configChange: { mode: 'Reboot', disruptionClass: 'None' },
    });
    const approved = await waitForPhase(client, stated, ['Approved', 'Failed'], 60_000);
    const recorded: ActionObject['status'] = (await getAction(client, approved.metadata.name)).status;
    const disruption = recorded?.configDisruption;
    assert.ok(disruption, 'classified');
    assert.deepEqual([disruption.class, disruption.basis], ['Reboot', 'Stated']);
    assert.match(disruption.message, /raised/);
  });
});
