// Maintenance against the sandbox: a node cordoned and drained through the gate, held out
// of service while someone works on it, and released — gated by checks, counted against
// budgets while held, held by a PodDisruptionBudget with its blockers shown, refused to
// an unauthorised release by the shipped admission policy, and carried across SIGKILLs
// of the controller with nothing lost and the release done once.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { HOOK_JOB_LABELS as LABELS, INSTANCE_LABEL, RELEASED_ANNOTATION } from '../../src/api/names.ts';
import { MAINTAINERS_CHECK } from '../../src/actions/maintainers.ts';
import type { Controller } from '../../src/controller.ts';
import { runCli } from '../support/cli.ts';
import { ControllerProcess } from '../support/controller-process.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  TEST_NODE_TAINT,
  createAction,
  createGroupHook,
  createTestNodes,
  createPolicy,
  deleteActionsAfter,
  events,
  getAction,
  hookTemplate,
  startGateController,
  testPlace,
  waitForPhase,
  whoami,
  type ActionObject,
  type Place,
} from '../support/gate.ts';
import {
  impersonate,
  refusal,
  rest,
  serverSideApply,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  userBinding,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('maintenance');
const RUN = instance;
// A requester who did not ask for the maintenance, and a holder of the verb bypass.
const neighbour = `neighbour-${RUN}@example.com`;
const bypasser = `bypasser-${RUN}@example.com`;
let controller: Controller | undefined;
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  await serverSideApply(kc, [
    userBinding(`${RUN}-requesters`, 'gatehouse:requester', [neighbour, bypasser]),
    userBinding(`${RUN}-bypass`, 'gatehouse:bypass', [bypasser]),
  ]);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await controller?.stop();
  for (const name of [`${RUN}-requesters`, `${RUN}-bypass`])
    await client
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
});

interface NodeObject {
  spec?: { unschedulable?: boolean };
  metadata: { annotations?: Record<string, string> };
}

const nodeOf = (name: string) => client.request<NodeObject>(`/api/v1/nodes/${name}`);

async function maintenance(
  t: TestContext,
  place: Place,
  spec: Record<string, unknown> = {},
): Promise<ActionObject> {
  const action = await createAction(client, instance, me, {
    nodeName: place.node,
    action: 'Maintenance',
    execution: 'Managed',
    ...spec,
  });
  deleteActionsAfter(t, client, action.metadata.name);
  return action;
}

