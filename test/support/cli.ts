// Running the gatehouse CLI as a user would: a separate process, with a kubeconfig or
// a server and token, its stdout, stderr and exit code — or inside a pseudo-terminal
// (util-linux `script`), to see what a person sees.
import { execFile, spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { repoRoot } from './install.ts';

export const NODE = join(repoRoot, 'node_modules', '.bin', 'node');
export const MAIN = join(repoRoot, 'src', 'cli', 'main.ts');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** The CLI's environment: no colour forced either way, nothing inherited that changes its mind. */
export function cliEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const dropped = [
    'FORCE_COLOR',
    'NO_COLOR',
    'GATEHOUSE_SERVER',
    'GATEHOUSE_TOKEN',
    'GATEHOUSE_CONTROLLER_INSTANCE',
    'NODE_TEST_CONTEXT',
  ];
  return {
    ...Object.fromEntries(Object.entries(process.env).filter(([key]) => !dropped.includes(key))),
    ...extra,
  };
}

export function runCli(
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 120_000,
): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      NODE,
      [MAIN, ...args],
      { env: cliEnv(env), timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** The CLI as a running process whose output the test reads while it runs (a pipe, not a terminal). */
export class CliProcess {
  stdout = '';
  stderr = '';
  readonly exited: Promise<number>;
  private readonly child: ReturnType<typeof spawn>;

  /** `command` runs instead of the CLI itself when given (e.g. a wrapper that execs it). */
  constructor(args: string[], env: NodeJS.ProcessEnv = cliEnv(), command: string[] = [NODE, MAIN]) {
    const [file = NODE, ...rest] = command;
    this.child = spawn(file, [...rest, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child.stdout?.setEncoding('utf8');
    this.child.stdout?.on('data', (text: string) => (this.stdout += text));
    this.child.stderr?.setEncoding('utf8');
    this.child.stderr?.on('data', (text: string) => (this.stderr += text));
    this.exited = new Promise((resolve) =>
      this.child.on('close', (code, signal) => resolve(code ?? (signal ? 128 : -1))),
    );
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.child.kill(signal);
  }
}

/** Whether this process may run the CLI as a Pod would see itself (root, util-linux unshare). */
export function canRunAsPod(): { ok: true } | { ok: false; why: string } {
  const probe = spawnSync('unshare', ['-m', 'true']);
  return probe.status === 0
    ? { ok: true }
    : { ok: false, why: `needs unshare -m (root): ${probe.stderr.toString().trim() || String(probe.error)}` };
}

export interface PodIdentity {
  /** The ServiceAccount token, CA certificate and namespace a Pod finds mounted. */
  token: string;
  ca: Buffer;
  namespace: string;
  /** The API server, as KUBERNETES_SERVICE_HOST/PORT tell a Pod. */
  server: URL;
}

/**
 * The CLI as a Pod runs it: no kubeconfig, its ServiceAccount's token and CA at the
 * standard paths (/var/run/secrets/kubernetes.io/serviceaccount, shown to this process
 * alone in a mount namespace of its own) and KUBERNETES_SERVICE_HOST/PORT. Needs
 * canRunAsPod(); `dir` holds the files (the caller removes it).
 */
export async function podCli(
  args: string[],
  pod: PodIdentity,
  dir: string,
  env: Record<string, string> = {},
): Promise<CliProcess> {
  await writeFile(join(dir, 'token'), pod.token);
  await writeFile(join(dir, 'ca.crt'), pod.ca);
  await writeFile(join(dir, 'namespace'), pod.namespace);
  const processEnv = cliEnv({
    HOME: dir,
    KUBERNETES_SERVICE_HOST: pod.server.hostname,
    KUBERNETES_SERVICE_PORT: pod.server.port,
    ...env,
  });
  delete processEnv.KUBECONFIG;
  const script =
    'mount -t tmpfs tmpfs /run && d=/run/secrets/kubernetes.io/serviceaccount && mkdir -p $d && cp "$0"/token "$0"/ca.crt "$0"/namespace $d && exec "$@"';
  return new CliProcess(args, processEnv, ['unshare', '-m', 'sh', '-c', script, dir, NODE, MAIN]);
}

function shellQuote(word: string): string {
  return `'${word.replaceAll("'", "'\\''")}'`;
}

/** The CLI in a pseudo-terminal of `columns` columns; everything the terminal shows accumulates in `screen`. */
export class TerminalSession {
  readonly child: ChildProcessWithoutNullStreams;
  screen = '';
  readonly exited: Promise<number>;

  constructor(args: string[], env: Record<string, string> = {}, columns = 120) {
    const command = `stty cols ${String(columns)} rows 50; exec ${[NODE, MAIN, ...args].map(shellQuote).join(' ')}`;
    // -e: exit with the child's code; -q: no "Script started" lines; the log goes nowhere.
    this.child = spawn('script', ['-q', '-e', '-c', command, '/dev/null'], {
      env: cliEnv({ TERM: 'xterm-256color', ...env }),
    });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (text: string) => (this.screen += text));
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (text: string) => (this.screen += text));
    this.exited = new Promise((resolve) =>
      this.child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : -1))),
    );
  }

  /** What was shown, without escape sequences and carriage returns. */
  text(): string {
    return stripTerminal(this.screen);
  }

  /** The exit code, or a failure (with what the terminal showed) if the CLI is still running after `ms`. */
  async exitCode(ms = 120_000): Promise<number> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(
          new Error(
            `the CLI was still running after ${String(ms)}ms; the terminal showed:\n${this.text().slice(-3000)}`,
          ),
        );
      }, ms);
    });
    try {
      return await Promise.race([this.exited, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Types into the terminal (\x03 is Ctrl-C). */
  type(keys: string): void {
    this.child.stdin.write(keys);
  }

  kill(): void {
    this.child.kill('SIGKILL');
  }
}

const ESC = String.fromCharCode(27);
const SEQUENCES = new RegExp(`${ESC}\\[[0-9;?]*[A-Za-z]`, 'g');

export function stripTerminal(text: string): string {
  return text.replace(SEQUENCES, '').replaceAll('\r', '');
}
