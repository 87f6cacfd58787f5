// Alertmanager silences while actions run, against the sandbox and a real Alertmanager
// (sandbox/monitoring.ts): held from approval to the end of the action, expired
// when it ends or is deleted, never a gate (an unreachable Alertmanager is reported and
// retried, the action goes on), and the same silence renewed across a controller restart.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { Controller } from '../../src/controller.ts';
import type { Silence } from '../../src/silences/client.ts';
import type { Monitoring } from '../../sandbox/monitoring.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createPolicy,
  createTestNodes,
  deleteActionsAfter,
  events,
  getAction,
  waitForActionGone,
  markExecuted,
  rebootNode,
  startGateController,
  waitForPhase,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { silencesForAction, startTestMonitoring, type ListedSilence } from '../support/monitoring.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('silences');
let monitoring: Monitoring | undefined;
/** The Alertmanager's URL. */
let am = '';
let controller: Controller | undefined;
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  monitoring = await startTestMonitoring();
  am = monitoring.alertmanagerUrl ?? '';
  controller = await startGateController(instance);
});

after(async () => {
  await stopAll(controller, monitoring);
});

/** Test nodes of their own, governed by a policy of their own that asks for silences. */
async function governedNode(
  t: TestContext,
  silence: { url: string; duration?: string },
  owner = instance,
): Promise<string> {
  const group = uniqueName('sil');
  const labels = { 'gatehouse.test/group': group };
  const [node] = await createTestNodes(t, client, group, 1, labels);
  await createPolicy(
    t,
    client,
    owner,
    { nodeSelector: { matchLabels: labels }, alertmanagerSilence: silence },
    uniqueName('silence-policy'),
  );
  return node as string;
}

async function startAction(t: TestContext, node: string, owner = instance): Promise<ActionObject> {
  const action = await createAction(client, owner, me, { nodeName: node });
  deleteActionsAfter(t, client, action.metadata.name);
  return action;
}

function silenced(a: ActionObject) {
  return a.status?.conditions?.find((c) => c.type === 'Silenced');
}