function release(name: string, as?: string) {
  return rest(as ? impersonate(kc, as) : kc).request<ActionObject>(`${API}/nodeactions/${name}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { metadata: { annotations: { [RELEASED_ANNOTATION]: 'true' } } },
  });
}

/** Pods of an app on the test's node (which tolerate its taint), with a PDB allowing `minAvailable`. */
async function workload(place: Place, replicas: number, minAvailable: number): Promise<void> {
  await client.request(`/apis/apps/v1/namespaces/${place.namespace}/deployments`, {
    method: 'POST',
    body: {
      metadata: { name: 'osd' },
      spec: {
        replicas,
        selector: { matchLabels: { app: 'osd' } },
        template: {
          metadata: { labels: { app: 'osd' } },
          spec: {
            nodeSelector: { 'gatehouse.test/group': place.group },
            tolerations: [{ key: TEST_NODE_TAINT, operator: 'Exists', effect: 'NoSchedule' }],
            containers: [{ name: 'osd', image: 'registry.example/osd' }],
          },
        },
      },
    },
  });
  await client.request(`/apis/policy/v1/namespaces/${place.namespace}/poddisruptionbudgets`, {
    method: 'POST',
    body: { metadata: { name: 'osd' }, spec: { minAvailable, selector: { matchLabels: { app: 'osd' } } } },
  });
  await waitFor(`the PDB to count ${String(replicas)} healthy pods`, async () => {
    const pdb = await client.request<{ status?: { currentHealthy?: number } }>(
      `/apis/policy/v1/namespaces/${place.namespace}/poddisruptionbudgets/osd`,
    );
    return pdb.status?.currentHealthy === replicas ? true : undefined;
  });
}

async function podsOn(place: Place): Promise<number> {
  const pods = await client.request<{ items: unknown[] }>(`/api/v1/namespaces/${place.namespace}/pods`, {
    query: { fieldSelector: `spec.nodeName=${place.node}` },
  });
  return pods.items.length;
}

describe('Maintenance', () => {
  it('waits for an unhealthy check, then cordons, drains and holds the node until released', async (t) => {
    const place = await testPlace(t, client, 'mnt-check');
    const check = await switchableCheck(t, kc, place.group, false, { [INSTANCE_LABEL]: instance }, [
      'Maintenance',
    ]);
    await createGroupHook(client, place, 'PreMaintenanceJob', 'noout', { template: hookTemplate() });
    await workload(place, 2, 0);
    const action = await maintenance(t, place, { maintenance: { reason: 'replace DIMM B2' } });
    const name = action.metadata.name;
    const waiting = await waitForPhase(client, name, 'WaitingForHealth');
    await new Promise((r) => setTimeout(r, 3000));
    assert.equal((await getAction(client, name)).status?.phase, 'WaitingForHealth', waiting.status?.message);
    assert.equal((await nodeOf(place.node)).spec?.unschedulable, undefined, 'not cordoned while gated');

    await check.set(true);
    const held = await waitForPhase(client, name, 'Held');
    assert.match(held.status?.message ?? '', /held out of service for replace DIMM B2 until released/);
    assert.deepEqual(
      held.status?.hooks?.map((h) => [h.kind, h.name, h.phase]),
      [['PreMaintenanceJob', 'noout', 'Succeeded']],
    );
    assert.equal((await nodeOf(place.node)).spec?.unschedulable, true, 'cordoned');
    assert.equal(await podsOn(place), 0, 'drained');
    // Held until released: no deadline of its own ends it.
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await getAction(client, name)).status?.phase, 'Held');
  });

  it('counts against an ActionPolicy budget while held: a second action on the pool waits', async (t) => {
    const place = await testPlace(t, client, 'mnt-budget');
    const [second = ''] = await createTestNodes(t, client, uniqueName('mnt-budget-b'), 1, {
      'gatehouse.test/group': place.group,
    });
    await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': place.group } },
      maxConcurrent: 1,
    });
    const first = await maintenance(t, place);
    await waitForPhase(client, first.metadata.name, 'Held');
    const reboot = await createAction(client, instance, me, { nodeName: second, action: 'Reboot' });
    deleteActionsAfter(t, client, reboot.metadata.name);
    await waitForPhase(client, reboot.metadata.name, 'Pending');
    await new Promise((r) => setTimeout(r, 3000));
    const pending = await getAction(client, reboot.metadata.name);
    assert.equal(
      pending.status?.phase,
      'Pending',
      `the held maintenance keeps its slot: ${pending.status?.message ?? ''}`,
    );

    await release(first.metadata.name);
    await waitForPhase(client, first.metadata.name, 'Succeeded');
    await waitForPhase(client, reboot.metadata.name, ['WaitingForHealth', 'RunningPreHooks', 'Approved']);
  });

  it('holds a drain a PodDisruptionBudget refuses, naming it, and goes on once it allows', async (t) => {
    const place = await testPlace(t, client, 'mnt-pdb');
    await workload(place, 2, 2);
    const action = await maintenance(t, place);
    const name = action.metadata.name;
    const blocked = await waitFor(`${name} to show its drain blocked`, async () => {
      const a = await getAction(client, name);
      const c = a.status?.conditions?.find((x) => x.type === 'DrainBlocked');
      return c?.status === 'True' ? a : undefined;
    });
    assert.equal(blocked.status?.phase, 'Executing');
    assert.ok(
      blocked.status.drain?.blockers?.some((b) => b.podDisruptionBudget === 'osd'),
      JSON.stringify(blocked.status.drain),
    );
    assert.match(blocked.status.message ?? '', /waiting for evictions/);
    await client.request(`/apis/policy/v1/namespaces/${place.namespace}/poddisruptionbudgets/osd`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { minAvailable: 0 } },
    });
    const held = await waitForPhase(client, name, 'Held');
    assert.equal(held.status?.conditions?.find((c) => c.type === 'DrainBlocked')?.status, 'False');
  });

  it('released, runs the node’s NodeReadyJobs and lifts its own cordon (the CLI, both ways)', async (t) => {
    const place = await testPlace(t, client, 'mnt-release');
    await createGroupHook(client, place, 'NodeReadyJob', 'unset-noout', { template: hookTemplate() });
    const connection = [
      '--kubeconfig',
      process.env.GATEHOUSE_TEST_KUBECONFIG ?? '',
      '--controller-instance',
      instance,
    ];
    // `gatehouse maintenance` follows the node until it is held, and exits 0 there.
    const taken = await runCli([
      'maintenance',
      ...connection,
      '--for',
      'swap the NIC',
      '-o',
      'name',
      place.node,
    ]);
    assert.equal(taken.code, 0, taken.stderr);
    const name = taken.stdout.trim();
    deleteActionsAfter(t, client, name);
    assert.match(
      taken.stderr,
      new RegExp(`✓ ${place.node} Maintenance Held .*held out of service for swap the NIC`),
    );
    assert.equal((await getAction(client, name)).status?.phase, 'Held');

    const released = await runCli(['maintenance', 'release', ...connection, place.node]);
    assert.equal(released.code, 0, released.stderr);
    assert.equal(released.stdout, `${name} released\n`);
    assert.match(released.stderr, new RegExp(`✓ ${place.node} Maintenance Succeeded`));
    const done = await getAction(client, name);
    assert.deepEqual(
      done.status?.hooks?.map((h) => [h.kind, h.name, h.phase]),
      [['NodeReadyJob', 'unset-noout', 'Succeeded']],
    );
    assert.equal(done.status.conditions?.find((c) => c.type === 'Released')?.reason, 'Released');
    assert.deepEqual(done.status.phaseHistory?.map((e) => e.phase).slice(-3), [
      'Held',
      'RunningPostHooks',
      'Succeeded',
    ]);
    await waitFor('the cordon to be lifted', async () =>
      (await nodeOf(place.node)).spec?.unschedulable ? undefined : true,
    );
    const reasons = (await events(client, name)).map((e) => e.reason);
    assert.ok(reasons.includes('Held') && reasons.includes('Succeeded'), reasons.join(', '));
    // Nothing is held any more: a second release says so.
    const again = await runCli(['maintenance', 'release', ...connection, place.node]);
    assert.equal(again.code, 2);
    assert.match(again.stderr, new RegExp(`no action holds node ${place.node} for maintenance`));
  });

  it('waits on a node cordoned by someone else until a policy allows it, leaves their cordon, and ends by maxDuration with a Warning', async (t) => {
    const place = await testPlace(t, client, 'mnt-theirs');
    await client.request(`/api/v1/nodes/${place.node}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { unschedulable: true } },
    });
    const action = await maintenance(t, place, { maintenance: { maxDuration: '10s' } });
    const name = action.metadata.name;
    // Someone may be working on the node: not taken without a policy's word.
    const waiting = await waitFor(`${name} to wait on the foreign cordon`, async () => {
      const a = await getAction(client, name);
      const r = a.status?.checks?.find((c) => c.name === MAINTAINERS_CHECK);
      return r && !r.healthy ? r : undefined;
    });
    assert.match(waiting.message ?? '', new RegExp(`node ${place.node} is cordoned, not by gatehouse`));
    await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': place.group } },
      allowForeignCordon: true,
    });
    const held = await waitForPhase(client, name, 'Held', 60_000);
    assert.match(held.status?.message ?? '', /or until \S+ \(maintenance\.maxDuration\)/);
    const done = await waitForPhase(client, name, 'Succeeded', 120_000);
    assert.equal(done.status?.conditions?.find((c) => c.type === 'Released')?.reason, 'MaxDurationReached');
    const warning = await waitFor('the MaxDurationReached Event', async () =>
      (await events(client, name)).find((e) => e.reason === 'MaxDurationReached'),
    );
    assert.equal(warning.type, 'Warning');
    assert.match(
      warning.message,
      /held for maintenance\.maxDuration \(10s\) without a release; releasing it/,
    );
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await nodeOf(place.node)).spec?.unschedulable, true, 'their cordon stays');
  });

  it('refuses a release by a requester who neither asked nor may bypass, and one before the hold', async (t) => {
    const place = await testPlace(t, client, 'mnt-who');
    await createGroupHook(client, place, 'PreMaintenanceJob', 'slow', {
      template: hookTemplate('Succeeded', '4s'),
    });
    const action = await maintenance(t, place);
    const name = action.metadata.name;
    await waitForPhase(client, name, 'RunningPreHooks');
    const early = await refusal(release(name));
    assert.equal(early.code, 422);
    assert.match(early.message, /talos\.dev\/released may only be set while a Maintenance is Held/);

    await waitForPhase(client, name, 'Held');
    const refused = await refusal(release(name, neighbour));
    assert.equal(refused.code, 403);
    assert.match(
      refused.message,
      new RegExp(
        `only the requester of NodeAction ${name} \\(.+\\) or a holder of the verb bypass may set or change talos\\.dev/released, not ${neighbour.replace(/[.]/g, '\\.')}`,
      ),
    );
    assert.equal((await getAction(client, name)).status?.phase, 'Held');
    await release(name, bypasser);
    await waitForPhase(client, name, 'Succeeded');
  });
});

