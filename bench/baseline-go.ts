// The scale benchmark's Go baseline (bench/baseline-go/README.md): where its build is kept,
// and how it is started. sandbox/build.sh builds it into the cache under a digest of its
// sources; the same digest is computed here, so a changed main.go is never run stale.
import { createHash } from 'node:crypto';
import { access, constants, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBuildScript } from '../sandbox/binaries.ts';
import { cacheDir } from '../src/cache-dir.ts';

const SOURCES = fileURLToPath(new URL('./baseline-go/', import.meta.url));

/** Where build.sh puts the build of the current sources (the files in its order). */
async function binaryPath(): Promise<string> {
  const hash = createHash('sha256');
  for (const file of ['go.mod', 'go.sum', 'main.go']) hash.update(await readFile(join(SOURCES, file)));
  return join(cacheDir(), 'tools', `baseline-go-${hash.digest('hex').slice(0, 16)}`, 'baseline-go');
}

async function executable(path: string): Promise<boolean> {
  return access(path, constants.X_OK).then(
    () => true,
    () => false,
  );
}

/** The baseline's executable, built first (sandbox/build.sh, a few minutes cold) when it is not. */
export async function baselineBinary(log: (line: string) => void): Promise<string> {
  const path = await binaryPath();
  if (await executable(path)) return path;
  log('the Go baseline is not built yet: building it (sandbox/build.sh)');
  await runBuildScript(log);
  if (!(await executable(path)))
    throw new Error(`sandbox/build.sh finished but left no ${path}; see its log above`);
  return path;
}

/** A TCP port free on 127.0.0.1 just now, for a program that must be told its port. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === 'object') resolve(address.port);
        else reject(new Error('no port'));
      });
    });
  });
}

export interface BaselineOptions {
  kubeconfig: string;
  checks: number;
  nodes: number;
  interval: string;
  healthPort: number;
  metricsPort: number;
}

/** The baseline's arguments: the same checks as gatehouse's scale checks select. */
export function baselineArguments(o: BaselineOptions): string[] {
  return [
    `-kubeconfig=${o.kubeconfig}`,
    `-checks=${String(o.checks)}`,
    `-nodes=${String(o.nodes)}`,
    `-interval=${o.interval}`,
    `-health-probe-bind-address=127.0.0.1:${String(o.healthPort)}`,
    `-metrics-bind-address=127.0.0.1:${String(o.metricsPort)}`,
  ];
}
