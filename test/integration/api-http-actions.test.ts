// The /v1/actions API against the sandbox, with real ServiceAccount tokens (TokenRequest)
// and the shipped roles: who may do what (401, 403, bypass), what a request becomes
// (requestedBy is the caller), idempotency across a controller restart, long-polls and
// server-sent events following a real action through the gate, marking External
// actions executed, cancelling, refusals of bad input, and per-caller limits.
import assert from 'node:assert/strict';
import { ACTIONS } from '../../src/api/common.ts';
import { request as httpRequest } from 'node:http';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { Controller, type ControllerOptions } from '../../src/controller.ts';
import { silentLogger } from '../../src/log.ts';
import {
  API,
  createTestNodes,
  deleteActionsAfter,
  deleteAfter,
  rebootNode,
  whoami,
} from '../support/gate.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  rest,
  serviceAccountToken,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('api-http');
const namespace = uniqueName('api-http');
const tokens = { requester: '', bypasser: '', viewer: '', nobody: '', other: '' };
const users = { requester: '', bypasser: '' };
let controller: Controller;
const bindings: string[] = [];

interface Json {
  [key: string]: unknown;
}

interface ActionJson {
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec: Json & { requestedBy: string; nodeName: string };
  status?: { phase?: string; message?: string };
}

async function startController(extra: Partial<ControllerOptions> = {}): Promise<Controller> {
  const started = await Controller.start({
    kubeConfig: await controllerKubeConfig(kc),
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
    instance,
    checkSelector: `${INSTANCE_LABEL}=${instance}`,
    api: {
      limits: {
        maxWaitMs: 20_000,
        requests: { perSecond: 100, burst: 200 },
        creations: { perSecond: 10, burst: 50 },
      },
      pollIntervalMs: 1000,
    },
    ...extra,
  });
  await started.waitForSync();
  return started;
}

async function call(
  method: string,
  path: string,
  options: { token?: string; body?: unknown; headers?: Record<string, string>; server?: Controller } = {},
): Promise<{ status: number; body: Json; headers: Headers }> {
  const response = await fetch(`${(options.server ?? controller).url}${path}`, {
    method,
    headers: {
      ...(options.token ? { Authorization: `Bearer ${options.token}` } : {}),
      ...(options.body !== undefined ? { 'Content-Type': 'application/json' } : {}),
      ...options.headers,
    },
    ...(options.body !== undefined
      ? { body: typeof options.body === 'string' ? options.body : JSON.stringify(options.body) }
      : {}),
  });
  const text = await response.text();
  return { status: response.status, body: (text ? JSON.parse(text) : {}) as Json, headers: response.headers };
}

/** Our instance's NodeActions, by name: what a refused request must not have changed. */
async function actionNames(): Promise<string[]> {
  const list = await client.request<{ items: ActionJson[] }>('/apis/talos.dev/v1alpha1/nodeactions', {
    query: { labelSelector: `${INSTANCE_LABEL}=${instance}` },
  });
  return list.items.map((a) => a.metadata.name).sort();
}

function cleanupActions(t: TestContext, ...names: string[]): void {
  deleteActionsAfter(t, client, ...names);
}

/** A node of our own, labelled for the check of `group`. */
async function node(t: TestContext, group: string): Promise<string> {
  const [name] = await createTestNodes(t, client, uniqueName('api'), 1, { 'gatehouse.test/group': group });
  return name as string;
}

/** An External Reboot asked for over HTTP, on a node of its own that its own check holds (unhealthy). */
async function heldReboot(
  t: TestContext,
  prefix: string,
): Promise<{ check: Awaited<ReturnType<typeof switchableCheck>>; target: string; name: string }> {
  const group = uniqueName(prefix);
  const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
  const target = await node(t, group);
  const created = await call('POST', '/v1/actions', {
    token: tokens.requester,
    body: { spec: { nodeName: target, action: 'Reboot', execution: 'External' } },
  });
  const name = (created.body as unknown as ActionJson).metadata.name;
  cleanupActions(t, name);
  return { check, target, name };
}

before(async () => {
  await installGatehouseAPI(kc);
  await client.request('/api/v1/namespaces', {
    method: 'POST',
    body: { metadata: { name: namespace, labels: { 'gatehouse.dev/test': 'true' } } },
  });
  for (const who of Object.keys(tokens) as (keyof typeof tokens)[]) {
    tokens[who] = await serviceAccountToken(kc, namespace, who);
  }
  users.requester = `system:serviceaccount:${namespace}:requester`;
  users.bypasser = `system:serviceaccount:${namespace}:bypasser`;
  bindings.push(
    await bindClusterRole(undefined, kc, 'gatehouse:requester', { namespace, name: 'requester' }),
  );
  bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:requester', { namespace, name: 'bypasser' }));
  bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:bypass', { namespace, name: 'bypasser' }));
  bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:view', { namespace, name: 'viewer' }));
  bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:requester', { namespace, name: 'other' }));
  controller = await startController();
});

