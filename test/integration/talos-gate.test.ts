// The Talos API gate holds disruptive calls as External NodeActions of the caller and
// forwards each once it is Approved (invariant 10), with the project's own Talos client
// as the caller and the Talos simulator as the node: who may call what, what the person
// at the terminal reads, bypass, cancellation, upgrades and configuration applies.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { ObservedNodeAction } from '../../src/api/node-action.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import type { Controller } from '../../src/controller.ts';
import { TalosApiError } from '../../src/talos/errors.ts';
import { createAuthority } from '../../src/talos-gate/pki.ts';
import {
  API,
  createGroupHook,
  createPolicy,
  deleteActionsAfter,
  hookTemplate,
  startGateController,
} from '../support/gate.ts';
import {
  freshNamespace,
  impersonate,
  rest,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { createTalosNodes, GROUP_LABEL, type NodeView } from '../support/talos-nodes.ts';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { RebootRequestSchema, RebootResponseSchema } from '../../src/talos/gen/gatehouse/talos/machine_pb.ts';
import {
  bindUser,
  rawClient,
  rawUnary,
  startGateStack,
  talosClient,
  type GateStack,
} from '../support/talos-gate.ts';

const kc = testKubeConfig();
const api = rest(kc);
const instance = uniqueName('talos-gate');
let stack: GateStack;
let controller: Controller;

before(async () => {
  stack = await startGateStack({ instance, holdMs: 1500 });
  controller = await startGateController(instance);
});
after(async () => {
  await controller.stop();
  await stack.stop();
});

const TAINT = 'gatehouse.test/talos-gate';

/** One simulated node of the test's own; returns its name, address and group. */
async function testNode(
  t: TestContext,
  talosVersion = 'v1.13.0',
): Promise<{ name: string; ip: string; group: string }> {
  const group = uniqueName('tgate');
  const [name = ''] = await createTalosNodes(t, api, {
    group,
    count: 1,
    taint: TAINT,
    kubernetesVersion: (
      await api.request<{ status: { nodeInfo: { kubeletVersion: string } } }>('/api/v1/nodes/cp-1')
    ).status.nodeInfo.kubeletVersion,
    talosVersion,
    addressBlock: 50,
  });
  // Whatever a test leaves on its node is cancelled when it ends (the budget is one at a time).
  t.after(async () => {
    for (const a of await actionsOn(name).catch(() => []))
      await api.request(`${API}/nodeactions/${a.metadata.name}`, { method: 'DELETE' }).catch(() => undefined);
    await waitFor(
      `the actions on ${name} to be gone`,
      async () => ((await actionsOn(name)).length === 0 ? true : undefined),
      { timeoutMs: 90_000 },
    ).catch(() => undefined);
  });
  const node = await api.request<NodeView>(`/api/v1/nodes/${name}`);
  const ip = node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? '';
  return { name, ip, group };
}

async function calls(node: string): Promise<Record<string, number>> {
  const n = await api.request<NodeView>(`/api/v1/nodes/${node}`);
  return talosCallCounts(n.metadata.annotations);
}

async function actionsOn(node: string): Promise<ObservedNodeAction[]> {
  const list = await api.request<{ items: ObservedNodeAction[] }>(`${API}/nodeactions`, {
    query: { fieldSelector: `spec.nodeName=${node}` },
  });
  return list.items;
}

async function refused(promise: Promise<unknown>): Promise<TalosApiError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(error instanceof TalosApiError, `expected a Talos API error, got ${String(error)}`);
  return error;
}

