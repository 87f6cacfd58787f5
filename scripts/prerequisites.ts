// What `npm test` and `npm run demo` need from the machine, checked before they start
// (npm's pretest and predemo): the Debian packages are installed when this user can
// (root, or sudo without a password), as .ci/run does; what apt cannot bring (Go, when
// the sandbox is not built yet) stops the command at once, with the exact command to run.
//
//   node scripts/prerequisites.ts test|demo
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { findBinaries, findTool, TOOLS } from '../sandbox/binaries.ts';

export type Purpose = 'test' | 'demo';

/** One thing a command needs, and whether this machine has it. */
export interface Requirement {
  /** What it is, in words (`chromium`, `Go`). */
  what: string;
  /** Why the command needs it. */
  why: string;
  present: boolean;
  /** The Debian package that brings it; without one, `otherwise` says how to get it. */
  debian?: string;
  otherwise?: string;
}

export type Plan =
  | { kind: 'ready' }
  | { kind: 'install'; command: readonly string[]; packages: readonly string[] }
  | { kind: 'stop'; message: string };

/** The Go release the sandbox is known to build with, for the download command. */
export const GO_VERSION = '1.26.8';

export function goInstallCommand(arch: string = process.arch): string {
  const goArch = arch === 'x64' ? 'amd64' : arch;
  return `curl -fsSL https://go.dev/dl/go${GO_VERSION}.linux-${goArch}.tar.gz | sudo tar -C /usr/local -xz && export PATH="$PATH:/usr/local/go/bin"`;
}

/**
 * What to do about the missing requirements: nothing, install the Debian packages (as
 * root, or with sudo), or stop with the commands to run. Pure, for the unit test.
 */
export function plan(
  purpose: Purpose,
  requirements: readonly Requirement[],
  how: { root: boolean; sudo: boolean; apt: boolean },
): Plan {
  const missing = requirements.filter((r) => !r.present);
  if (missing.length === 0) return { kind: 'ready' };
  const packages = [...new Set(missing.flatMap((r) => (r.debian ? [r.debian] : [])))];
  const others = missing.filter((r) => !r.debian);
  const canInstall = how.apt && (how.root || how.sudo);
  if (others.length === 0 && canInstall) {
    const sudo = how.root ? [] : ['sudo', '-n'];
    return {
      kind: 'install',
      packages,
      command: [
        ...sudo,
        'sh',
        '-c',
        `apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${packages.join(' ')}`,
      ],
    };
  }
  const lines = [
    `gatehouse: \`npm ${purpose === 'test' ? 'test' : 'run demo'}\` needs what this machine lacks:`,
  ];
  if (packages.length > 0) {
    const needs = missing.filter((r) => r.debian).map((r) => `${r.what} (${r.why})`);
    lines.push(`  ${needs.join(', ')}:`);
    lines.push(
      how.apt
        ? `    ${how.root ? '' : 'sudo '}apt-get update && ${how.root ? '' : 'sudo '}apt-get install -y ${packages.join(' ')}`
        : `    install the packages ${packages.join(' ')} (Debian's names) with this system's package manager`,
    );
  }
  for (const other of others) {
    lines.push(`  ${other.what} (${other.why}):`);
    lines.push(`    ${other.otherwise ?? `install ${other.what}`}`);
  }
  lines.push('then run it again.');
  return { kind: 'stop', message: lines.join('\n') };
}

function onPath(command: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => dir && existsSync(join(dir, command)));
}

/** The sandbox's control plane and tools, built once from Go modules: Go is needed until they are. */
async function sandboxBuilt(): Promise<boolean> {
  if (!(await findBinaries())) return false;
  for (const tool of TOOLS) if (!(await findTool(tool))) return false;
  return true;
}

export async function requirements(purpose: Purpose): Promise<Requirement[]> {
  const built = await sandboxBuilt();
  const goPresent = onPath('go');
  const list: Requirement[] = [
    {
      what: 'openssl',
      why: "the sandbox's certificates",
      present: onPath('openssl'),
      debian: 'openssl',
    },
    {
      what: 'Go',
      why: "builds the sandbox's control plane once, into ~/.cache/gatehouse",
      present: built || goPresent,
      otherwise: existsSync('/usr/local/go/bin/go')
        ? 'export PATH="$PATH:/usr/local/go/bin"   (Go is installed there, not on PATH)'
        : goInstallCommand(),
    },
  ];
  if (purpose === 'test') {
    const chromium = process.env.GATEHOUSE_TEST_CHROMIUM ?? '/usr/bin/chromium';
    list.push(
      {
        what: 'chromium',
        why: `the dashboard test's browser, at ${chromium}`,
        present: existsSync(chromium),
        debian: 'chromium',
      },
      { what: 'umoci', why: 'the container image test', present: onPath('umoci'), debian: 'umoci' },
      { what: 'runc', why: 'the container image test', present: onPath('runc'), debian: 'runc' },
      { what: 'strip', why: 'the container image build', present: onPath('strip'), debian: 'binutils' },
      {
        what: 'python3-venv',
        why: 'the HTTP API fuzz test installs schemathesis into a virtualenv',
        present: onPath('python3') && pythonVenv(),
        debian: 'python3-venv',
      },
    );
  }
  return list;
}

function pythonVenv(): boolean {
  try {
    execFileSync('python3', ['-c', 'import ensurepip, venv'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function canSudo(): boolean {
  try {
    execFileSync('sudo', ['-n', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

async function main(purpose: Purpose): Promise<number> {
  const root = process.getuid?.() === 0;
  const needed = await requirements(purpose);
  const first = plan(purpose, needed, { root, sudo: !root && canSudo(), apt: onPath('apt-get') });
  if (first.kind === 'ready') return 0;
  if (first.kind === 'stop') {
    process.stderr.write(`${first.message}\n`);
    return 1;
  }
  process.stderr.write(`gatehouse: installing ${first.packages.join(', ')} (Debian packages)\n`);
  const [command, ...args] = first.command;
  try {
    execFileSync(command ?? 'sh', args, { stdio: 'inherit' });
    return 0;
  } catch {
    process.stderr.write(
      `gatehouse: the installation failed; run it yourself:\n  ${first.command.join(' ')}\n`,
    );
    return 1;
  }
}

if (import.meta.main) {
  const purpose = process.argv[2];
  if (purpose !== 'test' && purpose !== 'demo') {
    process.stderr.write('usage: node scripts/prerequisites.ts test|demo\n');
    process.exit(2);
  }
  process.exitCode = await main(purpose);
}
