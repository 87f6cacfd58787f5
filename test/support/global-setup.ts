// One sandbox for the whole test run, shared by every integration suite (each test
// works in a namespace of its own). node:test runs this before any test file and
// passes the kubeconfig to the test processes through the environment.
//
// Set GATEHOUSE_TEST_KUBECONFIG to run the suites against a sandbox that is already up
// (`gatehouse sandbox up`), which saves its start-up time while iterating.
import { mkdir, mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { cacheDir } from '../../src/cache-dir.ts';
import { reapOrphans, startSandbox, type Sandbox } from '../../sandbox/cluster.ts';

let sandbox: Sandbox | undefined;

export async function globalSetup(): Promise<void> {
  if (process.env.GATEHOUSE_TEST_KUBECONFIG) return;
  const base = join(cacheDir(), 'test-sandboxes');
  await mkdir(base, { recursive: true });
  for (const dir of await reapOrphans(base))
    process.stderr.write(`# stopped a sandbox left by a crashed run: ${dir}\n`);
  const started = Date.now();
  sandbox = await startSandbox({
    dir: await mkdtemp(join(base, 'run-')),
    nodes: 4,
    ownerPid: process.pid,
    log: (line) => process.stderr.write(`# sandbox: ${line}\n`),
  });
  process.stderr.write(`# sandbox ready in ${String(Date.now() - started)}ms\n`);
  process.env.GATEHOUSE_TEST_KUBECONFIG = sandbox.kubeconfig;
  process.env.GATEHOUSE_TEST_SANDBOX_DIR = sandbox.state.dir;
}

export async function globalTeardown(): Promise<void> {
  await sandbox?.stop();
}