after(async () => {
  await stopAll(controller);
  for (const name of bindings) {
    await client
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
  }
  await client.request(`/api/v1/namespaces/${namespace}`, { method: 'DELETE' }).catch(() => undefined);
});

describe('authentication and authorisation', () => {
  it('refuses a request without a token or with a bad one (401 with a challenge), creating nothing', async () => {
    const before = await actionNames();
    const body = { spec: { nodeName: 'worker-1', action: 'Reboot' } };
    const none = await call('POST', '/v1/actions', { body });
    assert.equal(none.status, 401);
    assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="gatehouse"');
    assert.match(String(none.body.error), /send "Authorization: Bearer <token>"/);
    const bad = await call('POST', '/v1/actions', { body, token: 'not-a-real-token' });
    assert.equal(bad.status, 401);
    assert.equal(bad.headers.get('www-authenticate'), 'Bearer realm="gatehouse", error="invalid_token"');
    assert.match(String(bad.body.error), /did not accept the bearer token/);
    const list = await call('GET', '/v1/actions', { token: `${tokens.requester.slice(0, -4)}AAAA` });
    assert.equal(list.status, 401, 'a tampered token');
    assert.deepEqual(await actionNames(), before);
  });

  it('refuses a caller without the role (403, naming it), creating nothing', async () => {
    const before = await actionNames();
    const nobody = await call('POST', '/v1/actions', {
      token: tokens.nobody,
      body: { spec: { nodeName: 'worker-1', action: 'Reboot' } },
    });
    assert.equal(nobody.status, 403);
    assert.equal(
      nobody.body.error,
      `system:serviceaccount:${namespace}:nobody may not create nodeactions.talos.dev; ask an administrator for the ClusterRole gatehouse:requester`,
    );
    assert.equal((await call('GET', '/v1/actions', { token: tokens.nobody })).status, 403);
    const viewer = await call('POST', '/v1/actions', {
      token: tokens.viewer,
      body: { spec: { nodeName: 'worker-1', action: 'Reboot' } },
    });
    assert.equal(viewer.status, 403, 'view is not create');
    assert.equal((await call('GET', '/v1/actions', { token: tokens.viewer })).status, 200, 'but it may list');
    assert.deepEqual(await actionNames(), before);
  });

  it('creates the action as the caller: requestedBy is the user the token belongs to', async (t) => {
    const created = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'no-such-node-api', action: 'Reboot', execution: 'External' } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const action = created.body as unknown as ActionJson;
    cleanupActions(t, action.metadata.name);
    assert.equal(action.spec.requestedBy, users.requester);
    assert.match(action.metadata.name, /^no-such-node-api-reboot-[a-z0-9]{5}$/);
    assert.equal(created.headers.get('location'), `/v1/actions/${action.metadata.name}`);
    assert.equal(action.metadata.labels?.[INSTANCE_LABEL], instance);
    assert.equal(action.metadata.annotations?.['talos.dev/requested-via'], 'http-api');
    assert.ok(!('managedFields' in action.metadata));
    // The controller goes on to judge it: there is no such node.
    const denied = await call('GET', `/v1/actions/${action.metadata.name}?wait=15s&phase=Pending`, {
      token: tokens.viewer,
    });
    assert.equal((denied.body as unknown as ActionJson).status?.phase, 'Denied');
  });

  it('refuses a bypass without the bypass verb, and records one with it', async (t) => {
    const before = await actionNames();
    const body = {
      spec: {
        nodeName: 'no-such-node-api',
        action: 'Reboot',
        bypass: { healthChecks: true, reason: 'ceph probe is broken, cluster verified by hand' },
      },
    };
    const refused = await call('POST', '/v1/actions', { token: tokens.requester, body });
    assert.equal(refused.status, 403);
    assert.equal(
      refused.body.error,
      `${users.requester} may not bypass nodeactions.talos.dev; ask an administrator for the ClusterRole gatehouse:bypass`,
    );
    assert.deepEqual(await actionNames(), before, 'nothing was created');
    const allowed = await call('POST', '/v1/actions', { token: tokens.bypasser, body });
    assert.equal(allowed.status, 201, JSON.stringify(allowed.body));
    const action = allowed.body as unknown as ActionJson;
    cleanupActions(t, action.metadata.name);
    assert.equal(action.spec.requestedBy, users.bypasser);
    assert.deepEqual(
      action.spec.bypass,
      { ...body.spec.bypass, hooks: false },
      'hooks: false is the default',
    );
    const noReason = await call('POST', '/v1/actions', {
      token: tokens.bypasser,
      body: { spec: { ...body.spec, bypass: { hooks: true } } },
    });
    assert.equal(noReason.status, 422);
    assert.match(String(noReason.body.error), /spec\.bypass\.reason is required when bypassing/);
    const notBypassing = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { ...body.spec, bypass: { healthChecks: false, reason: 'no' } } },
    });
    assert.equal(notBypassing.status, 201, 'bypass: false asks for nothing');
    cleanupActions(t, (notBypassing.body as unknown as ActionJson).metadata.name);
  });
});

