// Starting and stopping the sandbox's programs. Each runs in its own process group,
// logs to a file, and is recorded by PID so that `down` (or a later reaper) can stop
// it even from another process.
import { spawn } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { sleep } from '../src/wait.ts';

export interface StartedProcess {
  name: string;
  pid: number;
  log: string;
  /** Set once the process has exited (only observable by the process that started it). */
  exited?: { code: number | null; signal: NodeJS.Signals | null };
}

export function startProcess(name: string, command: string, args: string[], log: string): StartedProcess {
  const fd = openSync(log, 'a');
  try {
    const child = spawn(command, args, { detached: true, stdio: ['ignore', fd, fd] });
    if (child.pid === undefined) throw new Error(`could not start ${name} (${command})`);
    const started: StartedProcess = { name, pid: child.pid, log };
    child.on('exit', (code, signal) => {
      started.exited = { code, signal };
    });
    child.on('error', () => undefined);
    // The sandbox outlives this process when started by `gatehouse sandbox up`.
    child.unref();
    return started;
  } finally {
    closeSync(fd);
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}

/** SIGTERM, then SIGKILL after a grace period; resolves when the process is gone. */
export async function stopProcess(pid: number, graceMs = 10_000): Promise<void> {
  if (!isAlive(pid)) return;
  signalGroup(pid, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(50);
  if (isAlive(pid)) {
    signalGroup(pid, 'SIGKILL');
    while (isAlive(pid)) await sleep(20);
  }
}

export async function logTail(path: string, lines = 25): Promise<string> {
  try {
    const text = await readFile(path, 'utf8');
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** A port for each name, each free a moment ago and distinct from the others. */
export async function freePorts<K extends string>(names: readonly K[]): Promise<Record<K, number>> {
  const count = names.length;
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<import('node:net').Server>((resolve, reject) => {
          const server = createServer();
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as import('node:net').AddressInfo).port);
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return Object.fromEntries(names.map((name, i) => [name, ports[i]])) as Record<K, number>;
}