describe('Maintenance under SIGKILL', () => {
  it('keeps the hold across a kill, and a release interrupted by kills is done once', async (t) => {
    const killed = uniqueName('maintenance-kill');
    const logs = await mkdtemp(join(tmpdir(), 'gatehouse-maintenance-'));
    t.after(() => rm(logs, { recursive: true, force: true }));
    const gate = new ControllerProcess(killed, logs);
    t.after(() => gate.stop());
    const place = await testPlace(t, client, 'mnt-kill');
    const hook = await createGroupHook(client, place, 'NodeReadyJob', 'unset-noout', {
      template: hookTemplate('Succeeded', '3s'),
    });
    // Every Job the hook ever got, by name: a name seen with two UIDs was created twice.
    const jobs = new Map<string, Set<string>>();
    const stopWatch = new AbortController();
    t.after(() => stopWatch.abort());
    void client
      .watch(
        `/apis/batch/v1/namespaces/${place.namespace}/jobs`,
        { labelSelector: `${LABELS.hookUID}=${hook.uid}` },
        (event) => {
          const job = event.object as { metadata: { name: string; uid: string } };
          if (event.type !== 'DELETED')
            jobs.set(job.metadata.name, (jobs.get(job.metadata.name) ?? new Set()).add(job.metadata.uid));
        },
        stopWatch.signal,
      )
      .catch(() => undefined);

    gate.start();
    const action = await createAction(client, killed, me, {
      nodeName: place.node,
      action: 'Maintenance',
      execution: 'Managed',
    });
    const name = action.metadata.name;
    deleteActionsAfter(t, client, name);
    const held = await waitForPhase(client, name, 'Held');

    // Killed while held: the hold is in the API server, and a new process keeps it.
    gate.kill();
    gate.start();
    await new Promise((r) => setTimeout(r, 4000));
    const still = await getAction(client, name);
    assert.equal(still.status?.phase, 'Held');
    assert.equal(still.status.phaseTime, held.status?.phaseTime, 'the same hold, not a new one');
    assert.equal((await nodeOf(place.node)).spec?.unschedulable, true);

    // Killed while releasing, again and again: the NodeReadyJob runs once, and it ends.
    await release(name);
    for (const delay of [300, 1500, 2500]) {
      await new Promise((r) => setTimeout(r, delay));
      gate.kill();
      gate.start();
    }
    const done = await waitForPhase(client, name, 'Succeeded', 120_000);
    gate.stop();
    assert.deepEqual(
      [...jobs.values()].map((uids) => uids.size),
      [1],
      `one NodeReadyJob Job, created once: ${JSON.stringify([...jobs].map(([n, u]) => [n, [...u]]))}`,
    );
    assert.deepEqual(
      done.status?.phaseHistory?.map((e) => e.phase).filter((p) => p === 'Held' || p === 'RunningPostHooks'),
      ['Held', 'RunningPostHooks'],
    );
    await waitFor('the cordon to be lifted', async () =>
      (await nodeOf(place.node)).spec?.unschedulable ? undefined : true,
    );
  });
});