describe("the dashboard's actions", () => {
  it('shows actions, requesters and bypass reasons only to readers allowed to list NodeActions', async (t) => {
    const reason = uniqueName('a reason only readers of actions may see');
    const created = await call('POST', '/v1/actions', {
      token: tokens.bypasser,
      body: {
        spec: {
          nodeName: 'no-such-node-dashboard',
          action: 'Reboot',
          bypass: { healthChecks: true, reason },
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const name = (created.body as unknown as ActionJson).metadata.name;
    cleanupActions(t, name);
    // A rollout is action data too (its nodes' actions and phases): it selects no node.
    const rollout = uniqueName('dash-rollout');
    await client.request(`${API}/noderollouts`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeRollout',
        metadata: { name: rollout, labels: { [INSTANCE_LABEL]: instance } },
        spec: {
          action: 'Reboot',
          nodeSelector: { matchLabels: { 'gatehouse.test/none': rollout } },
          requestedBy: await whoami(client),
        },
      },
    });
    deleteAfter(t, client, `${API}/noderollouts/${rollout}`);
    const read = async (token?: string) => {
      const answer = await call('GET', '/v1/dashboard', token ? { token } : {});
      return { status: answer.status, text: JSON.stringify(answer.body), body: answer.body };
    };
    // Anonymous, and with a token that may not list NodeActions: the health part only.
    for (const token of [undefined, tokens.nobody]) {
      const hidden = await read(token);
      assert.equal(hidden.status, 200);
      assert.equal(hidden.body.actionsHidden, true);
      assert.deepEqual(hidden.body.actions, []);
      assert.deepEqual(hidden.body.rollouts, []);
      for (const secret of [name, reason, users.bypasser, rollout])
        assert.ok(!hidden.text.includes(secret), `${token ? 'nobody' : 'anonymous'} sees ${secret}`);
      assert.ok(Array.isArray(hidden.body.checks), 'the checks stay anonymous');
    }
    // The event stream follows the same rule.
    const stream = await fetch(`${controller.url}/v1/dashboard/events`);
    const reader = stream.body?.getReader();
    assert.ok(reader);
    let first = '';
    while (!first.includes('\n\n', first.indexOf('data:')))
      first += new TextDecoder().decode((await reader.read()).value as Uint8Array | undefined);
    await reader.cancel();
    assert.match(first, /"actionsHidden":true/);
    assert.ok(!first.includes(reason));
    // A reader allowed to list NodeActions sees them.
    const shown = await waitFor('the action and the rollout on the dashboard', async () => {
      const r = await read(tokens.viewer);
      return r.text.includes(name) && r.text.includes(rollout) ? r : undefined;
    });
    assert.equal(shown.body.actionsHidden, false);
    assert.ok(shown.text.includes(reason));
    // A token that is not accepted is told so.
    assert.equal((await read('not-a-token')).status, 401);
  });
});

describe('idempotency', () => {
  it('gives a retried request its first action, refuses the key for another request, and survives a restart', async (t) => {
    const key = `retry-${uniqueName('k')}`;
    const body = { spec: { nodeName: 'no-such-node-idem', action: 'Shutdown', execution: 'External' } };
    const first = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body,
      headers: { 'Idempotency-Key': key },
    });
    assert.equal(first.status, 201, JSON.stringify(first.body));
    const name = (first.body as unknown as ActionJson).metadata.name;
    cleanupActions(t, name);
    assert.equal(
      (first.body as unknown as ActionJson).metadata.annotations?.['talos.dev/idempotency-key'],
      key,
    );

    // The same request again, key order shuffled: the same action.
    const again = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { execution: 'External', action: 'Shutdown', nodeName: 'no-such-node-idem' } },
      headers: { 'Idempotency-Key': key },
    });
    assert.equal(again.status, 200);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal((again.body as unknown as ActionJson).metadata.name, name);

    const before = await actionNames();
    const other = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { ...body.spec, action: 'Reboot' } },
      headers: { 'Idempotency-Key': key },
    });
    assert.equal(other.status, 409);
    assert.match(
      String(other.body.error),
      new RegExp(`already used by ${users.requester} for a different request \\(NodeAction ${name}\\)`),
    );
    assert.deepEqual(await actionNames(), before);

    // Another caller's key is another key.
    const theirs = await call('POST', '/v1/actions', {
      token: tokens.bypasser,
      body,
      headers: { 'Idempotency-Key': key },
    });
    assert.equal(theirs.status, 201);
    assert.notEqual((theirs.body as unknown as ActionJson).metadata.name, name);
    cleanupActions(t, (theirs.body as unknown as ActionJson).metadata.name);

    // The key lives on the object, not in the controller's memory.
    await controller.stop();
    controller = await startController();
    const afterRestart = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body,
      headers: { 'Idempotency-Key': key },
    });
    assert.equal(afterRestart.status, 200);
    assert.equal((afterRestart.body as unknown as ActionJson).metadata.name, name);

    // Concurrent attempts under one fresh key: the same request twice gives one action;
    // two different requests give one action and one refusal.
    const racing = `race-${uniqueName('k')}`;
    const twice = await Promise.all(
      [1, 2].map(() =>
        call('POST', '/v1/actions', {
          token: tokens.requester,
          body,
          headers: { 'Idempotency-Key': racing },
        }),
      ),
    );
    assert.deepEqual(twice.map((r) => r.status).sort(), [200, 201]);
    const raced = twice.map((r) => (r.body as unknown as ActionJson).metadata.name);
    assert.equal(raced[0], raced[1]);
    cleanupActions(t, raced[0] ?? '');
    const conflicting = `conflict-${uniqueName('k')}`;
    const different = await Promise.all(
      ['Reboot', 'Shutdown'].map((action) =>
        call('POST', '/v1/actions', {
          token: tokens.requester,
          body: { spec: { ...body.spec, action } },
          headers: { 'Idempotency-Key': conflicting },
        }),
      ),
    );
    assert.deepEqual(different.map((r) => r.status).sort(), [201, 409]);
    const winner = different.find((r) => r.status === 201);
    cleanupActions(t, (winner?.body as unknown as ActionJson).metadata.name);

    const malformed = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body,
      headers: { 'Idempotency-Key': 'has spaces in it' },
    });
    assert.equal(malformed.status, 400);
    assert.match(
      String(malformed.body.error),
      /Idempotency-Key header must be 1 to 255 visible ASCII characters/,
    );
  });
});

