// The bundle the container image and the single-file executable run (scripts/bundle.ts):
// it holds no test bed, runs on its own, copied away from this checkout's node_modules,
// starts from the compiled code it carries, and ships the licence of every package it
// carries code from.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import packageJson from '../../package.json' with { type: 'json' };
import { bundle } from '../../scripts/bundle.ts';

const run = promisify(execFile);

describe('the bundle', () => {
  let dir = '';
  let inputs: string[] = [];
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gatehouse-bundle-'));
    inputs = await bundle(join(dir, 'app'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('carries the controller and the CLI, and no test bed', () => {
    assert.ok(inputs.includes('src/controller.ts'), 'the controller is in it');
    assert.ok(inputs.includes('src/checks/probes/index.ts'), 'dynamic imports are followed');
    assert.deepEqual(
      inputs.filter((f) => /^(sandbox\/|src\/demo\/)/.test(f)),
      [],
    );
  });

  it('runs on its own: no node_modules beside it, the dashboard beside its code', async () => {
    const files = await readdir(join(dir, 'app'));
    assert.ok(!files.includes('node_modules'));
    assert.deepEqual((await readdir(join(dir, 'app', 'dashboard'))).sort(), [
      'app.js',
      'dashboard.css',
      'icon.svg',
      'index.html',
    ]);
    const { stdout } = await run(process.execPath, [join(dir, 'app', 'main.mjs'), '--version'], { cwd: dir });
    assert.equal(stdout.trim(), packageJson.version);
    // A command that loads the controller's whole graph, the lazy chunks included.
    const manifests = await run(process.execPath, [join(dir, 'app', 'main.mjs'), 'manifests'], {
      cwd: dir,
      maxBuffer: 64 * 1024 * 1024,
    });
    assert.match(manifests.stdout, /kind: CustomResourceDefinition/);
  });

  it('starts from the compiled code it carries (Node’s compile cache)', async () => {
    const { stderr } = await run(process.execPath, [join(dir, 'app', 'main.mjs'), '--version'], {
      cwd: dir,
      env: { ...process.env, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' },
    });
    assert.match(stderr, /V8 code cache for ESM file:\S+\/main-\w+\.mjs was accepted/);
  });

  it('carries the compile cache of the user it is built for (the image: 65532)', async (t) => {
    if (process.getuid?.() !== 0) return t.skip('needs root, to run as 65532 (CI runs as root)');
    const app = join(dir, 'image');
    await bundle(app, { cacheUid: 65532 });
    await chmod(dir, 0o755);
    await run('chmod', ['-R', 'a+rX,go-w', app]);
    const { stdout, stderr } = await run(
      'setpriv',
      [
        '--reuid=65532',
        '--regid=65532',
        '--clear-groups',
        process.execPath,
        join(app, 'main.mjs'),
        '--version',
      ],
      { cwd: '/', env: { ...process.env, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' } },
    );
    assert.equal(stdout.trim(), packageJson.version);
    assert.match(stderr, /V8 code cache for ESM file:\S+\/main-\w+\.mjs was accepted/);
    assert.doesNotMatch(stderr, /permission denied/);
  });

  it('ships the licence of every package it carries code from', async () => {
    const licences = await readFile(join(dir, 'app', 'THIRD-PARTY-LICENSES.txt'), 'utf8');
    const packages = new Set(
      inputs.flatMap((f) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f)?.[1] ?? []),
    );
    assert.ok(packages.has('@grpc/grpc-js') && packages.has('typebox'), [...packages].join(' '));
    for (const name of packages)
      assert.match(licences, new RegExp(`^${name.replace(/[/.]/g, '\\$&')}@\\S+ \\(`, 'm'), name);
    assert.match(licences, /Apache License/);
  });
});
