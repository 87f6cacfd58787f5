// The etcd snapshot before a control-plane action (ActionPolicy spec.etcdSnapshot) end to
// end: a controller with the sandbox's talosconfig streams MachineService.EtcdSnapshot
// from the simulated etcd of control-plane nodes of this file's own into a real HTTP store
// served here (PUT, HEAD, DELETE, as a WebDAV server answers them), records it on the
// NodeAction and in the policy's catalogue, prunes to the last `keep`, holds the action
// while the snapshot fails and fails it past the timeout; a bypass goes without one.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { ActionPolicy } from '../../src/api/action-policy.ts';
import type { Controller } from '../../src/controller.ts';
import { TALOS_FAULT_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { ETCD_DB_SIZE } from '../../sandbox/talos-etcd.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import { TalosClient } from '../../src/talos/client.ts';
import { loadTalosConfig, type TalosContext } from '../../src/talos/config.ts';
import { TalosApiError } from '../../src/talos/errors.ts';
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
import { rest, testKubeConfig, testSandboxState, uniqueName, waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(
    `the sandbox in ${sandbox.dir} runs no Talos simulator (started with --no-talos?): restart it`,
  );
const talos: TalosContext = await loadTalosConfig({ path: sandbox.talosconfig });
const TAINT = 'gatehouse.test/etcd-snapshot';
const instance = uniqueName('etcd-snapshot');
let controller: Controller;
let me = '';

/** A store as a WebDAV server is one: PUT (chunked welcome), HEAD, DELETE; `refuse` answers 403 to every PUT. */
class Store {
  readonly objects = new Map<string, { bytes: Buffer; storedAt: Date }>();
  readonly deleted: string[] = [];
  refuse = false;
  private server: Server | undefined;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      const path = req.url ?? '';
      if (req.method === 'PUT') {
        if (this.refuse) {
          res.writeHead(403, 'Forbidden').end('no writes here today');
          req.resume();
          return;
        }
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        // Only a whole body is stored: an upload cut off before its last chunk is dropped.
        req.on('end', () => {
          this.objects.set(path, { bytes: Buffer.concat(chunks), storedAt: new Date() });
          res.writeHead(201).end();
        });
        return;
      }
      const found = this.objects.get(path);
      if (req.method === 'HEAD') {
        if (found) res.writeHead(200, { 'content-length': String(found.bytes.length) }).end();
        else res.writeHead(404).end();
        return;
      }
      if (req.method === 'DELETE') {
        this.objects.delete(path);
        this.deleted.push(path);
        res.writeHead(found ? 204 : 404).end();
        return;
      }
      res.writeHead(405).end();
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const address = this.server.address();
    if (!address || typeof address === 'string') throw new Error('no port');
    this.url = `http://127.0.0.1:${String(address.port)}/etcd/`;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => {
      this.server?.closeAllConnections();
      this.server?.close(() => resolve());
    });
  }
}

const readNode = (name: string) => client.request<NodeView>(`/api/v1/nodes/${name}`);
const addressOf = async (node: string) =>
  (await readNode(node)).status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? '';
const calls = async (node: string) => talosCallCounts((await readNode(node)).metadata.annotations);
const policyOf = (name: string) => client.request<ActionPolicy>(`${API}/actionpolicies/${name}`);

/** Three control-plane nodes of an etcd cluster of the test's own, and a policy governing them that asks for snapshots. */
async function cluster(
  t: TestContext,
  store: Store,
  snapshot: Record<string, unknown> = {},
): Promise<{ nodes: string[]; policy: string }> {
  const group = uniqueName('snap');
  const nodes = await createTalosNodes(t, client, {
    group,
    count: 3,
    taint: TAINT,
    kubernetesVersion: sandbox.kubernetesVersion,
    talosVersion: 'v1.13.0',
    addressBlock: 150,
    etcdCluster: group,
  });
  const policy = await createPolicy(t, client, instance, {
    nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
    etcdSnapshot: { http: { url: store.url }, ...snapshot },
  });
  return { nodes, policy };
}

async function reboot(t: TestContext, node: string, extra: Record<string, unknown> = {}): Promise<string> {
  const created = await createAction(client, instance, me, {
    nodeName: node,
    action: 'Reboot',
    execution: 'Managed',
    ...extra,
  });
  deleteActionsAfter(t, client, created.metadata.name);
  return created.metadata.name;
}

