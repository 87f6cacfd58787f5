// Managed execution end to end: the controller performs the actions itself, through the
// Talos API of the sandbox's Talos simulator (real gRPC over mutual TLS), on simulated
// nodes of this file's own — cordon, drain through the eviction API, the Talos calls,
// the node followed back, the boot hooks, uncordon. The simulator counts every call on
// the Node (sandbox.gatehouse.dev/talos-calls), which is how these tests know that a
// call was made exactly once.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL, CORDONED_BY_ANNOTATION } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import {
  BOOT_DELAY_ANNOTATION,
  TALOS_FAULT_ANNOTATION,
  TALOS_FAULT_MESSAGE_ANNOTATION,
} from '../../sandbox/talos-faults.ts';
import { ETCD_LEADER_ANNOTATION } from '../../sandbox/talos-etcd.ts';
import { MACHINE_CONFIG_ANNOTATION } from '../../sandbox/talos-simulator.ts';
import { cordon } from '../../src/talos/drain.ts';
import { CALL_SETTLE_MS } from '../../src/actions/phases/executing.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { GROUP_LABEL, isReady } from '../support/talos-nodes.ts';
import {
  createGroupHook,
  API,
  createAction,
  createPolicy,
  deleteAfter,
  events,
  getAction,
  hookTemplate,
  startGateController,
  waitForPhase,
  whoami,
  installCephClusterKind,
  setCephHealth,
} from '../support/gate.ts';
import { freshNamespace, uniqueName, waitFor } from '../support/kube.ts';
import {
  callsOn,
  client,
  conditionOf,
  createManagedAction,
  kc,
  MANAGED_TAINT,
  managedController,
  managedNodes as createManagedNodes,
  readNode,
  talos,
} from '../support/managed.ts';
import { stopAll } from '../support/teardown.ts';

const CEPH_GROUP = 'ceph.managed.test.gatehouse.dev';
const TAINT = MANAGED_TAINT;
const OLD = 'v1.13.0';
const NEW_IMAGE = 'ghcr.io/siderolabs/installer:v1.13.1';
const instance = uniqueName('managed');
let controller: Controller;
let me = '';

/** Simulated Talos nodes of the test's own (addresses 10.5.100–149.x), labelled with `group`. */
function managedNodes(
  t: TestContext,
  group: string,
  count: number,
  options: { talosVersion?: string; annotations?: Record<string, string>; etcdCluster?: string } = {},
): Promise<string[]> {
  return createManagedNodes(t, group, count, {
    ...options,
    talosVersion: options.talosVersion ?? OLD,
    addressBlock: 100,
  });
}

const cephHealth = (namespace: string, health: string) =>
  setCephHealth(client, CEPH_GROUP, namespace, health, 'managed-test');

async function createHook(namespace: string, group: string, kind: string, name: string, template: unknown) {
  await createGroupHook(client, { namespace, group }, kind, name, { template });
}

/** A PreRebootJob that succeeds, with an undo Job that succeeds (like noout and its unset). */
async function createNooutHook(namespace: string, group: string): Promise<void> {
  await createGroupHook(client, { namespace, group }, 'PreRebootJob', 'noout', {
    template: hookTemplate('Succeeded', '1s'),
    undo: { template: hookTemplate('Succeeded', '1s') },
    placement: 'Anywhere',
  });
}

/** The undo Jobs gatehouse created for an action (label talos.dev/hook-purpose=undo). */
async function undoJobsOf(namespace: string, actionUID: string): Promise<{ metadata: { uid: string } }[]> {
  const list = await client.request<{ items: { metadata: { uid: string } }[] }>(
    `/apis/batch/v1/namespaces/${namespace}/jobs`,
    { query: { labelSelector: `talos.dev/action-uid=${actionUID},talos.dev/hook-purpose=undo` } },
  );
  return list.items;
}