/** Waits until the action's one silence in Alertmanager at `server` is in `state`; returns it. */
async function silenceIn(
  server: string,
  uid: string,
  state: Silence['status']['state'],
  timeoutMs = 30_000,
): Promise<ListedSilence> {
  return waitFor(
    `the action's silence to be ${state}`,
    async (observe) => {
      const list = await silencesForAction(server, uid);
      observe(JSON.stringify(list.map((s) => [s.id, s.status.state])));
      return list.length === 1 && list[0]?.status.state === state ? list[0] : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

/** Waits until the action's status shows what `test` looks for; returns the action. */
async function actionWhere(
  name: string,
  what: string,
  test: (a: ActionObject) => boolean,
  timeoutMs = 30_000,
): Promise<ActionObject> {
  return waitFor(
    what,
    async (observe) => {
      const a = await getAction(client, name);
      const c = silenced(a);
      observe(
        `${a.status?.phase ?? ''}; Silenced ${c?.status ?? '-'} ${c?.reason ?? ''}: ${c?.message ?? ''}; ${JSON.stringify(a.status?.silences ?? [])}`,
      );
      return test(a) ? a : undefined;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

/** The requester reboots the node: the action follows it to Succeeded. */
async function finish(name: string, node: string): Promise<ActionObject> {
  await markExecuted(client, name);
  await rebootNode(client, node);
  const done = await waitForPhase(client, name, ['Succeeded', 'Failed']);
  assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
  return done;
}

describe('Alertmanager silences', () => {
  it('holds a silence on the node from approval, capped at approval + duration, and expires it when the action succeeds', async (t) => {
    const node = await governedNode(t, { url: am, duration: '1m' });
    const action = await startAction(t, node);
    const uid = action.metadata.uid;
    const approved = await waitForPhase(client, action.metadata.name, 'Approved');
    const approvalTime = Date.parse(approved.status?.approvalTime ?? '');

    const silence = await silenceIn(am, uid, 'active');
    assert.deepEqual(silence.matchers, [{ name: 'node', value: node, isRegex: false, isEqual: true }]);
    assert.equal(silence.createdBy, 'gatehouse');
    assert.ok(
      Date.parse(silence.endsAt) <= approvalTime + 60_000,
      `endsAt ${silence.endsAt} is within a minute (the policy's duration) of approval ${approved.status?.approvalTime ?? ''}`,
    );
    const held = await actionWhere(action.metadata.name, 'the silence recorded as Active', (a) =>
      (a.status?.silences ?? []).some((s) => s.state === 'Active'),
    );
    assert.deepEqual(
      held.status?.silences?.map((s) => [s.url, s.nodeLabel, s.state, s.id, s.endsAt]),
      [[am, 'node', 'Active', silence.id, new Date(silence.endsAt).toISOString()]],
    );
    assert.equal(silenced(held)?.status, 'True');
    // The Event is recorded after the status that it reports is written.
    await waitFor('a Silenced event', async () =>
      (await events(client, action.metadata.name)).some((e) => e.reason === 'Silenced' && e.type === 'Normal')
        ? true
        : undefined,
    );

    await finish(action.metadata.name, node);
    await silenceIn(am, uid, 'expired');
    const done = await actionWhere(action.metadata.name, 'the silence recorded as Expired', (a) =>
      (a.status?.silences ?? []).every((s) => s.state === 'Expired'),
    );
    assert.equal(silenced(done)?.reason, 'ActionEnded');
    assert.equal((await silencesForAction(am, uid)).length, 1, 'one silence for the whole action');
    await waitFor(
      'the finalizer to go',
      async () =>
        ((await getAction(client, action.metadata.name)).metadata.finalizers ?? []).length === 0
          ? true
          : undefined,
      { timeoutMs: 15_000 },
    );
  });

  it('expires the silence when the action is deleted mid-action', async (t) => {
    const node = await governedNode(t, { url: am });
    const action = await startAction(t, node);
    await waitForPhase(client, action.metadata.name, 'Approved');
    await silenceIn(am, action.metadata.uid, 'active');

    await client.request(`${API}/nodeactions/${action.metadata.name}`, { method: 'DELETE' });
    await silenceIn(am, action.metadata.uid, 'expired');
    await waitForActionGone(client, action.metadata.name, 'the cancelled action to be gone', 20_000);
  });

  it('never holds an action back: Alertmanager down is reported, retried, and the silence comes when it is back', async (t) => {
    const down = monitoring;
    assert.ok(down);
    await down.stopAlertmanager(); // Its port now refuses connections.
    t.after(() => down.startAlertmanager().catch(() => undefined));
    const node = await governedNode(t, { url: am });
    const action = await startAction(t, node);

    const approved = await waitForPhase(client, action.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    const reported = await actionWhere(
      action.metadata.name,
      'the Silenced condition to say Alertmanager is unreachable',
      (a) => silenced(a)?.reason === 'AlertmanagerUnreachable',
    );
    const condition = silenced(reported);
    assert.equal(condition?.status, 'False');
    assert.match(condition.message, /unreachable: .*ECONNREFUSED.*the action goes on without it/);
    assert.equal(reported.status?.phase, 'Approved');
    const warning = await waitFor(
      'a Warning Event about the silence',
      async () =>
        (await events(client, action.metadata.name)).find(
          (e) => e.reason === 'SilenceFailed' && e.type === 'Warning',
        ),
      { timeoutMs: 10_000 },
    );
    assert.match(warning.message, /ECONNREFUSED/);

    await down.startAlertmanager();
    const silence = await silenceIn(am, action.metadata.uid, 'active', 60_000);
    await actionWhere(
      action.metadata.name,
      'the Silenced condition to turn True',
      (a) => silenced(a)?.status === 'True' && a.status?.silences?.[0]?.id === silence.id,
    );
    await finish(action.metadata.name, node);
    await silenceIn(am, action.metadata.uid, 'expired');
  });

  it('renews the same silence after a controller restart, never a second one', async (t) => {
    const own = uniqueName('silences-restart');
    let restarting: Controller | undefined = await startGateController(own);
    t.after(() => restarting?.stop());
    const node = await governedNode(t, { url: am }, own);
    const action = await startAction(t, node, own);
    const uid = action.metadata.uid;
    await waitForPhase(client, action.metadata.name, 'Approved');
    const silence = await silenceIn(am, uid, 'active');
    await actionWhere(action.metadata.name, 'the silence recorded', (a) =>
      (a.status?.silences ?? []).some((s) => s.state === 'Active'),
    );

    await restarting.stop();
    restarting = undefined;
    const before = (await silencesForAction(am, uid))[0];
    assert.ok(before);
    restarting = await startGateController(own);
    // Alertmanager stamps every update of a silence: a renewal shows as a later updatedAt.
    const renewed = await waitFor(
      'the new controller to renew the silence',
      async () => {
        const list = await silencesForAction(am, uid);
        return list.some((s) => s.updatedAt !== before.updatedAt) ? list : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    assert.deepEqual(
      renewed.map((s) => [s.id, s.status.state]),
      [[silence.id, 'active']],
      'the same silence renewed in place; none created after the restart',
    );
    assert.ok(Date.parse(renewed[0]?.endsAt ?? '') >= Date.parse(silence.endsAt), 'renewed, not shortened');

    await finish(action.metadata.name, node);
    await silenceIn(am, uid, 'expired');
    assert.equal((await silencesForAction(am, uid)).length, 1);
  });
});
