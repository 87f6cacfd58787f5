// The controller follows its talosconfig while it runs, against the sandbox's Talos
// simulator (real gRPC over mutual TLS): the file is a Secret volume as kubelet writes it
// (a `..data` symlink swapped to a new directory), and the controller is never restarted.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { talosNode } from '../../sandbox/nodes.ts';
import { createTalosPki, talosPkiPaths } from '../../sandbox/talos-pki.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import type { Controller } from '../../src/controller.ts';
import { loadTalosConfig, parseTalosConfig, selectContext, talosConfigYaml } from '../../src/talos/config.ts';
import { TalosConfigReloader } from '../../src/talos/config-reload.ts';
import { silentLogger } from '../../src/log.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  createAction,
  deleteActionsAfter,
  getAction,
  startGateController,
  waitForActionGone,
  waitForPhase,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { rest, testKubeConfig, testSandboxState, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig || !sandbox.talosPki)
  throw new Error(
    `the sandbox in ${sandbox.dir} runs no Talos simulator (started with --no-talos?): restart it`,
  );
const valid = await readFile(sandbox.talosconfig, 'utf8');
const sandboxContext = await loadTalosConfig({ path: sandbox.talosconfig });
/** Keeps everyone else's pods off this file's nodes, which reboot. */
const TAINT = 'gatehouse.test/talos-reload';
/** Fast enough for a test; the controller's default is 15s. */
const POLL_MS = 200;
let dir = '';
let me = '';
/** The sandbox's CA and endpoints, with a client certificate another CA signed: apid refuses it. */
let refused = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-talos-reload-'));
  const foreign = await createTalosPki(join(dir, 'foreign-pki'));
  refused = talosConfigYaml({
    name: sandboxContext.name,
    endpoints: sandboxContext.endpoints,
    ca: await readFile(talosPkiPaths(sandbox.talosPki ?? '').ca, 'utf8'),
    crt: await readFile(foreign.admin.cert, 'utf8'),
    key: await readFile(foreign.admin.key, 'utf8'),
  });
});
after(() => rm(dir, { recursive: true, force: true }));

/** A Secret volume as kubelet writes it: `config` → `..data/config`, `..data` → the latest directory. */
async function secretVolume(
  t: TestContext,
): Promise<{ path: string; write: (text: string) => Promise<void> }> {
  const volume = await mkdtemp(join(dir, 'volume-'));
  let generation = 0;
  const path = join(volume, 'config');
  return {
    path,
    write: async (text) => {
      generation += 1;
      const stamp = `..2026_03_02_10_00_${String(generation).padStart(2, '0')}.${String(process.pid)}`;
      await mkdir(join(volume, stamp));
      await writeFile(join(volume, stamp, 'config'), text, { mode: 0o600 });
      await symlink(stamp, join(volume, '..data_tmp'));
      await rename(join(volume, '..data_tmp'), join(volume, '..data'));
      if (generation === 1) await symlink(join('..data', 'config'), path);
      for (const entry of await readdir(volume))
        if (entry.startsWith('..2026') && entry !== stamp) await rm(join(volume, entry), { recursive: true });
      t.diagnostic(`talosconfig written (${stamp})`);
    },
  };
}

/** A controller of the test's own following the volume's talosconfig, stopped when it ends. */
async function followingController(
  t: TestContext,
  path: string,
): Promise<{ instance: string; controller: Controller; reloader: TalosConfigReloader }> {
  const reloader = new TalosConfigReloader({ path, log: silentLogger(), intervalMs: POLL_MS });
  await reloader.load();
  const instance = uniqueName('talos-reload');
  const controller = await startGateController(instance, { talos: { config: reloader, drainRetryMs: 500 } });
  t.after(() => controller.stop());
  return { instance, controller, reloader };
}

/** A free address in 10.5.180.0–10.5.199.255, away from the other suites' simulated nodes. */
async function freeAddress(): Promise<string> {
  const list = await client.request<{
    items: { status?: { addresses?: { address: string }[] } }[];
  }>('/api/v1/nodes');
  const taken = new Set(list.items.flatMap((n) => n.status?.addresses?.map((a) => a.address) ?? []));
  for (;;) {
    const ip = `10.5.${String(180 + Math.floor(Math.random() * 20))}.${String(2 + Math.floor(Math.random() * 250))}`;
    if (!taken.has(ip)) return ip;
  }
}

interface NodeView {
  metadata: { annotations?: Record<string, string> };
  status?: { conditions?: { type: string; status: string }[] };
}

const readNode = (name: string) => client.request<NodeView>(`/api/v1/nodes/${name}`);

