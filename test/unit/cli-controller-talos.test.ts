// Where `gatehouse controller` finds its talosconfig: --talosconfig, $TALOSCONFIG, the
// in-cluster mount — or none, and Managed actions are then approved but not performed.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { controllerTalosConfig } from '../../src/cli/controller.ts';
import { silentLogger } from '../../src/log.ts';
import { talosConfigYaml, TalosConfigError } from '../../src/talos/config.ts';

const CA = '-----BEGIN CERTIFICATE-----\nY2E=\n-----END CERTIFICATE-----\n';
const KEY = '-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n';
const log = silentLogger();
let dir = '';

async function config(name: string, context: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(
    path,
    talosConfigYaml({ name: context, endpoints: [`${context}.example`], ca: CA, crt: CA, key: KEY }),
  );
  return path;
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-cli-talos-'));
});
after(() => rm(dir, { recursive: true, force: true }));

describe('gatehouse controller: the talosconfig', () => {
  it('takes --talosconfig first, then $TALOSCONFIG, then the in-cluster mount', async () => {
    const flag = await config('flag', 'flag');
    const env = await config('env', 'env');
    const mounted = await config('mounted', 'mounted');
    const pick = async (options: { talosconfig?: string }, environment: NodeJS.ProcessEnv) =>
      (await controllerTalosConfig(options, log, environment, mounted))?.name;
    assert.equal(await pick({ talosconfig: flag }, { TALOSCONFIG: env }), 'flag');
    assert.equal(await pick({}, { TALOSCONFIG: env }), 'env');
    assert.equal(await pick({}, {}), 'mounted');
  });

  it('runs without an executor when there is none at all', async () => {
    assert.equal(await controllerTalosConfig({}, log, {}, join(dir, 'not-mounted')), undefined);
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
