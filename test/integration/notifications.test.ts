// NotificationPolicies against the sandbox: a receiver this test starts on 127.0.0.1 sees
// every step of an action in order (started, held and why, approved, done), each signed
// with the key from a Secret; a Slack-format policy whose URL (token and all) lives in a
// Secret gets Slack bodies, and its status counts them without the token; a receiver that
// accepts and never answers does not delay an action.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { Controller } from '../../src/controller.ts';
import { verifySignature } from '../../src/notifications/message.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createPolicy,
  deleteActionsAfter,
  deleteAfter,
  markExecuted,
  startGateController,
  testPlace,
  waitForPhase,
  whoami,
  type Place,
} from '../support/gate.ts';
import { rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('notify');
const NAMESPACE = 'gatehouse-system';
let controller: Controller | undefined;
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance, {
    // An action approved within the grace has no Held step. 5 s, not less: on a loaded CI
    // machine an unfrozen action once took over a second to be approved, and its Slack
    // lines then had a Held step the test does not expect.
    notifications: { holdGraceMs: 5000, statusIntervalMs: 1000, queue: { minIntervalMs: 200 } },
  });
});

after(async () => {
  await controller?.stop();
});

interface Delivery {
  headers: IncomingMessage['headers'];
  body: string;
}

/** An HTTP receiver on 127.0.0.1, stopped when the test ends; `hang` never answers. */
async function receiver(t: TestContext, hang = false): Promise<{ url: string; got: Delivery[] }> {
  const got: Delivery[] = [];
  const server: Server = createServer((req, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      if (!hang) res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`, got };
}

async function secret(t: TestContext, data: Record<string, string>): Promise<string> {
  const name = uniqueName('notify');
  await client.request(`/api/v1/namespaces/${NAMESPACE}/secrets`, {
    method: 'POST',
    body: { apiVersion: 'v1', kind: 'Secret', metadata: { name }, stringData: data },
  });
  deleteAfter(t, client, `/api/v1/namespaces/${NAMESPACE}/secrets/${name}`);
  return name;
}

async function notificationPolicy(t: TestContext, place: Place, webhook: Record<string, unknown>) {
  const name = uniqueName('notify');
  await client.request(`${API}/notificationpolicies`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NotificationPolicy',
      metadata: { name },
      // Only this test's node: the other files' controllers share the API server.
      spec: { nodeSelector: { matchLabels: { 'gatehouse.test/group': place.group } }, webhook },
    },
  });
  deleteAfter(t, client, `${API}/notificationpolicies/${name}`);
  return name;
}

/** An External ConfigChange without reboot, run to its end: approved, marked executed, done. */
async function runAction(t: TestContext, place: Place, heldBy?: () => Promise<void>) {
  const action = await createAction(client, instance, me, {
    nodeName: place.node,
    action: 'ConfigChange',
    configChange: { mode: 'NoReboot' },
  });
  deleteActionsAfter(t, client, action.metadata.name);
  if (heldBy) await heldBy();
  await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
  await markExecuted(client, action.metadata.name);
  await waitForPhase(client, action.metadata.name, 'Succeeded', 30_000);
  return action.metadata.name;
}

type Steps = { step: string; reason: string; message: string }[];

describe('notifications', () => {
  it('a Generic receiver sees every step of an action in order, each signed', async (t) => {
    const place = await testPlace(t, client, 'notify-generic');
    const { url, got } = await receiver(t);
    const key = 'a signing key from a Secret';
    const keySecret = await secret(t, { key });
    await notificationPolicy(t, place, {
      url: `${url}/hook`,
      signingSecretRef: { name: keySecret, key: 'key' },
      timeout: '2s',
    });
    // A freeze holds the action in Pending past the hold grace: the Held step says why.
    const freeze = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': place.group } },
      freezes: [
        { start: '2020-01-01T00:00:00Z', end: '2099-01-01T00:00:00Z', reason: 'the notification test' },
      ],
    });
    const name = await runAction(t, place, async () => {
      await waitFor('the Held step', () => (got.length >= 2 ? true : undefined), { timeoutMs: 20_000 });
      await client.request(`${API}/actionpolicies/${freeze}`, { method: 'DELETE' });
    });
    await waitFor('the Done step', () =>
      got.some((d) => d.body.includes('"Succeeded"')) ? true : undefined,
    );
    for (const d of got) {
      const headers = {
        timestamp: d.headers['x-gatehouse-timestamp'] as string | undefined,
        signature: d.headers['x-gatehouse-signature'] as string | undefined,
      };
      assert.ok(verifySignature(key, headers, d.body), `signature of ${d.body}`);
    }
    const docs = got.map(
      (d) => JSON.parse(d.body) as { kind: string; action: { name: string }; steps: Steps },
    );
    assert.ok(docs.every((d) => d.kind === 'Notification' && d.action.name === name));
    const steps = docs.flatMap((d) => d.steps);
    assert.deepEqual(
      steps.map((s) => `${s.step}/${s.reason}`),
      ['Started/Requested', 'Held/Pending', 'Approved/Approved', 'Done/Succeeded'],
    );
    assert.match(steps[1]?.message ?? '', /waits: .*frozen until 2099/);
  });

  it('a Slack receiver whose URL is in a Secret gets Slack bodies; the status counts them, without the token', async (t) => {
    const place = await testPlace(t, client, 'notify-slack');
    const { url, got } = await receiver(t);
    const token = 'T0000/B0000/XXXXsecrettoken';
    const urlSecret = await secret(t, { url: `${url}/services/${token}` });
    const policy = await notificationPolicy(t, place, {
      format: 'Slack',
      urlSecretRef: { name: urlSecret, key: 'url' },
    });
    await runAction(t, place);
    await waitFor('the Done line', () => (got.some((d) => d.body.includes('*Done*')) ? true : undefined));
    const texts = got.map((d) => (JSON.parse(d.body) as { text: string }).text);
    assert.ok(
      texts.every((x) => x.startsWith('*ConfigChange* of node')),
      texts.join('\n'),
    );
    const lines = texts.flatMap((x) => x.split('\n').slice(1));
    assert.deepEqual(
      lines.map((l) => /\*(\w+)\* \((\w+)\)/.exec(l)?.slice(1, 3).join('/')),
      ['Started/Requested', 'Approved/Approved', 'Done/Succeeded'],
    );
    const status = await waitFor('the policy status to count them', async () => {
      const p = await client.request<{
        status?: { sent?: number; conditions?: { type: string; status: string }[] };
      }>(`${API}/notificationpolicies/${policy}`);
      return (p.status?.sent ?? 0) >= got.length ? p.status : undefined;
    });
    assert.equal(status.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
    assert.ok(!JSON.stringify(status).includes('secrettoken'));
  });

  it('a receiver that never answers does not delay the action', async (t) => {
    const place = await testPlace(t, client, 'notify-hang');
    const { url, got } = await receiver(t, true);
    const keySecret = await secret(t, { key: 'k' });
    await notificationPolicy(t, place, {
      url,
      signingSecretRef: { name: keySecret, key: 'key' },
      timeout: '30s',
    });
    const started = Date.now();
    await runAction(t, place);
    const took = Date.now() - started;
    assert.ok(got.length >= 1, 'the receiver was called');
    assert.ok(took < 10_000, `the action took ${String(took)} ms`);
  });
});
