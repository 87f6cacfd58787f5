// The supervised informer keeps an exact cache through what real clusters do to
// watches: streams the server ends, watches that go silent, and expired history.
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Informer, type KubeObject } from '../../src/kube/informer.ts';
import { NODE_LIST } from '../../src/kube/node-protobuf.ts';
import { NODE_UNREAD, slimNode } from '../../src/kube/nodes.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { sleep } from '../../src/wait.ts';
import { compactEtcd } from '../../sandbox/cluster.ts';
import {
  freshNamespace,
  rest,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const api = rest(kc);

function informer(
  t: TestContext,
  namespace: string,
  options: { watchTimeoutSeconds?: number; idleTimeoutMs?: number; liveSilenceMs?: number } = {},
) {
  const inf = new Informer<KubeObject & { data?: Record<string, string> }>({
    rest: api,
    path: `/api/v1/namespaces/${namespace}/configmaps`,
    log: silentLogger(),
    minBackoffMs: 50,
    ...options,
  });
  inf.start();
  t.after(() => inf.stop());
  return inf;
}

const create = (namespace: string, name: string, data: Record<string, string> = {}) =>
  api.request(`/api/v1/namespaces/${namespace}/configmaps`, {
    method: 'POST',
    body: { metadata: { name }, data },
  });

/** The informer's cache equals the server's list (names and resourceVersions). */
async function consistent(inf: Informer<KubeObject>, namespace: string): Promise<void> {
  await waitFor('the cache to match the server', async (observe) => {
    const list = await api.request<{ items: KubeObject[] }>(`/api/v1/namespaces/${namespace}/configmaps`);
    const server = list.items.map((o) => `${o.metadata.name}@${o.metadata.resourceVersion ?? ''}`).sort();
    const cache = inf
      .list()
      .map((o) => `${o.metadata.name}@${o.metadata.resourceVersion ?? ''}`)
      .sort();
    observe(`server ${server.length} objects, cache ${cache.length}`);
    return JSON.stringify(server) === JSON.stringify(cache) ? true : undefined;
  });
}

/**
 * The cached Node equals the served one, slimmed as the cache keeps it (list items carry no
 * kind), once both are at the same version: the node lifecycle controller writes new Nodes.
 */
async function sameAsServed(inf: Informer<KubeObject>, name: string): Promise<void> {
  const [cached, served] = await waitFor('the cache and the server at the same version', async () => {
    const node = await api.request<KubeObject>(`/api/v1/nodes/${name}`);
    const inCache = inf.get(name);
    return inCache?.metadata.resourceVersion === node.metadata.resourceVersion ? [inCache, node] : undefined;
  });
  const {
    kind: _kind,
    apiVersion: _apiVersion,
    ...rest
  } = served as KubeObject & { kind?: string; apiVersion?: string };
  delete (rest.metadata as { managedFields?: unknown }).managedFields;
  const {
    kind: _k,
    apiVersion: _a,
    ...cachedRest
  } = cached as KubeObject & { kind?: string; apiVersion?: string };
  assert.deepEqual(cachedRest, slimNode(rest));
}

describe('Informer', () => {
  it('reports adds, updates and deletes', async (t) => {
    const namespace = await freshNamespace(t);
    const inf = informer(t, namespace);
    const seen: string[] = [];
    inf.on('add', (o) => seen.push(`add ${o.metadata.name}`));
    inf.on('update', (_, o) => seen.push(`update ${o.metadata.name}`));
    inf.on('delete', (o) => seen.push(`delete ${o.metadata.name}`));
    await inf.waitForSync();
    await create(namespace, 'one');
    await api.request(`/api/v1/namespaces/${namespace}/configmaps/one`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { data: { k: 'v' } },
    });
    await api.request(`/api/v1/namespaces/${namespace}/configmaps/one`, { method: 'DELETE' });
    await waitFor('three events', () =>
      seen.filter((s) => s.endsWith(' one')).length >= 3 ? true : undefined,
    );
    assert.deepEqual(
      seen.filter((s) => s.endsWith(' one')),
      ['add one', 'update one', 'delete one'],
    );
  });

  it('caches what its transform leaves, listed or watched, and never managedFields', async (t) => {
    const namespace = await freshNamespace(t);
    await create(namespace, 'listed', { keep: 'a', big: 'x'.repeat(1000) });
    const inf = new Informer<KubeObject & { data?: Record<string, string> }>({
      rest: api,
      path: `/api/v1/namespaces/${namespace}/configmaps`,
      log: silentLogger(),
      transform: (o) => {
        delete o.data?.big;
        return o;
      },
    });
    inf.start();
    t.after(() => inf.stop());
    await inf.waitForSync();
    await create(namespace, 'watched', { keep: 'b', big: 'y'.repeat(1000) });
    const watched = await waitFor('the watched config map in the cache', () =>
      inf.get(`${namespace}/watched`),
    );
    const listed = inf.get(`${namespace}/listed`);
    assert.ok(listed);
    assert.deepEqual(listed.data, { keep: 'a' });
    assert.deepEqual(watched.data, { keep: 'b' });
    for (const o of [listed, watched])
      assert.equal((o.metadata as { managedFields?: unknown }).managedFields, undefined);
  });

  it('leaves the members `omit` names out of listed objects undecoded: a listed Node is cached as a watched one', async (t) => {
    const name = uniqueName('omit');
    const busy = {
      images: [{ names: ['registry.example/app@sha256:1', 'registry.example/app:v1'], sizeBytes: 1234 }],
      volumesInUse: ['kubernetes.io/csi/driver^volume-1'],
      volumesAttached: [{ name: 'kubernetes.io/csi/driver^volume-1', devicePath: '' }],
      nodeInfo: { bootID: 'b-1', osImage: 'Talos (v1.13.0)', kubeletVersion: 'v1.36.0' },
      conditions: [
        { type: 'Ready', status: 'False', reason: 'Test', message: 'a "quoted", [bracketed] message' },
      ],
    };
    await api.request('/api/v1/nodes', {
      method: 'POST',
      body: { metadata: { name, labels: { 'gatehouse.test/omit': name } }, status: busy },
    });
    t.after(() => api.request(`/api/v1/nodes/${name}`, { method: 'DELETE' }).catch(() => undefined));
    const decoded: { images: boolean; managedFields: boolean }[] = [];
    const inf = new Informer<KubeObject>({
      rest: api,
      path: '/api/v1/nodes',
      labelSelector: `gatehouse.test/omit=${name}`,
      log: silentLogger(),
      omit: NODE_UNREAD,
      transform: (node) => {
        const seen = node as { status?: { images?: unknown }; metadata: { managedFields?: unknown } };
        decoded.push({
          images: seen.status?.images !== undefined,
          managedFields: seen.metadata.managedFields !== undefined,
        });
        return slimNode(node);
      },
    });
    inf.start();
    t.after(() => inf.stop());
    await inf.waitForSync();
    // The list's item reached the transform without them: they were never parsed.
    assert.deepEqual(decoded[0], { images: false, managedFields: false });
    await sameAsServed(inf, name);
    assert.equal(
      (inf.get(name) as { status?: { conditions?: unknown[] } } | undefined)?.status?.conditions?.length,
      1,
    );
    // A watched change is decoded whole and slimmed by the transform alone: the same shape.
    await api.request(`/api/v1/nodes/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { touched: 'yes' } } },
    });
    await waitFor('the watched change in the cache', () => inf.get(name)?.metadata.annotations?.touched);
    assert.equal(decoded.at(-1)?.images, true);
    await sameAsServed(inf, name);
  });

  it('resumes watches the server ends without missing a change', async (t) => {
    const namespace = await freshNamespace(t);
    const inf = informer(t, namespace, { watchTimeoutSeconds: 1 });
    await inf.waitForSync();
    for (let i = 0; i < 30; i++) {
      await create(namespace, `cm-${String(i)}`);
      await sleep(100);
    }
    await consistent(inf, namespace);
    assert.ok(inf.stats.watches >= 3, `expected several watches, saw ${String(inf.stats.watches)}`);
    assert.equal(inf.stats.lists, 1, 'resuming needs no relist');
  });

  it('restarts a watch that goes silent', async (t) => {
    const namespace = await freshNamespace(t);
    const inf = informer(t, namespace, { watchTimeoutSeconds: 300, idleTimeoutMs: 300 });
    await inf.waitForSync();
    await waitFor('the watchdog to restart a silent watch', () =>
      inf.stats.watchdogRestarts >= 1 ? true : undefined,
    );
    await create(namespace, 'after-silence');
    await waitFor('the informer to see a create after the restart', () =>
      inf.get(`${namespace}/after-silence`),
    );
  });

  it('is live only while synced, its watch open and heard from lately', async (t) => {
    const namespace = await freshNamespace(t);
    const inf = informer(t, namespace, { watchTimeoutSeconds: 300, liveSilenceMs: 1500 });
    assert.equal(inf.live, false, 'not live before the first list');
    await inf.waitForSync();
    await waitFor('the watch to open', () => (inf.live ? true : undefined));
    // Nothing happens in the namespace, and bookmarks come once a minute: it goes quiet.
    await waitFor('a quiet watch to stop counting as live', () => (inf.live ? undefined : true), {
      timeoutMs: 10_000,
    });
    await create(namespace, 'wakes-it');
    await waitFor('an event to make it live again', () => (inf.live ? true : undefined));
    await inf.stop();
    assert.equal(inf.live, false, 'a stopped informer is not live');
  });

  it('is live from the end of its list, before its watch has answered', async (t) => {
    const namespace = await freshNamespace(t);
    const inf = informer(t, namespace);
    const at: boolean[] = [];
    inf.once('synced', () => at.push(inf.live));
    await inf.waitForSync();
    assert.deepEqual(at, [true], 'not live as the list ended');
  });

  it('is not live while its watch reconnects', async (t) => {
    const namespace = await freshNamespace(t);
    const inf = informer(t, namespace);
    await inf.waitForSync();
    await waitFor('the watch to open', () => (inf.live ? true : undefined));
    const states: boolean[] = [];
    const sample = setInterval(() => states.push(inf.live), 1);
    t.after(() => clearInterval(sample));
    const watches = inf.stats.watches;
    // As if the connection dropped: the watch resumes from where it was.
    inf.resumeFrom(inf.watchedVersion ?? '');
    await waitFor('the watch to reopen', () => (inf.stats.watches > watches && inf.live ? true : undefined));
    clearInterval(sample);
    assert.ok(states.includes(false), 'live throughout a broken watch');
  });

  it('relists when the watch history has expired (410 Gone), emitting what it missed', async (t) => {
    // PodTemplates skip the sandbox's watch cache, so compacting etcd expires their history.
    const namespace = await freshNamespace(t);
    const path = `/api/v1/namespaces/${namespace}/podtemplates`;
    const template = (name: string) => ({
      metadata: { name },
      template: { spec: { containers: [{ name: 'c', image: 'i' }] } },
    });
    await api.request(path, { method: 'POST', body: template('doomed') });
    const inf = new Informer<KubeObject>({ rest: api, path, log: silentLogger(), minBackoffMs: 50 });
    inf.start();
    t.after(() => inf.stop());
    await inf.waitForSync();
    const deleted: string[] = [];
    inf.on('delete', (o) => deleted.push(o.metadata.name));
    const position = inf.list()[0]?.metadata.resourceVersion ?? '';
    await inf.stop(); // the informer is away...
    await api.request(`${path}/doomed`, { method: 'DELETE' });
    await api.request(path, { method: 'POST', body: template('born-while-away') });
    await compactEtcd(await testSandboxState()); // ...the cluster compacts its history...
    inf.resumeFrom(position); // ...and the informer comes back from where it was
    inf.start();
    await waitFor('a 410 relist', () => (inf.stats.gone >= 1 ? true : undefined));
    await waitFor('the informer to see what happened while it was away', () =>
      inf.get(`${namespace}/born-while-away`) && !inf.get(`${namespace}/doomed`) ? true : undefined,
    );
    assert.deepEqual(deleted, ['doomed']);
    assert.equal(inf.stats.lists, 2);
  });

  it('lists in pages, each decoded as it arrives, and caches every object of every page', async (t) => {
    const namespace = await freshNamespace(t);
    // Text that a decoder cutting at the wrong byte would break: quotes, brackets, escapes, UTF-8.
    const text = (i: number) => `"${'é日😀\\]},'.repeat(i * 40)}"`;
    await Promise.all(
      Array.from({ length: 23 }, (_, i) => create(namespace, `cm-${String(i)}`, { text: text(i) })),
    );
    const pages: (string | undefined)[] = [];
    const counting = Object.assign(Object.create(api) as RestClient, {
      listPage: (...args: Parameters<RestClient['listPage']>) => {
        pages.push(args[1].query?.continue as string | undefined);
        return api.listPage(...args);
      },
    });
    const inf = new Informer<KubeObject & { data?: Record<string, string> }>({
      rest: counting,
      path: `/api/v1/namespaces/${namespace}/configmaps`,
      log: silentLogger(),
      pageSize: 5,
    });
    inf.start();
    t.after(() => inf.stop());
    await inf.waitForSync();
    assert.equal(pages.length, 5, '23 objects in pages of 5');
    assert.equal(pages[0], undefined);
    assert.ok(
      pages.slice(1).every((p) => typeof p === 'string' && p.length > 0),
      'each next page by its token',
    );
    for (let i = 0; i < 23; i++) assert.equal(inf.get(`${namespace}/cm-${String(i)}`)?.data?.text, text(i));
    await consistent(inf, namespace);
  });

  it('starts the list over when its continue token expires between pages (410 Gone)', async (t) => {
    // PodTemplates skip the watch cache: a compaction between two pages expires the token.
    const namespace = await freshNamespace(t);
    const path = `/api/v1/namespaces/${namespace}/podtemplates`;
    const template = (name: string) => ({
      metadata: { name },
      template: { spec: { containers: [{ name: 'c', image: 'i' }] } },
    });
    for (let i = 0; i < 7; i++) await api.request(path, { method: 'POST', body: template(`t-${String(i)}`) });
    let compacted = false;
    const compacting = Object.assign(Object.create(api) as RestClient, {
      listPage: async (...args: Parameters<RestClient['listPage']>) => {
        if (args[1].query?.continue && !compacted) {
          compacted = true;
          await api.request(path, { method: 'POST', body: template('between-pages') });
          await compactEtcd(await testSandboxState());
        }
        return api.listPage(...args);
      },
    });
    const inf = new Informer<KubeObject>({
      rest: compacting,
      path,
      log: silentLogger(),
      minBackoffMs: 50,
      pageSize: 3,
    });
    inf.start();
    t.after(() => inf.stop());
    await inf.waitForSync();
    assert.ok(compacted);
    assert.equal(inf.stats.gone, 1, 'the expired token was a 410');
    assert.equal(inf.stats.lists, 2, 'and the list started over');
    assert.deepEqual(
      inf
        .list()
        .map((o) => o.metadata.name)
        .sort(),
      ['between-pages', ...Array.from({ length: 7 }, (_, i) => `t-${String(i)}`)].sort(),
    );
  });
});

describe('RestClient.listPage', () => {
  it('lets go of what the caller collected, and of its callbacks, once the page is read, while its connection lives on', async (t) => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const namespace = await freshNamespace(t);
    for (const name of ['a', 'b', 'c']) await create(namespace, name);
    const client = rest(kc);
    const collected = async () => {
      const items: unknown[] = [];
      // The callbacks hold the items too, as the informer's closures do.
      const told: unknown[] = [];
      await client.listPage(
        `/api/v1/namespaces/${namespace}/configmaps`,
        { query: { limit: 2 } },
        (item) => items.push(item),
        {
          onEncoding: (encoding) => told.push(encoding, items.length),
        },
      );
      assert.equal(items.length, 2);
      assert.deepEqual(told, ['json', 0], 'told the encoding');
      return new WeakRef(items);
    };
    const ref = await collected();
    // The kept-alive connection (and whatever Node hangs on it) is still in the client's pool.
    await client.request(`/api/v1/namespaces/${namespace}/configmaps`);
    // A WeakRef's target is kept for the rest of the job that made or read it: collect
    // in a later one, and read only after collecting.
    await sleep(20);
    gc();
    assert.equal(ref.deref(), undefined, "the caller's items are still reachable after the page was read");
  });
});

describe('Nodes listed in protobuf', () => {
  /** Nodes with every member gatehouse reads set, and some it does not; deleted after the test. */
  async function busyNodes(t: TestContext): Promise<{ selector: string; names: string[] }> {
    const run = uniqueName('protobuf');
    const owner = await api.request<KubeObject>(`/api/v1/namespaces/${await freshNamespace(t)}`);
    const names = [`${run}-busy`, `${run}-bare`];
    const [busy, bare] = names as [string, string];
    await api.request('/api/v1/nodes', {
      method: 'POST',
      body: {
        metadata: {
          name: busy,
          labels: { 'gatehouse.test/protobuf': run, 'node-role.kubernetes.io/worker': '' },
          annotations: { 'talos.dev/audit': '{"bootID":"b-1"}', note: 'naïve 日本 😀 "quoted"' },
          finalizers: ['gatehouse.test/hold'],
          ownerReferences: [
            {
              apiVersion: 'v1',
              kind: 'Namespace',
              name: owner.metadata.name,
              uid: owner.metadata.uid,
              controller: true,
            },
          ],
        },
        spec: {
          unschedulable: true,
          podCIDR: '10.244.7.0/24',
          podCIDRs: ['10.244.7.0/24'],
          providerID: 'talos://sandbox/busy',
          taints: [
            {
              key: 'talos.dev/preready',
              value: 'boot',
              effect: 'NoExecute',
              timeAdded: '2026-01-02T03:04:05Z',
            },
            { key: 'gatehouse.test/plain', effect: 'NoSchedule' },
          ],
        },
        status: {
          capacity: { cpu: '4', memory: '16Gi', pods: '110' },
          allocatable: { cpu: '3900m', memory: '15Gi', pods: '110' },
          conditions: [
            {
              type: 'Ready',
              status: 'False',
              reason: 'Test',
              message: 'a "quoted", [bracketed] message',
              lastHeartbeatTime: '2026-01-02T03:04:05Z',
              lastTransitionTime: '2026-01-02T03:04:05Z',
            },
            { type: 'MemoryPressure', status: 'Unknown' },
          ],
          addresses: [
            { type: 'InternalIP', address: '10.5.0.9' },
            { type: 'Hostname', address: busy },
          ],
          daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
          nodeInfo: {
            machineID: 'm-1',
            systemUUID: 's-1',
            bootID: 'b-1',
            kernelVersion: '6.18.1-talos',
            osImage: 'Talos (v1.13.0)',
            containerRuntimeVersion: 'containerd://2.1.5',
            kubeletVersion: 'v1.36.0',
            operatingSystem: 'linux',
            architecture: 'amd64',
          },
          images: [{ names: ['registry.example/app@sha256:1', 'registry.example/app:v1'], sizeBytes: 1234 }],
          volumesInUse: ['kubernetes.io/csi/driver^volume-1'],
          volumesAttached: [{ name: 'kubernetes.io/csi/driver^volume-1', devicePath: '/dev/xvdb' }],
        },
      },
    });
    await api.request('/api/v1/nodes', {
      method: 'POST',
      body: { metadata: { name: bare, labels: { 'gatehouse.test/protobuf': run } } },
    });
    t.after(async () => {
      for (const name of names) {
        await api
          .request(`/api/v1/nodes/${name}`, {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: { metadata: { finalizers: null } },
          })
          .catch(() => undefined);
        await api.request(`/api/v1/nodes/${name}`, { method: 'DELETE' }).catch(() => undefined);
      }
    });
    return { selector: `gatehouse.test/protobuf=${run}`, names };
  }

  /** Every Node of the cluster at one resourceVersion, in protobuf and then in JSON, by name. */
  async function bothWays(omit: readonly (readonly string[])[]) {
    const listed = { protobuf: new Map<string, KubeObject>(), json: new Map<string, KubeObject>() };
    let resourceVersion: string | undefined;
    for (const way of ['protobuf', 'json'] as const) {
      let next: string | undefined;
      do {
        const encodings: string[] = [];
        const page = await api.listPage(
          '/api/v1/nodes',
          {
            query: {
              limit: 2,
              continue: next,
              // The JSON list is of the very snapshot the protobuf one was.
              ...(way === 'json' && next === undefined
                ? { resourceVersion, resourceVersionMatch: 'Exact' }
                : {}),
            },
          },
          (item) => listed[way].set((item as KubeObject).metadata.name, item as KubeObject),
          {
            omit,
            ...(way === 'protobuf' ? { protobuf: NODE_LIST } : {}),
            onEncoding: (e) => encodings.push(e),
          },
        );
        assert.deepEqual(encodings, [way], 'the page came in the encoding asked for');
        resourceVersion ??= page.metadata?.resourceVersion;
        next = page.metadata?.continue;
      } while (next);
    }
    return listed;
  }

  it('gives every Node exactly as its JSON does, whole or with members omitted', async (t) => {
    const { names } = await busyNodes(t);
    for (const omit of [[], [['metadata', 'managedFields'], ...NODE_UNREAD]]) {
      const { protobuf, json } = await bothWays(omit);
      assert.deepEqual([...protobuf.keys()].sort(), [...json.keys()].sort());
      for (const [name, node] of json) assert.deepEqual(protobuf.get(name), node, `Node ${name}`);
      for (const name of names) assert.ok(protobuf.has(name), `Node ${name} listed`);
      const busy = protobuf.get(names[0] as string) as KubeObject & {
        spec: { taints?: unknown[] };
        status: Record<string, unknown>;
      };
      // Ours, and any the node lifecycle controller added (unschedulable: true).
      assert.ok((busy.spec.taints?.length ?? 0) >= 2);
      assert.equal(busy.status.images === undefined, omit.length > 0);
      assert.equal(
        (busy.metadata as { managedFields?: unknown }).managedFields === undefined,
        omit.length > 0,
      );
    }
  });

  it('the Node informer lists in protobuf and caches what it would have from JSON', async (t) => {
    const { selector, names } = await busyNodes(t);
    const inf = new Informer<KubeObject>({
      rest: api,
      path: '/api/v1/nodes',
      labelSelector: selector,
      log: silentLogger(),
      omit: NODE_UNREAD,
      transform: slimNode,
      protobuf: NODE_LIST,
    });
    inf.start();
    t.after(() => inf.stop());
    await inf.waitForSync();
    assert.equal(inf.stats.protobufPages, 1, 'the list came in protobuf, not JSON');
    for (const name of names) await sameAsServed(inf, name);
  });
});