/** Sends a raw request (bodies fetch would not send: chunked, huge, not UTF-8). */
function raw(
  path: string,
  options: { headers: Record<string, string | number>; chunks: Buffer[]; server?: Controller },
): Promise<{ status: number; body: string; headers: Record<string, string | string[] | undefined> }> {
  const url = new URL(path, (options.server ?? controller).url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', headers: options.headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    // The server may answer (413) and close before the whole body is sent.
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error);
    });
    for (const chunk of options.chunks) req.write(chunk);
    req.end();
  });
}

describe('bad input', () => {
  it('answers 422 naming every field at fault and what is allowed', async () => {
    const before = await actionNames();
    const answer = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'UPPER', action: 'Nuke', requestedBy: 'root', upgrade: { image: 7 } } },
    });
    assert.equal(answer.status, 422);
    const details = answer.body.details as { field: string; message: string }[];
    assert.deepEqual(
      details.map((d) => d.field),
      ['spec.action', 'spec.nodeName', 'spec.requestedBy', 'spec.upgrade.image'],
    );
    assert.match(
      details[0]?.message ?? '',
      // Every kind, in the API's order (a kind added to ACTIONS is listed without editing this).
      new RegExp(`must be one of ${ACTIONS.join(', ')}, not "Nuke"`),
    );
    // A cross-field rule is the API server's; its words come through with the field.
    const rule = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'worker-1', action: 'Upgrade' } },
    });
    assert.equal(rule.status, 422);
    assert.match(
      String(rule.body.error),
      /spec\.upgrade \(with upgrade\.image\) is required when spec\.action is Upgrade/,
    );
    const image = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'worker-1', action: 'Upgrade', upgrade: { image: 'not an image' } } },
    });
    assert.equal(image.status, 422);
    assert.equal((image.body.details as { field: string }[])[0]?.field, 'spec.upgrade.image');
    assert.deepEqual(await actionNames(), before);
  });

  it('answers 400 to bodies that are not JSON or not UTF-8, and 415 to other media types', async () => {
    const headers = { Authorization: `Bearer ${tokens.requester}`, 'Content-Type': 'application/json' };
    const notJson = await raw('/v1/actions', { headers, chunks: [Buffer.from('{"spec": ')] });
    assert.equal(notJson.status, 400);
    assert.match(notJson.body, /not valid JSON/);
    const latin1 = await raw('/v1/actions', { headers, chunks: [Buffer.from([0x7b, 0xff, 0xfe, 0x7d])] });
    assert.equal(latin1.status, 400);
    assert.match(latin1.body, /not valid UTF-8/);
    const text = await raw('/v1/actions', {
      headers: { ...headers, 'Content-Type': 'text/plain' },
      chunks: [Buffer.from('reboot worker-1 please')],
    });
    assert.equal(text.status, 415);
    assert.match(
      text.body,
      /send the request body as JSON with \\"Content-Type: application\/json\\", not \\"text\/plain\\"/,
    );
  });

  it('answers 413 to a body over 64 KiB, whether it says so up front or not', async () => {
    const before = await actionNames();
    const headers = { Authorization: `Bearer ${tokens.requester}`, 'Content-Type': 'application/json' };
    const big = Buffer.alloc(70 * 1024, 0x20);
    const declared = await raw('/v1/actions', {
      headers: { ...headers, 'Content-Length': big.length },
      chunks: [big],
    });
    assert.equal(declared.status, 413);
    assert.match(declared.body, /larger than 64 KiB/);
    const chunked = await raw('/v1/actions', {
      headers: { ...headers, 'Transfer-Encoding': 'chunked' },
      chunks: Array.from({ length: 40 }, () => Buffer.alloc(4096, 0x20)),
    });
    assert.equal(chunked.status, 413);
    assert.deepEqual(await actionNames(), before);
  });

  it('answers 400 to a bad wait or phase, and 404 to names that do not exist', async () => {
    const bad = await call('GET', '/v1/actions/anything?wait=forever', { token: tokens.viewer });
    assert.equal(bad.status, 400);
    assert.match(
      String(bad.body.error),
      /\?wait= must be a duration such as 30s or 500ms \(from 0s to 20s\)/,
    );
    assert.equal((await call('GET', '/v1/actions/anything?wait=5m', { token: tokens.viewer })).status, 400);
    assert.equal((await call('GET', '/v1/actions?phase=Sleeping', { token: tokens.viewer })).status, 400);
    const missing = await call('GET', '/v1/actions/does-not-exist', { token: tokens.viewer });
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error, 'NodeAction "does-not-exist" does not exist');
    assert.equal((await call('GET', '/v1/actions/Not%20A%20Name', { token: tokens.viewer })).status, 404);
    assert.equal((await call('GET', '/v1/actions/%zz', { token: tokens.viewer })).status, 400);
    assert.equal(
      (await call('POST', '/v1/actions/does-not-exist/cancel', { token: tokens.requester })).status,
      404,
    );
    assert.equal((await call('DELETE', '/v1/actions/x', { token: tokens.requester })).status, 405);
  });
});

