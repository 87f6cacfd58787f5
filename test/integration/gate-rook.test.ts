// The Rook/Ceph scenario end to end against the sandbox (real API server, real Job
// controller, kwok nodes): a ClusterHealthCheck on a CephCluster custom resource, a
// PreRebootJob (noout) and a NodeReadyJob (unset), an External Reboot. The test plays
// the requester (waits for Approved, marks executed) and the node (a new boot ID).
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  createGroupHook,
  API,
  createAction,
  createTestNodes,
  deleteActionsAfter,
  deleteAfter,
  events,
  getAction,
  hookTemplate,
  markExecuted,
  rebootNode,
  startGateController,
  waitForPhase,
  whoami,
  type ActionObject,
  installCephClusterKind,
  setCephHealth,
} from '../support/gate.ts';
import { freshNamespace, rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const CEPH_GROUP = 'ceph.test.gatehouse.dev';
const instance = uniqueName('gate-rook');
let controller: Controller;
let me = '';

interface Scenario {
  namespace: string;
  node: string;
  group: string;
  check: string;
}

/** One node of its own, a Ceph cluster in a namespace of its own, and the health check on it. */
async function scenario(t: TestContext, health = 'HEALTH_OK'): Promise<Scenario> {
  const group = uniqueName('rook');
  const [node] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });
  const namespace = await freshNamespace(t, kc);
  await cephHealth(namespace, health);
  const check = uniqueName('ceph-health-ok');
  await client.request(`${API}/clusterhealthchecks`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ClusterHealthCheck',
      // This file's controller alone runs it.
      metadata: { name: check, labels: { [INSTANCE_LABEL]: instance } },
      spec: {
        interval: '2s',
        timeout: '2s',
        failureThreshold: 1,
        actions: ['Reboot', 'Upgrade'],
        nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
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
  return { namespace, node: node as string, group, check };
}

const cephHealth = (namespace: string, health: string) =>
  setCephHealth(client, CEPH_GROUP, namespace, health, 'gate-rook-test');

async function createHook(
  s: Scenario,
  kind: string,
  name: string,
  spec: Record<string, unknown>,
): Promise<void> {
  await createGroupHook(client, s, kind, name, spec);
}

function cleanupAction(t: TestContext, name: string): void {
  deleteActionsAfter(t, client, name);
}

function ms(time: string | undefined): number {
  assert.ok(time, 'a timestamp is missing');
  return Date.parse(time);
}

before(async () => {
  await installGatehouseAPI(kc);
  await installCephClusterKind(CEPH_GROUP);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await stopAll(controller);
});

describe('the Rook scenario', () => {
  it('checks Ceph, sets noout, approves, follows the reboot, unsets noout: in that order', async (t) => {
    const s = await scenario(t);
    await createHook(s, 'PreRebootJob', 'set-noout', { template: hookTemplate('Succeeded', '2s') });
    await createHook(s, 'NodeReadyJob', 'unset-noout', { template: hookTemplate('Succeeded', '1s') });
    const created = await createAction(client, instance, me, { nodeName: s.node, action: 'Reboot' });
    const name = created.metadata.name;
    cleanupAction(t, name);

    const approved = await waitForPhase(client, name, ['Approved', 'Failed', 'Denied']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    const status = approved.status ?? {};
    assert.deepEqual(
      status.checks?.map((c) => [c.name, c.healthy]),
      [[s.check, true]],
    );
    const noout = status.hooks?.find((h) => h.name === 'set-noout');
    assert.equal(noout?.phase, 'Succeeded');
    assert.equal(noout.kind, 'PreRebootJob');
    const bootBefore = status.bootIDBefore;
    assert.ok(bootBefore);

    // The Job: the hook's namespace, owned by the action, labelled, with the environment and placement.
    const job = await client.request<{
      metadata: {
        labels: Record<string, string>;
        ownerReferences: { kind: string; name: string; uid: string }[];
      };
      spec: {
        activeDeadlineSeconds: number;
        template: {
          spec: {
            containers: { env: { name: string; value: string }[] }[];
            affinity: {
              nodeAffinity: {
                requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: unknown[] };
              };
            };
          };
        };
      };
    }>(`/apis/batch/v1/namespaces/${s.namespace}/jobs/${noout.jobName ?? ''}`);
    assert.deepEqual(
      job.metadata.ownerReferences.map((o) => [o.kind, o.name, o.uid]),
      [['NodeAction', name, created.metadata.uid]],
    );
    assert.equal(job.metadata.labels['talos.dev/action-uid'], created.metadata.uid);
    assert.equal(job.metadata.labels['talos.dev/hook-kind'], 'PreRebootJob');
    assert.equal(job.metadata.labels['talos.dev/hook'], 'set-noout');
    assert.equal(job.spec.activeDeadlineSeconds, 900);
    const env = Object.fromEntries(
      job.spec.template.spec.containers[0]?.env.map((e) => [e.name, e.value]) ?? [],
    );
    assert.deepEqual(env, {
      GATEHOUSE_NODE: s.node,
      GATEHOUSE_ACTION: 'Reboot',
      GATEHOUSE_ACTION_NAME: name,
      GATEHOUSE_BOOT_ID: bootBefore,
    });
    assert.deepEqual(
      job.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        .nodeSelectorTerms,
      [{ matchFields: [{ key: 'metadata.name', operator: 'NotIn', values: [s.node] }] }],
    );

    // The requester acts: marks it executed, and the node reboots.
    await markExecuted(client, name);
    const bootAfter = await rebootNode(client, s.node);
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed']);
    const end = done.status ?? {};
    assert.equal(end.phase, 'Succeeded', end.message);
    assert.equal(end.bootIDBefore, bootBefore);
    assert.equal(end.bootIDAfter, bootAfter);
    const unset = end.hooks?.find((h) => h.name === 'unset-noout');
    assert.equal(unset?.phase, 'Succeeded');
    assert.equal(unset.kind, 'NodeReadyJob');

    // check → hook → approval → new boot → ready hook, from the recorded times.
    const checked = ms(end.checks?.[0]?.probeTime);
    const hookStarted = ms(noout.startTime);
    const hookDone = ms(end.hooks?.find((h) => h.name === 'set-noout')?.completionTime);
    const approvedAt = ms(end.approvalTime);
    const returned = ms(end.conditions?.find((c) => c.type === 'NodeReturned')?.lastTransitionTime);
    const readyHookStarted = ms(unset.startTime);
    const readyHookDone = ms(unset.completionTime);
    assert.ok(checked <= hookStarted, `check at ${checked} before the hook started at ${hookStarted}`);
    // Job completion times have whole seconds; the hook ran for 2s.
    assert.ok(hookStarted < hookDone + 1000 && hookDone <= approvedAt, 'the hook finished before approval');
    assert.ok(
      approvedAt <= ms(end.executionTime) && ms(end.executionTime) <= returned,
      'approved before the new boot',
    );
    assert.ok(returned <= readyHookStarted, 'the node was back before the ready hook');
    assert.ok(readyHookStarted < readyHookDone + 1000 && readyHookDone <= ms(end.completionTime) + 1000);

    // An Event for every transition, in order.
    const reasons = await waitFor('the Succeeded event', async () => {
      const list = await events(client, name);
      return list.some((e) => e.reason === 'Succeeded') ? list.map((e) => e.reason) : undefined;
    });
    for (const reason of [
      'Requested',
      'Pending',
      'WaitingForHealth',
      'RunningPreHooks',
      'Approved',
      'WaitingForNode',
      'RunningPostHooks',
      'Succeeded',
    ]) {
      assert.ok(reasons.includes(reason), `no ${reason} event among ${reasons.join(', ')}`);
    }

    // The hooks' own status records the runs.
    const hookStatus = await waitFor('the PreRebootJob status to count the run', async () => {
      const h = await client.request<{
        status?: { succeeded?: number; lastRuns?: { action?: string; phase: string }[] };
      }>(`${API}/namespaces/${s.namespace}/prerebootjobs/set-noout`);
      return h.status?.succeeded === 1 ? h.status : undefined;
    });
    assert.equal(hookStatus.lastRuns?.[0]?.action, name);
    assert.equal(hookStatus.lastRuns[0].phase, 'Succeeded');

    // Finished: the finalizer is gone, so deleting it is immediate.
    await waitFor('the finalizer to be removed', async () => {
      const final = await getAction(client, name);
      return (final.metadata.finalizers ?? []).includes('talos.dev/node-action') ? undefined : true;
    });
  });

  it('a bypass skips an unhealthy check and a failing hook, on the record: status and an Event naming who and why', async (t) => {
    const s = await scenario(t, 'HEALTH_ERR');
    await createHook(s, 'PreRebootJob', 'set-noout', { template: hookTemplate('Failed', '1s') });
    const reason = 'the Ceph cluster on this node is being decommissioned';
    const created = await createAction(client, instance, me, {
      nodeName: s.node,
      bypass: { healthChecks: true, hooks: true, reason },
    });
    cleanupAction(t, created.metadata.name);
    const approved = await waitForPhase(client, created.metadata.name, ['Approved', 'Failed']);
    const status = approved.status ?? {};
    assert.equal(status.phase, 'Approved', status.message);
    assert.deepEqual(
      status.checks?.map((c) => [c.name, c.healthy, c.bypassed]),
      [[s.check, false, true]],
      'the check is recorded as it stood, bypassed',
    );
    assert.deepEqual(
      status.hooks?.map((h) => [h.name, h.phase]),
      [['set-noout', 'Bypassed']],
    );
    const bypassed = status.conditions?.find((c) => c.type === 'Bypassed');
    assert.equal(bypassed?.status, 'True');
    assert.ok(bypassed.message.includes(me) && bypassed.message.includes(reason), bypassed.message);
    const jobs = await client.request<{ items: unknown[] }>(`/apis/batch/v1/namespaces/${s.namespace}/jobs`);
    assert.equal(jobs.items.length, 0, 'no hook ran');
    const event = await waitFor('the Bypassed event', async () =>
      (await events(client, created.metadata.name)).find((e) => e.reason === 'Bypassed'),
    );
    assert.equal(event.type, 'Warning');
    assert.ok(event.message.includes(me) && event.message.includes(reason), event.message);
  });

  it('holds the action at the health gate while Ceph is unhealthy, and goes on once it is healthy', async (t) => {
    const s = await scenario(t, 'HEALTH_WARN');
    await createHook(s, 'PreRebootJob', 'set-noout', { template: hookTemplate('Succeeded', '1s') });
    const { metadata } = await createAction(client, instance, me, { nodeName: s.node });
    cleanupAction(t, metadata.name);
    const held = await waitFor('the action to be held with the check unhealthy', async (observe) => {
      const a = await getAction(client, metadata.name);
      observe(JSON.stringify(a.status ?? {}));
      return a.status?.phase === 'WaitingForHealth' && a.status.checks?.[0]?.healthy === false
        ? a
        : undefined;
    });
    assert.match(held.status?.message ?? '', new RegExp(`waiting for health checks: ${s.check}`));
    assert.equal(held.status?.conditions?.find((c) => c.type === 'HealthChecksPassed')?.status, 'False');
    // It stays held: fresh evaluations keep finding HEALTH_WARN, no hook runs.
    const samples: ActionObject[] = [];
    for (let i = 0; i < 6; i++) {
      samples.push(await getAction(client, metadata.name));
      await new Promise((r) => setTimeout(r, 1000));
    }
    assert.ok(
      samples.every((a) => a.status?.phase === 'WaitingForHealth'),
      samples.map((a) => a.status?.phase).join(),
    );
    assert.ok(samples.every((a) => (a.status?.hooks ?? []).length === 0));
    const jobs = await client.request<{ items: unknown[] }>(`/apis/batch/v1/namespaces/${s.namespace}/jobs`);
    assert.equal(jobs.items.length, 0);

    const healthyAt = Date.now();
    await cephHealth(s.namespace, 'HEALTH_OK');
    const approved = await waitForPhase(client, metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    assert.ok(
      ms(approved.status.checks?.[0]?.probeTime) >= healthyAt - 1000,
      'judged on a probe made after Ceph healed',
    );
    assert.equal(approved.status.hooks?.[0]?.phase, 'Succeeded');
  });
});
