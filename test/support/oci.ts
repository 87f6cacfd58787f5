// Running the container image (scripts/image.sh) without a Docker engine: its OCI
// layout unpacked by umoci into a runtime bundle, and run by runc, the OCI runtime
// Kubernetes' container runtimes use.
//
// The container gets namespaces of its own (PID, mount, IPC, UTS and a user namespace
// mapping its uids 0-65535 to host uids 200000-265535, so that its 65532 is nobody on
// the host) but the host's network, so that it reaches the sandbox's API server on
// loopback; no capabilities, no new privileges, a read-only root filesystem and a tmpfs
// at /tmp, as the chart's Deployment runs it.
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chown, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The host uid (and gid) the container's uid 0 is. */
export const HOST_ID_BASE = 200_000;
const ID_RANGE = 65_536;

/** What an OCI image configuration says about the process (its `config`). */
export interface ImageConfig {
  User?: string;
  Env?: string[];
  Entrypoint?: string[];
  Cmd?: string[];
  WorkingDir?: string;
}

async function blob<T>(layout: string, digest: string): Promise<T> {
  const [algorithm, hex] = digest.split(':');
  return JSON.parse(await readFile(join(layout, 'blobs', algorithm ?? '', hex ?? ''), 'utf8')) as T;
}

/** The configuration of the image tagged `tag` in the OCI layout `layout`. */
export async function imageConfig(layout: string, tag: string): Promise<ImageConfig> {
  const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as {
    manifests: { digest: string; annotations?: Record<string, string> }[];
  };
  const entry = index.manifests.find((m) => m.annotations?.['org.opencontainers.image.ref.name'] === tag);
  if (!entry) throw new Error(`no image tagged ${tag} in ${layout}`);
  const manifest = await blob<{ config: { digest: string } }>(layout, entry.digest);
  return (await blob<{ config: ImageConfig }>(layout, manifest.config.digest)).config;
}

export interface BindMount {
  source: string;
  destination: string;
}

/** The OCI runtime configuration (config.json) for the image's process with `args` after its entrypoint. */
export function runtimeSpec(
  image: ImageConfig,
  args: readonly string[],
  binds: readonly BindMount[],
): object {
  const [uid, gid] = (image.User ?? '0:0').split(':').map(Number);
  const idMap = [{ containerID: 0, hostID: HOST_ID_BASE, size: ID_RANGE }];
  const tmpfs = (destination: string, mode: string) => ({
    destination,
    type: 'tmpfs',
    source: 'tmpfs',
    options: ['nosuid', 'nodev', `mode=${mode}`, 'size=65536k'],
  });
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid, gid: gid ?? uid },
      args: [...(image.Entrypoint ?? []), ...args],
      env: image.Env ?? [],
      cwd: image.WorkingDir || '/',
      noNewPrivileges: true,
      capabilities: { bounding: [], effective: [], permitted: [], inheritable: [], ambient: [] },
    },
    root: { path: 'rootfs', readonly: true },
    hostname: 'gatehouse',
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      tmpfs('/dev', '755'),
      tmpfs('/dev/shm', '1777'),
      tmpfs('/tmp', '1777'),
      ...binds.map((b) => ({ ...b, type: 'bind', options: ['bind', 'ro', 'nosuid', 'nodev'] })),
    ],
    linux: {
      // No network namespace: the host's loopback, where the sandbox listens.
      namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, { type: 'user' }],
      uidMappings: idMap,
      gidMappings: idMap,
      maskedPaths: ['/proc/kcore', '/proc/keys', '/proc/timer_list', '/proc/sched_debug'],
      readonlyPaths: ['/proc/sys', '/proc/sysrq-trigger', '/proc/irq', '/proc/bus'],
    },
  };
}

/** `path` readable inside the container by the image's user alone (its host uid). */
export async function ownForContainer(path: string, image: ImageConfig): Promise<void> {
  const [uid, gid] = (image.User ?? '0:0').split(':').map(Number);
  await chown(path, HOST_ID_BASE + (uid ?? 0), HOST_ID_BASE + (gid ?? uid ?? 0));
}

/**
 * runc bind-mounts the rootfs onto itself from inside the user namespace, as the
 * container's root (host uid HOST_ID_BASE, a stranger to the host): every directory
 * above the bundle must let others search it, or the mount fails with a bare
 * "permission denied". Says which one does not.
 */
async function reachableByContainer(bundle: string): Promise<void> {
  for (let path = resolve(bundle); ; path = dirname(path)) {
    const { mode } = await stat(path);
    if ((mode & 0o001) === 0)
      throw new Error(
        `${path} (mode ${(mode & 0o777).toString(8)}) is not searchable by others: the container's root, host uid ${String(HOST_ID_BASE)}, cannot reach its rootfs in ${bundle} (chmod o+x it)`,
      );
    if (path === dirname(path)) return;
  }
}

export interface Container {
  id: string;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /** Resolves with the exit code when the process ends. */
  exited: Promise<number | null>;
  /** SIGTERM, SIGKILL after `graceMs`, then the runtime's state is deleted. Safe to call twice. */
  stop(graceMs?: number): Promise<void>;
}

/**
 * Unpacks `tag` from the OCI layout into `dir` and runs it with runc, state under
 * `dir` (never /run/runc). Call stop() in an `after` hook: nothing outlives the test.
 */
export async function runImage(options: {
  layout: string;
  tag: string;
  dir: string;
  args: readonly string[];
  binds?: readonly BindMount[];
}): Promise<Container> {
  const { layout, tag, dir } = options;
  const image = await imageConfig(layout, tag);
  const bundle = join(dir, 'bundle');
  const state = join(dir, 'runc');
  await mkdir(bundle, { recursive: true });
  await reachableByContainer(bundle);
  const map = `0:${String(HOST_ID_BASE)}:${String(ID_RANGE)}`;
  await run('umoci', [
    'raw',
    'unpack',
    '--uid-map',
    map,
    '--gid-map',
    map,
    '--image',
    `${layout}:${tag}`,
    join(bundle, 'rootfs'),
  ]);
  await writeFile(
    join(bundle, 'config.json'),
    JSON.stringify(runtimeSpec(image, options.args, options.binds ?? [])),
  );
  const id = `gatehouse-${String(process.pid)}-${String(Date.now())}`;
  const child = spawn('runc', ['--root', state, 'run', '--bundle', bundle, id], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  const runc = (...args: string[]) => run('runc', ['--root', state, ...args]).catch(() => undefined);
  let stopping: Promise<void> | undefined;
  const stop = (graceMs = 10_000) =>
    (stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        await runc('kill', id, 'TERM');
        const timer = setTimeout(() => void runc('kill', id, 'KILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      await runc('delete', '--force', id);
    })());
  return { id, output: () => output, exited, stop };
}
