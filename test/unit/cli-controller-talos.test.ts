// Where `gatehouse controller` finds its talosconfig: --talosconfig, $TALOSCONFIG, the
// in-cluster mount — or none yet, and Managed actions are then approved but not performed
// until the in-cluster one appears.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { controllerTalosConfig } from '../../src/cli/controller.ts';
import { silentLogger } from '../../src/log.ts';
import { createTalosPki } from '../../sandbox/talos-pki.ts';
import { talosConfigYaml, TalosConfigError } from '../../src/talos/config.ts';

const log = silentLogger();
let dir = '';
let pem = { ca: '', crt: '', key: '' };

async function config(name: string, context: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, talosConfigYaml({ name: context, endpoints: [`${context}.example`], ...pem }));
  return path;
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-cli-talos-'));
  // Real certificates: the controller checks that the key belongs to the certificate.
  const pki = await createTalosPki(join(dir, 'pki'));
  const read = (path: string) => readFile(path, 'utf8');
  pem = { ca: await read(pki.ca), crt: await read(pki.admin.cert), key: await read(pki.admin.key) };
});
after(() => rm(dir, { recursive: true, force: true }));

describe('gatehouse controller: the talosconfig', () => {
  it('takes --talosconfig first, then $TALOSCONFIG, then the in-cluster mount', async () => {
    const flag = await config('flag', 'flag');
    const env = await config('env', 'env');
    const mounted = await config('mounted', 'mounted');
    const pick = async (options: { talosconfig?: string }, environment: NodeJS.ProcessEnv) =>
      (await controllerTalosConfig(options, log, environment, mounted)).current?.name;
    assert.equal(await pick({ talosconfig: flag }, { TALOSCONFIG: env }), 'flag');
    assert.equal(await pick({}, { TALOSCONFIG: env }), 'env');
    assert.equal(await pick({}, {}), 'mounted');
  });

  it('follows the file it read', async () => {
    const path = await config('followed', 'before');
    const reloader = await controllerTalosConfig({ talosconfig: path }, log, {}, join(dir, 'not-mounted'));
    assert.equal(reloader.path, path);
    await config('followed', 'after');
    assert.equal(await reloader.reload(), true);
    assert.equal(reloader.current?.name, 'after');
  });

  it('without any, waits for the in-cluster one to appear', async () => {
    const mounted = join(dir, 'mounted-later');
    const reloader = await controllerTalosConfig({}, log, {}, mounted);
    assert.equal(
      reloader.current?.name,
      undefined,
      'no credentials: Managed actions are approved, not performed',
    );
    assert.equal(reloader.path, mounted);
    assert.equal(await reloader.reload(), false);
    await config('mounted-later', 'late');
    assert.equal(await reloader.reload(), true);
    assert.equal(reloader.current?.name, 'late');
  });

  it('refuses a talosconfig at start that it cannot use, rather than run without it', async () => {
    const path = join(dir, 'mismatched');
    const other = await createTalosPki(join(dir, 'other-pki'));
    await writeFile(
      path,
      talosConfigYaml({
        name: 'x',
        endpoints: ['x.example'],
        ...pem,
        key: await readFile(other.admin.key, 'utf8'),
      }),
    );
    await assert.rejects(controllerTalosConfig({}, log, {}, path), {
      name: 'TalosConfigError',
      message: `talosconfig ${path}, context "x": "key" is not the private key of the client certificate "crt"`,
    });
  });

  it('refuses a talosconfig it was pointed at that does not exist, rather than run without it', async () => {
    await assert.rejects(
      controllerTalosConfig({ talosconfig: join(dir, 'missing') }, log, {}, join(dir, 'not-mounted')),
      (error: unknown) =>
        error instanceof TalosConfigError && /missing \(given\) does not exist/.test(error.message),
    );
  });

  it('selects the context asked for', async () => {
    const path = await config('ctx', 'prod');
    await assert.rejects(
      controllerTalosConfig({ talosconfig: path, talosContext: 'lab' }, log, {}, join(dir, 'not-mounted')),
      /has no context "lab" \(it has: prod\)/,
    );
  });
});
