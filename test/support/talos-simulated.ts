// Simulated Talos nodes of a test's own, on the sandbox's Talos simulator, and what the
// Talos suites read of them: a client with the sandbox's talosconfig, the Node as seen
// (ready, boot ID, osImage), waits for a reboot, and the error a call ends with.
import assert from 'node:assert/strict';
import { after, type TestContext } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { isReady, talosNode } from '../../sandbox/nodes.ts';
import { ETCD_CLUSTER_LABEL } from '../../sandbox/talos-etcd.ts';
import { talosPkiPaths } from '../../sandbox/talos-pki.ts';
import { TalosClient } from '../../src/talos/client.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import { TalosApiError } from '../../src/talos/errors.ts';
import { parseDuration } from '../../src/duration.ts';
import { rest, testKubeConfig, testSandboxState, uniqueName, waitFor } from './kube.ts';

export const kc = testKubeConfig();
export const core = kc.makeApiClient(CoreV1Api);
export const api = rest(kc);
export const sandbox = await testSandboxState();
if (!sandbox.talosconfig || !sandbox.talosPki)
  throw new Error(
    `the sandbox in ${sandbox.dir} runs no Talos simulator (it predates it, or was started with --no-talos): restart it`,
  );
export const talosconfig = sandbox.talosconfig;
export const talosPki = talosPkiPaths(sandbox.talosPki);
export const context = await loadTalosConfig({ path: talosconfig });
export const talos = new TalosClient(context, { timeoutMs: 20_000 });
after(() => talos.close());

/** How long a rebooting node stays down (`sandbox up --talos-boot-delay`). */
export const BOOT_DELAY_MS = parseDuration(sandbox.talosBootDelay ?? '2s');
/** Long enough for a rebooted node to be back, had it been going to come back. */
export const BOOTS_BACK_MS = BOOT_DELAY_MS + 2000;
/** Keeps everyone else's pods (and DaemonSets) off the nodes these tests power off. */
export const TEST_TAINT = 'sandbox.gatehouse.dev/talos-test';

export interface NodeView {
  metadata: { name: string; resourceVersion: string; annotations?: Record<string, string> };
  status?: {
    conditions?: { type: string; status: string }[];
    nodeInfo?: { bootID: string; osImage: string };
  };
}

export interface Seen {
  ready: string;
  bootID: string;
  osImage: string;
}

export const seenOf = (node: NodeView): Seen => ({
  ready: node.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? 'none',
  bootID: node.status?.nodeInfo?.bootID ?? '',
  osImage: node.status?.nodeInfo?.osImage ?? '',
});

export const readNode = (name: string) => api.request<NodeView>(`/api/v1/nodes/${name}`);

/** A free address in 10.5.200.0–10.5.249.255, away from the sandbox's own 10.5.0.x nodes. */
export async function freeAddress(): Promise<string> {
  const taken = new Set(
    (await core.listNode()).items.flatMap((n) => n.status?.addresses?.map((a) => a.address) ?? []),
  );
  for (;;) {
    const ip = `10.5.${String(200 + Math.floor(Math.random() * 50))}.${String(2 + Math.floor(Math.random() * 250))}`;
    if (!taken.has(ip)) return ip;
  }
}

/**
 * A simulated Talos node of the test's own (deleted when it ends). Not labelled
 * type=kwok and tainted, so suites that look at the sandbox's nodes never see it.
 */
export async function simulatedNode(
  t: TestContext,
  options: {
    talosVersion?: string;
    annotations?: Record<string, string>;
    /** A control-plane node of this simulated etcd cluster (ETCD_CLUSTER_LABEL). */
    etcdCluster?: string;
  } = {},
): Promise<{ name: string; ip: string; bootID: string }> {
  const name = uniqueName(`talos-${t.name}`.slice(0, 30));
  const ip = await freeAddress();
  const node = talosNode(
    {
      name,
      role: options.etcdCluster === undefined ? 'worker' : 'control-plane',
      internalIP: ip,
      ...(options.talosVersion ? { talosVersion: options.talosVersion } : {}),
    },
    sandbox.kubernetesVersion,
  );
  const metadata = node.metadata ?? {};
  const { type: _sandboxLabel, ...labels } = metadata.labels ?? {};
  metadata.labels = {
    ...labels,
    'gatehouse.dev/test': 'talos',
    ...(options.etcdCluster === undefined ? {} : { [ETCD_CLUSTER_LABEL]: options.etcdCluster }),
  };
  metadata.annotations = { ...metadata.annotations, ...options.annotations };
  node.metadata = metadata;
  node.spec = { taints: [{ key: TEST_TAINT, effect: 'NoSchedule' }] };
  await core.createNode({ body: node });
  t.after(() => core.deleteNode({ name }).catch(() => undefined));
  const ready = await waitFor(
    `node ${name} to become Ready`,
    async () => {
      const n = await core.readNode({ name });
      return isReady(n) ? n : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
  return { name, ip, bootID: ready.status?.nodeInfo?.bootID ?? '' };
}

/** Records every state a Node passes through (from a watch), until the test ends. */
export async function recordNode(t: TestContext, name: string): Promise<Seen[]> {
  const start = await readNode(name);
  const seen = [seenOf(start)];
  const controller = new AbortController();
  t.after(() => controller.abort());
  void api
    .watch(
      '/api/v1/nodes',
      { fieldSelector: `metadata.name=${name}`, resourceVersion: start.metadata.resourceVersion },
      (event) => {
        if (event.type === 'ADDED' || event.type === 'MODIFIED')
          seen.push(seenOf(event.object as unknown as NodeView));
      },
      controller.signal,
    )
    .catch(() => undefined);
  return seen;
}

/** Waits until the node is Ready again in a boot other than `bootID`. */
export function rebooted(name: string, bootID: string, timeoutMs = 60_000): Promise<Seen> {
  return waitFor(
    `node ${name} to be Ready with a new bootID`,
    async (observe) => {
      const seen = seenOf(await readNode(name));
      observe(JSON.stringify(seen));
      return seen.ready === 'True' && seen.bootID !== bootID ? seen : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

export function notReady(name: string): Promise<Seen> {
  return waitFor(
    `node ${name} to go NotReady`,
    async () => {
      const seen = seenOf(await readNode(name));
      return seen.ready !== 'True' ? seen : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}

/** The node went down in its old boot before it came back in a new one (as its watch saw it). */
export async function assertWentDownThenUp(seen: Seen[], oldBootID: string): Promise<void> {
  const isUp = (s: Seen) => s.ready === 'True' && s.bootID !== oldBootID;
  // The watch may trail the reads that saw the node back.
  await waitFor('the watch to see the node back', () => (seen.some(isUp) ? true : undefined), {
    timeoutMs: 10_000,
  }).catch(() => undefined);
  const down = seen.findIndex((s) => s.ready !== 'True' && s.bootID === oldBootID);
  const up = seen.findIndex(isUp);
  assert.ok(down >= 0, `the node never went NotReady in its old boot: ${JSON.stringify(seen)}`);
  assert.ok(up > down, `the node was not Ready in a new boot after going down: ${JSON.stringify(seen)}`);
}

export async function talosError(promise: Promise<unknown>): Promise<TalosApiError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(error instanceof TalosApiError, `expected a TalosApiError, got ${String(error)}`);
  return error;
}

export const INSTALLER = 'ghcr.io/siderolabs/installer';
