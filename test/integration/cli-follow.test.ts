// Following an action with a kubeconfig: the CLI watches the action and its node, so it
// shows every phase the API server recorded, in order, even one that lasted a few
// milliseconds — checked against a watch of the test's own. The watch it follows
// through survives the server ending it, expired history (410 Gone), a stream that goes
// silent, and stops at once, leaving nothing open, when the caller aborts.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it, type TestContext } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import type { Progress } from '../../src/cli/backend.ts';
import { EXIT } from '../../src/cli/exit.ts';
import { KubeBackend } from '../../src/cli/kube-backend.ts';
import { progressEvents } from '../../src/cli/progress.ts';
import { codeOf } from '../../src/cli/rollout.ts';
import type { KubeObject } from '../../src/kube/informer.ts';
import { RestClient, type WatchEvent } from '../../src/kube/rest.ts';
import { ObjectWatch } from '../../src/kube/watch.ts';
import { errorMessage, sleep } from '../../src/wait.ts';
import { compactEtcd } from '../../sandbox/cluster.ts';
import { NODE, cliEnv } from '../support/cli.ts';
import {
  API,
  createTestNodes,
  deleteActionsAfter,
  rebootNode,
  startGateController,
  waitForActionGone,
  watchActions,
} from '../support/gate.ts';
import { installGatehouseAPI, repoRoot } from '../support/install.ts';
import {
  freshNamespace,
  rest,
  switchableCheck,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('cli-follow');
const selector = `${INSTANCE_LABEL}=${instance}`;
let controller: Controller;

before(async () => {
  await installGatehouseAPI(kc);
  controller = await startGateController(instance);
});

after(async () => {
  await stopAll(controller);
});

const phaseOf = (action: { status?: { phase?: string } } | undefined) =>
  action ? (action.status?.phase ?? '(new)') : '(deleted)';

/** Appends unless it repeats the last entry: the phases, not every version. */
function collapse(list: string[], phase: string): void {
  if (list.at(-1) !== phase) list.push(phase);
}

/** The truth: every phase the API server recorded for this instance's actions, with when it was seen. */
async function recordPhases(t: TestContext) {
  const list = await client.request<{ metadata: { resourceVersion: string } }>(`${API}/nodeactions`, {
    query: { labelSelector: selector, limit: 1 },
  });
  const seen = new Map<string, { phase: string; at: number }[]>();
  const log = watchActions(client, selector, list.metadata.resourceVersion, (action, type) => {
    const entries = seen.get(action.metadata.name) ?? [];
    const phase = type === 'DELETED' ? '(deleted)' : phaseOf(action);
    if (entries.at(-1)?.phase !== phase) entries.push({ phase, at: Date.now() });
    seen.set(action.metadata.name, entries);
  });
  t.after(() => log.stop());
  return {
    async phases(name: string, last: string): Promise<{ phase: string; at: number }[]> {
      return waitFor(`the test's watch to see ${name} reach ${last}`, () => {
        const entries = seen.get(name);
        return entries?.some((e) => e.phase === last) ? entries : undefined;
      });
    },
    errors: log.errors,
  };
}

/** A node of the test's own, its group, and a check on it that holds actions until switched healthy. */
async function heldNode(t: TestContext, healthy = false) {
  const group = uniqueName('follow');
  const check = await switchableCheck(t, kc, group, healthy, { [INSTANCE_LABEL]: instance });
  const [node = ''] = await createTestNodes(t, client, uniqueName('follow'), 1, {
    'gatehouse.test/group': group,
  });
  return { node, check };
}

describe('following an action with a kubeconfig', () => {
  it('shows every phase the action went through, in order, those shorter than a second too', async (t) => {
    const truth = await recordPhases(t);
    const { node } = await heldNode(t, true);
    const backend = new KubeBackend(kc, { instance });
    const action = await backend.createAction({ nodeName: node, action: 'Reboot', execution: 'External' });
    const name = action.metadata.name;
    deleteActionsAfter(t, client, name);

    // Plays the requester (the mark, once Approved) and the node (a new boot, once waited for).
    const observed: string[] = [];
    const chores: Promise<unknown>[] = [];
    const final = await backend.follow(
      name,
      (progress) => {
        const phase = phaseOf(progress.action);
        if (observed.at(-1) === phase) return;
        observed.push(phase);
        if (phase === 'Approved') chores.push(backend.markExecuted(name));
        if (phase === 'WaitingForNode') chores.push(rebootNode(client, node));
      },
      { signal: AbortSignal.timeout(120_000) },
    );
    await Promise.all(chores);
    assert.equal(phaseOf(final.action), 'Succeeded', final.action?.status?.message);

    const recorded = await truth.phases(name, 'Succeeded');
    assert.deepEqual(truth.errors, []);
    assert.deepEqual(
      observed,
      recorded.map((e) => e.phase),
      'the CLI saw exactly the phases the API server recorded',
    );
    const lasted = recorded
      .slice(0, -1)
      .map((e, i) => ({ phase: e.phase, ms: (recorded[i + 1]?.at ?? e.at) - e.at }));
    t.diagnostic(`phases: ${lasted.map((l) => `${l.phase} ${String(l.ms)}ms`).join(', ')}`);
    assert.ok(
      lasted.some((l) => l.phase !== '(new)' && l.ms < 1000),
      'at least one phase lasted less than a second (what polling every second could miss)',
    );
  });

  it('resumes the watches the server ends, without missing a phase', async (t) => {
    const truth = await recordPhases(t);
    const { node, check } = await heldNode(t);
    // Every watch ends after a second; the action waits at the health gate for several.
    const backend = new KubeBackend(kc, { instance, watchTimeoutSeconds: 1 });
    const action = await backend.createAction({ nodeName: node, action: 'Reboot', execution: 'External' });
    const name = action.metadata.name;
    deleteActionsAfter(t, client, name);
    const observed: string[] = [];
    let switched: Promise<void> | undefined;
    const final = await backend.follow(
      name,
      (progress) => {
        collapse(observed, phaseOf(progress.action));
        if (phaseOf(progress.action) === 'WaitingForHealth' && !switched) {
          switched = new Promise((r) => setTimeout(r, 4000)).then(() => check.set(true));
        }
      },
      { until: (p) => phaseOf(p.action) === 'Approved', signal: AbortSignal.timeout(120_000) },
    );
    await switched;
    assert.equal(phaseOf(final.action), 'Approved');
    const recorded = await truth.phases(name, 'Approved');
    assert.deepEqual(
      observed,
      recorded.map((e) => e.phase),
    );
  });

  it("ends with the node as it is, even when the node's watch lags the action's", async (t) => {
    const { node } = await heldNode(t, true);
    const backend = new KubeBackend(kc, { instance });
    // The node's watch events reach the CLI two seconds late (a slow stream, a busy
    // machine); the action's are on time, so the action is Succeeded before the CLI
    // has seen the reboot through the node's watch.
    class LaggingNodeWatch extends RestClient {
      override watch(
        path: string,
        query: Record<string, string | number | boolean | undefined>,
        onEvent: (event: WatchEvent) => void,
        signal?: AbortSignal,
        onOpen?: () => void,
      ): Promise<void> {
        const late = (event: WatchEvent) => void sleep(2000).then(() => onEvent(event));
        return super.watch(path, query, path === '/api/v1/nodes' ? late : onEvent, signal, onOpen);
      }
    }
    const slowed = new LaggingNodeWatch(kc);
    (backend as unknown as { rest: RestClient }).rest = slowed;
    const action = await backend.createAction({ nodeName: node, action: 'Reboot', execution: 'External' });
    const name = action.metadata.name;
    deleteActionsAfter(t, client, name);

    const seen: Progress[] = [];
    let rebooted: Promise<string> | undefined;
    const final = await backend.follow(
      name,
      (progress) => {
        seen.push(progress);
        if (phaseOf(progress.action) === 'Approved') {
          rebooted ??= backend.markExecuted(name).then(() => rebootNode(client, node));
        }
      },
      { signal: AbortSignal.timeout(60_000) },
    );
    const bootID = await rebooted;
    assert.equal(phaseOf(final.action), 'Succeeded', final.action?.status?.message);
    assert.equal(final.node?.bootID, bootID, 'the last picture has the node in its new boot');
    const story = seen.flatMap((p, i) => progressEvents(seen[i - 1], p));
    assert.ok(
      story.some((l) => l.includes(`node ${node} booted again`)),
      `the story tells the reboot:\n${story.join('\n')}`,
    );
  });

  it('ends with the action gone when it is deleted, as cancelled (exit code 3)', async (t) => {
    const { node } = await heldNode(t);
    const backend = new KubeBackend(kc, { instance });
    const action = await backend.createAction({ nodeName: node, action: 'Reboot', execution: 'External' });
    const name = action.metadata.name;
    deleteActionsAfter(t, client, name);
    let deleting: Promise<unknown> | undefined;
    const final = await backend.follow(
      name,
      (progress) => {
        if (phaseOf(progress.action) === 'WaitingForHealth') {
          deleting ??= client.request(`${API}/nodeactions/${name}`, { method: 'DELETE' });
        }
      },
      { signal: AbortSignal.timeout(60_000) },
    );
    await deleting;
    assert.ok(!final.action || final.action.status?.phase === 'Cancelled', phaseOf(final.action));
    assert.equal(codeOf(final, false), EXIT.cancelled);

    // An action that does not exist (any more) ends the follow at once, the same way.
    await waitForActionGone(client, name, `${name} to be gone`);
    const fresh = new KubeBackend(kc, { instance });
    const missing = await fresh.follow(name, () => undefined, { signal: AbortSignal.timeout(10_000) });
    assert.equal(missing.action, undefined);
    assert.equal(codeOf(missing, false), EXIT.cancelled);
  });

  it('stops at once when aborted, and leaves nothing behind that keeps a process running', async (t) => {
    const { node } = await heldNode(t);
    const backend = new KubeBackend(kc, { instance, safetyPollMs: 200 });
    const action = await backend.createAction({ nodeName: node, action: 'Reboot', execution: 'External' });
    const name = action.metadata.name;
    deleteActionsAfter(t, client, name);

    const interrupt = new AbortController();
    const seen: Progress[] = [];
    const following = backend.follow(name, (p) => seen.push(p), { signal: interrupt.signal });
    await waitFor('the action at the health gate', () =>
      seen.some((p) => phaseOf(p.action) === 'WaitingForHealth') ? true : undefined,
    );
    const reason = new Error('interrupted');
    const started = Date.now();
    interrupt.abort(reason);
    await assert.rejects(following, (error) => error === reason);
    assert.ok(Date.now() - started < 1000, `took ${String(Date.now() - started)}ms to stop`);

    // The same in a process of its own, which must then exit by itself: an open socket
    // or a pending timer would keep it running.
    const module = (path: string) => JSON.stringify(pathToFileURL(join(repoRoot, path)).href);
    const script = `
      import { KubeConfig } from '@kubernetes/client-node';
      import { KubeBackend } from ${module('src/cli/kube-backend.ts')};
      const kc = new KubeConfig();
      kc.loadFromFile(process.env.GATEHOUSE_TEST_KUBECONFIG);
      const backend = new KubeBackend(kc, { safetyPollMs: 200, watchTimeoutSeconds: 300 });
      const interrupt = new AbortController();
      const phases = [];
      const following = backend.follow(${JSON.stringify(name)}, (p) => {
        phases.push(p.action?.status?.phase);
        if (p.action?.status?.phase === 'WaitingForHealth') setTimeout(() => interrupt.abort(new Error('interrupted')), 1000);
      }, { signal: interrupt.signal });
      try { await following; } catch (error) { process.stdout.write(JSON.stringify({ error: error.message, phases })); }
    `;
    const started2 = Date.now();
    const child = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        NODE,
        ['--input-type=module', '-e', script],
        { cwd: repoRoot, env: cliEnv(), timeout: 30_000 },
        (error, stdout, stderr) =>
          resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }),
      );
    });
    assert.equal(child.code, 0, `the process did not exit by itself: ${child.stderr}`);
    const result = JSON.parse(child.stdout) as { error: string; phases: string[] };
    assert.equal(result.error, 'interrupted');
    assert.ok(result.phases.includes('WaitingForHealth'));
    assert.ok(Date.now() - started2 < 15_000, `the process took ${String(Date.now() - started2)}ms`);
  });
});

