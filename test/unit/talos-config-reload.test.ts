// The controller follows its talosconfig file as kubelet updates a mounted Secret: the
// new content goes to a fresh timestamped directory, the `..data` symlink is swapped to
// it in one rename, and `config` is a symlink through `..data`.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { createTalosPki } from '../../sandbox/talos-pki.ts';
import { talosConfigYaml, type TalosContext } from '../../src/talos/config.ts';
import { TalosConfigReloader } from '../../src/talos/config-reload.ts';
import type { Logger } from '../../src/log.ts';
import { sleep, waitFor } from '../../src/wait.ts';

interface Pem {
  ca: string;
  crt: string;
  key: string;
}

const INTERVAL_MS = 100;
/** Timers run late on a busy machine. */
const SLACK_MS = 400;
let root = '';
/** Two clusters' credentials, both valid. */
let first: Pem;
let second: Pem;

before(async () => {
  root = await mkdtemp(join(tmpdir(), 'gatehouse-talos-reload-'));
  const pem = async (dir: string): Promise<Pem> => {
    const pki = await createTalosPki(join(root, dir));
    const read = (path: string) => readFile(path, 'utf8');
    return { ca: await read(pki.ca), crt: await read(pki.admin.cert), key: await read(pki.admin.key) };
  };
  [first, second] = await Promise.all([pem('pki-1'), pem('pki-2')]);
});
after(() => rm(root, { recursive: true, force: true }));

const yaml = (name: string, pem: Pem, endpoints = ['10.5.0.2']) =>
  talosConfigYaml({ name, endpoints, ...pem });

/** A Secret volume: a directory kubelet writes through symlinks. */
class SecretVolume {
  readonly dir: string;
  private generation = 0;

  constructor(dir: string) {
    this.dir = dir;
  }

  get path(): string {
    return join(this.dir, 'config');
  }

  static async create(t: TestContext): Promise<SecretVolume> {
    const dir = await mkdtemp(join(root, 'volume-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    return new SecretVolume(dir);
  }

  /** What kubelet's atomic writer does: new directory, `..data` swapped by rename, old one removed. */
  async write(content: string): Promise<void> {
    this.generation += 1;
    const stamp = `..2026_03_02_10_00_${String(this.generation).padStart(2, '0')}.${String(process.pid)}`;
    await mkdir(join(this.dir, stamp));
    await writeFile(join(this.dir, stamp, 'config'), content);
    await symlink(stamp, join(this.dir, '..data_tmp'));
    await rename(join(this.dir, '..data_tmp'), join(this.dir, '..data'));
    await symlink(join('..data', 'config'), this.path).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    });
    for (const entry of await readdir(this.dir))
      if (entry.startsWith('..2026') && entry !== stamp) await rm(join(this.dir, entry), { recursive: true });
  }

  /** The Secret deleted: kubelet empties the (optional) volume. */
  async empty(): Promise<void> {
    for (const entry of await readdir(this.dir)) await rm(join(this.dir, entry), { recursive: true });
  }
}

interface Line {
  level: number;
  msg: string;
  [field: string]: unknown;
}

function capture(): { log: Logger; lines: Line[]; messages: (level?: number) => string[] } {
  const lines: Line[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => lines.push(JSON.parse(line) as Line) });
  return {
    log,
    lines,
    messages: (level = 30) => lines.filter((l) => l.level >= level).map((l) => l.msg),
  };
}

/** A reloader on the volume, polling every INTERVAL_MS, stopped when the test ends. */
async function follow(
  t: TestContext,
  volume: SecretVolume,
  options: { now?: () => Date; registry?: Registry } = {},
) {
  const logs = capture();
  const reloader = new TalosConfigReloader({
    path: volume.path,
    log: logs.log,
    intervalMs: INTERVAL_MS,
    ...(options.now ? { now: options.now } : {}),
  });
  const initial = await reloader.load();
  const changes: { context: TalosContext; at: number }[] = [];
  reloader.start({
    onChange: (context) => changes.push({ context, at: Date.now() }),
    ...(options.registry ? { registry: options.registry } : {}),
  });
  t.after(() => reloader.stop());
  return { reloader, initial, changes, ...logs };
}

/** Several polls' time: long enough for a change to have been seen, had there been one. */
const polls = () => sleep(INTERVAL_MS * 6);

