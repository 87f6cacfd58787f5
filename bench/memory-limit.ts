// Runs a benchmarked controller under the memory limit its Deployment gives it, in a memory
// cgroup of its own, as the kubelet would. It matters for more than the OOM line: Node sizes
// the V8 heap from the limit it runs under (process.constrainedMemory()). Under the chart's
// 512 MiB the heap may grow to 259 MiB and major collections come early; with no limit, on
// this 24 GiB machine, V8 sizes it for 4 GiB and lets garbage pile up before collecting
// it: a controller's first start at 5,000 Nodes kept 276 MiB of RSS, where the same start
// under 512Mi held 168 MiB (docs/decisions.md, "The Deployment's memory limit").
// The CPU limit is not applied: it only slows a start, and the Go baseline's Deployment
// would have a limit of its own.
//
// Needs a writable cgroup hierarchy with the memory controller (root here; cgroup v1 or v2;
// on v2 it enables the memory controller for the root's children if it is not yet).
// Without one, the process runs unconfined and the benchmark says so.
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Bytes of a Kubernetes quantity with a binary suffix (Ki, Mi, Gi) or none. */
export function quantityBytes(quantity: string): number {
  const match = /^(\d+)(Ki|Mi|Gi)?$/.exec(quantity);
  if (!match) throw new Error(`not a quantity of bytes this benchmark reads: ${quantity}`);
  const suffix = match[2] as 'Ki' | 'Mi' | 'Gi' | undefined;
  const scale = suffix ? { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30 }[suffix] : 1;
  return Number(match[1]) * scale;
}

interface Hierarchy {
  /** Where groups are made. */
  root: string;
  limitFile: string;
}

async function hierarchy(): Promise<Hierarchy | string> {
  const v2 = '/sys/fs/cgroup';
  const controllers = await readFile(join(v2, 'cgroup.controllers'), 'utf8').catch(() => undefined);
  if (controllers !== undefined) {
    if (!controllers.split(/\s+/).includes('memory')) return 'cgroup v2 without the memory controller';
    const enabled = await readFile(join(v2, 'cgroup.subtree_control'), 'utf8').catch(() => '');
    if (!enabled.split(/\s+/).includes('memory'))
      await writeFile(join(v2, 'cgroup.subtree_control'), '+memory').catch(() => undefined);
    return { root: v2, limitFile: 'memory.max' };
  }
  const v1 = '/sys/fs/cgroup/memory';
  if (existsSync(join(v1, 'memory.limit_in_bytes'))) return { root: v1, limitFile: 'memory.limit_in_bytes' };
  return 'no cgroup memory controller mounted';
}

let made = 0;

export interface Limited {
  child: ChildProcess;
  /** What the process runs under: "a 512Mi memory cgroup", or why it runs without one. */
  confinement: string;
  /** Removes the cgroup once the process has exited. */
  release: () => Promise<void>;
}

/**
 * Spawns `command` inside a new memory cgroup limited to `limit` (a quantity, e.g. 512Mi):
 * a shell joins the group and then becomes the command (exec), so that the process is
 * in it from its first instruction and keeps the pid the caller sees.
 */
export async function spawnLimited(
  command: string,
  args: readonly string[],
  options: SpawnOptions,
  limit: string | undefined,
): Promise<Limited> {
  if (limit === undefined)
    return {
      child: spawn(command, args, options),
      confinement: 'no memory limit (asked for none)',
      release: () => Promise.resolve(),
    };
  const found = await hierarchy();
  let reason = typeof found === 'string' ? found : '';
  let group: string | undefined;
  if (typeof found !== 'string') {
    const dir = join(found.root, `gatehouse-bench-${String(process.pid)}-${String(++made)}`);
    try {
      await mkdir(dir);
      await writeFile(join(dir, found.limitFile), String(quantityBytes(limit)));
      group = dir;
    } catch (error) {
      reason = `cannot make a memory cgroup (${(error as Error).message})`;
      await rmdir(dir).catch(() => undefined);
    }
  }
  if (!group) {
    return {
      child: spawn(command, args, options),
      confinement: `no memory limit: ${reason}`,
      release: () => Promise.resolve(),
    };
  }
  const procs = join(group, 'cgroup.procs');
  const child = spawn('/bin/sh', ['-c', `echo $$ > '${procs}' && exec "$0" "$@"`, command, ...args], options);
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  return {
    child,
    confinement: `a ${limit} memory cgroup`,
    release: async () => {
      await exited;
      await rmdir(group).catch(() => undefined);
    },
  };
}
