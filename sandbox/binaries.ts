// Where the sandbox's control-plane programs are, building them on first use.
import { spawn } from 'node:child_process';
import { access, constants, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cacheDir } from '../src/cache-dir.ts';

export const PROGRAMS = [
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
  'kwok',
] as const;
export type Program = (typeof PROGRAMS)[number];

export interface Binaries {
  dir: string;
  kubernetesVersion: string;
  path(program: Program): string;
}

const buildScript = join(dirname(fileURLToPath(import.meta.url)), 'build.sh');

async function complete(dir: string): Promise<boolean> {
  try {
    await Promise.all(PROGRAMS.map((p) => access(join(dir, p), constants.X_OK)));
    return true;
  } catch {
    return false;
  }
}

async function describe(dir: string): Promise<Binaries> {
  const kubernetesVersion = (await readFile(join(dir, 'kubernetes.version'), 'utf8')).trim();
  return { dir, kubernetesVersion, path: (program) => join(dir, program) };
}

/** The cached build, or undefined if there is none yet. */
export async function findBinaries(): Promise<Binaries | undefined> {
  const override = process.env.GATEHOUSE_SANDBOX_BIN;
  if (override) {
    if (!(await complete(override))) {
      throw new Error(`GATEHOUSE_SANDBOX_BIN=${override} must hold executables ${PROGRAMS.join(', ')}`);
    }
    return describe(override);
  }
  let current: string;
  try {
    current = (await readFile(join(cacheDir(), 'current'), 'utf8')).trim();
  } catch {
    return undefined;
  }
  const dir = join(cacheDir(), current, 'bin');
  return (await complete(dir)) ? describe(dir) : undefined;
}

/** The cached build, running sandbox/build.sh first when there is none (minutes, cold). */
export async function ensureBinaries(log: (line: string) => void = () => undefined): Promise<Binaries> {
  const found = await findBinaries();
  // build.sh also builds the tools (helm, Prometheus...); it skips whatever is built already.
  if (found && (await Promise.all(TOOLS.map(findTool))).every(Boolean)) return found;
  log('sandbox binaries not built yet: building them from Go modules (a cold build takes 15-30 minutes)');
  await runBuildScript(log);
  const built = await findBinaries();
  if (!built) throw new Error(`sandbox/build.sh finished but left no complete build under ${cacheDir()}`);
  return built;
}

/** Runs sandbox/build.sh, which builds whatever is not in the cache yet, passing on its log lines. */
export async function runBuildScript(log: (line: string) => void): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const child = spawn('bash', [buildScript], { stdio: ['ignore', 'ignore', 'pipe'] });
    child.stderr.setEncoding('utf8');
    let tail = '';
    child.stderr.on('data', (chunk: string) => {
      tail = (tail + chunk).slice(-4000);
      for (const line of chunk.split('\n')) if (line.trim()) log(line);
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolve();
      else reject(new Error(`sandbox/build.sh exited with ${code}:\n${tail}`));
    });
  });
}

/** Programs build.sh puts under tools/, apart from the Kubernetes build. */
export const TOOLS = ['helm', 'prometheus', 'promtool', 'alertmanager'] as const;
export type Tool = (typeof TOOLS)[number];

/** A tool that sandbox/build.sh built (helm for the chart's tests, Prometheus...), or undefined. */
export async function findTool(tool: Tool): Promise<string | undefined> {
  const path = join(cacheDir(), 'tools', tool);
  try {
    await access(path, constants.X_OK);
    return path;
  } catch {
    return undefined;
  }
}

/** The tool, running build.sh first when it is not built yet. */
export async function ensureTool(tool: Tool, log?: (line: string) => void): Promise<string> {
  const found = await findTool(tool);
  if (found) return found;
  await ensureBinaries(log);
  const built = await findTool(tool);
  if (!built)
    throw new Error(`sandbox/build.sh finished but left no ${tool} under ${join(cacheDir(), 'tools')}`);
  return built;
}

/** The helm that sandbox/build.sh built (for the chart's tests), or undefined. */
export function findHelm(): Promise<string | undefined> {
  return findTool('helm');
}
