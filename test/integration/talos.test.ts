// The Talos API client against the sandbox's Talos simulator: real gRPC over real
// mutual TLS (Ed25519, like Talos), each call played on a kwok Node of the test's own.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, describe, it, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { CoreV1Api } from '@kubernetes/client-node';
import { NODE_POWER_ANNOTATION } from '../../sandbox/kwok-config.ts';
import { isReady, talosNode } from '../../sandbox/nodes.ts';
import { freePorts } from '../../sandbox/processes.ts';
import { TALOS_FAULT_ANNOTATION, TALOS_FAULT_MESSAGE_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { createTalosPki, talosPkiPaths } from '../../sandbox/talos-pki.ts';
import { MACHINE_CONFIG_ANNOTATION, TalosSimulator } from '../../sandbox/talos-simulator.ts';
import { TalosClient, type ImagePullProgress } from '../../src/talos/client.ts';
import { loadTalosConfig, loadTalosConfigFromSecret, type TalosContext } from '../../src/talos/config.ts';
import { TalosApiError, TalosUpgradeFailedError } from '../../src/talos/errors.ts';
import { parseDuration } from '../../src/duration.ts';
import { sleep } from '../../src/wait.ts';
import {
  freshNamespace,
  rest,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
  type KubeApiError,
} from '../support/kube.ts';

const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const api = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig || !sandbox.talosPki)
  throw new Error(
    `the sandbox in ${sandbox.dir} runs no Talos simulator (it predates it, or was started with --no-talos): restart it`,
  );
const talosconfig = sandbox.talosconfig;
const talosPki = talosPkiPaths(sandbox.talosPki);
const context = await loadTalosConfig({ path: talosconfig });
const talos = new TalosClient(context, { timeoutMs: 20_000 });
after(() => talos.close());

/** How long a rebooting node stays down (`sandbox up --talos-boot-delay`). */
const BOOT_DELAY_MS = parseDuration(sandbox.talosBootDelay ?? '2s');
/** Long enough for a rebooted node to be back, had it been going to come back. */
const BOOTS_BACK_MS = BOOT_DELAY_MS + 2000;
/** Keeps everyone else's pods (and DaemonSets) off the nodes these tests power off. */
const TEST_TAINT = 'sandbox.gatehouse.dev/talos-test';

interface NodeView {
  metadata: { name: string; resourceVersion: string; annotations?: Record<string, string> };
  status?: {
    conditions?: { type: string; status: string }[];
    nodeInfo?: { bootID: string; osImage: string };
  };
}

interface Seen {
  ready: string;
  bootID: string;
  osImage: string;
}

const seenOf = (node: NodeView): Seen => ({
  ready: node.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? 'none',
  bootID: node.status?.nodeInfo?.bootID ?? '',
  osImage: node.status?.nodeInfo?.osImage ?? '',
});

const readNode = (name: string) => api.request<NodeView>(`/api/v1/nodes/${name}`);