/** Reads server-sent events until `stop` says so; returns every event. */
async function readEvents(
  path: string,
  token: string,
  stop: (events: { event: string; data: Json }[]) => boolean,
  signal: AbortSignal,
): Promise<{ event: string; data: Json }[]> {
  const response = await fetch(`${controller.url}${path}`, {
    headers: { Authorization: `Bearer ${token}` },
    signal,
  });
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
  const events: { event: string; data: Json }[] = [];
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event && data) events.push({ event, data: JSON.parse(data) as Json });
    }
    if (stop(events)) break;
  }
  return events;
}

describe('following an action', () => {
  it('long-polls until the phase changes, or until the wait is over', async (t) => {
    const { check, name } = await heldReboot(t, 'poll');
    const waiting = await call('GET', `/v1/actions/${name}?wait=15s&phase=Pending`, { token: tokens.viewer });
    assert.equal((waiting.body as unknown as ActionJson).status?.phase, 'WaitingForHealth');

    // Nothing changes: the answer comes when the wait is over, with the same phase.
    const started = Date.now();
    const unchanged = await call('GET', `/v1/actions/${name}?wait=2s`, { token: tokens.viewer });
    assert.equal((unchanged.body as unknown as ActionJson).status?.phase, 'WaitingForHealth');
    assert.ok(Date.now() - started >= 1900, `answered after ${String(Date.now() - started)}ms`);

    // The check comes good while we wait: the answer comes with the change, not at the end.
    const flip = setTimeout(() => void check.set(true), 1500);
    t.after(() => clearTimeout(flip));
    const polled = Date.now();
    const changed = await call('GET', `/v1/actions/${name}?wait=20s`, { token: tokens.viewer });
    const took = Date.now() - polled;
    assert.notEqual((changed.body as unknown as ActionJson).status?.phase, 'WaitingForHealth');
    assert.ok(took >= 1400 && took < 15_000, `answered after ${String(took)}ms`);
  });

  it('serves many long-polls at once without piling listeners on the informers', async (t) => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    t.after(() => process.off('warning', onWarning));
    const { name } = await heldReboot(t, 'many');
    await call('GET', `/v1/actions/${name}?wait=15s&phase=Pending`, { token: tokens.viewer });
    // Held at the health gate: every long-poll waits its whole second, following the action.
    const started = Date.now();
    const polls = await Promise.all(
      [...Array<string>(6).fill(tokens.requester), ...Array<string>(6).fill(tokens.viewer)].map((token) =>
        call('GET', `/v1/actions/${name}?wait=1s`, { token }),
      ),
    );
    assert.ok(Date.now() - started >= 950);
    assert.deepEqual(
      polls.map((p) => [p.status, (p.body as unknown as ActionJson).status?.phase]),
      Array.from({ length: 12 }, () => [200, 'WaitingForHealth']),
    );
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(
      warnings.filter((w) => w.includes('MaxListeners')),
      [],
    );
  });

  it('streams progress as server-sent events through approval, execution and the node coming back', async (t) => {
    const { check, target, name } = await heldReboot(t, 'sse');
    const abort = new AbortController();
    t.after(() => abort.abort());
    const phases = (events: { event: string; data: Json }[]) =>
      events
        .filter((e) => e.event === 'progress')
        .map((e) => (e.data.action as ActionJson).status?.phase ?? 'New')
        .filter((p, i, all) => p !== all[i - 1]);
    let stage = 0;
    const events = await readEvents(
      `/v1/actions/${name}/events`,
      tokens.viewer,
      (seen) => {
        const current = phases(seen).at(-1);
        // Play the requester and the node, as each step is reached.
        if (current === 'WaitingForHealth' && stage === 0) {
          stage = 1;
          void check.set(true);
        } else if (current === 'Approved' && stage === 1) {
          stage = 2;
          void call('POST', `/v1/actions/${name}/executed`, { token: tokens.requester }).then((r) =>
            assert.equal(r.status, 200),
          );
        } else if (current === 'WaitingForNode' && stage === 2) {
          stage = 3;
          void rebootNode(client, target);
        }
        return seen.some((e) => e.event === 'end');
      },
      AbortSignal.any([abort.signal, AbortSignal.timeout(90_000)]),
    );
    const seen = phases(events);
    assert.ok(seen.includes('WaitingForHealth'), seen.join(' → '));
    assert.ok(seen.includes('Approved'), seen.join(' → '));
    assert.equal(seen.at(-1), 'Succeeded', seen.join(' → '));
    const nodes = events
      .filter((e) => e.event === 'progress')
      .map((e) => e.data.node as { bootID: string; name: string });
    const [first] = nodes;
    const last = nodes.at(-1);
    assert.ok(first && last);
    assert.equal(first.name, target);
    assert.notEqual(first.bootID, last.bootID, 'the node came back with a new boot');
    assert.deepEqual(events.at(-1), {
      event: 'end',
      data: {
        name,
        phase: 'Succeeded',
        message: (events.at(-2)?.data.action as ActionJson).status?.message ?? '',
      },
    });
  });
});