/** A simulated Talos node of the test's own, Ready, deleted when the test ends. */
async function simulatedNode(t: TestContext): Promise<string> {
  const name = uniqueName('talos-reload');
  t.after(() => client.request(`/api/v1/nodes/${name}`, { method: 'DELETE' }).catch(() => undefined));
  const node = talosNode(
    { name, role: 'worker', internalIP: await freeAddress(), talosVersion: 'v1.13.0' },
    sandbox.kubernetesVersion,
  );
  const metadata = node.metadata ?? {};
  // Not type=kwok: suites that look at the sandbox's own nodes never see this one.
  const { type: _sandboxLabel, ...labels } = metadata.labels ?? {};
  metadata.labels = { ...labels, 'gatehouse.dev/test': 'talos-reload' };
  node.metadata = metadata;
  node.spec = { taints: [{ key: TAINT, effect: 'NoSchedule' }] };
  await client.request('/api/v1/nodes', { method: 'POST', body: node });
  await waitFor(
    `node ${name} to become Ready`,
    async () =>
      (await readNode(name)).status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')
        ? true
        : undefined,
    { timeoutMs: 60_000, intervalMs: 250 },
  );
  return name;
}

async function reboot(t: TestContext, instance: string, nodeName: string): Promise<string> {
  const created = await createAction(client, instance, me, {
    nodeName,
    action: 'Reboot',
    execution: 'Managed',
  });
  deleteActionsAfter(t, client, created.metadata.name);
  return created.metadata.name;
}

const callsOn = async (name: string) => talosCallCounts((await readNode(name)).metadata.annotations);
const executed = (a: ActionObject) => a.status?.conditions?.find((c) => c.type === 'Executed');

/** Until the controller's executor uses the credentials of the talosconfig `text`. */
async function inUse(controller: Controller, text: string): Promise<void> {
  const { crt } = selectContext(parseTalosConfig(text, 'test'), 'test');
  await waitFor(
    'the executor to switch credentials',
    () => (controller.executor?.context?.crt === crt ? true : undefined),
    { timeoutMs: 10_000, intervalMs: 20 },
  );
}

describe('talosconfig followed by a running controller', () => {
  it('fails a call with a client certificate Talos refuses, then makes the next one with the renewed talosconfig', async (t) => {
    const volume = await secretVolume(t);
    await volume.write(refused);
    const { instance, controller } = await followingController(t, volume.path);
    const node = await simulatedNode(t);

    const first = await reboot(t, instance, node);
    const failed = await waitForPhase(client, first, ['Succeeded', 'Failed'], 90_000);
    assert.equal(failed.status?.phase, 'Failed', failed.status?.message);
    assert.equal(executed(failed)?.reason, 'TalosError');
    assert.match(
      executed(failed)?.message ?? '',
      /TLS handshake failed: the endpoint refused our client certificate/,
    );
    assert.equal(failed.status.execution?.callResult, 'Failed', 'refused: known not to have been made');
    assert.deepEqual(await callsOn(node), {}, 'the call never reached the node');

    const swapped = Date.now();
    await volume.write(valid);
    await inUse(controller, valid);
    t.diagnostic(`switched ${String(Date.now() - swapped)}ms after the swap`);

    const second = await reboot(t, instance, node);
    const done = await waitForPhase(client, second, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.execution?.callResult, 'Acknowledged');
    assert.notEqual(done.status.bootIDAfter, done.status.bootIDBefore);
    assert.deepEqual(await callsOn(node), { Reboot: 1 });
  });

  it('starts performing Managed actions once a talosconfig appears, leaving those handed to their requester', async (t) => {
    const volume = await secretVolume(t);
    const { instance, controller, reloader } = await followingController(t, volume.path);
    assert.equal(reloader.current, undefined);
    assert.ok(controller.executor, 'the executor is there, without credentials');
    const node = await simulatedNode(t);

    const handed = await reboot(t, instance, node);
    const approved = await waitForPhase(client, handed, 'Approved', 60_000);
    assert.equal(executed(approved)?.reason, 'ExecutorNotInstalled');
    assert.match(approved.status?.message ?? '', /the Talos executor is not installed/);

    await volume.write(valid);
    await inUse(controller, valid);
    // Its requester was told to perform it: the controller must not do it too.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const still = await getAction(client, handed);
    assert.equal(still.status?.phase, 'Approved');
    assert.equal(executed(still)?.reason, 'ExecutorNotInstalled');
    assert.deepEqual(await callsOn(node), {});
    await client.request(`/apis/talos.dev/v1alpha1/nodeactions/${handed}`, { method: 'DELETE' });
    await waitForActionGone(client, handed, `NodeAction ${handed} to be cancelled and gone`);

    const performed = await reboot(t, instance, node);
    const done = await waitForPhase(client, performed, ['Succeeded', 'Failed'], 120_000);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.execution?.callResult, 'Acknowledged');
    assert.deepEqual(await callsOn(node), { Reboot: 1 });
  });
});
