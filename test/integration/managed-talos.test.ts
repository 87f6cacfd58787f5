// Managed execution meaning what Talos means (issue 30, items 5 and 6), against the
// sandbox's Talos simulator: a reset wipes what it says (its user disks sent; 1.14's
// system volumes named), the installer's exit codes read (3 ends it at once, 5 pulls
// again), a live 1.14 change hands no etcd leadership over, and a staged legacy upgrade
// whose controller is SIGKILLed after the call is not sent twice.
import assert from 'node:assert/strict';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { Controller } from '../../src/controller.ts';
import { SHUTDOWN_DELAY_ANNOTATION, TALOS_FAULT_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { ETCD_LEADER_ANNOTATION } from '../../sandbox/talos-etcd.ts';
import { WIPED_ANNOTATION } from '../../sandbox/talos-reset.ts';
import { INSTALLER_EXIT_ANNOTATION } from '../../sandbox/talos-simulator.ts';
import { KubeApiError } from '../../src/kube/rest.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { ControllerProcess } from '../support/controller-process.ts';
import { API, createAction, deleteAfter, events, getAction, waitForPhase, whoami } from '../support/gate.ts';
import { uniqueName, waitFor } from '../support/kube.ts';
import {
  callsOn,
  client,
  conditionOf,
  createManagedAction,
  kc,
  managedController,
  managedNodes,
  readNode,
  sandbox,
} from '../support/managed.ts';
import { stopAll } from '../support/teardown.ts';

const instance = uniqueName('managed-talos');
let controller: Controller;
let me = '';

/** Nodes of the test's own, at 10.5.200–249.x (away from the other Managed suite's 100–149). */
const nodes = (
  t: TestContext,
  count: number,
  options: Omit<Parameters<typeof managedNodes>[3], 'addressBlock'>,
) => managedNodes(t, uniqueName('mt'), count, { ...options, addressBlock: 200 });

const managed = (t: TestContext, spec: Parameters<typeof createAction>[3], inst = instance) =>
  createManagedAction(t, inst, me, spec);

const wiped = async (node: string) =>
  JSON.parse((await readNode(node)).metadata.annotations?.[WIPED_ANNOTATION] ?? '{}') as {
    mode?: string;
    disks?: string[];
    partitions?: string[];
  };

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await managedController(instance);
});

after(async () => {
  await stopAll(controller);
});

