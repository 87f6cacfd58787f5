// The single-file executable (scripts/sea.ts: Node's single executable application),
// run as someone who downloaded one file: --version, `status` against the sandbox, and
// the test bed it does not carry. CI builds it first (.ci/run) and names it in
// GATEHOUSE_TEST_SEA; without it the test builds one of its own.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { promisify } from 'node:util';
import packageJson from '../../package.json' with { type: 'json' };
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { installGatehouseAPI, repoRoot } from '../support/install.ts';
import { rest, testKubeConfig, uniqueName } from '../support/kube.ts';

const run = promisify(execFile);
const kc = testKubeConfig();
const client = rest(kc);
const check = uniqueName('sea');
let dir = '';
let executable = '';

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-sea-'));
  executable = process.env.GATEHOUSE_TEST_SEA ?? join(dir, 'gatehouse');
  if (!process.env.GATEHOUSE_TEST_SEA)
    await run(process.execPath, [join(repoRoot, 'scripts', 'sea.ts'), executable], {
      cwd: repoRoot,
      maxBuffer: 64 << 20,
    });
  await installGatehouseAPI(kc);
});

after(async () => {
  await client
    .request(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${check}`, { method: 'DELETE' })
    .catch(() => undefined);
  if (dir) await rm(dir, { recursive: true, force: true });
});

it('one file: --version, status against the sandbox, and no test bed', async () => {
  // A machine of its own: no Node on PATH, an empty cache to unpack into.
  const unpacked = join(dir, 'cache');
  const env = { PATH: '/usr/bin:/bin', HOME: dir, GATEHOUSE_SEA_DIR: unpacked };
  const first = await run(executable, ['--version'], { env, cwd: dir });
  assert.equal(first.stdout.trim(), packageJson.version);
  assert.equal((await readdir(unpacked)).length, 1, 'unpacked once, into a directory named by its digest');
  assert.equal((await run(executable, ['--version'], { env, cwd: dir })).stdout.trim(), packageJson.version);
  assert.equal((await readdir(unpacked)).length, 1, 'the second run reuses it');

  await client.request('/apis/talos.dev/v1alpha1/clusterhealthchecks', {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ClusterHealthCheck',
      metadata: { name: check, labels: { [INSTANCE_LABEL]: check } },
      spec: { interval: '1m', tcpSocket: { host: '127.0.0.1', port: 1 } },
    },
  });
  const kubeconfig = process.env.GATEHOUSE_TEST_KUBECONFIG ?? '';
  const { stdout } = await run(executable, ['status', '--kubeconfig', kubeconfig], { env, cwd: dir });
  assert.match(stdout, /^CHECKS/m);
  assert.ok(stdout.includes(check), `status lists the check ${check}:\n${stdout}`);

  const sandbox = await run(executable, ['sandbox', 'up'], { env, cwd: dir }).then(
    () => assert.fail('sandbox up ran from the executable'),
    (error: unknown) => error as { code: number; stderr: string },
  );
  assert.equal(sandbox.code, 2);
  assert.match(sandbox.stderr, /runs from a clone of the gatehouse repository/);
});
