// Running the gatehouse CLI as a user would: a separate process, with a kubeconfig or
// a server and token, its stdout, stderr and exit code — or inside a pseudo-terminal
// (util-linux `script`), to see what a person sees.
import { execFile, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
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
  const dropped = ['FORCE_COLOR', 'NO_COLOR', 'GATEHOUSE_SERVER', 'GATEHOUSE_TOKEN', 'NODE_TEST_CONTEXT'];
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