describe('Managed execution means what Talos means', () => {
  it('refuses a UserDisks reset without disks, sends the disks of one with them, and says what it wipes', async (t) => {
    const refused = await createAction(client, instance, me, {
      execution: 'Managed',
      nodeName: 'any',
      action: 'Reset',
      reset: { wipeMode: 'UserDisks' },
    }).then(
      () => assert.fail('the API server took a UserDisks reset without disks'),
      (e: unknown) => e,
    );
    assert.ok(refused instanceof KubeApiError);
    assert.match(refused.message, /reset\.userDisks must list the disks to wipe with wipeMode UserDisks/);

    const [node = ''] = await nodes(t, 1, { talosVersion: 'v1.13.0' });
    const name = await managed(t, {
      nodeName: node,
      action: 'Reset',
      reset: { wipeMode: 'UserDisks', userDisks: ['/dev/sdb'] },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.match(
      conditionOf(done, 'Executed')?.message ?? '',
      /resetting: wiping user disk\(s\) \/dev\/sdb; Talos and its data stay/,
    );
    await waitFor('the wipe', async () => ((await wiped(node)).mode ? true : undefined));
    assert.deepEqual(await wiped(node), { mode: 'USER_DISKS', disks: ['/dev/sdb'], partitions: [] });
  });

  it('names ETCD, CRI, KUBELET and LOG with STATE and EPHEMERAL when a 1.14 node’s system data is wiped', async (t) => {
    const [node = ''] = await nodes(t, 1, { talosVersion: 'v1.14.0' });
    const name = await managed(t, { nodeName: node, action: 'Reset', reset: { wipeMode: 'SystemData' } });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.match(
      conditionOf(done, 'Executed')?.message ?? '',
      /the system partitions STATE, EPHEMERAL, ETCD, CRI, KUBELET, LOG; Talos stays installed/,
    );
    await waitFor('the wipe', async () => ((await wiped(node)).mode ? true : undefined));
    // Directories under EPHEMERAL on this node: wiped with it (Talos accepts the six).
    assert.deepEqual(await wiped(node), {
      mode: 'SYSTEM_DISK',
      disks: [],
      partitions: ['STATE', 'EPHEMERAL'],
    });
  });

  it('ends an upgrade at once when the installer exits 3 (unsupported), and never tries again', async (t) => {
    const [node = ''] = await nodes(t, 1, {
      talosVersion: 'v1.13.4',
      annotations: { [INSTALLER_EXIT_ANNOTATION]: '3' },
    });
    const name = await managed(t, {
      nodeName: node,
      action: 'Upgrade',
      upgrade: { image: 'factory.talos.dev/installer/abc:v1.14.0' },
    });
    const failed = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.match(
      failed.status.message ?? '',
      /the installer exited with code 3 \(unsupported: .*permanent, not retried\)/,
    );
    await new Promise((r) => setTimeout(r, 3000));
    assert.deepEqual(await callsOn(node), { ImagePull: 1, LifecycleUpgrade: 1 }, 'no retry, no reboot');
  });

  it('pulls and installs again when the installer fails on a dependency (exit 5), then goes on', async (t) => {
    const [node = ''] = await nodes(t, 1, {
      talosVersion: 'v1.13.4',
      annotations: { [INSTALLER_EXIT_ANNOTATION]: '5' },
    });
    const name = await managed(t, {
      nodeName: node,
      action: 'Upgrade',
      upgrade: { image: 'factory.talos.dev/installer/abc:v1.14.0' },
    });
    await waitFor('the retry to be recorded', async () => {
      const a = await getAction(client, name);
      return (a.status?.execution?.installRetries?.count ?? 0) >= 1 ? a : undefined;
    });
    // The registry is back: the next attempt succeeds.
    await client.request(`/api/v1/nodes/${node}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [INSTALLER_EXIT_ANNOTATION]: null } } },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 180_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal((await readNode(node)).status?.nodeInfo?.osImage, 'Talos (v1.14.0)');
    assert.deepEqual(await callsOn(node), { ImagePull: 2, LifecycleUpgrade: 2, Reboot: 1 });
    assert.ok((await events(client, name)).some((e) => e.reason === 'InstallRetried'));
  });

  it('hands no etcd leadership over for a live 1.14 Auto change, even on the leader', async (t) => {
    const cluster = uniqueName('etcd14');
    const [leader = ''] = await managedNodes(t, cluster, 3, {
      talosVersion: 'v1.14.0',
      addressBlock: 200,
      etcdCluster: cluster,
    });
    await client.request(`/api/v1/nodes/${leader}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [ETCD_LEADER_ANNOTATION]: 'true' } } },
    });
    const secret = uniqueName('machine-config');
    await client.request('/api/v1/namespaces/gatehouse-system/secrets', {
      method: 'POST',
      body: {
        metadata: { name: secret },
        stringData: {
          'config.yaml': 'version: v1alpha1\nmachine:\n  type: controlplane\n  network:\n    hostname: x\n',
        },
      },
    });
    deleteAfter(t, client, `/api/v1/namespaces/gatehouse-system/secrets/${secret}`);
    const name = await managed(t, {
      nodeName: leader,
      action: 'ConfigChange',
      configChange: { mode: 'Auto', configSecretRef: { name: secret } },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.deepEqual(
      await callsOn(leader),
      { MachineConfigGet: 1, ApplyConfiguration: 1 },
      'its configuration read for its class; no hand-off, no election forced',
    );
    assert.equal((await readNode(leader)).metadata.annotations?.[ETCD_LEADER_ANNOTATION], 'true');
  });

  it('never sends a staged legacy upgrade twice when its controller is SIGKILLed after the call', async (t) => {
    // A 1.12 node whose stageUpgrade takes its time (Talos drains inside machined first),
    // and whose answer to the Upgrade is lost: the controller is killed waiting for it.
    const [node = ''] = await nodes(t, 1, {
      talosVersion: 'v1.12.6',
      annotations: { [TALOS_FAULT_ANNOTATION]: 'lost-reply:Upgrade', [SHUTDOWN_DELAY_ANNOTATION]: '150s' },
    });
    const own = uniqueName('managed-kill');
    const process = new ControllerProcess(
      own,
      await mkdtemp(join(tmpdir(), 'gatehouse-kill-')),
      sandbox.talosconfig ?? '',
    );
    t.after(() => process.stop());
    process.start();
    const name = await managed(
      t,
      {
        nodeName: node,
        action: 'Upgrade',
        upgrade: { image: 'ghcr.io/siderolabs/installer:v1.12.7', stage: true },
        drain: { enabled: false },
        deadlines: { waitingForNode: '10m' },
      },
      own,
    );
    await waitFor(
      'the staged upgrade to reach the node',
      async (observe) => {
        const calls = await callsOn(node);
        observe(JSON.stringify(calls));
        return calls.Upgrade === 1 ? true : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 200 },
    );
    process.kill();
    const bootID = (await readNode(node)).status?.nodeInfo?.bootID;
    // Another controller: it asks the node (still in that boot) once the call has settled.
    const second = await managedController(own);
    t.after(() => second.stop());
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 420_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.execution?.callResult, 'Unknown');
    assert.notEqual(done.status.bootIDAfter, bootID);
    assert.equal((await callsOn(node)).Upgrade, 1, 'the staged upgrade reached the node once');
    const reasons = (await events(client, name)).map((e) => e.reason);
    assert.ok(!reasons.includes('TalosCallNotReceived'), reasons.join(', '));
    assert.ok(reasons.includes('TalosCallOutcomeUnknown'), reasons.join(', '));
    await client.request(`${API}/nodeactions/${name}`, { method: 'DELETE' }).catch(() => undefined);
  });
});
