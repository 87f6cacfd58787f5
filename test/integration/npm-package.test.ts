// The npm package, as someone who never clones the repository gets it: `npm pack` (which
// compiles the CLI, scripts/package-build.ts), installed into a project of its own, and
// `npx gatehouse status` run from there against the sandbox.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, it } from 'node:test';
import { promisify } from 'node:util';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { repoRoot } from '../support/install.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { rest, testKubeConfig, uniqueName } from '../support/kube.ts';

const run = promisify(execFile);
const kc = testKubeConfig();
const client = rest(kc);
const check = uniqueName('packaged');
let dir = '';
// Node 24 (the npm package `node` this repository runs on) before the system's.
const env = { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` };

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-npm-package-'));
  await installGatehouseAPI(kc);
});

after(async () => {
  await client
    .request(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${check}`, { method: 'DELETE' })
    .catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

it('packs the compiled CLI without the test bed, and npx gatehouse status works from the tarball', async () => {
  await run('npm', ['pack', '--pack-destination', dir], { cwd: repoRoot, env, maxBuffer: 16 << 20 });
  const tarball = (await readdir(dir)).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack wrote a tarball');
  const { stdout: listing } = await run('tar', ['tzf', join(dir, tarball)], { maxBuffer: 16 << 20 });
  const files = listing.split('\n').filter(Boolean);
  for (const file of [
    'package/bin/gatehouse.js',
    'package/dist/src/cli/main.js',
    'package/dist/src/http/dashboard/index.html',
    'package/dist/package.json',
  ])
    assert.ok(files.includes(file), `the package holds ${file}`);
  assert.deepEqual(
    files.filter((f) => f.endsWith('.ts') || f.includes('/sandbox/') || f.includes('/demo/')),
    [],
    'no TypeScript sources and no test bed',
  );

  const project = join(dir, 'project');
  await run('mkdir', ['-p', project]);
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'uses-gatehouse', private: true }));
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', join(dir, tarball)], {
    cwd: project,
    env,
    maxBuffer: 16 << 20,
  });

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
  const { stdout } = await run('npx', ['--no-install', 'gatehouse', 'status', '--kubeconfig', kubeconfig], {
    cwd: project,
    env,
  });
  assert.match(stdout, /^CHECKS/m);
  assert.ok(stdout.includes(check), `status lists the check ${check}:\n${stdout}`);

  // The test bed stays in the repository: the packaged CLI says where to find it.
  const sandbox = await run('npx', ['--no-install', 'gatehouse', 'sandbox', 'up'], {
    cwd: project,
    env,
  }).then(
    () => assert.fail('sandbox up ran from the package'),
    (error: unknown) => error as { code: number; stderr: string },
  );
  assert.notEqual(sandbox.code, 0);
  assert.match(sandbox.stderr, /runs from a clone of the gatehouse repository/);
});