/** A Deployment of `replicas` pods on the group's nodes, and a PDB keeping `minAvailable` of them. */
async function deployWithBudget(
  namespace: string,
  group: string,
  name: string,
  replicas: number,
  minAvailable: number,
): Promise<void> {
  await client.request(`/apis/apps/v1/namespaces/${namespace}/deployments`, {
    method: 'POST',
    body: {
      metadata: { name },
      spec: {
        replicas,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: {
            nodeSelector: { [GROUP_LABEL]: group },
            tolerations: [{ key: TAINT, operator: 'Exists', effect: 'NoSchedule' }],
            containers: [{ name: 'main', image: 'registry.example/app' }],
          },
        },
      },
    },
  });
  await client.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`, {
    method: 'POST',
    body: { metadata: { name }, spec: { minAvailable, selector: { matchLabels: { app: name } } } },
  });
  await waitFor(`PDB ${name} to count ${String(replicas)} healthy pods`, async () => {
    const pdb = await client.request<{ status?: { currentHealthy?: number } }>(
      `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/${name}`,
    );
    return pdb.status?.currentHealthy === replicas ? true : undefined;
  });
}

interface Pod {
  metadata: { name: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status?: { conditions?: { type: string; status: string }[] };
}

async function podsOf(namespace: string, app: string): Promise<Pod[]> {
  const list = await client.request<{ items: Pod[] }>(`/api/v1/namespaces/${namespace}/pods`, {
    query: { labelSelector: `app=${app}` },
  });
  return list.items;
}

/** Watches the app's pods and remembers the fewest that were available (Ready, not being deleted) at once. */
async function watchAvailability(t: TestContext, namespace: string, app: string): Promise<() => number> {
  const list = await client.request<{ items: Pod[]; metadata: { resourceVersion: string } }>(
    `/api/v1/namespaces/${namespace}/pods`,
    { query: { labelSelector: `app=${app}` } },
  );
  const available = (p: Pod) =>
    !p.metadata.deletionTimestamp &&
    (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
  const pods = new Map(list.items.map((p) => [p.metadata.name, available(p)]));
  const count = () => [...pods.values()].filter(Boolean).length;
  let fewest = count();
  const abort = new AbortController();
  t.after(() => abort.abort());
  void client
    .watch(
      `/api/v1/namespaces/${namespace}/pods`,
      { labelSelector: `app=${app}`, resourceVersion: list.metadata.resourceVersion },
      (event) => {
        const pod = event.object as unknown as Pod;
        if (event.type === 'DELETED') pods.delete(pod.metadata.name);
        else pods.set(pod.metadata.name, available(pod));
        fewest = Math.min(fewest, count());
      },
      abort.signal,
    )
    .catch(() => undefined);
  return () => fewest;
}

function ms(time: string | undefined, what: string): number {
  assert.ok(time, `${what}: the timestamp is missing`);
  return Date.parse(time);
}

const managedAction = (t: TestContext, spec: Parameters<typeof createAction>[3], inst = instance) =>
  createManagedAction(t, inst, me, spec);

before(async () => {
  await installGatehouseAPI(kc);
  await installCephClusterKind(CEPH_GROUP);
  me = await whoami(client);
  controller = await managedController(instance);
});

after(async () => {
  await stopAll(controller);
});

describe('Managed execution', () => {
  it('upgrades three nodes one at a time: Ceph checked, noout set, drained, upgraded, back, noout unset, uncordoned', async (t) => {
    const group = uniqueName('roll');
    const nodes = await managedNodes(t, group, 3);
    const namespace = await freshNamespace(t, kc);
    await cephHealth(namespace, 'HEALTH_OK');
    const check = uniqueName('ceph-ok');
    await client.request(`${API}/clusterhealthchecks`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ClusterHealthCheck',
        metadata: { name: check, labels: { [INSTANCE_LABEL]: instance } },
        spec: {
          interval: '2s',
          timeout: '2s',
          failureThreshold: 1,
          actions: ['Upgrade'],
          nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
          resource: {
            apiVersion: `${CEPH_GROUP}/v1`,
            kind: 'CephCluster',
            namespace,
            expression: "self.status.ceph.health == 'HEALTH_OK'",
          },
        },
      },
    });
    deleteAfter(t, client, `${API}/clusterhealthchecks/${check}`);
    const policy = uniqueName('one-at-a-time');
    await client.request(`${API}/actionpolicies`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ActionPolicy',
        metadata: { name: policy, labels: { [INSTANCE_LABEL]: instance } },
        spec: { nodeSelector: { matchLabels: { [GROUP_LABEL]: group } }, maxConcurrent: 1 },
      },
    });
    deleteAfter(t, client, `${API}/actionpolicies/${policy}`);
    await createHook(namespace, group, 'PreUpgradeJob', 'set-noout', hookTemplate('Succeeded', '2s'));
    await createHook(namespace, group, 'NodeReadyJob', 'unset-noout', hookTemplate('Succeeded', '1s'));
    // Workloads on the nodes, which the drains move around within their budget.
    await deployWithBudget(namespace, group, 'app', 3, 2);
    const fewest = await watchAvailability(t, namespace, 'app');
    const before = new Map(
      await Promise.all(
        nodes.map(async (n) => [n, (await readNode(n)).status?.nodeInfo?.bootID ?? ''] as const),
      ),
    );

    const names = [];
    for (const nodeName of nodes)
      names.push(await managedAction(t, { nodeName, action: 'Upgrade', upgrade: { image: NEW_IMAGE } }));
    const done = await Promise.all(
      names.map((n) => waitForPhase(client, n, ['Succeeded', 'Failed'], 400_000)),
    );
    for (const a of done)
      assert.equal(a.status?.phase, 'Succeeded', `${a.metadata.name}: ${a.status?.message ?? ''}`);

    const ordered = [...done].sort(
      (a, b) => ms(a.status?.approvalTime, 'approval') - ms(b.status?.approvalTime, 'approval'),
    );
    for (const a of ordered) {
      const s = a.status ?? {};
      const nodeName = a.spec.nodeName;
      const node = await readNode(nodeName);
      // The node runs the new version in a new boot, and is schedulable again.
      assert.equal(node.status?.nodeInfo?.osImage, 'Talos (v1.13.1)', nodeName);
      assert.equal(s.bootIDBefore, before.get(nodeName));
      assert.notEqual(s.bootIDAfter, s.bootIDBefore);
      assert.equal(node.status.nodeInfo.bootID, s.bootIDAfter);
      assert.ok(!node.spec?.unschedulable, `${nodeName} is still cordoned`);
      assert.equal(node.metadata.annotations?.[CORDONED_BY_ANNOTATION], undefined);
      // Each Talos call once: pull, install, reboot.
      assert.deepEqual(await callsOn(nodeName), { ImagePull: 1, LifecycleUpgrade: 1, Reboot: 1 });
      assert.equal(s.execution?.call, 'MachineService.Reboot');
      assert.equal(s.execution.callResult, 'Acknowledged');

      // check → noout → approval → drain → call → back → unset noout → done, from the record.
      const noout = s.hooks?.find((h) => h.name === 'set-noout');
      const unset = s.hooks?.find((h) => h.name === 'unset-noout');
      assert.equal(noout?.phase, 'Succeeded');
      assert.equal(unset?.phase, 'Succeeded');
      const times = [
        ['check', ms(s.checks?.[0]?.probeTime, 'check')],
        ['noout started', ms(noout.startTime, 'noout')],
        ['noout done', ms(noout.completionTime, 'noout') - 1000], // Jobs finish in whole seconds
        ['approved', ms(s.approvalTime, 'approval')],
        ['executing', ms(s.executionTime, 'execution')],
        ['drained', ms(s.execution.drainTime, 'drain')],
        ['called', ms(s.execution.callTime, 'call')],
        ['back', ms(conditionOf(a, 'NodeReturned')?.lastTransitionTime, 'return')],
        ['unset started', ms(unset.startTime, 'unset') + 1000],
        ['done', ms(s.completionTime, 'completion') + 1000],
      ] as const;
      for (let i = 1; i < times.length; i++) {
        const [previous, at] = times[i - 1] as readonly [string, number];
        const [what, then] = times[i] as readonly [string, number];
        assert.ok(
          at <= then,
          `${a.metadata.name}: ${previous} (${String(at)}) after ${what} (${String(then)})`,
        );
      }
    }
    // One at a time: each action finished before the next one was even admitted (its noout).
    for (let i = 1; i < ordered.length; i++) {
      const previous = ordered[i - 1]?.status;
      const next = ordered[i]?.status;
      const nextNoout = next?.hooks?.find((h) => h.name === 'set-noout');
      assert.ok(
        ms(previous?.completionTime, 'completion') <= ms(nextNoout?.startTime, 'next noout'),
        `${ordered[i]?.metadata.name ?? ''} started before ${ordered[i - 1]?.metadata.name ?? ''} finished`,
      );
    }
    assert.ok(
      fewest() >= 2,
      `the PodDisruptionBudget was broken: ${String(fewest())} pod(s) available at one point`,
    );

    const reasons = (await events(client, ordered[0]?.metadata.name ?? '')).map((e) => e.reason);
    for (const reason of [
      'Approved',
      'Executing',
      'Preparing',
      'Draining',
      'Drained',
      'Installing',
      'TalosCall',
      'TalosCallAcknowledged',
      'WaitingForNode',
      'Uncordoned',
      'Succeeded',
    ])
      assert.ok(reasons.includes(reason), `no ${reason} event among ${reasons.join(', ')}`);
  });

  it("evicts the node's pods within their PodDisruptionBudget before rebooting it", async (t) => {
    const group = uniqueName('evict');
    const [target, spare] = (await managedNodes(t, group, 2)) as [string, string];
    const namespace = await freshNamespace(t, kc);
    // Every pod starts on the target; their replacements can only go to the spare.
    await cordon(client, spare, true);
    await deployWithBudget(namespace, group, 'web', 3, 2);
    await cordon(client, spare, false);
    const fewest = await watchAvailability(t, namespace, 'web');
    const name = await managedAction(t, { nodeName: target, action: 'Reboot', drain: { timeout: '2m' } });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 180_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.match(conditionOf(done, 'Drained')?.message ?? '', /3 pod\(s\) evicted/);
    const pods = await podsOf(namespace, 'web');
    assert.deepEqual(
      pods.filter((p) => !p.metadata.deletionTimestamp).map((p) => p.spec.nodeName),
      [spare, spare, spare],
    );
    assert.ok(fewest() >= 2, `the budget was broken: ${String(fewest())} pod(s) available at one point`);
    assert.deepEqual(await callsOn(target), { Reboot: 1 });
    assert.ok(ms(done.status.execution?.drainTime, 'drain') <= ms(done.status.execution?.callTime, 'call'));
  });

  it('holds the drain on a PodDisruptionBudget that allows no disruption, then fails naming it, without calling Talos, undoes its hook and uncordons', async (t) => {
    const group = uniqueName('stuck');
    const [target, spare] = (await managedNodes(t, group, 2)) as [string, string];
    const namespace = await freshNamespace(t, kc);
    await createNooutHook(namespace, group);
    // Both pods on the target, and a budget that needs both: no eviction is ever allowed.
    await cordon(client, spare, true);
    await deployWithBudget(namespace, group, 'osd', 2, 2);
    assert.deepEqual(
      (await podsOf(namespace, 'osd')).map((p) => p.spec.nodeName),
      [target, target],
    );
    const name = await managedAction(t, { nodeName: target, action: 'Reboot', drain: { timeout: '5s' } });
    const failed = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    const message = failed.status?.message ?? '';
    assert.equal(failed.status?.phase, 'Failed', message);
    assert.match(
      message,
      new RegExp(
        `the drain failed: drain of ${target} timed out after 5\\.0s with 2 pod\\(s\\) left; evictions refused: ${namespace}/osd-`,
      ),
    );
    assert.match(message, /disruption budget osd needs 2 healthy pods/);
    // Issue 16: nothing was done to the node, so it is put back as it was.
    assert.match(message, new RegExp(`uncordoning node ${target}, cordoned for this action`));
    assert.equal(conditionOf(failed, 'Drained')?.reason, 'DrainTimedOut');
    // What held it stays recorded: both pods, their budget, nothing it allowed.
    assert.equal(conditionOf(failed, 'DrainBlocked')?.status, 'True');
    assert.deepEqual(
      failed.status.drain?.blockers?.map((b) => [b.podDisruptionBudget, b.disruptionsAllowed]),
      [
        ['osd', 0],
        ['osd', 0],
      ],
    );
    assert.deepEqual(await callsOn(target), {}, 'Talos was never called');
    const undone = await waitFor(
      'the undo of the noout hook to succeed',
      async () => {
        const a = await getAction(client, name);
        return conditionOf(a, 'Undone')?.status === 'True' ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    assert.equal(undone.status?.undo?.nodeDisrupted, false);
    assert.equal(undone.status.undo.runs?.length, 1);
    assert.equal((await undoJobsOf(namespace, undone.metadata.uid)).length, 1);
    const node = await waitFor(
      'the node to be uncordoned',
      async () => {
        const n = await readNode(target);
        return n.spec?.unschedulable ? undefined : n;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    assert.equal(node.metadata.annotations?.[CORDONED_BY_ANNOTATION], undefined);
    assert.ok((await events(client, name)).some((e) => e.reason === 'Uncordoned'));
  });

  it('leaves a node someone else cordoned cordoned when its drain fails', async (t) => {
    const group = uniqueName('theirs');
    const [target, spare] = (await managedNodes(t, group, 2)) as [string, string];
    const namespace = await freshNamespace(t, kc);
    await cordon(client, spare, true);
    await deployWithBudget(namespace, group, 'osd', 2, 2);
    await cordon(client, target, true); // an administrator's cordon: no talos.dev/cordoned-by
    // Taken only where the policies say so (else it waits at its health gate: maintainers.test.ts).
    await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
      maxConcurrent: 1,
      allowForeignCordon: true,
    });
    const name = await managedAction(t, { nodeName: target, action: 'Reboot', drain: { timeout: '3s' } });
    const failed = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.doesNotMatch(failed.status.message ?? '', /uncordoning/);
    await new Promise((r) => setTimeout(r, 2000));
    const node = await readNode(target);
    assert.equal(node.spec?.unschedulable, true, 'their cordon stays');
    assert.equal(node.metadata.annotations?.[CORDONED_BY_ANNOTATION], undefined);
  });

  it('waits on a PodDisruptionBudget that allows no disruption, and goes on once it does', async (t) => {
    const group = uniqueName('held');
    const [target, spare] = (await managedNodes(t, group, 2)) as [string, string];
    const namespace = await freshNamespace(t, kc);
    await cordon(client, spare, true);
    await deployWithBudget(namespace, group, 'osd', 2, 2);
    await cordon(client, spare, false);
    const name = await managedAction(t, { nodeName: target, action: 'Reboot', drain: { timeout: '2m' } });
    const held = await waitFor(
      'the drain to report the budget that holds it, for both pods',
      async () => {
        const a = await getAction(client, name);
        return a.status?.drain?.blockers?.length === 2 ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    assert.equal(held.status?.phase, 'Executing');
    const blocked = new RegExp(
      `^draining node ${target}: waiting for evictions: osd-\\S+ blocked by PodDisruptionBudget ${namespace}/osd \\(0 disruptions allowed\\); osd-\\S+ blocked by`,
    );
    assert.match(held.status.message ?? '', blocked);
    assert.equal(conditionOf(held, 'Drained')?.status, 'Unknown');
    assert.match(conditionOf(held, 'Drained')?.message ?? '', /blocked by PodDisruptionBudget/);
    assert.equal(conditionOf(held, 'DrainBlocked')?.status, 'True');
    assert.equal(conditionOf(held, 'DrainBlocked')?.reason, 'EvictionsRefused');
    const pods = (await podsOf(namespace, 'osd')).map((p) => p.metadata.name).sort();
    assert.deepEqual(
      held.status.drain?.blockers
        ?.map((b) => [b.namespace, b.pod, b.podDisruptionBudget, b.disruptionsAllowed])
        .sort(),
      pods.map((pod) => [namespace, pod, 'osd', 0]),
    );
    assert.equal(held.status.drain.moreBlockers, undefined);
    assert.ok(held.status.drain.blockers.every((b) => Date.parse(b.since) <= Date.now()));
    // Six retries (every 500ms) refused alike: the status is not written again.
    await new Promise((r) => setTimeout(r, 3000));
    const still = await getAction(client, name);
    assert.equal(
      still.metadata.resourceVersion,
      held.metadata.resourceVersion,
      `an unchanged hold was written again: ${JSON.stringify(still.status?.drain)}`,
    );
    assert.deepEqual(await callsOn(target), {}, 'no Talos call while the drain is held');
    // The budget allows one disruption now: the drain goes on, pod by pod.
    await client.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/osd`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { minAvailable: 1 } },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 180_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.match(conditionOf(done, 'Drained')?.message ?? '', /2 pod\(s\) evicted/);
    // What held it is cleared once the drain went on, and DrainBlocked says so.
    assert.equal(done.status.drain, undefined);
    assert.equal(conditionOf(done, 'DrainBlocked')?.status, 'False');
    assert.equal(conditionOf(done, 'DrainBlocked')?.reason, 'EvictionsAllowed');
    assert.match(conditionOf(done, 'DrainBlocked')?.message ?? '', /went through after \d/);
    assert.deepEqual(await callsOn(target), { Reboot: 1 });
  });

  it('applies a machine configuration from its Secret: live without a drain, or with a drain and a reboot', async (t) => {
    const [live, rebooting] = (await managedNodes(t, uniqueName('config'), 2)) as [string, string];
    const config = (hostname: string) =>
      `version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: ${hostname}\n`;
    const secret = uniqueName('machine-config');
    await client.request('/api/v1/namespaces/gatehouse-system/secrets', {
      method: 'POST',
      body: {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: secret },
        stringData: { 'config.yaml': config('one'), 'other.yaml': config('two') },
      },
    });
    deleteAfter(t, client, `/api/v1/namespaces/gatehouse-system/secrets/${secret}`);
    const digest = (text: string) => `sha256:${createHash('sha256').update(text).digest('hex')}`;

    const a = await managedAction(t, {
      nodeName: live,
      action: 'ConfigChange',
      configChange: { mode: 'NoReboot', configSecretRef: { name: secret } },
    });
    const applied = await waitForPhase(client, a, ['Succeeded', 'Failed'], 120_000);
    assert.equal(applied.status?.phase, 'Succeeded', applied.status?.message);
    assert.equal(applied.status.execution?.reboots, false);
    assert.equal(conditionOf(applied, 'Drained')?.reason, 'NotNeeded');
    assert.equal(applied.status.bootIDAfter, applied.status.bootIDBefore, 'the node did not reboot');
    const node = await readNode(live);
    assert.equal(node.metadata.annotations?.[MACHINE_CONFIG_ANNOTATION], digest(config('one')));
    assert.ok(!node.spec?.unschedulable, 'never cordoned');
    // The running configuration read for the change's disruption class, then the apply.
    assert.deepEqual(await callsOn(live), { MachineConfigGet: 1, ApplyConfiguration: 1 });

    const b = await managedAction(t, {
      nodeName: rebooting,
      action: 'ConfigChange',
      configChange: { mode: 'Reboot', configSecretRef: { name: secret, key: 'other.yaml' } },
    });
    const rebooted = await waitForPhase(client, b, ['Succeeded', 'Failed'], 120_000);
    assert.equal(rebooted.status?.phase, 'Succeeded', rebooted.status?.message);
    assert.equal(conditionOf(rebooted, 'Drained')?.reason, 'Drained');
    assert.notEqual(rebooted.status.bootIDAfter, rebooted.status.bootIDBefore);
    assert.equal(
      (await readNode(rebooting)).metadata.annotations?.[MACHINE_CONFIG_ANNOTATION],
      digest(config('two')),
      'the staged configuration runs after the reboot',
    );
    assert.deepEqual(await callsOn(rebooting), { ApplyConfiguration: 1 });
  });

  it('resets a node: drained, wiped, and finished once it is down, its Node left in place', async (t) => {
    const [node = ''] = await managedNodes(t, uniqueName('reset'), 1);
    const name = await managedAction(t, {
      nodeName: node,
      action: 'Reset',
      reset: { graceful: true, wipeMode: 'SystemDisk' },
    });
    // Talos wipes and halts the machine but never deletes its Node (that is the
    // operator's, or the cloud's, part): the action ends when the node is down.
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.match(done.status.message ?? '', new RegExp(`node ${node} is down`));
    assert.equal((await callsOn(node)).Reset, 1);
    assert.ok(!isReady(await readNode(node)), 'halted, and its Node still there');
    assert.equal(done.status.execution?.call, 'MachineService.Reset');
    assert.ok(done.status.execution.drainTime, 'drained first');
  });

  it("fails an upgrade that Talos fails, with Talos' reason, on Talos 1.13 and on the legacy upgrade", async (t) => {
    const fault = {
      [TALOS_FAULT_ANNOTATION]: 'upgrade-error',
      [TALOS_FAULT_MESSAGE_ANNOTATION]: 'disk /dev/sda is read-only',
    };
    const [current] = await managedNodes(t, uniqueName('upg-err'), 1, { annotations: fault });
    const [legacy] = await managedNodes(t, uniqueName('upg-legacy'), 1, {
      talosVersion: 'v1.12.4',
      annotations: fault,
    });
    const bootOf = async (n: string) => (await readNode(n)).status?.nodeInfo?.bootID;
    const boots = [await bootOf(current ?? ''), await bootOf(legacy ?? '')];

    const a = await managedAction(t, {
      nodeName: current ?? '',
      action: 'Upgrade',
      upgrade: { image: NEW_IMAGE },
    });
    const failed = await waitForPhase(client, a, ['Succeeded', 'Failed'], 120_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.match(
      failed.status.message ?? '',
      /could not install ghcr\.io\/siderolabs\/installer:v1\.13\.1: Talos LifecycleService\.Upgrade .* the installer exited with code 1 \(failure: installers before Talos 1\.14 exit 1 on every failure: its output says why\): error: disk \/dev\/sda is read-only/,
    );
    assert.equal(conditionOf(failed, 'Executed')?.reason, 'TalosError');
    assert.deepEqual(
      await callsOn(current ?? ''),
      { ImagePull: 1, LifecycleUpgrade: 1 },
      'no reboot after a failed install',
    );

    const b = await managedAction(t, {
      nodeName: legacy ?? '',
      action: 'Upgrade',
      upgrade: { image: NEW_IMAGE },
    });
    const legacyFailed = await waitForPhase(client, b, ['Succeeded', 'Failed'], 120_000);
    assert.equal(legacyFailed.status?.phase, 'Failed', legacyFailed.status?.message);
    assert.match(
      legacyFailed.status.message ?? '',
      /Talos MachineService\.Upgrade failed: Talos MachineService\.Upgrade on node [\d.]+ via .* failed: disk \/dev\/sda is read-only/,
    );
    assert.equal(legacyFailed.status.execution?.callResult, 'Failed');
    assert.deepEqual(await callsOn(legacy ?? ''), { Upgrade: 1 });
    assert.deepEqual(
      [await bootOf(current ?? ''), await bootOf(legacy ?? '')],
      boots,
      'neither node rebooted',
    );
  });

  it('upgrades and reboots nodes on Talos 1.12, 1.13 and 1.14 in one cluster, each by its own flow', async (t) => {
    const flows = [
      { version: 'v1.12.6', image: 'ghcr.io/siderolabs/installer:v1.12.7', calls: { Upgrade: 1 } },
      {
        version: 'v1.13.9',
        image: 'ghcr.io/siderolabs/installer:v1.13.10',
        calls: { ImagePull: 1, LifecycleUpgrade: 1, Reboot: 1 },
      },
      {
        version: 'v1.14.0',
        image: 'ghcr.io/siderolabs/installer:v1.14.1',
        calls: { ImagePull: 1, LifecycleUpgrade: 1, Reboot: 1 },
      },
    ];
    for (const flow of flows) {
      const [node = ''] = await managedNodes(t, uniqueName(`v${flow.version.slice(3, 5)}`), 1, {
        talosVersion: flow.version,
      });
      const upgrade = await managedAction(t, {
        nodeName: node,
        action: 'Upgrade',
        upgrade: { image: flow.image },
      });
      const upgraded = await waitForPhase(client, upgrade, ['Succeeded', 'Failed'], 120_000);
      assert.equal(upgraded.status?.phase, 'Succeeded', `${flow.version}: ${upgraded.status?.message ?? ''}`);
      const tag = flow.image.split(':')[1] ?? '';
      assert.equal((await readNode(node)).status?.nodeInfo?.osImage, `Talos (${tag})`);
      assert.deepEqual(await callsOn(node), flow.calls, flow.version);

      const reboot = await managedAction(t, { nodeName: node, action: 'Reboot' });
      const rebooted = await waitForPhase(client, reboot, ['Succeeded', 'Failed'], 120_000);
      assert.equal(rebooted.status?.phase, 'Succeeded', `${flow.version}: ${rebooted.status?.message ?? ''}`);
      assert.equal((await callsOn(node)).Reboot, (flow.calls.Reboot ?? 0) + 1, flow.version);
    }
  });

  /**
   * A machine configuration whose change needs a reboot: machine.env, read by services
   * when they start (Talos ≤ 1.13 refuses it live; 1.14 applies it, for the next boot).
   */
  async function installChangingConfig(t: TestContext): Promise<string> {
    const secret = uniqueName('machine-config');
    await client.request('/api/v1/namespaces/gatehouse-system/secrets', {
      method: 'POST',
      body: {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: secret },
        stringData: {
          'config.yaml':
            'version: v1alpha1\nmachine:\n  type: worker\n  env:\n    HTTPS_PROXY: http://proxy:3128\n',
        },
      },
    });
    deleteAfter(t, client, `/api/v1/namespaces/gatehouse-system/secrets/${secret}`);
    return secret;
  }

  it('applies a ConfigChange that reboots on Talos 1.14 NO_REBOOT, then reboots through a drain', async (t) => {
    const [node = ''] = await managedNodes(t, uniqueName('cfg14'), 1, { talosVersion: 'v1.14.0' });
    const secret = await installChangingConfig(t);
    const name = await managedAction(t, {
      nodeName: node,
      action: 'ConfigChange',
      configChange: { mode: 'Reboot', configSecretRef: { name: secret } },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(conditionOf(done, 'Drained')?.reason, 'Drained');
    assert.equal(done.status.execution?.call, 'MachineService.Reboot');
    assert.notEqual(done.status.bootIDAfter, done.status.bootIDBefore);
    // REBOOT is never asked of 1.14 (it would be UNIMPLEMENTED): NO_REBOOT, then the reboot.
    assert.deepEqual(await callsOn(node), { ApplyConfiguration: 1, Reboot: 1 });
  });

  it('follows an Auto ConfigChange that Talos 1.13 turns into a reboot', async (t) => {
    const [node = ''] = await managedNodes(t, uniqueName('auto13'), 1, { talosVersion: 'v1.13.9' });
    const secret = await installChangingConfig(t);
    const name = await managedAction(t, {
      nodeName: node,
      action: 'ConfigChange',
      configChange: { mode: 'Auto', configSecretRef: { name: secret } },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.execution?.reboots, true);
    assert.equal(done.status.configDisruption?.class, 'Reboot', 'classified so, and drained');
    assert.equal(conditionOf(done, 'Drained')?.reason, 'Drained');
    assert.notEqual(done.status.bootIDAfter, done.status.bootIDBefore);
    assert.deepEqual(await callsOn(node), { MachineConfigGet: 1, ApplyConfiguration: 1 });
  });

  it('fails, naming the disagreement, when Talos answers UNIMPLEMENTED where the osImage promised the call', async (t) => {
    const [node = ''] = await managedNodes(t, uniqueName('unimpl'), 1, {
      talosVersion: 'v1.13.9',
      annotations: { [TALOS_FAULT_ANNOTATION]: 'unimplemented:ImagePull' },
    });
    const name = await managedAction(t, { nodeName: node, action: 'Upgrade', upgrade: { image: NEW_IMAGE } });
    const failed = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.match(
      failed.status.message ?? '',
      /Talos answered UNIMPLEMENTED to ImageService\.Pull: the node does not have what its osImage "Talos \(v1\.13\.9\)" promises .*nothing was changed/,
    );
    // No other flow was guessed: nothing after the refused pull.
    assert.deepEqual(await callsOn(node), { ImagePull: 1 });
  });

  it('hands etcd leadership over before it reboots the leader', async (t) => {
    const cluster = uniqueName('etcd');
    const [leader = '', ...others] = await managedNodes(t, cluster, 3, { etcdCluster: cluster });
    await client.request(`/api/v1/nodes/${leader}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [ETCD_LEADER_ANNOTATION]: 'true' } } },
    });
    const name = await managedAction(t, { nodeName: leader, action: 'Reboot' });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    // The etcd guard reads the members first (EtcdStatus); then the hand-over (is there a
    // member to hand to? then hand over), then the reboot.
    const { EtcdStatus: statusReads = 0, ...calls } = await callsOn(leader);
    assert.deepEqual(calls, { EtcdMemberList: 1, EtcdForfeitLeadership: 1, Reboot: 1 });
    assert.ok(statusReads >= 1, 'the etcd guard read the member before approving');
    assert.equal((await readNode(leader)).metadata.annotations?.[ETCD_LEADER_ANNOTATION], undefined);
    const leaders = await Promise.all(
      others.map(async (n) => (await readNode(n)).metadata.annotations?.[ETCD_LEADER_ANNOTATION]),
    );
    assert.deepEqual(leaders.filter(Boolean), ['true'], 'another member leads now');
    // On the record: who gave leadership up, and who took it (Talos names the latter).
    const newLeader = others.find((_, i) => leaders[i] === 'true');
    const handOff = (await events(client, name)).find((e) => e.reason === 'EtcdLeadershipHandOff');
    assert.equal(handOff?.message, `etcd leadership handed over by ${leader} to ${newLeader ?? '?'}`);
  });

  it('fails an action whose node never comes back, at the waitingForNode deadline', async (t) => {
    const [node] = await managedNodes(t, uniqueName('lost'), 1, {
      annotations: { [TALOS_FAULT_ANNOTATION]: 'never-return' },
    });
    const name = await managedAction(t, {
      nodeName: node ?? '',
      action: 'Reboot',
      deadlines: { waitingForNode: '10s' },
    });
    const failed = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.match(
      failed.status.message ?? '',
      /waiting for the node for longer than deadlines\.waitingForNode \(10s\): waiting for node .* to reboot/,
    );
    assert.equal(failed.status.execution?.callResult, 'Acknowledged');
    assert.deepEqual(await callsOn(node ?? ''), { Reboot: 1 });
    assert.ok(!isReady(await readNode(node ?? '')), 'the node is down');
  });

  it('does not make the Talos call again when it gets no answer, and waits for the node instead (and undoes nothing)', async (t) => {
    const silentGroup = uniqueName('silent');
    const [node] = await managedNodes(t, silentGroup, 1, {
      annotations: { [TALOS_FAULT_ANNOTATION]: 'hang:Reboot' },
    });
    const nodeName = node ?? '';
    const namespace = await freshNamespace(t, kc);
    await createNooutHook(namespace, silentGroup);
    // A controller of its own, whose Talos calls give up after 3s.
    const own = uniqueName('managed-silent');
    const impatient = await startGateController(own, {
      talos: { config: talos, drainRetryMs: 500, client: { timeoutMs: 3000 } },
    });
    t.after(() => impatient.stop());
    const name = await managedAction(
      t,
      { nodeName, action: 'Reboot', deadlines: { waitingForNode: '8s' } },
      own,
    );
    const failed = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.equal(failed.status.execution?.callResult, 'Unknown');
    const executed = conditionOf(failed, 'Executed');
    assert.equal(executed?.reason, 'OutcomeUnknown');
    assert.match(executed.message, /no answer from Talos: .*no answer within 3\.0s \(DEADLINE_EXCEEDED\)/);
    assert.match(
      failed.status.message ?? '',
      /deadlines\.waitingForNode \(8\.0s\): waiting for node .* to reboot/,
    );
    assert.deepEqual(await callsOn(nodeName), { Reboot: 1 }, 'asked once, never again');
    // The outcome is unknown: the node may be rebooting, so noout is not undone.
    assert.equal(failed.status.undo?.nodeDisrupted, true);
    assert.match(failed.status.undo.reason, /whether it reached the node is unknown/);
    assert.deepEqual(await undoJobsOf(namespace, failed.metadata.uid), []);
    assert.ok((await events(client, name)).some((e) => e.reason === 'NotUndone'));
  });

  it('makes the call a gone controller recorded but never sent, once the node shows it never came (issue 17)', async (t) => {
    // The state a controller SIGKILLed between writing callTime and sending the reboot
    // leaves behind, written here by hand (no controller of this instance runs yet); the
    // record is older than CALL_SETTLE_MS, so the next controller asks the node at once.
    const [node] = await managedNodes(t, uniqueName('unsent'), 1);
    const nodeName = node ?? '';
    const own = uniqueName('managed-unsent');
    const name = await managedAction(t, { nodeName, action: 'Reboot', drain: { enabled: false } }, own);
    const bootID = (await readNode(nodeName)).status?.nodeInfo?.bootID ?? '';
    const recorded = new Date(Date.now() - CALL_SETTLE_MS - 10_000).toISOString();
    await client.request(`${API}/nodeactions/${name}/status`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: {
        status: {
          phase: 'Executing',
          startTime: recorded,
          phaseTime: recorded,
          approvalTime: recorded,
          executionTime: recorded,
          bootIDBefore: bootID,
          execution: { drainTime: recorded, call: 'MachineService.Reboot', callTime: recorded },
          message: `calling Talos MachineService.Reboot on node ${nodeName}`,
        },
      },
    });
    const second = await managedController(own);
    t.after(() => second.stop());
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.execution?.callResult, 'Acknowledged', 'made, and answered, by this controller');
    assert.notEqual(done.status.execution.callTime, recorded, 'recorded anew before it was made');
    assert.notEqual(done.status.bootIDAfter, bootID);
    assert.deepEqual((await callsOn(nodeName)).Reboot, 1, 'the reboot reached the node once');
    const reasons = (await events(client, name)).map((e) => e.reason);
    assert.ok(reasons.includes('TalosCallNotReceived'), reasons.join(', '));
    assert.ok(!reasons.includes('TalosCallOutcomeUnknown'), reasons.join(', '));
  });

  it('does not make the Talos call again when the controller restarts while making it', async (t) => {
    // The reboot happens, but its reply never arrives: the controller is restarted with
    // the call recorded in the status and no answer.
    const [node] = await managedNodes(t, uniqueName('restart'), 1, {
      annotations: { [TALOS_FAULT_ANNOTATION]: 'lost-reply:Reboot', [BOOT_DELAY_ANNOTATION]: '6s' },
    });
    const nodeName = node ?? '';
    const own = uniqueName('managed-restart');
    let first: Controller | undefined = await managedController(own);
    t.after(() => first?.stop());
    const name = await managedAction(t, { nodeName, action: 'Reboot' }, own);
    const calling = await waitFor(
      'the reboot to be recorded and made',
      async (observe) => {
        const a = await getAction(client, name);
        const calls = await callsOn(nodeName);
        observe(`${a.status?.phase ?? ''}: ${a.status?.message ?? ''}; calls ${JSON.stringify(calls)}`);
        return a.status?.execution?.callTime && calls.Reboot === 1 ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    assert.equal(calling.status?.phase, 'Executing');
    await first.stop();
    first = undefined;
    assert.equal(
      (await getAction(client, name)).status?.execution?.callResult,
      undefined,
      'no answer was recorded',
    );

    const second = await managedController(own);
    t.after(() => second.stop());
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.execution?.callResult, 'Unknown');
    assert.equal(conditionOf(done, 'Executed')?.reason, 'OutcomeUnknown');
    assert.notEqual(done.status.bootIDAfter, done.status.bootIDBefore);
    assert.deepEqual(await callsOn(nodeName), { Reboot: 1 }, 'the reboot was asked for once');
    const reasons = (await events(client, name)).map((e) => e.reason);
    assert.ok(reasons.includes('TalosCallOutcomeUnknown'), reasons.join(', '));
    assert.ok(
      !(await readNode(nodeName)).spec?.unschedulable,
      "the second controller lifted the first one's cordon",
    );
  });
});
