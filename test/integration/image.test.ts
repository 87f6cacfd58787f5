// The container image (scripts/image.sh, built without a Docker engine), run by a real
// OCI runtime (runc) as the chart runs it: user 65532, a read-only root filesystem,
// no capabilities, the controller's kubeconfig mounted read-only. The controller inside
// gets ready and gates an action: held while its check is unhealthy, approved once the
// check is healthy. The CLI target answers --version.
//
// CI builds the image first (.ci/run) and names it in GATEHOUSE_TEST_IMAGE (an OCI layout
// directory); without it the test builds one of its own. Runs as root (uid mappings for
// the container's user namespace; .ci/run runs as root or with sudo).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { promisify } from 'node:util';
import packageJson from '../../package.json' with { type: 'json' };
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { WaitAbortedError } from '../../src/wait.ts';
import {
  API,
  createTestNodes,
  deleteActionsAfter,
  getAction,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import { installGatehouseAPI, repoRoot } from '../support/install.ts';
import {
  controllerKubeConfig,
  rest,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { ownForContainer, imageConfig, runImage, type Container } from '../support/oci.ts';

const run = promisify(execFile);
const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('image');
const containers: Container[] = [];
let dir = '';
let layout = '';

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
}

before(async () => {
  for (const tool of ['umoci', 'runc'])
    await run(tool, ['--version']).catch(() => {
      throw new Error(`${tool} is missing: install it with  apt-get install -y ${tool}`);
    });
  if (process.getuid?.() !== 0)
    throw new Error('the container test maps uids for its user namespace: run it as root (sudo)');
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-image-'));
  // mkdtemp makes it 0700; the container's root (host uid 200000) must reach the bundles in it.
  await chmod(dir, 0o711);
  layout = process.env.GATEHOUSE_TEST_IMAGE ?? join(dir, 'image');
  if (!process.env.GATEHOUSE_TEST_IMAGE)
    await run('bash', [join(repoRoot, 'scripts', 'image.sh'), '--out', layout], {
      cwd: repoRoot,
      maxBuffer: 64 << 20,
    });
  await installGatehouseAPI(kc);
});

after(async () => {
  // Whatever before() or the test got to: every container stops before the directory goes.
  await Promise.all(containers.map((c) => c.stop()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

it('runs the controller read-only as 65532: ready, and gating an action', async (t) => {
  const image = await imageConfig(layout, packageJson.version);
  assert.equal(image.User, '65532:65532');
  assert.deepEqual(image.Cmd, ['controller']);

  const kube = join(dir, 'kube');
  await mkdir(kube);
  const kubeconfig = join(kube, 'config');
  await writeFile(kubeconfig, (await controllerKubeConfig(kc)).exportConfig(), { mode: 0o600 });
  await ownForContainer(kubeconfig, image);

  const group = uniqueName('image');
  const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
  const [node] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });

  const port = await freePort();
  const container = await runImage({
    layout,
    tag: packageJson.version,
    dir: join(dir, 'controller'),
    args: [
      'controller',
      '--kubeconfig',
      '/etc/gatehouse/kubeconfig',
      '--listen-host',
      '127.0.0.1',
      '--port',
      String(port),
      '--instance',
      instance,
      '--check-selector',
      `${INSTANCE_LABEL}=${instance}`,
      '--no-leader-elect',
    ],
    binds: [{ source: kubeconfig, destination: '/etc/gatehouse/kubeconfig' }],
  });
  // From here, what a node does once the image is pulled and unpacked: runc starts it.
  const started = Date.now();
  containers.push(container);
  let exited: number | null | undefined;
  void container.exited.then((code) => (exited = code));

  await waitFor(
    'the controller in the container to answer /readyz',
    async (observe) => {
      if (exited !== undefined)
        throw new WaitAbortedError(`the container exited (${String(exited)}):\n${container.output()}`);
      const response = await fetch(`http://127.0.0.1:${String(port)}/readyz`).catch((e: unknown) => e);
      observe(response instanceof Response ? `HTTP ${String(response.status)}` : String(response));
      return response instanceof Response && response.ok ? true : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 100 },
  );
  const readyMs = Date.now() - started;
  t.diagnostic(`container start to /readyz: ${String(readyMs)}ms`);

  const name = uniqueName(`image-reboot-${node ?? ''}`);
  await client.request(`${API}/nodeactions`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NodeAction',
      metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
      spec: { nodeName: node, action: 'Reboot', execution: 'External', requestedBy: await whoami(client) },
    },
  });
  deleteActionsAfter(t, client, name);
  // WaitingForHealth first says it is evaluating; the message names the check once its
  // fresh result is in.
  const held = await waitFor(`NodeAction ${name} to be held by ${check.name}`, async (observe) => {
    const a = await getAction(client, name);
    observe(`${a.status?.phase ?? '(none)'}: ${a.status?.message ?? ''}`);
    return a.status?.message?.includes(check.name) ? a : undefined;
  });
  assert.equal(held.status?.phase, 'WaitingForHealth');
  await check.set(true);
  await waitForPhase(client, name, 'Approved');
  assert.equal((await getAction(client, name)).status?.phase, 'Approved');

  // Nothing but /tmp is writable, and nothing ran as anyone but 65532.
  assert.doesNotMatch(container.output(), /EROFS|EACCES/);
  await container.stop();
  assert.equal(await container.exited, 0, container.output());
});

it('the CLI target runs the same files with no command of its own', async () => {
  const tag = `${packageJson.version}-cli`;
  const image = await imageConfig(layout, tag);
  assert.equal(image.User, '65532:65532');
  assert.equal(image.Cmd, undefined);
  const container = await runImage({ layout, tag, dir: join(dir, 'cli'), args: ['--version'] });
  containers.push(container);
  assert.equal(await container.exited, 0, container.output());
  assert.equal(container.output().trim(), packageJson.version);

  // The test bed stays in the repository: the image says where to find it.
  const sandbox = await runImage({ layout, tag, dir: join(dir, 'cli-sandbox'), args: ['sandbox', 'up'] });
  containers.push(sandbox);
  assert.equal(await sandbox.exited, 2, sandbox.output());
  assert.match(sandbox.output(), /runs from a clone of the gatehouse repository/);
});
