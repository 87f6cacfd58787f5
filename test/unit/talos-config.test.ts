import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import {
  endpointAddress,
  loadTalosConfig,
  parseTalosConfig,
  selectContext,
  talosConfigYaml,
  TalosConfigError,
} from '../../src/talos/config.ts';

const CA = '-----BEGIN CERTIFICATE-----\nY2E=\n-----END CERTIFICATE-----\n';
const CRT = '-----BEGIN CERTIFICATE-----\nY3J0\n-----END CERTIFICATE-----\n';
const KEY = '-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n';
const b64 = (text: string) => Buffer.from(text).toString('base64');

function file(overrides: Record<string, unknown> = {}, current = 'prod'): string {
  return stringify({
    context: current,
    contexts: {
      prod: {
        endpoints: ['10.5.0.2', '10.5.0.3:6000'],
        nodes: ['10.5.0.4'],
        ca: b64(CA),
        crt: b64(CRT),
        key: b64(KEY),
      },
      lab: { endpoints: ['lab.example'], ca: b64(CA), crt: b64(CRT), key: b64(KEY) },
      ...overrides,
    },
  });
}

describe('talosconfig', () => {
  it('selects the current context, decodes its PEM and completes its endpoints with port 50000', () => {
    const ctx = selectContext(parseTalosConfig(file(), 'test'), 'test');
    assert.deepEqual(ctx, {
      name: 'prod',
      endpoints: ['10.5.0.2:50000', '10.5.0.3:6000'],
      nodes: ['10.5.0.4'],
      ca: CA,
      crt: CRT,
      key: KEY,
      source: 'test',
    });
  });

  it('selects another context by name', () => {
    const ctx = selectContext(parseTalosConfig(file(), 'test'), 'test', 'lab');
    assert.equal(ctx.name, 'lab');
    assert.deepEqual(ctx.endpoints, ['lab.example:50000']);
    assert.deepEqual(ctx.nodes, []);
  });

  it('writes what it reads', () => {
    const text = talosConfigYaml({ name: 'sb', endpoints: ['127.0.0.1:1234'], ca: CA, crt: CRT, key: KEY });
    const ctx = selectContext(parseTalosConfig(text, 'x'), 'x');
    assert.deepEqual(
      [ctx.name, ctx.endpoints, ctx.ca, ctx.crt, ctx.key],
      ['sb', ['127.0.0.1:1234'], CA, CRT, KEY],
    );
  });

  it('says which context is missing and which exist', () => {
    assert.throws(() => selectContext(parseTalosConfig(file(), 'f.yaml'), 'f.yaml', 'staging'), {
      name: 'TalosConfigError',
      message: 'talosconfig f.yaml has no context "staging" (it has: prod, lab)',
    });
    assert.throws(
      () => selectContext(parseTalosConfig(stringify({ contexts: {} }), 'f.yaml'), 'f.yaml'),
      /f\.yaml names no current context/,
    );
  });

  it('requires endpoints and base64 PEM credentials', () => {
    const broken = (ctx: Record<string, unknown>) => () =>
      selectContext(parseTalosConfig(file({ bad: ctx }, 'bad'), 'f'), 'f');
    const complete = { endpoints: ['a'], ca: b64(CA), crt: b64(CRT), key: b64(KEY) };
    assert.throws(
      broken({ ...complete, endpoints: [] }),
      /context "bad" has no endpoints: list the Talos API addresses/,
    );
    assert.throws(
      broken({ ...complete, ca: 'not base64 pem' }),
      /context "bad": "ca" is not base64-encoded PEM \(a certificate\)/,
    );
    assert.throws(
      broken({ ...complete, key: b64(CRT) }),
      /"key" is not base64-encoded PEM \(a private key\)/,
    );
    assert.throws(broken({ endpoints: ['a'], ca: b64(CA), key: b64(KEY) }), /"crt" is missing/);
  });

  it('rejects files of the wrong shape, saying where', () => {
    assert.throws(() => parseTalosConfig('context: [', 'f'), /talosconfig f is not valid YAML/);
    assert.throws(() => parseTalosConfig('- a', 'f'), /is not a mapping with "context" and "contexts"/);
    assert.throws(
      () => parseTalosConfig('contexts: 3', 'f'),
      /"contexts" must map context names to contexts/,
    );
    assert.throws(
      () => parseTalosConfig(stringify({ contexts: { a: { endpoints: 'x' } } }), 'f'),
      /contexts\.a\.endpoints must be a list of addresses/,
    );
    assert.throws(() => parseTalosConfig(stringify({ contexts: { a: { ca: 1 } } }), 'f'), TalosConfigError);
  });

  it('completes endpoints of every form to host:port', () => {
    assert.equal(endpointAddress('10.5.0.2'), '10.5.0.2:50000');
    assert.equal(endpointAddress('10.5.0.2:1234'), '10.5.0.2:1234');
    assert.equal(endpointAddress('talos.example'), 'talos.example:50000');
    assert.equal(endpointAddress('https://talos.example:443/'), 'talos.example:443');
    assert.equal(endpointAddress('fd00::1'), '[fd00::1]:50000');
    assert.equal(endpointAddress('[fd00::1]'), '[fd00::1]:50000');
    assert.equal(endpointAddress('[fd00::1]:7'), '[fd00::1]:7');
  });
});

describe('finding the talosconfig', () => {
  let dir: string;
  const paths = { given: '', env: '', inCluster: '', home: '' };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'talosconfig-'));
    const write = async (name: string, current: string) => {
      const path = join(dir, name);
      await writeFile(path, file({}, current));
      return path;
    };
    paths.given = await write('given', 'prod');
    paths.env = await write('env', 'lab');
    await mkdir(join(dir, 'home', '.talos'), { recursive: true });
    paths.home = join(dir, 'home');
    await writeFile(
      join(paths.home, '.talos', 'config'),
      file({ home: { endpoints: ['h'], ca: b64(CA), crt: b64(CRT), key: b64(KEY) } }, 'home'),
    );
    paths.inCluster = join(dir, 'in-cluster');
  });
  after(() => rm(dir, { recursive: true, force: true }));

  const load = (options: { path?: string; env?: Record<string, string>; inCluster?: boolean }) =>
    loadTalosConfig({
      ...(options.path ? { path: options.path } : {}),
      env: options.env ?? {},
      inClusterPath: options.inCluster ? paths.given : join(dir, 'absent'),
      home: paths.home,
    });

  it('takes an explicit path over $TALOSCONFIG', async () => {
    const ctx = await load({ path: paths.given, env: { TALOSCONFIG: paths.env } });
    assert.equal(ctx.name, 'prod');
    assert.equal(ctx.source, paths.given);
  });

  it('takes $TALOSCONFIG over the in-cluster file', async () => {
    assert.equal((await load({ env: { TALOSCONFIG: paths.env }, inCluster: true })).name, 'lab');
  });

  it('takes the in-cluster file over ~/.talos/config', async () => {
    assert.equal((await load({ inCluster: true })).source, paths.given);
    assert.equal((await load({})).name, 'home');
  });

  it('fails clearly when a named file is missing, or nothing is found', async () => {
    await assert.rejects(load({ env: { TALOSCONFIG: join(dir, 'nope') } }), {
      message: `talosconfig ${join(dir, 'nope')} ($TALOSCONFIG) does not exist`,
    });
    await assert.rejects(
      loadTalosConfig({ env: {}, inClusterPath: join(dir, 'absent'), home: join(dir, 'nohome') }),
      /no talosconfig found: pass a path, set \$TALOSCONFIG, or run in a pod Talos grants API access/,
    );
  });
});