async function newStore(t: TestContext): Promise<Store> {
  const store = new Store();
  await store.start();
  t.after(() => store.stop());
  return store;
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
});
after(async () => {
  await stopAll(controller);
});

describe('etcd snapshot before a control-plane action', () => {
  it('is taken from another healthy member before a reboot is approved, checked and recorded; the last `keep` are kept', async (t) => {
    const store = await newStore(t);
    const { nodes, policy } = await cluster(t, store, { keep: 2 });
    const done: ActionObject[] = [];
    for (const node of nodes) {
      const name = await reboot(t, node);
      const a = await waitForPhase(client, name, ['Succeeded', 'Failed', 'Denied'], 120_000);
      assert.equal(a.status?.phase, 'Succeeded', a.status?.message);
      done.push(a);
    }
    const [first, second, third] = done as [ActionObject, ActionObject, ActionObject];
    const s = first.status?.etcdSnapshot;
    assert.equal(s?.phase, 'Taken', JSON.stringify(s));
    assert.equal(s.policy, policy);
    assert.notEqual(s.member, nodes[0], 'not from the node about to reboot: another member is healthy');
    assert.ok(s.member && nodes.includes(s.member));
    assert.match(s.name ?? '', new RegExp(`^etcd-\\d{8}T\\d{6}Z-${first.metadata.name}\\.db$`));
    assert.equal(s.size, ETCD_DB_SIZE + 32, 'the database and the SHA-256 etcd ends it with');
    assert.ok((s.raftIndex ?? 0) > 0);
    assert.ok(
      Date.parse(s.time ?? '') <= Date.parse(first.status?.approvalTime ?? ''),
      'taken before approval',
    );
    const streams = await Promise.all(nodes.map(async (n) => (await calls(n)).EtcdSnapshot ?? 0));
    assert.equal(
      streams.reduce((a, b) => a + b, 0),
      3,
      'one stream per action',
    );
    assert.ok(
      (await events(client, first.metadata.name)).some((e) => e.reason === 'EtcdSnapshotTaken'),
      'an Event says so',
    );

    // Pruned to the last two: the first is gone from the store and the catalogue.
    const names = done.map((a) => a.status?.etcdSnapshot?.name ?? '');
    assert.deepEqual(
      [...store.objects.keys()].sort(),
      names
        .slice(1)
        .map((n) => `/etcd/${n}`)
        .sort(),
    );
    assert.deepEqual(store.deleted, [`/etcd/${names[0] ?? ''}`]);
    assert.deepEqual(third.status?.etcdSnapshot?.pruned, [names[0]]);
    assert.equal(second.status?.etcdSnapshot?.pruned, undefined, 'nothing to prune at two');
    const catalogue = (await policyOf(policy)).status?.etcdSnapshots ?? [];
    assert.deepEqual(
      catalogue.map((e) => e.name),
      [names[2], names[1]],
    );
    // What is stored is what was recorded, and etcd's own checksum holds.
    for (const a of [second, third]) {
      const rec = a.status?.etcdSnapshot;
      const stored = store.objects.get(`/etcd/${rec?.name ?? ''}`)?.bytes ?? Buffer.alloc(0);
      assert.equal(stored.length, rec?.size);
      assert.equal(sha256(stored), rec?.sha256);
      assert.equal(sha256(stored.subarray(0, -32)), stored.subarray(-32).toString('hex'));
      assert.equal(catalogue.find((e) => e.name === rec?.name)?.sha256, rec?.sha256);
    }
  });

  it('holds the action while the store refuses the snapshot, naming why; it goes once the store takes it', async (t) => {
    const store = await newStore(t);
    store.refuse = true;
    const { nodes } = await cluster(t, store);
    const [node = ''] = nodes;
    const name = await reboot(t, node);
    const held = await waitFor(
      `action ${name} to be held by its snapshot`,
      async () => {
        const a = await getAction(client, name);
        return a.status?.etcdSnapshot?.phase === 'Failed' ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    assert.equal(held.status?.phase, 'RunningPreHooks');
    assert.match(
      held.status.etcdSnapshot?.message ?? '',
      /the store refused PUT http:\/\/127\.0\.0\.1:\d+\/etcd\/etcd-.*: 403 Forbidden \(no writes here today\)/,
    );
    assert.match(held.status.message ?? '', /held: the etcd snapshot ActionPolicy .* failed/);
    assert.ok(
      (await events(client, name)).some((e) => e.reason === 'EtcdSnapshotFailed' && e.type === 'Warning'),
    );
    assert.equal((await calls(node)).Reboot ?? 0, 0, 'nothing done to the node');
    assert.equal(store.objects.size, 0);
    store.refuse = false;
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed', 'Denied'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.etcdSnapshot?.phase, 'Taken');
    assert.ok((done.status.etcdSnapshot.attempts ?? 0) >= 2);
    assert.equal(store.objects.size, 1);
  });

  it('fails closed when no member gives a snapshot within the timeout, having stored nothing', async (t) => {
    const store = await newStore(t);
    const { nodes } = await cluster(t, store, { timeout: '30s' });
    for (const n of nodes)
      await client.request(`/api/v1/nodes/${n}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { [TALOS_FAULT_ANNOTATION]: 'error:EtcdSnapshot' } } },
      });
    const [node = ''] = nodes;
    const name = await reboot(t, node);
    const failed = await waitForPhase(client, name, ['Succeeded', 'Failed', 'Denied'], 90_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.match(
      failed.status.message ?? '',
      /no etcd snapshot within etcdSnapshot\.timeout \(30s\) of ActionPolicy .*: no etcd member gave a whole snapshot: .*; .*bypass\.healthChecks/,
    );
    assert.equal((await calls(node)).Reboot ?? 0, 0, 'never rebooted');
    assert.equal(store.objects.size, 0);
  });

  it('goes without a snapshot under bypass.healthChecks, on the record', async (t) => {
    const store = await newStore(t);
    const { nodes } = await cluster(t, store);
    const [node = ''] = nodes;
    const name = await reboot(t, node, { bypass: { healthChecks: true, reason: 'etcd restore drill' } });
    const done = await waitForPhase(client, name, ['Succeeded', 'Failed', 'Denied'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.etcdSnapshot?.phase, 'Bypassed');
    assert.match(done.status.etcdSnapshot.message ?? '', /health checks bypassed by .*: etcd restore drill/);
    assert.ok((await events(client, name)).some((e) => e.reason === 'EtcdSnapshotBypassed'));
    assert.equal(store.objects.size, 0);
  });
});

describe('the simulator serves EtcdSnapshot as a node does', () => {
  it("streams a control-plane member's database with etcd's checksum; a worker answers UNIMPLEMENTED, a node that is down fails", async (t) => {
    const group = uniqueName('snapsim');
    const [cp = '', down = ''] = await createTalosNodes(t, client, {
      group,
      count: 2,
      taint: TAINT,
      kubernetesVersion: sandbox.kubernetesVersion,
      talosVersion: 'v1.14.0',
      addressBlock: 150,
      etcdCluster: group,
    });
    const [worker = ''] = await createTalosNodes(t, client, {
      group: uniqueName('snapw'),
      count: 1,
      taint: TAINT,
      kubernetesVersion: sandbox.kubernetesVersion,
      talosVersion: 'v1.14.0',
      addressBlock: 150,
    });
    const talosClient = new TalosClient(talos);
    t.after(() => talosClient.close());
    const read = async (node: string) => {
      const chunks: Buffer[] = [];
      let largest = 0;
      await talosClient.etcdSnapshot({
        node: await addressOf(node),
        onChunk: (b) => {
          largest = Math.max(largest, b.length);
          chunks.push(Buffer.from(b));
        },
      });
      return { bytes: Buffer.concat(chunks), largest };
    };
    const { bytes, largest } = await read(cp);
    assert.equal(bytes.length, ETCD_DB_SIZE + 32);
    assert.equal(sha256(bytes.subarray(0, -32)), bytes.subarray(-32).toString('hex'));
    assert.equal(largest, 1024, "Talos's chunks");
    const failure = async (node: string) =>
      read(node).then(
        () => undefined,
        (e: unknown) => e,
      );
    const onWorker = await failure(worker);
    assert.ok(onWorker instanceof TalosApiError && onWorker.codeName === 'UNIMPLEMENTED', String(onWorker));
    assert.match(onWorker.message, /etcd snapshot is only available on control plane nodes/);
    await talosClient.shutdown({ node: await addressOf(down) });
    await waitFor(`${down} to go down`, async () => (isReady(await readNode(down)) ? undefined : true), {
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    const whileDown = await failure(down);
    assert.ok(whileDown instanceof TalosApiError && whileDown.codeName === 'UNAVAILABLE', String(whileDown));
  });
});