/** A free address in 10.5.200.0–10.5.249.255, away from the sandbox's own 10.5.0.x nodes. */
async function freeAddress(): Promise<string> {
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
async function simulatedNode(
  t: TestContext,
  options: { talosVersion?: string; annotations?: Record<string, string> } = {},
): Promise<{ name: string; ip: string; bootID: string }> {
  const name = uniqueName(`talos-${t.name}`.slice(0, 30));
  const ip = await freeAddress();
  const node = talosNode(
    {
      name,
      role: 'worker',
      internalIP: ip,
      ...(options.talosVersion ? { talosVersion: options.talosVersion } : {}),
    },
    sandbox.kubernetesVersion,
  );
  const metadata = node.metadata ?? {};
  const { type: _sandboxLabel, ...labels } = metadata.labels ?? {};
  metadata.labels = { ...labels, 'gatehouse.dev/test': 'talos' };
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
async function recordNode(t: TestContext, name: string): Promise<Seen[]> {
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
function rebooted(name: string, bootID: string, timeoutMs = 60_000): Promise<Seen> {
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

function notReady(name: string): Promise<Seen> {
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
async function assertWentDownThenUp(seen: Seen[], oldBootID: string): Promise<void> {
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

async function talosError(promise: Promise<unknown>): Promise<TalosApiError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(error instanceof TalosApiError, `expected a TalosApiError, got ${String(error)}`);
  return error;
}

const INSTALLER = 'ghcr.io/siderolabs/installer';

describe('Talos API client and simulator', () => {
  it('reports the Talos version of a node, by address or name, and of the endpoint itself', async (t) => {
    const node = await simulatedNode(t);
    const version = await talos.version({ node: node.ip });
    assert.equal(version.tag, 'v1.13.0');
    assert.equal(version.hostname, node.name);
    assert.equal(version.os, 'linux');
    assert.equal(version.arch, 'amd64');
    assert.equal((await talos.version({ node: node.name })).hostname, node.name);
    assert.equal((await talos.version()).hostname, 'talos-simulator');

    const error = await talosError(talos.version({ node: '10.5.255.254' }));
    assert.equal(error.failure, 'status');
    assert.equal(error.code, status.UNAVAILABLE);
    assert.match(
      error.message,
      /^Talos MachineService\.Version on node 10\.5\.255\.254 via 127\.0\.0\.1:\d+ failed: .*no route to host/,
    );
  });

  it('reboots a node: NotReady, then a new bootID, then Ready', async (t) => {
    const node = await simulatedNode(t);
    const seen = await recordNode(t, node.name);
    const { actorId } = await talos.reboot({ node: node.ip });
    assert.match(actorId, /^[0-9a-f-]{36}$/);
    const after = await rebooted(node.name, node.bootID);
    assert.equal(after.osImage, 'Talos (v1.13.0)');
    await assertWentDownThenUp(seen, node.bootID);
  });

  it('upgrades a Talos 1.13 node: image pull and install with streamed progress, then reboot', async (t) => {
    const node = await simulatedNode(t);
    const image = `${INSTALLER}:v1.13.1`;
    const pulls: ImagePullProgress[] = [];
    const pulled = await talos.pullImage({ node: node.ip, image, onProgress: (p) => pulls.push(p) });
    assert.equal(pulled.name, image);
    assert.ok(pulls.some((p) => p.status === 'downloading' && p.offset < p.total));
    assert.ok(pulls.some((p) => p.status === 'extract-complete' && p.offset === p.total));
    assert.equal(new Set(pulls.map((p) => p.layerId)).size, 2);

    const lines: string[] = [];
    const installed = await talos.installUpgrade({
      node: node.ip,
      image,
      onProgress: (line) => lines.push(line),
    });
    assert.ok(lines.length >= 3, `expected several progress lines, got ${JSON.stringify(lines)}`);
    assert.deepEqual(installed.output, lines);
    assert.match(lines.at(-1) ?? '', /installed Talos v1\.13\.1/);
    // Installed, not yet running: that takes the reboot.
    assert.equal(seenOf(await readNode(node.name)).osImage, 'Talos (v1.13.0)');

    const seen = await recordNode(t, node.name);
    await talos.reboot({ node: node.ip });
    const after = await rebooted(node.name, node.bootID);
    assert.equal(after.osImage, 'Talos (v1.13.1)');
    await assertWentDownThenUp(seen, node.bootID);
    assert.equal((await talos.version({ node: node.ip })).tag, 'v1.13.1');
  });

  it('will not install an image that was not pulled first', async (t) => {
    const node = await simulatedNode(t);
    const error = await talosError(talos.installUpgrade({ node: node.ip, image: `${INSTALLER}:v1.13.2` }));
    assert.equal(error.code, status.NOT_FOUND);
    assert.match(error.talosMessage, /not found in containerd namespace system: pull it first/);
  });

  it('upgrades an older node through the legacy MachineService.Upgrade', async (t) => {
    const node = await simulatedNode(t, { talosVersion: 'v1.12.4' });
    const unsupported = await talosError(
      talos.installUpgrade({ node: node.ip, image: `${INSTALLER}:v1.12.6` }),
    );
    assert.equal(unsupported.code, status.UNIMPLEMENTED);
    assert.match(
      unsupported.message,
      /LifecycleService\.Upgrade .* failed: unknown service machine\.LifecycleService \(UNIMPLEMENTED\)/,
    );

    const seen = await recordNode(t, node.name);
    const { ack } = await talos.upgrade({ node: node.ip, image: `${INSTALLER}:v1.12.6` });
    assert.equal(ack, 'Upgrade request received');
    const after = await rebooted(node.name, node.bootID);
    assert.equal(after.osImage, 'Talos (v1.12.6)');
    await assertWentDownThenUp(seen, node.bootID);
  });

  it('shuts a node down, and it stays down and unreachable', async (t) => {
    const node = await simulatedNode(t);
    await talos.shutdown({ node: node.ip, force: true });
    await notReady(node.name);
    // Well past kwok's own re-initialisation (within a second) and a boot delay.
    await sleep(BOOTS_BACK_MS + 1000);
    const later = await readNode(node.name);
    assert.notEqual(seenOf(later).ready, 'True');
    assert.equal(seenOf(later).bootID, node.bootID);
    assert.equal(later.metadata.annotations?.[NODE_POWER_ANNOTATION], 'off');
    const error = await talosError(talos.version({ node: node.ip }));
    assert.equal(error.code, status.UNAVAILABLE);
    assert.match(error.talosMessage, /connection refused \(the node is powered off\)/);
  });

  it('resets a node, which leaves the cluster: its Node is deleted', async (t) => {
    const node = await simulatedNode(t);
    const bad = await talosError(
      talos.reset({ node: node.ip, systemPartitionsToWipe: [{ label: 'ROOT', wipe: true }] }),
    );
    assert.equal(bad.code, status.INVALID_ARGUMENT);
    assert.match(bad.talosMessage, /unknown system partition label\(s\) "ROOT"/);

    await talos.reset({
      node: node.ip,
      graceful: true,
      reboot: false,
      systemPartitionsToWipe: [
        { label: 'STATE', wipe: true },
        { label: 'EPHEMERAL', wipe: true },
      ],
    });
    await waitFor(
      `node ${node.name} to be deleted`,
      () =>
        readNode(node.name).then(
          () => undefined,
          (e: unknown) => ((e as KubeApiError).code === 404 ? true : undefined),
        ),
      { timeoutMs: 30_000, intervalMs: 200 },
    );
  });

  it('applies a machine configuration without a reboot, with one, and refuses a broken one', async (t) => {
    const node = await simulatedNode(t);
    const config = (hostname: string) =>
      `version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: ${hostname}\n`;
    const digest = async (text: string) => {
      const { createHash } = await import('node:crypto');
      return `sha256:${createHash('sha256').update(text).digest('hex')}`;
    };

    const first = await talos.applyConfiguration({ node: node.ip, data: config('one'), mode: 'no-reboot' });
    assert.deepEqual(first, {
      mode: 'no-reboot',
      modeDetails: 'Applied configuration without a reboot',
      warnings: [],
    });
    const auto = await talos.applyConfiguration({ node: node.ip, data: config('one'), mode: 'auto' });
    assert.equal(auto.mode, 'no-reboot');
    const applied = await readNode(node.name);
    assert.equal(applied.metadata.annotations?.[MACHINE_CONFIG_ANNOTATION], await digest(config('one')));
    assert.equal(seenOf(applied).bootID, node.bootID);

    const seen = await recordNode(t, node.name);
    const second = await talos.applyConfiguration({ node: node.ip, data: config('two'), mode: 'reboot' });
    assert.equal(second.mode, 'reboot');
    await rebooted(node.name, node.bootID);
    await assertWentDownThenUp(seen, node.bootID);
    assert.equal(
      (await readNode(node.name)).metadata.annotations?.[MACHINE_CONFIG_ANNOTATION],
      await digest(config('two')),
    );

    const broken = await talosError(
      talos.applyConfiguration({ node: node.ip, data: 'machine: [', mode: 'no-reboot' }),
    );
    assert.equal(broken.code, status.INVALID_ARGUMENT);
    assert.match(broken.message, /ApplyConfiguration .* failed: failed to parse config: /);
  });
});

describe('Talos simulator faults', () => {
  it('fails an upgrade with Talos’ message, and the node stays as it was', async (t) => {
    const node = await simulatedNode(t, {
      annotations: {
        [TALOS_FAULT_ANNOTATION]: 'upgrade-error',
        [TALOS_FAULT_MESSAGE_ANNOTATION]: 'disk /dev/sda is read-only',
      },
    });
    const image = `${INSTALLER}:v1.13.1`;
    await talos.pullImage({ node: node.ip, image });
    const failed = await talosError(talos.installUpgrade({ node: node.ip, image }));
    assert.ok(failed instanceof TalosUpgradeFailedError);
    assert.equal(failed.exitCode, 1);
    assert.equal(failed.node, node.ip);
    assert.match(
      failed.message,
      /LifecycleService\.Upgrade on node .* failed: the installer exited with code 1: error: disk \/dev\/sda is read-only$/,
    );

    const legacy = await talosError(talos.upgrade({ node: node.ip, image }));
    assert.equal(legacy.failure, 'status');
    assert.match(
      legacy.message,
      /MachineService\.Upgrade on node .* failed: disk \/dev\/sda is read-only \(UNKNOWN\)$/,
    );

    await sleep(BOOTS_BACK_MS);
    assert.deepEqual(seenOf(await readNode(node.name)), {
      ready: 'True',
      bootID: node.bootID,
      osImage: 'Talos (v1.13.0)',
    });
  });

  it('fails an image pull with Talos’ message', async (t) => {
    const node = await simulatedNode(t, {
      annotations: {
        [TALOS_FAULT_ANNOTATION]: 'pull-error',
        [TALOS_FAULT_MESSAGE_ANNOTATION]: 'registry said 503',
      },
    });
    const progress: ImagePullProgress[] = [];
    const error = await talosError(
      talos.pullImage({ node: node.ip, image: `${INSTALLER}:v1.13.1`, onProgress: (p) => progress.push(p) }),
    );
    assert.ok(progress.length > 0, 'progress streamed before the failure');
    assert.match(
      error.message,
      /ImageService\.Pull on node .* failed: failed to pull image ".*": registry said 503 \(UNKNOWN\)$/,
    );
  });

  it('keeps a node that never returns down after its reboot', async (t) => {
    const node = await simulatedNode(t, { annotations: { [TALOS_FAULT_ANNOTATION]: 'never-return' } });
    await talos.reboot({ node: node.ip });
    await notReady(node.name);
    await sleep(BOOTS_BACK_MS + 1000);
    const seen = seenOf(await readNode(node.name));
    assert.notEqual(seen.ready, 'True');
    assert.equal(seen.bootID, node.bootID);
  });

  it('ends a hanging call at the client’s deadline (fault injected through the simulator’s API)', async (t) => {
    const node = await simulatedNode(t);
    const simulator = await TalosSimulator.start({
      kubeConfig: kc,
      tls: { ca: talosPki.ca, cert: talosPki.server.cert, key: talosPki.server.key },
    });
    t.after(() => simulator.stop());
    const client = new TalosClient(context, { endpoints: [simulator.endpoint] });
    t.after(() => client.close());

    simulator.injectFault(node.ip, { kind: 'hang', method: 'Reboot' });
    simulator.injectFault(node.name, { kind: 'hang', method: 'LifecycleUpgrade' });
    assert.equal((await client.version({ node: node.ip })).hostname, node.name);
    const started = Date.now();
    const hung = await talosError(client.reboot({ node: node.ip, timeoutMs: 1500 }));
    assert.equal(hung.failure, 'deadline');
    assert.ok(Date.now() - started >= 1400, 'the call waited for its deadline');
    assert.match(
      hung.message,
      new RegExp(
        `^Talos MachineService\\.Reboot on node ${node.ip.replace(/\./g, '\\.')} via ${simulator.endpoint} failed: no answer within 1\\.5s \\(DEADLINE_EXCEEDED\\)$`,
      ),
    );
    const stream = await talosError(
      client.installUpgrade({ node: node.ip, image: `${INSTALLER}:v1.13.1`, timeoutMs: 1000 }),
    );
    assert.equal(stream.failure, 'deadline');

    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error('operator gave up')), 200);
    const cancelled = await talosError(client.reboot({ node: node.ip, signal: abort.signal }));
    assert.equal(cancelled.failure, 'cancelled');
    assert.match(cancelled.message, /MachineService\.Reboot on node .* failed: cancelled by the caller$/);

    simulator.clearFaults(node.ip);
    assert.equal((await client.version({ node: node.ip })).tag, 'v1.13.0');
    // The hung reboot never happened.
    assert.equal(seenOf(await readNode(node.name)).bootID, node.bootID);
  });
});

describe('Talos API mutual TLS', () => {
  const foreign = (async () => {
    const dir = await mkdtemp(join(tmpdir(), 'foreign-talos-'));
    after(() => rm(dir, { recursive: true, force: true }));
    const pki = await createTalosPki(dir);
    const read = (path: string) => readFile(path, 'utf8');
    return { ca: await read(pki.ca), crt: await read(pki.admin.cert), key: await read(pki.admin.key) };
  })();
  const withCredentials = (credentials: Partial<Pick<TalosContext, 'ca' | 'crt' | 'key'>>): TalosContext => ({
    ...context,
    ...credentials,
    source: 'a test talosconfig',
  });

  it('refuses a client certificate from another CA, and the client says so', async (t) => {
    const node = await simulatedNode(t);
    const { crt, key } = await foreign;
    const client = new TalosClient(withCredentials({ crt, key }), { timeoutMs: 10_000 });
    t.after(() => client.close());
    const error = await talosError(client.version({ node: node.ip }));
    assert.equal(error.failure, 'tls-client-certificate');
    assert.match(
      error.message,
      /^Talos MachineService\.Version on node .* failed: TLS handshake failed: the endpoint refused our client certificate \(.*\); the crt in a test talosconfig must be signed by this cluster's Talos CA$/,
    );
  });

  it('does not trust an endpoint whose certificate another CA signed', async (t) => {
    const { ca } = await foreign;
    const client = new TalosClient(withCredentials({ ca }), { timeoutMs: 10_000 });
    t.after(() => client.close());
    const error = await talosError(client.version());
    assert.equal(error.failure, 'tls-server-certificate');
    assert.match(
      error.message,
      /TLS handshake failed: the endpoint's certificate is not trusted by the talosconfig's CA \(.*certificate.*\); is a test talosconfig for this cluster\?$/,
    );
  });

  it('says an endpoint with nothing listening is unreachable, and moves on to the next endpoint', async () => {
    const { port } = await freePorts(['port']);
    const dead = `127.0.0.1:${String(port)}`;
    const only = new TalosClient(context, { endpoints: [dead], timeoutMs: 10_000 });
    const error = await talosError(only.version());
    only.close();
    assert.equal(error.failure, 'unreachable');
    assert.match(
      error.message,
      new RegExp(`via ${dead} failed: cannot connect to the endpoint: .*ECONNREFUSED`),
    );

    const both = new TalosClient(context, { endpoints: [dead, ...context.endpoints], timeoutMs: 10_000 });
    assert.equal((await both.version()).hostname, 'talos-simulator');
    both.close();
  });
});

describe('sandbox talosconfig', () => {
  it('is loaded from a Kubernetes Secret as from a file', async (t) => {
    const namespace = await freshNamespace(t);
    await core.createNamespacedSecret({
      namespace,
      body: {
        metadata: { name: 'talosconfig' },
        data: { config: (await readFile(talosconfig)).toString('base64') },
      },
    });
    const fromSecret = await loadTalosConfigFromSecret(api, { namespace, name: 'talosconfig' });
    assert.equal(fromSecret.source, `Secret ${namespace}/talosconfig key "config"`);
    const client = new TalosClient(fromSecret);
    t.after(() => client.close());
    assert.equal((await client.version()).hostname, 'talos-simulator');
    await assert.rejects(
      loadTalosConfigFromSecret(api, { namespace, name: 'talosconfig', key: 'talosconfig' }),
      {
        message: `Secret ${namespace}/talosconfig key "talosconfig" does not exist in the Secret (it has: config)`,
      },
    );
  });

  it('is exported by `gatehouse sandbox env`', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [
      join(import.meta.dirname, '../../src/cli/main.ts'),
      'sandbox',
      'env',
      `--dir=${sandbox.dir}`,
    ]);
    assert.match(stdout, new RegExp(`^export TALOSCONFIG=${talosconfig.replace(/[.]/g, '\\.')}$`, 'm'));
  });
});
