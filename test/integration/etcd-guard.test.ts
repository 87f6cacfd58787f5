// The etcd guard (builtin:etcd) end to end: a controller with the sandbox's talosconfig
// reads the simulated etcd of control-plane nodes of this file's own (one simulated etcd
// cluster per test, ETCD_CLUSTER_LABEL) through the Talos API, and holds, refuses or
// lets through what would take a member down; faults come from the Node annotation
// sandbox.gatehouse.dev/etcd-fault, as an operator's etcd would fail.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { Controller } from '../../src/controller.ts';
import { BOOT_DELAY_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { ETCD_FAULT_ANNOTATION } from '../../sandbox/talos-etcd.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import { TalosClient } from '../../src/talos/client.ts';
import { loadTalosConfig, type TalosContext } from '../../src/talos/config.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { createTalosNodes, GROUP_LABEL, isReady, type NodeView } from '../support/talos-nodes.ts';
import {
  API,
  createAction,
  createPolicy,
  deleteActionsAfter,
  events,
  getAction,
  startGateController,
  waitForPhase,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { NODE, MAIN, cliEnv } from '../support/cli.ts';
import { rest, testKubeConfig, testSandboxState, uniqueName, waitFor } from '../support/kube.ts';
import { spawn } from 'node:child_process';
import { stopAll } from '../support/teardown.ts';
import { errorMessage } from '../../src/wait.ts';
import { TalosApiError } from '../../src/talos/errors.ts';
import { bindUser, startGateStack, talosClient as gateClient } from '../support/talos-gate.ts';

const kc = testKubeConfig();
const client = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(
    `the sandbox in ${sandbox.dir} runs no Talos simulator (started with --no-talos?): restart it`,
  );
const talos: TalosContext = await loadTalosConfig({ path: sandbox.talosconfig });
const TAINT = 'gatehouse.test/etcd-guard';
const instance = uniqueName('etcd-guard');
const ETCD = 'builtin:etcd';
let controller: Controller;
let me = '';

const readNode = (name: string) => client.request<NodeView>(`/api/v1/nodes/${name}`);
const etcdCheck = (a: ActionObject) => a.status?.checks?.find((c) => c.name === ETCD);
const addressOf = async (node: string) =>
  (await readNode(node)).status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? '';

/** `count` control-plane nodes of a simulated etcd cluster of the test's own (addresses 10.5.150–199.x). */
function controlPlanes(
  t: TestContext,
  count: number,
  annotations: Record<string, string> = {},
): Promise<string[]> {
  const group = uniqueName('cp');
  return createTalosNodes(t, client, {
    group,
    count,
    taint: TAINT,
    kubernetesVersion: sandbox.kubernetesVersion,
    talosVersion: 'v1.13.0',
    addressBlock: 150,
    annotations,
    etcdCluster: group,
  });
}

const setFault = (node: string, fault: string | null) =>
  client.request(`/api/v1/nodes/${node}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { metadata: { annotations: { [ETCD_FAULT_ANNOTATION]: fault } } },
  });

async function action(t: TestContext, spec: Parameters<typeof createAction>[3], inst = instance) {
  const created = await createAction(client, inst, me, { execution: 'Managed', ...spec });
  deleteActionsAfter(t, client, created.metadata.name);
  return created.metadata.name;
}

/** The action once the etcd guard holds it with a message matching `pattern`. */
function heldByEtcd(name: string, pattern: RegExp, timeoutMs = 60_000): Promise<ActionObject> {
  return waitFor(
    `action ${name} to be held by ${ETCD} (${String(pattern)})`,
    async () => {
      const a = await getAction(client, name);
      const c = etcdCheck(a);
      return c && !c.healthy && pattern.test(c.message ?? '') ? a : undefined;
    },
    { timeoutMs, intervalMs: 250 },
  );
}

async function health(path: string): Promise<{
  status: number;
  body: { message: string; checks: { name: string; state: string; message: string }[] };
}> {
  const response = await fetch(`${controller.url}${path}`);
  return { status: response.status, body: (await response.json()) as never };
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
});
after(async () => {
  await stopAll(controller);
});

describe('etcd guard', () => {
  it('holds a control-plane upgrade while another member is unhealthy, naming it, and approves it once it recovers', async (t) => {
    const [first = '', second = ''] = await controlPlanes(t, 3);
    await setFault(second, 'unhealthy');
    const name = await action(t, {
      nodeName: first,
      action: 'Upgrade',
      upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
    });
    const held = await heldByEtcd(name, new RegExp(`etcd member ${second} is unhealthy`));
    assert.equal(held.status?.phase, 'WaitingForHealth');
    assert.match(
      held.status.message ?? '',
      new RegExp(`waiting for health checks: ${ETCD} \\(etcd member ${second}`),
    );
    // /v1/health asks the same question of a prospective upgrade of that node.
    const answer = await health(`/v1/health?action=Upgrade&node=${first}`);
    assert.equal(answer.status, 503);
    const shown = answer.body.checks.find((c) => c.name === ETCD);
    assert.equal(shown?.state, 'Unhealthy');
    assert.match(shown.message, new RegExp(`etcd member ${second} is unhealthy`));
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await getAction(client, name)).status?.phase, 'WaitingForHealth', 'still held');
    await setFault(second, null);
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed', 'Denied'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(etcdCheck(done)?.healthy, true);
    assert.match(etcdCheck(done)?.message ?? '', /etcd can spare/);
  });

  it('never takes a second control-plane member down, even when a policy allows more', async (t) => {
    const nodes = await controlPlanes(t, 3, { [BOOT_DELAY_ANNOTATION]: '40s' });
    const [down = '', next = ''] = nodes;
    const group = nodes[0]?.replace(/-1$/, '') ?? '';
    await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
      maxConcurrent: 3,
    });
    // The first member goes down outside gatehouse (talosctl reboot): nothing in the
    // cluster's actions says so, only etcd does.
    const talosClient = new TalosClient(talos);
    t.after(() => talosClient.close());
    await talosClient.reboot({ node: await addressOf(down), mode: 'default' });
    // The action comes once the member is down, as an operator's would: asked while the
    // reboot is still being taken up, it could be judged (rightly) on a healthy etcd.
    await waitFor(`${down} to go down`, async () => (isReady(await readNode(down)) ? undefined : true), {
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    const name = await action(t, { nodeName: next, action: 'Reboot' });
    const held = await heldByEtcd(name, new RegExp(`etcd member ${down} (is unreachable|lags)`));
    assert.equal(held.status?.phase, 'WaitingForHealth');
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed', 'Denied'], 240_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.ok(isReady(await readNode(down)), `${down} was back before ${next} went`);
  });

  it('judges a graceful Reset as its member leaving etcd for good: two members become one, the last one is refused', async (t) => {
    // Two members cannot spare one for a reboot (quorum 2), but can let one leave for good.
    const [first = '', second = ''] = await controlPlanes(t, 2);
    const dead = await action(t, { nodeName: first, action: 'Reset', reset: { graceful: false } });
    const refused = await waitForPhase(client, dead, ['Denied', 'Succeeded', 'Failed'], 60_000);
    assert.equal(refused.status?.phase, 'Denied', refused.status?.message);
    assert.match(refused.status.message ?? '', /a reset that is not graceful leaves a dead member/);
    assert.match(refused.status.message ?? '', new RegExp(`would lose quorum without ${first} \\(for good`));

    const leaves = await action(t, { nodeName: first, action: 'Reset', reset: { wipeMode: 'SystemDisk' } });
    const done = await waitForPhase(client, leaves, ['Denied', 'Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.match(
      etcdCheck(done)?.message ?? '',
      new RegExp(`can let ${first} leave for good: 2 → 1 voting members`),
    );
    const talosClient = new TalosClient(talos);
    t.after(() => talosClient.close());
    const members = await talosClient.etcdMemberList({ node: await addressOf(second) });
    assert.deepEqual(
      members.map((m) => m.hostname),
      [second],
      'the member left etcd in the reset',
    );

    const last = await action(t, { nodeName: second, action: 'Reset' });
    const denied = await waitForPhase(client, last, ['Denied', 'Succeeded', 'Failed'], 60_000);
    assert.equal(denied.status?.phase, 'Denied', denied.status?.message);
    assert.match(denied.status.message ?? '', /only voting member: it cannot leave etcd without ending it/);
  });

  it('an EtcdLeave (Managed): two members become one through the Talos API, the last one is refused', async (t) => {
    const [first = '', second = ''] = await controlPlanes(t, 2);
    const leaves = await action(t, { nodeName: first, action: 'EtcdLeave' });
    const done = await waitForPhase(client, leaves, ['Denied', 'Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.match(
      etcdCheck(done)?.message ?? '',
      new RegExp(`can let ${first} leave for good: 2 → 1 voting members`),
    );
    assert.equal(talosCallCounts((await readNode(first)).metadata.annotations).EtcdLeaveCluster, 1);
    assert.ok(isReady(await readNode(first)), 'the node keeps running: only its member left');
    const after = await client.request<{ spec?: { unschedulable?: boolean } }>(`/api/v1/nodes/${first}`);
    assert.equal(after.spec?.unschedulable ?? false, false, 'not cordoned: no workload stops');
    const talosClient = new TalosClient(talos);
    t.after(() => talosClient.close());
    const members = await talosClient.etcdMemberList({ node: await addressOf(second) });
    assert.deepEqual(
      members.map((m) => m.hostname),
      [second],
    );

    const last = await action(t, { nodeName: second, action: 'EtcdLeave' });
    const denied = await waitForPhase(client, last, ['Denied', 'Succeeded', 'Failed'], 60_000);
    assert.equal(denied.status?.phase, 'Denied', denied.status?.message);
    assert.match(denied.status.message ?? '', /EtcdLeave of control-plane node .* \(it leaves etcd\)/);
    assert.equal(talosCallCounts((await readNode(second)).metadata.annotations).EtcdLeaveCluster ?? 0, 0);
  });

  it('talosctl etcd leave and remove-member through the Talos API gate are EtcdLeave actions of the member’s node, held while etcd cannot spare it, forwarded once', async (t) => {
    const stack = await startGateStack({ instance, holdMs: 1500 });
    t.after(() => stack.stop());
    const [a = '', b = '', c = ''] = await controlPlanes(t, 3);
    await bindUser(t, 'gatehouse:requester', 'jane');
    const jane = gateClient(stack.contextFor('jane', ['os:admin']));
    t.after(() => jane.close());
    const actionsOn = async (node: string) =>
      (
        await client.request<{ items: ActionObject[] }>(`${API}/nodeactions`, {
          query: { fieldSelector: `spec.nodeName=${node}` },
        })
      ).items;
    const held = async (call: () => Promise<unknown>) => {
      const e = await call().then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(e instanceof TalosApiError && e.codeName === 'FAILED_PRECONDITION', String(e));
      return e;
    };

    // etcd leave on a, while c is unhealthy: b and c would be no healthy quorum.
    const [ipA, ipC] = [await addressOf(a), await addressOf(c)];
    await setFault(c, 'unhealthy');
    const first = await held(() => jane.etcdLeaveCluster({ node: ipA }));
    const [leave] = await actionsOn(a);
    assert.ok(leave, 'the call made an action');
    deleteActionsAfter(t, client, leave.metadata.name);
    assert.equal(leave.spec.action, 'EtcdLeave');
    assert.equal(leave.spec.execution, 'External');
    assert.equal(leave.spec.requestedBy, 'jane');
    assert.match(first.talosMessage, new RegExp(leave.metadata.name));
    await heldByEtcd(leave.metadata.name, new RegExp(`etcd member ${c} is unhealthy`));
    assert.equal(talosCallCounts((await readNode(a)).metadata.annotations).EtcdLeaveCluster ?? 0, 0);

    await setFault(c, null);
    await waitForPhase(client, leave.metadata.name, ['Approved'], 60_000);
    await jane.etcdLeaveCluster({ node: ipA });
    const left = await waitForPhase(client, leave.metadata.name, ['Succeeded', 'Failed'], 60_000);
    assert.equal(left.status?.phase, 'Succeeded', left.status?.message);
    assert.equal(left.metadata.annotations?.['talos.dev/executed'], 'true');
    assert.equal(
      talosCallCounts((await readNode(a)).metadata.annotations).EtcdLeaveCluster,
      1,
      'forwarded once',
    );

    // remove-member of b's member, sent to c: an EtcdLeave of b (two members become one).
    const direct = new TalosClient(talos);
    t.after(() => direct.close());
    const members = await direct.etcdMemberList({ node: ipC });
    assert.deepEqual(members.map((m) => m.hostname).sort(), [b, c].sort());
    const id = members.find((m) => m.hostname === b)?.id ?? 0n;
    // Nothing holds it (two members can spare one for good, no check selects b): it
    // passes within the gate's hold, or once Approved when the machine is slow.
    const first2 = await jane.etcdRemoveMemberById(id, { node: ipC }).then(
      () => undefined,
      (e: unknown) => e,
    );
    const [remove] = await actionsOn(b);
    assert.ok(remove, 'the removal made an action for the member’s node');
    deleteActionsAfter(t, client, remove.metadata.name);
    assert.equal(remove.spec.action, 'EtcdLeave');
    assert.equal(remove.spec.requestedBy, 'jane');
    assert.equal((await actionsOn(c)).length, 0, 'nothing asked of the node the call was sent to');
    if (first2 !== undefined) {
      assert.ok(
        first2 instanceof TalosApiError && first2.codeName === 'FAILED_PRECONDITION',
        errorMessage(first2),
      );
      await waitForPhase(client, remove.metadata.name, ['Approved'], 60_000);
      await jane.etcdRemoveMemberById(id, { node: ipC });
    }
    const removed = await waitForPhase(client, remove.metadata.name, ['Succeeded', 'Failed'], 60_000);
    assert.equal(removed.status?.phase, 'Succeeded', removed.status?.message);
    assert.equal(removed.metadata.annotations?.['talos.dev/executed'], 'true');
    assert.deepEqual(
      (await direct.etcdMemberList({ node: ipC })).map((m) => m.hostname),
      [c],
    );
    assert.equal(talosCallCounts((await readNode(c)).metadata.annotations).EtcdRemoveMemberByID, 1);

    // An ID no member has passes: Talos answers NotFound and nothing changes.
    const unknown = await jane.etcdRemoveMemberById(1234n, { node: ipC }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(unknown instanceof TalosApiError && unknown.codeName === 'NOT_FOUND', String(unknown));
  });

  it('reboots and upgrades a cluster of one control-plane node, on the record, handing leadership to nobody (issue 30)', async (t) => {
    const [alone = ''] = await controlPlanes(t, 1);
    // Without a bypass the guard holds it, and says what would let it through.
    const held = await action(t, { nodeName: alone, action: 'Reboot' });
    await heldByEtcd(
      held,
      /single member, .*: etcd is unavailable while it is down.*bypass\.healthChecks with a reason/,
    );
    await client.request(`${API}/nodeactions/${held}`, { method: 'DELETE' });
    const bypass = { healthChecks: true, reason: 'a one-node edge cluster: etcd is down while it reboots' };
    const reboot = await action(t, { nodeName: alone, action: 'Reboot', bypass });
    const rebooted = await waitForPhase(client, reboot, ['Succeeded', 'Failed', 'Denied'], 120_000);
    assert.equal(rebooted.status?.phase, 'Succeeded', rebooted.status?.message);
    const upgrade = await action(t, {
      nodeName: alone,
      action: 'Upgrade',
      upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
      bypass,
    });
    const upgraded = await waitForPhase(client, upgrade, ['Succeeded', 'Failed', 'Denied'], 120_000);
    assert.equal(upgraded.status?.phase, 'Succeeded', upgraded.status?.message);
    assert.equal((await readNode(alone)).status?.nodeInfo?.osImage, 'Talos (v1.13.1)');
    // Nobody to hand leadership to: asked who else votes, and never asked to forfeit it
    // (Talos refuses that outright in a cluster of one member).
    const calls = talosCallCounts((await readNode(alone)).metadata.annotations);
    assert.equal(calls.EtcdForfeitLeadership, undefined, JSON.stringify(calls));
    assert.ok((calls.EtcdMemberList ?? 0) >= 2, JSON.stringify(calls));
    assert.equal(calls.Reboot, 2);
  });

  it('lets bypass.healthChecks through an unhealthy etcd, on the record', async (t) => {
    const [first = '', second = ''] = await controlPlanes(t, 3);
    await setFault(second, 'nospace');
    const name = await action(t, {
      nodeName: first,
      action: 'Reboot',
      bypass: { healthChecks: true, reason: 'replacing the member with the NOSPACE alarm' },
    });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed', 'Denied'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    const recorded = etcdCheck(done);
    assert.equal(recorded?.bypassed, true);
    assert.match(recorded.message ?? '', /bypassed by .*: replacing the member with the NOSPACE alarm/);
    const bypassEvents = (await events(client, name)).filter((e) => /bypass/i.test(e.message));
    assert.ok(bypassEvents.length > 0, 'the bypass is an Event too');
  });

  it('says that etcd was not checked without a talosconfig: Managed holds, External goes on', async (t) => {
    const bare = uniqueName('etcd-bare');
    const without = await startGateController(bare);
    t.after(() => without.stop());
    const [first = ''] = await controlPlanes(t, 3);
    const managed = await action(t, { nodeName: first, action: 'Reboot' }, bare);
    const held = await heldByEtcd(managed, /etcd was not checked: this controller has no talosconfig/);
    assert.equal(etcdCheck(held)?.notChecked, true);
    assert.match(
      etcdCheck(held)?.message ?? '',
      /a Managed Reboot of control-plane node .* waits until it can/,
    );
    await client.request(`${API}/nodeactions/${managed}`, { method: 'DELETE' });
    const external = await action(t, { nodeName: first, action: 'Reboot', execution: 'External' }, bare);
    const approved = await waitForPhase(client, external, ['Approved', 'Failed', 'Denied'], 60_000);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    assert.equal(etcdCheck(approved)?.notChecked, true);
    assert.match(
      etcdCheck(approved)?.message ?? '',
      /not checked.*must check etcd first \(talosctl etcd status\)/,
    );
  });

  it('stops a rolling upgrade of three control-plane nodes before the next one while a member is unhealthy, and resumes', async (t) => {
    const nodes = await controlPlanes(t, 3);
    const [first = '', second = '', third = ''] = nodes;
    const cli = spawn(
      NODE,
      [
        MAIN,
        'upgrade',
        '--kubeconfig',
        sandbox.kubeconfig,
        '--controller-instance',
        instance,
        '--image',
        'ghcr.io/siderolabs/installer:v1.13.1',
        ...nodes,
      ],
      { env: cliEnv() },
    );
    let output = '';
    cli.stdout.on('data', (d: Buffer) => (output += d.toString()));
    cli.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number>((resolve) => cli.on('exit', (code) => resolve(code ?? -1)));
    t.after(() => cli.kill());
    // The CLI's actions, whichever it got to create, go with the test.
    t.after(async () => {
      const list = await client.request<{ items: ActionObject[] }>(`${API}/nodeactions`);
      const mine = list.items.filter((a) => nodes.includes(a.spec.nodeName));
      await Promise.all(
        mine.map((a) =>
          client
            .request(`${API}/nodeactions/${a.metadata.name}`, { method: 'DELETE' })
            .catch(() => undefined),
        ),
      );
    });
    const actionOf = async (node: string) => {
      const list = await client.request<{ items: ActionObject[] }>(`${API}/nodeactions`);
      return list.items.find((a) => a.spec.nodeName === node);
    };
    // The fault comes once the first node is past its own gate and its Talos calls (leadership
    // handed over, the upgrade asked for), and before the CLI can ask for the second: set at
    // the first's success instead, the second's gate could pass in between (it did, in CI).
    const pastItsCalls = new Set(['WaitingForNode', 'RunningPostHooks', 'Succeeded']);
    await waitFor(
      `the upgrade of ${first} to be past its Talos calls`,
      async () => (pastItsCalls.has((await actionOf(first))?.status?.phase ?? '') ? true : undefined),
      { timeoutMs: 120_000 },
    );
    await setFault(third, 'unhealthy');
    await waitFor(
      `the upgrade of ${first} to succeed`,
      async () => ((await actionOf(first))?.status?.phase === 'Succeeded' ? true : undefined),
      { timeoutMs: 120_000 },
    );
    const held = await waitFor(
      `the upgrade of ${second} to be held by ${ETCD}`,
      async () => {
        const a = await actionOf(second);
        if (a?.status?.phase === 'Succeeded') return a; // it went before the fault; judged below
        const c = a ? etcdCheck(a) : undefined;
        return c && !c.healthy ? a : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.notEqual(held.status?.phase, 'Succeeded', `${second} was upgraded before the fault was seen`);
    assert.match(etcdCheck(held)?.message ?? '', new RegExp(`etcd member ${third} is unhealthy`));
    await new Promise((r) => setTimeout(r, 3000));
    assert.notEqual((await getAction(client, held.metadata.name)).status?.phase, 'Succeeded');
    assert.equal(await actionOf(third), undefined, `the roll did not go on to ${third}`);
    await setFault(third, null);
    assert.equal(await exited, 0, output);
    for (const node of nodes) assert.equal((await actionOf(node))?.status?.phase, 'Succeeded', node);
    assert.match(output, new RegExp(ETCD));
  });
});