describe('marking executed and cancelling', () => {
  it('marks only an Approved External action, and only once it is approved', async (t) => {
    const group = uniqueName('mark');
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
    const target = await node(t, group);
    const managed = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'no-such-node-mark', action: 'Reboot' } },
    });
    const managedName = (managed.body as unknown as ActionJson).metadata.name;
    cleanupActions(t, managedName);
    const refusedManaged = await call('POST', `/v1/actions/${managedName}/executed`, {
      token: tokens.requester,
    });
    assert.equal(refusedManaged.status, 409);
    assert.match(String(refusedManaged.body.error), /Managed execution/);

    const external = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: target, action: 'Reboot', execution: 'External' } },
    });
    const name = (external.body as unknown as ActionJson).metadata.name;
    cleanupActions(t, name);
    await call('GET', `/v1/actions/${name}?wait=15s&phase=Pending`, { token: tokens.viewer });
    const early = await call('POST', `/v1/actions/${name}/executed`, { token: tokens.requester });
    assert.equal(early.status, 409);
    assert.match(String(early.body.error), /is not approved yet \(phase WaitingForHealth\)/);
    assert.equal((await call('POST', `/v1/actions/${name}/executed`, { token: tokens.viewer })).status, 403);
    await check.set(true);
    await waitFor(
      'approval',
      async () => {
        const a = await call('GET', `/v1/actions/${name}?wait=5s&phase=WaitingForHealth`, {
          token: tokens.viewer,
        });
        return (a.body as unknown as ActionJson).status?.phase === 'Approved' ? true : undefined;
      },
      { timeoutMs: 60_000 },
    );
    // Another requester may not mark it: only its own requester, or a holder of the verb bypass.
    const foreign = await call('POST', `/v1/actions/${name}/executed`, { token: tokens.other });
    assert.equal(foreign.status, 403);
    assert.match(String(foreign.body.error), /may not bypass nodeactions/);
    const marked = await call('POST', `/v1/actions/${name}/executed`, { token: tokens.requester });
    assert.equal(marked.status, 200);
    assert.equal((marked.body as unknown as ActionJson).metadata.annotations?.['talos.dev/executed'], 'true');
    assert.equal(
      (await call('POST', `/v1/actions/${name}/executed`, { token: tokens.requester })).status,
      200,
    );
  });

  it('releases only a held Maintenance, for its requester or a bypass holder, and once', async (t) => {
    const group = uniqueName('release');
    const target = await node(t, group);
    const created = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: target, action: 'Maintenance', execution: 'External' } },
    });
    const name = (created.body as unknown as ActionJson).metadata.name;
    cleanupActions(t, name);
    const phaseIs = (phase: string) =>
      waitFor(
        `${name} ${phase}`,
        async () => {
          const a = await call('GET', `/v1/actions/${name}`, { token: tokens.viewer });
          return (a.body as unknown as ActionJson).status?.phase === phase ? true : undefined;
        },
        { timeoutMs: 60_000 },
      );
    await phaseIs('Approved');
    const early = await call('POST', `/v1/actions/${name}/release`, { token: tokens.requester });
    assert.equal(early.status, 409);
    assert.match(String(early.body.error), /is not held \(phase Approved\)/);
    // The requester drained the node itself, and says so: the node is held.
    assert.equal(
      (await call('POST', `/v1/actions/${name}/executed`, { token: tokens.requester })).status,
      200,
    );
    await phaseIs('Held');
    assert.equal((await call('POST', `/v1/actions/${name}/release`, { token: tokens.viewer })).status, 403);
    const foreign = await call('POST', `/v1/actions/${name}/release`, { token: tokens.other });
    assert.equal(foreign.status, 403);
    assert.match(String(foreign.body.error), /may not bypass nodeactions/);
    const released = await call('POST', `/v1/actions/${name}/release`, { token: tokens.requester });
    assert.equal(released.status, 200);
    assert.equal(
      (released.body as unknown as ActionJson).metadata.annotations?.['talos.dev/released'],
      'true',
    );
    assert.equal(
      (await call('POST', `/v1/actions/${name}/release`, { token: tokens.requester })).status,
      200,
    );
    await phaseIs('Succeeded');
    // Released, it went on to its end; releasing it again is still harmless.
    const after = await call('POST', `/v1/actions/${name}/release`, { token: tokens.requester });
    assert.equal(after.status, 200);
  });

  it('cancels an unfinished action (it goes), and refuses to cancel a finished one', async (t) => {
    const { name } = await heldReboot(t, 'cancel');
    await call('GET', `/v1/actions/${name}?wait=15s&phase=Pending`, { token: tokens.viewer });
    assert.equal((await call('POST', `/v1/actions/${name}/cancel`, { token: tokens.viewer })).status, 403);
    const cancelled = await call('POST', `/v1/actions/${name}/cancel`, { token: tokens.requester });
    assert.equal(cancelled.status, 202);
    assert.equal(cancelled.body.name, name);
    await waitFor(
      `${name} to go`,
      async () =>
        (await call('GET', `/v1/actions/${name}`, { token: tokens.viewer })).status === 404
          ? true
          : undefined,
      { timeoutMs: 30_000 },
    );

    const denied = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'no-such-node-cancel', action: 'Reboot' } },
    });
    const deniedName = (denied.body as unknown as ActionJson).metadata.name;
    cleanupActions(t, deniedName);
    await call('GET', `/v1/actions/${deniedName}?wait=15s&phase=Pending`, { token: tokens.viewer });
    const late = await call('POST', `/v1/actions/${deniedName}/cancel`, { token: tokens.requester });
    assert.equal(late.status, 409);
    assert.match(String(late.body.error), /has already ended \(Denied\): there is nothing to cancel/);
  });

  it('lists actions, filtered by node and phase, oldest first', async (t) => {
    const a = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'no-such-node-list', action: 'Reboot' } },
    });
    const b = await call('POST', '/v1/actions', {
      token: tokens.requester,
      body: { spec: { nodeName: 'no-such-node-list', action: 'Shutdown' } },
    });
    const names = [a, b].map((r) => (r.body as unknown as ActionJson).metadata.name);
    cleanupActions(t, ...names);
    const list = await call('GET', '/v1/actions?node=no-such-node-list', { token: tokens.viewer });
    assert.equal(list.status, 200);
    assert.deepEqual(
      (list.body.items as ActionJson[]).map((i) => i.metadata.name).filter((n) => names.includes(n)),
      names,
    );
    assert.ok((list.body.items as ActionJson[]).every((i) => i.spec.nodeName === 'no-such-node-list'));
    await waitFor('both denied', async () => {
      const denied = await call('GET', '/v1/actions?node=no-such-node-list&phase=Denied', {
        token: tokens.viewer,
      });
      const got = (denied.body.items as ActionJson[]).map((i) => i.metadata.name);
      return names.every((n) => got.includes(n)) ? true : undefined;
    });
  });
});

