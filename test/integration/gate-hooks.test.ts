// Hooks against the sandbox: a failing Fail hook fails the action (never approved), an
// Ignore hook lets it go on, webhook hooks follow the callback protocol, and deleting an
// unfinished action cancels it and stops its hook Jobs.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { hookJobName } from '../../src/hooks/job.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import type { HookRequest } from '../../src/hooks/protocol.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  createGroupHook,
  API,
  createAction,
  testPlace,
  type Place,
  deleteActionsAfter,
  events,
  getAction,
  markExecuted,
  rebootNode,
  waitForActionGone,
  hookTemplate,
  startGateController,
  waitForPhase,
  watchActions,
  whoami,
} from '../support/gate.ts';
import { rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('gate-hooks');
let controller: Controller;
let me = '';

const place = (t: TestContext): Promise<Place> => testPlace(t, client, 'hooks');

function createHook(
  p: Place,
  kind: string,
  name: string,
  spec: Record<string, unknown>,
): Promise<{ uid: string }> {
  return createGroupHook(client, p, kind, name, spec);
}

async function jobsOf(
  namespace: string,
  actionUid: string,
): Promise<{ metadata: { name: string; deletionTimestamp?: string } }[]> {
  const list = await client.request<{ items: { metadata: { name: string; deletionTimestamp?: string } }[] }>(
    `/apis/batch/v1/namespaces/${namespace}/jobs`,
    { query: { labelSelector: `talos.dev/action-uid=${actionUid}` } },
  );
  return list.items;
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await stopAll(controller);
});