describe('ObjectWatch', () => {
  it('resumes from the last version when the server ends the watch, missing none', async (t) => {
    const namespace = await freshNamespace(t);
    const path = `/api/v1/namespaces/${namespace}/configmaps`;
    const written: string[] = [];
    const created = await client.request<KubeObject>(path, {
      method: 'POST',
      body: { metadata: { name: 'counter' }, data: { n: '0' } },
    });
    written.push(created.metadata.resourceVersion ?? '');
    const delivered: string[] = [];
    const watch = new ObjectWatch<KubeObject>({
      rest: client,
      path,
      name: 'counter',
      watchTimeoutSeconds: 1,
      onVersion: (o) => delivered.push(o?.metadata.resourceVersion ?? '(gone)'),
    });
    const stop = new AbortController();
    const running = watch.run(stop.signal);
    t.after(() => stop.abort());
    // The first version comes from a read: change nothing before it has.
    await waitFor('the first version', () => (delivered.length > 0 ? true : undefined));
    for (let i = 1; i <= 25; i++) {
      const patched = await client.request<KubeObject>(`${path}/counter`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { data: { n: String(i) } },
      });
      written.push(patched.metadata.resourceVersion ?? '');
      await new Promise((r) => setTimeout(r, 150));
    }
    await client.request(`${path}/counter`, { method: 'DELETE' });
    written.push('(gone)');
    await waitFor('every version delivered', () => (delivered.at(-1) === '(gone)' ? true : undefined));
    stop.abort();
    await running;
    assert.deepEqual(delivered, written);
    assert.ok(watch.stats.watches >= 3, `expected several watches, saw ${String(watch.stats.watches)}`);
    assert.equal(watch.stats.reads, 1, 'resuming needs no read');
  });

  it('reads the object again and watches from there when its history has expired (410 Gone)', async (t) => {
    // PodTemplates skip the sandbox's watch cache, so compacting etcd expires their history.
    const namespace = await freshNamespace(t);
    const path = `/api/v1/namespaces/${namespace}/podtemplates`;
    const template = (image: string) => ({
      metadata: { name: 'followed' },
      template: { spec: { containers: [{ name: 'c', image }] } },
    });
    const old = await client.request<KubeObject>(path, { method: 'POST', body: template('one') });
    let now = old;
    for (const image of ['two', 'three']) {
      now = await client.request<KubeObject>(`${path}/followed`, { method: 'PUT', body: template(image) });
    }
    // The history from `old` on is gone (the version after it included).
    await compactEtcd(await testSandboxState());
    const delivered: string[] = [];
    const watch = new ObjectWatch<KubeObject>({
      rest: client,
      path,
      name: 'followed',
      from: old,
      onVersion: (o) => delivered.push(o?.metadata.resourceVersion ?? '(gone)'),
    });
    const stop = new AbortController();
    const running = watch.run(stop.signal);
    t.after(() => stop.abort());
    await waitFor('the current version after a 410', () =>
      delivered.includes(now.metadata.resourceVersion ?? '') ? true : undefined,
    );
    stop.abort();
    await running;
    assert.equal(watch.stats.gone, 1);
    assert.deepEqual(delivered, [old.metadata.resourceVersion, now.metadata.resourceVersion]);
  });

  it('restarts a watch that goes silent while the object changes, and delivers what it missed', async (t) => {
    const namespace = await freshNamespace(t);
    const path = `/api/v1/namespaces/${namespace}/configmaps`;
    // A stream that stays open but carries nothing, as behind a proxy that lost it: the
    // first watch's events are dropped.
    class SilentFirstWatch extends RestClient {
      watchesStarted = 0;
      override watch(
        p: string,
        query: Record<string, string | number | boolean | undefined>,
        onEvent: (event: WatchEvent) => void,
        signal?: AbortSignal,
        onOpen?: () => void,
      ): Promise<void> {
        const silent = ++this.watchesStarted === 1;
        return super.watch(p, query, (event) => (silent ? undefined : onEvent(event)), signal, onOpen);
      }
    }
    const silentRest = new SilentFirstWatch(kc);
    const created = await client.request<KubeObject>(path, {
      method: 'POST',
      body: { metadata: { name: 'quiet' }, data: { n: '0' } },
    });
    const delivered: string[] = [];
    const watch = new ObjectWatch<KubeObject>({
      rest: silentRest,
      path,
      name: 'quiet',
      safetyPollMs: 300,
      onVersion: (o) => delivered.push(o?.metadata.resourceVersion ?? '(gone)'),
    });
    const stop = new AbortController();
    const running = watch.run(stop.signal);
    t.after(() => stop.abort());
    await waitFor('the first version', () => (delivered.length > 0 ? true : undefined));
    const written = [created.metadata.resourceVersion];
    for (let i = 1; i <= 3; i++) {
      const patched = await client.request<KubeObject>(`${path}/quiet`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { data: { n: String(i) } },
      });
      written.push(patched.metadata.resourceVersion);
    }
    await waitFor('the versions the silent watch missed', () =>
      delivered.length === written.length ? true : undefined,
    );
    stop.abort();
    await running;
    assert.deepEqual(delivered, written);
    assert.equal(watch.stats.stalls, 1);
    assert.equal(watch.stats.reads, 1);
    assert.equal(silentRest.watchesStarted, 2);
  });

  it('rejects with what went wrong once nothing has worked for a while', async () => {
    const unreachable = new KubeConfig();
    unreachable.loadFromOptions({
      clusters: [{ name: 'nowhere', server: 'https://127.0.0.1:9' }],
      users: [{ name: 'nobody' }],
      contexts: [{ name: 'nowhere', cluster: 'nowhere', user: 'nobody' }],
      currentContext: 'nowhere',
    });
    const nowhere = new RestClient(unreachable);
    const watch = new ObjectWatch<KubeObject>({
      rest: nowhere,
      path: '/api/v1/nodes',
      name: 'cp-1',
      giveUpAfterMs: 500,
      minBackoffMs: 50,
      onVersion: () => undefined,
    });
    await assert.rejects(watch.run(new AbortController().signal), (error) => {
      assert.match(errorMessage(error), /ECONNREFUSED/);
      return true;
    });
  });
});