describe('the rest of the API', () => {
  it('serves its OpenAPI document, policies and fresh check evaluations', async (t) => {
    const doc = await call('GET', '/openapi.json');
    assert.equal(doc.status, 200);
    assert.equal(doc.body.openapi, '3.1.0');
    assert.ok(Object.keys(doc.body.paths as object).includes('/v1/actions/{name}/events'));
    assert.equal((await call('GET', '/v1/policies', { token: tokens.viewer })).status, 200);
    assert.equal((await call('GET', '/v1/policies', { token: tokens.nobody })).status, 403);
    const group = uniqueName('eval');
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
    await waitFor('the check to be known', async () =>
      (await call('POST', `/v1/checks/${check.name}/evaluate`, { token: tokens.viewer })).status === 200
        ? true
        : undefined,
    );
    await check.set(true);
    const fresh = await call('POST', `/v1/checks/${check.name}/evaluate`, { token: tokens.viewer });
    assert.equal(fresh.status, 200);
    assert.equal(fresh.body.healthy, true, 'probed after the change, not read from the last interval');
    assert.equal(
      (await call('POST', `/v1/checks/${check.name}/evaluate`, { token: tokens.nobody })).status,
      403,
    );
    assert.equal(
      (await call('POST', '/v1/checks/no-such-check/evaluate', { token: tokens.viewer })).status,
      404,
    );
  });
});

