// The real controller command in a process of its own, which a test can SIGKILL mid-way
// (the Managed call made, its answer not yet recorded): every start logs, at info, to a
// file of its own, so that a stall can be read.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { INSTANCE_LABEL } from '../../src/api/names.ts';

/**
 * The real controller command, in a process of its own that the test can SIGKILL. Each
 * start logs (at info) to a file of its own in `logDir`, so that a stall can be read.
 */
export class ControllerProcess {
  private child: ChildProcess | undefined;
  kills = 0;
  private stopped = false;
  private readonly instance: string;
  private readonly logDir: string;
  private readonly talosconfig: string | undefined;
  /** One log file per start, oldest first. */
  readonly logs: string[] = [];
  /** Without a talosconfig, it performs only what needs no Talos (a Maintenance's drain). */
  constructor(instance: string, logDir: string, talosconfig?: string) {
    this.instance = instance;
    this.logDir = logDir;
    this.talosconfig = talosconfig;
  }

  start(): void {
    const file = join(this.logDir, `controller-${String(this.logs.length).padStart(2, '0')}.log`);
    const out = openSync(file, 'w');
    this.logs.push(file);
    try {
      this.child = spawn(
        process.execPath,
        [
          'src/cli/main.ts', 'controller', '--kubeconfig', process.env.GATEHOUSE_TEST_KUBECONFIG ?? '',
          '--listen-host', '127.0.0.1', '--port', '0', '--instance', this.instance,
          '--check-selector', `${INSTANCE_LABEL}=${this.instance}`,
          ...(this.talosconfig ? ['--talosconfig', this.talosconfig] : []),
          '--no-leader-elect', '--log-level', 'info',
        ], // prettier-ignore
        { stdio: ['ignore', out, out] },
      );
    } finally {
      closeSync(out);
    }
  }

  async rampage(until: () => Promise<boolean>): Promise<void> {
    while (!this.isStopped() && !(await until())) {
      await new Promise((r) => setTimeout(r, 1500 + Math.random() * 4000));
      if (this.isStopped()) break;
      this.child?.kill('SIGKILL');
      this.kills++;
      this.start();
    }
  }

  private isStopped(): boolean {
    return this.stopped;
  }

  /** SIGKILL, as a node's kernel or an OOM killer would end it: nothing runs after it. */
  kill(): void {
    this.child?.kill('SIGKILL');
    this.kills++;
  }

  stop(): void {
    this.stopped = true;
    this.child?.kill('SIGTERM');
  }

  /** The last lines each start logged (the last start's more), for a failure's message. */
  async tails(lines = 40): Promise<string> {
    const parts: string[] = [];
    for (const [i, file] of this.logs.entries()) {
      const last = i === this.logs.length - 1;
      const text = await readFile(file, 'utf8').catch(() => '');
      const all = text.split('\n').filter((l) => l.trim() !== '');
      // Of the killed starts only what went wrong, and how far each got.
      const kept = last
        ? all.slice(-lines)
        : [...all.filter((l) => /"level":"(warn|error|fatal)"/.test(l)).slice(-5), ...all.slice(-3)];
      parts.push(`--- ${file} (${String(all.length)} lines)${last ? ', the last start' : ''}`, ...kept);
    }
    return parts.join('\n');
  }
}