async function approved(node: string, action = 'Reboot'): Promise<ObservedNodeAction> {
  return waitFor(
    `the ${action} of ${node} to be Approved`,
    async (observe) => {
      const a = (await actionsOn(node)).find(
        (x) => x.spec.action === action && x.status?.phase !== 'Succeeded',
      );
      observe(`${a?.metadata.name ?? '(none)'}: ${a?.status?.phase ?? ''} ${a?.status?.message ?? ''}`);
      return a?.status?.phase === 'Approved' ? a : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
}

describe('the Talos API gate holds disruptive calls until their NodeAction is Approved', () => {
  it('a reboot held by an unhealthy check names the check and the NodeAction; it passes once healthy, reaching the node once', async (t) => {
    const node = await testNode(t);
    await bindUser(t, 'gatehouse:requester', 'jane');
    const check = await switchableCheck(t, kc, node.group, false, { [INSTANCE_LABEL]: instance });
    const jane = talosClient(stack.contextFor('jane', ['os:operator']));
    t.after(() => jane.close());

    const started = Date.now();
    const held = await refused(jane.reboot({ node: node.ip }));
    assert.ok(Date.now() - started < 2000, 'the person learns within 2s');
    assert.equal(held.codeName, 'FAILED_PRECONDITION');
    const [action] = await actionsOn(node.name);
    assert.ok(action);
    deleteActionsAfter(t, api, action.metadata.name);
    assert.equal(action.spec.requestedBy, 'jane');
    assert.equal(action.spec.execution, 'External');
    assert.match(held.talosMessage, new RegExp(`NodeAction ${action.metadata.name}`));
    await waitFor(
      'the held message to name the check',
      async () => {
        const again = await refused(jane.reboot({ node: node.ip }));
        return again.talosMessage.includes(check.name) ? again : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.equal((await calls(node.name)).Reboot ?? 0, 0, 'nothing reached the node while held');

    await check.set(true);
    await approved(node.name);
    await jane.reboot({ node: node.ip });
    await waitFor('the node to reboot', async () =>
      (await calls(node.name)).Reboot === 1 ? true : undefined,
    );
    // The same command again is a new request: held behind the first, never forwarded on its approval.
    const again = await refused(jane.reboot({ node: node.ip }));
    assert.equal(again.codeName, 'FAILED_PRECONDITION');
    const all = await actionsOn(node.name);
    deleteActionsAfter(t, api, ...all.map((a) => a.metadata.name));
    assert.equal((await calls(node.name)).Reboot, 1, 'exactly one Reboot reached the simulator');
    const first = all.find((a) => a.metadata.name === action.metadata.name);
    assert.equal(first?.metadata.annotations?.['talos.dev/executed'], 'true');
  });

  it('a PreRebootJob runs before the call passes; the held message names it', async (t) => {
    const node = await testNode(t);
    await bindUser(t, 'gatehouse:requester', 'jane');
    const namespace = await freshNamespace(t);
    await createGroupHook(api, { namespace, group: node.group }, 'PreRebootJob', 'noout', {
      template: hookTemplate('Succeeded', '4s'),
    });
    const jane = talosClient(stack.contextFor('jane', ['os:operator']));
    t.after(() => jane.close());
    const seen = await waitFor(
      'the held message to name the PreRebootJob',
      async () => {
        const e = await jane.reboot({ node: node.ip }).then(
          () => undefined,
          (x: unknown) => x as TalosApiError,
        );
        if (!e) throw new Error('the reboot passed before its PreRebootJob ran');
        return /PreRebootJob .*noout/.test(e.talosMessage) ? e : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 300 },
    );
    assert.match(seen.talosMessage, /must finish first/);
    const action = await approved(node.name);
    deleteActionsAfter(t, api, action.metadata.name);
    assert.equal(action.status?.hooks?.find((h) => h.kind === 'PreRebootJob')?.phase, 'Succeeded');
    await jane.reboot({ node: node.ip });
    await waitFor('the reboot to reach the node', async () =>
      (await calls(node.name)).Reboot === 1 ? true : undefined,
    );
  });

  it('an upgrade through LifecycleService then Reboot is one Upgrade NodeAction', async (t) => {
    const node = await testNode(t, 'v1.13.0');
    await bindUser(t, 'gatehouse:requester', 'ops-admin');
    const check = await switchableCheck(t, kc, node.group, false, { [INSTANCE_LABEL]: instance }, [
      'Upgrade',
    ]);
    const admin = talosClient(stack.contextFor('ops-admin', ['os:admin']));
    t.after(() => admin.close());
    const image = 'ghcr.io/siderolabs/installer:v1.13.2';
    await admin.pullImage({ node: node.ip, image }); // not gated: it installs nothing
    const held = await refused(admin.installUpgrade({ node: node.ip, image }));
    assert.equal(held.codeName, 'FAILED_PRECONDITION');
    assert.equal((await calls(node.name)).LifecycleUpgrade ?? 0, 0, 'the install waits too');
    await check.set(true);
    const action = await approved(node.name, 'Upgrade');
    deleteActionsAfter(t, api, action.metadata.name);
    assert.equal(action.spec.upgrade?.image, image);
    await admin.installUpgrade({ node: node.ip, image });
    await admin.reboot({ node: node.ip });
    await waitFor(
      'the node to boot v1.13.2',
      async () => {
        const n = await api.request<{ status: { nodeInfo: { osImage: string } } }>(
          `/api/v1/nodes/${node.name}`,
        );
        return n.status.nodeInfo.osImage === 'Talos (v1.13.2)' ? true : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const all = await actionsOn(node.name);
    assert.deepEqual(
      all.map((a) => a.spec.action),
      ['Upgrade'],
      'one action: the Upgrade, no Reboot of its own',
    );
    assert.equal((await calls(node.name)).Reboot, 1);
  });

  it('ApplyConfiguration: NO_REBOOT passes on 1.13 and is gated on 1.14; REBOOT is gated on 1.13; the configuration is never stored', async (t) => {
    const old = await testNode(t, 'v1.13.0');
    const current = await testNode(t, 'v1.14.0');
    await bindUser(t, 'gatehouse:requester', 'ops-admin');
    await switchableCheck(t, kc, old.group, false, { [INSTANCE_LABEL]: instance }, ['ConfigChange']);
    await switchableCheck(t, kc, current.group, false, { [INSTANCE_LABEL]: instance }, ['ConfigChange']);
    const admin = talosClient(stack.contextFor('ops-admin', ['os:admin']));
    t.after(() => admin.close());
    const secret = `token-${uniqueName('secret')}`;
    // A change Talos 1.13 applies live (a node label; the worker's type and cluster as they are).
    const data = `version: v1alpha1\nmachine:\n  type: worker\n  nodeLabels:\n    gate-test: ${secret}\ncluster:\n  clusterName: sandbox\n`;
    const live = await admin.applyConfiguration({ node: old.ip, data, mode: 'no-reboot' });
    assert.equal(live.mode, 'no-reboot');
    assert.deepEqual(await actionsOn(old.name), [], 'no NodeAction for a live apply on 1.13');

    const auto = await refused(admin.applyConfiguration({ node: old.ip, data, mode: 'auto' }));
    assert.match(auto.talosMessage, /--mode=reboot/);

    const rebootHeld = await refused(admin.applyConfiguration({ node: old.ip, data, mode: 'reboot' }));
    assert.equal(rebootHeld.codeName, 'FAILED_PRECONDITION');
    const [change] = await actionsOn(old.name);
    assert.equal(change?.spec.configChange?.mode, 'Reboot');

    const liveHeld = await refused(admin.applyConfiguration({ node: current.ip, data, mode: 'no-reboot' }));
    assert.equal(liveHeld.codeName, 'FAILED_PRECONDITION');
    const [liveChange] = await actionsOn(current.name);
    assert.equal(liveChange?.spec.configChange?.mode, 'NoReboot');
    // Its class, from the bytes forwarded and the node's running configuration (issue 30, item 1).
    assert.equal(liveChange.spec.configChange.disruptionClass, 'None');
    const rebootOn114 = await refused(admin.applyConfiguration({ node: current.ip, data, mode: 'reboot' }));
    assert.equal(rebootOn114.codeName, 'UNIMPLEMENTED', "1.14's own answer, forwarded");

    const stored = JSON.stringify([...(await actionsOn(old.name)), ...(await actionsOn(current.name))]);
    assert.ok(!stored.includes(secret), 'the configuration is in no NodeAction');
    const events = JSON.stringify(await api.request('/api/v1/namespaces/default/events'));
    assert.ok(!events.includes(secret), 'nor in an Event');
  });
});

describe('who may call through the Talos API gate', () => {
  it('a reader certificate cannot reboot; an expired or foreign-CA certificate gets no session', async (t) => {
    const node = await testNode(t);
    const reader = talosClient(stack.contextFor('reader-ann', ['os:reader']));
    t.after(() => reader.close());
    const denied = await refused(reader.reboot({ node: node.ip }));
    assert.equal(denied.codeName, 'PERMISSION_DENIED');
    assert.match(denied.talosMessage, /os:operator/);
    assert.equal((await reader.version({ node: node.ip })).tag, 'v1.13.0', 'what its role allows passes');

    const expired = talosClient(
      stack.contextFor('jane', ['os:admin'], { notAfter: new Date(Date.now() - 60_000) }),
      5000,
    );
    const foreign = talosClient(
      stack.contextFor('jane', ['os:admin'], { ca: createAuthority('someone else') }),
      5000,
    );
    t.after(() => {
      expired.close();
      foreign.close();
    });
    for (const client of [expired, foreign]) {
      const error = await refused(client.version({ node: node.ip }));
      assert.equal(error.failure, 'tls-client-certificate', error.message);
    }
    assert.deepEqual(await actionsOn(node.name), []);
  });

  it('a bypass pre-approved by a holder of the verb passes; one without the verb cannot pre-approve', async (t) => {
    const node = await testNode(t);
    await bindUser(t, 'gatehouse:requester', 'bob');
    await bindUser(t, 'gatehouse:bypass', 'bob');
    await bindUser(t, 'gatehouse:requester', 'eve');
    await switchableCheck(t, kc, node.group, false, { [INSTANCE_LABEL]: instance });
    const spec = (who: string) => ({
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NodeAction',
      metadata: { name: uniqueName(`bypass-${who}`), labels: { [INSTANCE_LABEL]: instance } },
      spec: {
        nodeName: node.name,
        action: 'Reboot',
        execution: 'External',
        requestedBy: who,
        bypass: { healthChecks: true, reason: 'rescue the node now' },
      },
    });
    // What `gatehouse reboot --external --skip-checks --reason …` creates, as each user.
    await assert.rejects(
      rest(impersonate(kc, 'eve')).request(`${API}/nodeactions`, { method: 'POST', body: spec('eve') }),
      /bypass/,
    );
    const eve = talosClient(stack.contextFor('eve', ['os:operator']));
    const bob = talosClient(stack.contextFor('bob', ['os:operator']));
    t.after(() => {
      eve.close();
      bob.close();
    });
    assert.equal((await refused(eve.reboot({ node: node.ip }))).codeName, 'FAILED_PRECONDITION');

    const eveAction = (await actionsOn(node.name))[0];
    if (eveAction) await api.request(`${API}/nodeactions/${eveAction.metadata.name}`, { method: 'DELETE' });
    const body = spec('bob');
    await rest(impersonate(kc, 'bob')).request(`${API}/nodeactions`, { method: 'POST', body });
    deleteActionsAfter(t, api, body.metadata.name);
    await approved(node.name);
    await bob.reboot({ node: node.ip });
    await waitFor('the bypassed reboot to reach the node', async () =>
      (await calls(node.name)).Reboot === 1 ? true : undefined,
    );
    const marked = await api.request<ObservedNodeAction>(`${API}/nodeactions/${body.metadata.name}`);
    assert.equal(marked.metadata.annotations?.['talos.dev/executed'], 'true');
  });

  it('a caller who cancels a held call cancels its NodeAction, which was never executed', async (t) => {
    const node = await testNode(t);
    await bindUser(t, 'gatehouse:requester', 'jane');
    await switchableCheck(t, kc, node.group, false, { [INSTANCE_LABEL]: instance });
    const patient = await stack.startGate({ instance, holdMs: 120_000 });
    const jane = talosClient(
      stack.contextFor('jane', ['os:operator'], { endpoint: patient.endpoint }),
      120_000,
    );
    t.after(() => jane.close());
    const abort = new AbortController();
    const call = jane.reboot({ node: node.ip, signal: abort.signal }).then(
      () => 'passed',
      (e: unknown) => e,
    );
    const action = await waitFor(
      'the held call to create its action',
      async () => (await actionsOn(node.name))[0],
    );
    deleteActionsAfter(t, api, action.metadata.name);
    abort.abort();
    assert.ok((await call) instanceof Error);
    await waitFor(
      'the action to be cancelled',
      async () => {
        const left = await actionsOn(node.name);
        return left.length === 0 ||
          left.every((a) => a.status?.phase === 'Cancelled' || a.metadata.deletionTimestamp)
          ? true
          : undefined;
      },
      { timeoutMs: 20_000 },
    );
    assert.equal((await calls(node.name)).Reboot ?? 0, 0);
  });

  it('two gate replicas given the same approved call at once forward it once', async (t) => {
    const node = await testNode(t);
    await bindUser(t, 'gatehouse:requester', 'jane');
    const check = await switchableCheck(t, kc, node.group, false, { [INSTANCE_LABEL]: instance });
    const other = await stack.startGate({ instance, holdMs: 1500 });
    const viaA = talosClient(stack.contextFor('jane', ['os:operator']));
    const viaB = talosClient(stack.contextFor('jane', ['os:operator'], { endpoint: other.endpoint }));
    t.after(() => {
      viaA.close();
      viaB.close();
    });
    await refused(viaA.reboot({ node: node.ip }));
    await check.set(true);
    await approved(node.name);
    const outcomes = await Promise.all(
      [viaA, viaB, viaA, viaB].map((c) =>
        c.reboot({ node: node.ip }).then(
          () => 'passed',
          (e: unknown) => (e as TalosApiError).codeName,
        ),
      ),
    );
    assert.equal(outcomes.filter((o) => o === 'passed').length, 1, outcomes.join(', '));
    await waitFor('the reboot to reach the node', async () =>
      (await calls(node.name)).Reboot === 1 ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal((await calls(node.name)).Reboot, 1, 'one Reboot reached the simulator');
  });

  it('a fan-out (nodes metadata) is gated per node: the approved node is rebooted, the held one answered for in the reply', async (t) => {
    const a = await testNode(t);
    const b = await testNode(t);
    await bindUser(t, 'gatehouse:requester', 'jane');
    await switchableCheck(t, kc, b.group, false, { [INSTANCE_LABEL]: instance });
    // Both nodes under a budget of their own: under the default (one action at a time
    // cluster-wide) the held node's action, once it took the slot, would hold the other
    // back for ever, and an earlier test's reboot on its way back would too.
    await createPolicy(t, api, instance, {
      nodeSelector: { matchExpressions: [{ key: GROUP_LABEL, operator: 'In', values: [a.group, b.group] }] },
      actions: ['Reboot'],
      maxConcurrent: 2,
    });
    const client = rawClient(stack.contextFor('jane', ['os:operator']));
    t.after(() => client.close());
    const request = Buffer.from(toBinary(RebootRequestSchema, create(RebootRequestSchema, {})));
    // The wait is long for a loaded CI machine, and says what each node's action last said.
    const reply = await waitFor(
      'the approved node to pass',
      async (observe) => {
        try {
          return (
            await rawUnary(client, '/machine.MachineService/Reboot', request, { nodes: `${a.ip},${b.ip}` })
          ).reply;
        } catch (error) {
          if ((error as { code?: number }).code !== 9) throw error;
          const states = await Promise.all(
            [a, b].map(async (n) =>
              (await actionsOn(n.name))
                .map(
                  (x) => `${n.name} ${x.metadata.name}: ${x.status?.phase ?? ''} ${x.status?.message ?? ''}`,
                )
                .join(', '),
            ),
          );
          observe(states.join(' | ')); // both still held
          return undefined;
        }
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    const messages = fromBinary(RebootResponseSchema, reply).messages;
    assert.deepEqual(
      messages.map((m) => [m.metadata?.hostname, m.metadata?.error === '' ? 'ok' : 'held']),
      [
        [a.ip, 'ok'],
        [b.ip, 'held'],
      ],
    );
    assert.match(messages[1]?.metadata?.error ?? '', /held by NodeAction talos-reboot-/);
    await waitFor('the approved node to reboot', async () =>
      (await calls(a.name)).Reboot === 1 ? true : undefined,
    );
    assert.equal((await calls(b.name)).Reboot ?? 0, 0, 'the held node was not called');
  });
});