describe('talosconfig reload', () => {
  it('switches to a changed talosconfig within the poll interval, and says what it uses', async (t) => {
    const volume = await SecretVolume.create(t);
    await volume.write(yaml('cluster', first));
    const { reloader, initial, changes, lines } = await follow(t, volume);
    assert.equal(initial?.crt, first.crt);

    const written = Date.now();
    await volume.write(yaml('cluster', second, ['10.5.0.3', '10.5.0.4:6000']));
    await waitFor('the change to be picked up', () => changes[0], { timeoutMs: 5000, intervalMs: 5 });
    const [change] = changes;
    assert.ok(change);
    assert.ok(
      change.at - written <= INTERVAL_MS + SLACK_MS,
      `picked up after ${String(change.at - written)}ms, polling every ${String(INTERVAL_MS)}ms`,
    );
    assert.equal(change.context.crt, second.crt);
    assert.equal(change.context.key, second.key);
    assert.deepEqual(change.context.endpoints, ['10.5.0.3:50000', '10.5.0.4:6000']);
    assert.equal(reloader.current, change.context);

    const loaded = lines.filter((l) => l.msg.startsWith('Talos executor on'));
    assert.deepEqual(
      loaded.map((l) => l.msg),
      [
        'Talos executor on',
        'Talos executor on new credentials: the talosconfig changed (calls in flight finish on the old ones)',
      ],
    );
    const last = loaded[1] as Line & { certificate: { notAfter: string; roles: string[]; subject: string } };
    assert.equal(last.talosconfig, volume.path);
    assert.equal(last.context, 'cluster');
    assert.deepEqual(last.endpoints, ['10.5.0.3:50000', '10.5.0.4:6000']);
    assert.deepEqual(last.certificate.roles, ['os:admin']);
    assert.match(last.certificate.subject, /CN=admin/);
    assert.ok(Date.parse(last.certificate.notAfter) > Date.now() + 365 * 86_400_000);
    await polls();
    assert.equal(changes.length, 1, 'one change, one switch');
  });

  it('keeps the credentials in use when the new talosconfig cannot be used, and says why once per change', async (t) => {
    const volume = await SecretVolume.create(t);
    await volume.write(yaml('cluster', first));
    const registry = new Registry();
    const { reloader, changes, lines } = await follow(t, volume, { registry });
    const warnings = () => lines.filter((l) => l.level === 40);

    const broken: [string, RegExp][] = [
      ['contexts: [not, a, mapping', /is not valid YAML/],
      [
        yaml('cluster', { ...first, key: second.key }),
        /"key" is not the private key of the client certificate/,
      ],
      [yaml('other', first).replace('context: other', 'context: cluster'), /has no context "cluster"/],
      [
        yaml('cluster', { ...first, crt: '-----BEGIN CERTIFICATE-----\nY3J0\n-----END CERTIFICATE-----\n' }),
        /"crt" is not a valid certificate/,
      ],
    ];
    for (const [content, problem] of broken) {
      const before = warnings().length;
      await volume.write(content);
      await waitFor('the warning', () => (warnings().length > before ? true : undefined), {
        timeoutMs: 5000,
        intervalMs: 5,
      });
      await polls();
      const said = warnings().slice(before);
      assert.equal(said.length, 1, `one warning per change: ${JSON.stringify(said)}`);
      assert.equal(
        said[0]?.msg,
        'talosconfig changed but cannot be used: the Talos executor keeps the credentials it has',
      );
      assert.match(String(said[0].problem), problem);
      assert.match(reloader.rejected ?? '', problem);
      assert.equal(reloader.current?.crt, first.crt, 'the old credentials are kept');
    }
    assert.equal(changes.length, 0);
    const metric = async (name: string) => (await registry.getSingleMetricAsString(name)).split('\n');
    assert.ok(
      (await metric('gatehouse_talosconfig_reloads_total')).includes(
        'gatehouse_talosconfig_reloads_total{result="rejected"} 4',
      ),
    );
    assert.ok(
      (await metric('gatehouse_talosconfig_last_reload_successful')).includes(
        'gatehouse_talosconfig_last_reload_successful 0',
      ),
    );

    // The Secret deleted: nothing to switch to either.
    await volume.empty();
    await waitFor('the warning', () => (reloader.rejected?.includes('is gone') ? true : undefined), {
      timeoutMs: 5000,
      intervalMs: 5,
    });
    assert.equal(reloader.current?.crt, first.crt);

    await volume.write(yaml('cluster', second));
    await waitFor('the fixed talosconfig', () => changes[0], { timeoutMs: 5000, intervalMs: 5 });
    assert.equal(reloader.rejected, undefined);
    assert.equal(reloader.current.crt, second.crt);
    assert.ok(
      (await metric('gatehouse_talosconfig_reloads_total')).includes(
        'gatehouse_talosconfig_reloads_total{result="applied"} 1',
      ),
    );
    assert.ok(
      (await metric('gatehouse_talosconfig_last_reload_successful')).includes(
        'gatehouse_talosconfig_last_reload_successful 1',
      ),
    );
  });

  it('does not reload what did not change: the same content rewritten, or another context of the file', async (t) => {
    const volume = await SecretVolume.create(t);
    const twoContexts = (lab: Pem) =>
      talosConfigYaml({ name: 'prod', endpoints: ['10.5.0.2'], ...first }).replace(
        /^contexts:\n/m,
        `contexts:\n  lab:\n    endpoints: [lab.example]\n    ca: ${b64(lab.ca)}\n    crt: ${b64(lab.crt)}\n    key: ${b64(lab.key)}\n`,
      );
    await volume.write(twoContexts(first));
    const { reloader, changes, messages, lines } = await follow(t, volume);
    const used = reloader.current;
    assert.equal(used?.name, 'prod');

    await volume.write(twoContexts(first)); // the same bytes, in a new directory
    await polls();
    await volume.write(twoContexts(second)); // only the context not in use changed
    await waitFor(
      'the rewrite to be read',
      () => (lines.some((l) => l.msg.includes('credentials it gives are those in use')) ? true : undefined),
      { timeoutMs: 5000, intervalMs: 5 },
    );
    await polls();
    assert.equal(changes.length, 0);
    assert.equal(reloader.current, used, 'the very same context object');
    assert.deepEqual(messages(), ['Talos executor on'], 'nothing else said at info or above');
    assert.equal(await reloader.reload(), false);
  });

  it('starts using a talosconfig that appears after the start', async (t) => {
    const volume = await SecretVolume.create(t);
    const { reloader, initial, changes, messages } = await follow(t, volume);
    assert.equal(initial, undefined);
    await polls();
    assert.equal(reloader.current?.name, undefined);
    assert.deepEqual(messages(), [], 'waiting is not worth a line each poll');

    await volume.write('not: [a talosconfig');
    await waitFor('the warning', () => reloader.rejected, { timeoutMs: 5000, intervalMs: 5 });
    assert.deepEqual(messages(40), [
      'talosconfig appeared but cannot be used: Managed actions are still approved but not performed',
    ]);

    await volume.write(yaml('late', first));
    await waitFor('the talosconfig', () => changes[0], { timeoutMs: 5000, intervalMs: 5 });
    assert.equal(reloader.current?.name, 'late');
    assert.equal(messages().at(-1), 'Talos executor on: the talosconfig appeared');
  });

  it('warns when the client certificate expires within 7 days, again each day, and once it has expired', async (t) => {
    const volume = await SecretVolume.create(t);
    await volume.write(yaml('cluster', first));
    const notAfter = new X509Certificate(first.crt).validToDate;
    let now = new Date(notAfter.getTime() - 3 * 86_400_000 - 3_600_000);
    const registry = new Registry();
    const { reloader, lines } = await follow(t, volume, { now: () => now, registry });
    const expiry = () => lines.filter((l) => l.level === 40).map((l) => l.msg);
    assert.deepEqual(expiry(), [
      'the Talos client certificate expires in 3d1h: renew the talosconfig (gatehouse picks it up without a restart)',
    ]);
    assert.equal(lines.at(-1)?.notAfter, notAfter.toISOString());
    await polls();
    assert.equal(expiry().length, 1, 'not at every poll');

    now = new Date(now.getTime() + 25 * 3_600_000);
    await reloader.reload();
    assert.equal(expiry().length, 2, 'again a day later');
    assert.match(expiry()[1] ?? '', /expires in 2d0h/);

    now = new Date(notAfter.getTime() + 1000);
    await reloader.reload();
    assert.equal(
      expiry()[2],
      'the Talos client certificate has expired: Talos refuses it, and Managed actions fail until the talosconfig is renewed',
    );
    assert.ok(
      (
        await registry.getSingleMetricAsString(
          'gatehouse_talos_client_certificate_expiration_timestamp_seconds',
        )
      )
        .split('\n')
        .includes(
          `gatehouse_talos_client_certificate_expiration_timestamp_seconds ${String(notAfter.getTime() / 1000)}`,
        ),
    );
  });
});

function b64(text: string): string {
  return Buffer.from(text).toString('base64');
}