describe('per-caller limits', () => {
  it('answers 429 with Retry-After past the request rate, per caller, and past the open streams', async () => {
    const tight = await startController({
      instance: uniqueName('api-http-limits'),
      actions: false,
      api: { limits: { requests: { perSecond: 1, burst: 3 }, streamsPerCaller: 1, maxWaitMs: 10_000 } },
    });
    try {
      const statuses: number[] = [];
      let retryAfter: string | null = null;
      for (let i = 0; i < 5; i++) {
        const answer = await call('GET', '/v1/actions', { token: tokens.viewer, server: tight });
        statuses.push(answer.status);
        if (answer.status === 429) {
          retryAfter = answer.headers.get('retry-after');
          assert.match(String(answer.body.error), /is over its request rate; retry in 1s/);
        }
      }
      assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
      assert.equal(retryAfter, '1');
      assert.equal(
        (await call('GET', '/v1/actions', { token: tokens.requester, server: tight })).status,
        200,
        'another caller is not held back',
      );
      await new Promise((r) => setTimeout(r, 1100));
      assert.equal(
        (await call('GET', '/v1/actions', { token: tokens.viewer, server: tight })).status,
        200,
        'the bucket refills',
      );

      // One open stream per caller here: a second long-running request is refused at once.
      const created = await call('POST', '/v1/actions', {
        token: tokens.requester,
        server: tight,
        body: { spec: { nodeName: 'no-such-node-limits', action: 'Reboot', execution: 'External' } },
      });
      assert.equal(created.status, 201);
      const name = (created.body as unknown as ActionJson).metadata.name;
      await new Promise((r) => setTimeout(r, 2100));
      const abort = new AbortController();
      const stream = await fetch(`${tight.url}/v1/actions/${name}/events`, {
        headers: { Authorization: `Bearer ${tokens.requester}` },
        signal: abort.signal,
      });
      assert.equal(stream.status, 200);
      const second = await call('GET', `/v1/actions/${name}/events`, {
        token: tokens.requester,
        server: tight,
      });
      assert.equal(second.status, 429);
      assert.match(String(second.body.error), /already has 1 long-polls or event streams open/);
      abort.abort();
      await client
        .request(`/apis/talos.dev/v1alpha1/nodeactions/${name}`, { method: 'DELETE' })
        .catch(() => undefined);
    } finally {
      await tight.stop();
    }
  });

  it('refuses an address with too many failed authentications (429) before asking the API server again', async () => {
    const tight = await startController({
      instance: uniqueName('api-http-authfail'),
      actions: false,
      api: { limits: { authenticationFailures: { perSecond: 0.1, burst: 3 } } },
    });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++)
        statuses.push(
          (await call('GET', '/v1/actions', { token: `bogus-${String(i)}`, server: tight })).status,
        );
      assert.deepEqual(statuses, [401, 401, 401, 429, 429]);
      const metrics = await (await fetch(`${tight.url}/metrics`)).text();
      assert.match(metrics, /gatehouse_http_api_requests_total\{route="list",code="401"\} 3/);
      assert.match(metrics, /gatehouse_http_api_requests_total\{route="list",code="429"\} 2/);
    } finally {
      await tight.stop();
    }
  });
});