describe('hooks', () => {
  it('a failing Fail hook fails the action, which is never approved', async (t) => {
    const p = await place(t);
    await createHook(p, 'PreRebootJob', 'breaks', {
      template: hookTemplate('Failed', '1s'),
      failurePolicy: 'Fail',
    });
    await createHook(p, 'PreRebootJob', 'later', { template: hookTemplate('Succeeded'), order: 5 });
    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    const log = watchActions(client, `${INSTANCE_LABEL}=${instance}`, created.metadata.resourceVersion);
    t.after(() => log.stop());
    const failed = await waitForPhase(client, created.metadata.name, ['Failed', 'Approved', 'Succeeded']);
    assert.equal(failed.status?.phase, 'Failed');
    assert.match(
      failed.status.message ?? '',
      /pre-action hook failed: PreRebootJob .*\/breaks failed: .*Job .* failed: BackoffLimitExceeded/,
    );
    assert.equal(failed.status.approvalTime, undefined);
    assert.deepEqual(
      failed.status.hooks?.map((h) => [h.name, h.phase]),
      [['breaks', 'Failed']],
      'the hook of the next order never started',
    );
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(log.errors, []);
    const seen = log.phases.get(created.metadata.name) ?? [];
    assert.ok(!seen.includes('Approved'), `phases seen: ${seen.join(' → ')}`);
    assert.deepEqual(seen.slice(-3), ['WaitingForHealth', 'RunningPreHooks', 'Failed']);
    const reasons = (await events(client, created.metadata.name)).map((e) => e.reason);
    assert.ok(reasons.includes('Failed'));
    assert.ok(!reasons.includes('Approved'));
  });

  it('an Ignore hook that fails is recorded and the action goes on', async (t) => {
    const p = await place(t);
    await createHook(p, 'PreRebootJob', 'flaky', {
      template: hookTemplate('Failed', '1s'),
      failurePolicy: 'Ignore',
    });
    await createHook(p, 'PreRebootJob', 'solid', { template: hookTemplate('Succeeded', '1s') });
    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    const approved = await waitForPhase(client, created.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    const byName = new Map(approved.status.hooks?.map((h) => [h.name, h]));
    assert.equal(byName.get('flaky')?.phase, 'Failed');
    assert.equal(byName.get('flaky')?.failurePolicy, 'Ignore');
    assert.equal(byName.get('solid')?.phase, 'Succeeded');
    assert.match(
      approved.status.conditions?.find((c) => c.type === 'PreHooksSucceeded')?.message ?? '',
      /failures ignored: PreRebootJob .*\/flaky/,
    );
    // One Job per hook: each created exactly once.
    const jobs = await jobsOf(p.namespace, created.metadata.uid);
    assert.equal(jobs.length, 2);
  });

  it('calls webhook hooks with the HookRequest, honours retryAfterSeconds, and fails on Failure', async (t) => {
    const p = await place(t);
    const requests: HookRequest[] = [];
    const answers = new Map<string, { status: string; message: string; retryAfterSeconds?: number }[]>([
      [
        '/ready',
        [
          { status: 'Success', message: 'draining', retryAfterSeconds: 1 },
          { status: 'Success', message: 'drained' },
        ],
      ],
      ['/refuse', [{ status: 'Failure', message: 'placement groups are not clean' }]],
    ]);
    const server: Server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        requests.push(JSON.parse(body) as HookRequest);
        const queue = answers.get(req.url ?? '') ?? [];
        const answer = queue.length > 1 ? queue.shift() : queue[0];
        res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(answer ?? {}));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as AddressInfo).port;
    await client.request(`/api/v1/namespaces/${p.namespace}/services`, {
      method: 'POST',
      body: {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'ceph-hooks' },
        spec: { type: 'ExternalName', externalName: 'localhost', ports: [{ port, protocol: 'TCP' }] },
      },
    });
    const webhook = (path: string) => ({ service: { name: 'ceph-hooks', port }, path, scheme: 'HTTP' });
    await createHook(p, 'PreRebootJob', 'osd-ok-to-stop', { webhook: webhook('/ready') });

    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    const approved = await waitForPhase(client, created.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    const record = approved.status.hooks?.[0];
    assert.equal(record?.phase, 'Succeeded');
    assert.equal(record.message, 'drained');
    assert.equal(record.jobName, undefined);
    const calls = requests.filter((r) => r.hook.name === 'osd-ok-to-stop');
    assert.equal(calls.length, 2, 'asked once, told to wait, asked again');
    assert.deepEqual(calls[0], {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'HookRequest',
      action: {
        name: created.metadata.name,
        uid: created.metadata.uid,
        action: 'Reboot',
        node: p.node,
        bootID: approved.status.bootIDBefore,
        parameters: {},
      },
      hook: { kind: 'PreRebootJob', namespace: p.namespace, name: 'osd-ok-to-stop' },
    });
    const waited = Date.parse(record.completionTime ?? '') - Date.parse(record.startTime ?? '');
    assert.ok(
      waited >= 900,
      `retryAfterSeconds: 1 was honoured (${waited}ms between first call and success)`,
    );

    // A second action on the same node, with a hook that refuses.
    await createHook(p, 'PreRebootJob', 'refuses', { webhook: webhook('/refuse'), order: 10 });
    await client.request(`${API}/nodeactions/${created.metadata.name}`, { method: 'DELETE' });
    const second = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, second.metadata.name);
    const failed = await waitForPhase(client, second.metadata.name, ['Approved', 'Failed']);
    assert.equal(failed.status?.phase, 'Failed');
    assert.match(failed.status.message ?? '', /refuses failed: placement groups are not clean/);
  });

  it('an answer outside the protocol is an error, retried slowly, never a success', async (t) => {
    const p = await place(t);
    const calls = new Map<string, number>();
    const answers: Record<string, unknown> = {
      '/string': { status: 'Success', retryAfterSeconds: '30' },
      '/tiny': { status: 'Success', retryAfterSeconds: 0.0001 },
    };
    const server: Server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        calls.set(req.url ?? '', (calls.get(req.url ?? '') ?? 0) + 1);
        res
          .writeHead(200, { 'Content-Type': 'application/json' })
          .end(JSON.stringify(answers[req.url ?? '']));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as AddressInfo).port;
    await client.request(`/api/v1/namespaces/${p.namespace}/services`, {
      method: 'POST',
      body: {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'odd-hooks' },
        spec: { type: 'ExternalName', externalName: 'localhost', ports: [{ port, protocol: 'TCP' }] },
      },
    });
    const webhook = (path: string) => ({ service: { name: 'odd-hooks', port }, path, scheme: 'HTTP' });
    await createHook(p, 'PreRebootJob', 'says-string', { webhook: webhook('/string') });
    await createHook(p, 'PreRebootJob', 'says-tiny', { webhook: webhook('/tiny') });
    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    const started = Date.now();
    const running = await waitFor('both hooks to have answered', async () => {
      const a = await getAction(client, created.metadata.name);
      assert.notEqual(a.status?.phase, 'Approved', 'an answer outside the protocol approved the action');
      const messages = a.status?.hooks?.map((h) => h.message ?? '') ?? [];
      return messages.length === 2 && messages.every((m) => /outside the hook protocol/.test(m))
        ? a
        : undefined;
    });
    const byName = new Map(running.status?.hooks?.map((h) => [h.name, h]));
    assert.match(byName.get('says-string')?.message ?? '', /retryAfterSeconds is "30", not an integer ≥ 0/);
    assert.match(byName.get('says-tiny')?.message ?? '', /retryAfterSeconds is 0\.0001, not an integer ≥ 0/);
    await new Promise((r) => setTimeout(r, Math.max(0, 6000 - (Date.now() - started))));
    const action = await getAction(client, created.metadata.name);
    assert.equal(action.status?.phase, 'RunningPreHooks');
    const elapsed = (Date.now() - started) / 1000;
    for (const path of ['/string', '/tiny']) {
      const n = calls.get(path) ?? 0;
      // An error is asked again after a back-off of seconds: a handful of calls, not thousands.
      assert.ok(n >= 1 && n <= Math.ceil(elapsed / 5) + 1, `${path}: ${n} calls in ${elapsed}s`);
    }
  });

  it("a Job under the hook Job's name that gatehouse did not create is not adopted", async (t) => {
    const p = await place(t);
    await createHook(p, 'PreRebootJob', 'first', { template: hookTemplate('Succeeded', '3s'), order: 1 });
    const guard = await createHook(p, 'PreRebootJob', 'guard', { template: hookTemplate('Hang'), order: 2 });
    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    // A namespace editor squats the name the guard's Job will have, with a Job that succeeds.
    const name = hookJobName(
      {
        node: p.node,
        action: { name: created.metadata.name, uid: created.metadata.uid, action: 'Reboot', parameters: {} },
      },
      { metadata: { name: 'guard', uid: guard.uid } } as HookObject,
      1,
    );
    const impostor = hookTemplate('Succeeded', '0s');
    await client.request(`/apis/batch/v1/namespaces/${p.namespace}/jobs`, {
      method: 'POST',
      body: { apiVersion: 'batch/v1', kind: 'Job', metadata: { name }, ...impostor },
    });
    const ended = await waitForPhase(client, created.metadata.name, ['Failed', 'Approved']);
    assert.equal(ended.status?.phase, 'Failed', 'the impostor Job passed for the guard hook');
    const record = ended.status.hooks?.find((h) => h.name === 'guard');
    assert.equal(record?.phase, 'Failed');
    assert.match(
      record.message ?? '',
      new RegExp(
        `Job ${p.namespace}/${name} was not created by gatehouse for this run \\(its label app.kubernetes.io/managed-by is missing`,
      ),
    );
    assert.match(ended.status.message ?? '', /guard failed: Job .* was not created by gatehouse/);
  });

  it('deleting an unfinished action cancels it and deletes its running hook Jobs', async (t) => {
    const p = await place(t);
    await createHook(p, 'PreRebootJob', 'hangs', { template: hookTemplate('Hang') });
    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    await waitFor('the hook Job to run', async () => {
      const a = await getAction(client, created.metadata.name);
      return a.status?.hooks?.[0]?.phase === 'Running' ? a : undefined;
    });
    assert.equal((await jobsOf(p.namespace, created.metadata.uid)).length, 1);
    await client.request(`${API}/nodeactions/${created.metadata.name}`, { method: 'DELETE' });
    await waitForActionGone(client, created.metadata.name, 'the action to be gone', 30_000);
    await waitFor('its Job to be deleted', async () => {
      const jobs = await jobsOf(p.namespace, created.metadata.uid);
      return jobs.every((j) => j.metadata.deletionTimestamp) ? true : undefined;
    });
    const cancelled = (await events(client, created.metadata.name)).find((e) => e.reason === 'Cancelled');
    assert.ok(cancelled, 'a Cancelled event');
    assert.match(cancelled.message, /deleted before it finished \(it was RunningPreHooks\)/);
  });

  it('a hook deleted while it runs closes its run and deletes its Job; the action keeps no finalizer', async (t) => {
    const p = await place(t);
    await createHook(p, 'PreRebootJob', 'hangs', { template: hookTemplate('Hang') });
    await createHook(p, 'PreRebootJob', 'quick', { template: hookTemplate('Succeeded', '1s'), order: 5 });
    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    await waitFor('the hanging hook to run', async () => {
      const a = await getAction(client, created.metadata.name);
      return a.status?.hooks?.find((h) => h.name === 'hangs')?.phase === 'Running' ? a : undefined;
    });
    await client.request(`${API}/namespaces/${p.namespace}/prerebootjobs/hangs`, { method: 'DELETE' });
    const approved = await waitForPhase(client, created.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    const closed = approved.status.hooks?.find((h) => h.name === 'hangs');
    assert.equal(closed?.phase, 'Failed', 'the run of the deleted hook still says it runs');
    assert.match(
      closed.message ?? '',
      /hangs was deleted, or no longer selects node .*, while it ran: its run is closed and its Job deleted/,
    );
    await waitFor('its Job to be deleted', async () => {
      const jobs = await jobsOf(p.namespace, created.metadata.uid);
      const job = jobs.find((j) => j.metadata.name === closed.jobName);
      return !job || job.metadata.deletionTimestamp ? true : undefined;
    });
    // The action ends, and lets go of its finalizer.
    await markExecuted(client, created.metadata.name);
    await rebootNode(client, p.node);
    const done = await waitForPhase(client, created.metadata.name, ['Succeeded', 'Failed']);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    await waitFor('the finalizer to go', async () => {
      const a = await getAction(client, created.metadata.name);
      return (a.metadata.finalizers ?? []).includes('talos.dev/node-action') ? undefined : true;
    });
  });
});
