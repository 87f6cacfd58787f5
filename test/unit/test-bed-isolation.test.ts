// The controller does not load the test bed (sandbox/, src/demo): they are imported
// lazily by `gatehouse sandbox` and `gatehouse demo` only (src/cli/test-bed.ts), and the
// container image leaves them out. Checked twice: the controller's module graph, with
// its dynamic imports, read statically; and the CLI run for a command that is neither,
// recording every module Node actually loads.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { CliError, EXIT } from '../../src/cli/exit.ts';
import { loadTestBed } from '../../src/cli/test-bed.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const TEST_BED = /^(sandbox\/|src\/demo\/)/;

/** Every repository file reachable from `entry` by relative imports, static or dynamic. */
async function moduleGraph(entry: string): Promise<Set<string>> {
  const seen = new Set<string>();
  const pending = [resolve(root, entry)];
  for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
    if (seen.has(file)) continue;
    seen.add(file);
    const source = await readFile(file, 'utf8');
    // With detectJavaScriptImports, import('...') counts as much as import ... from.
    for (const { fileName } of ts.preProcessFile(source, true, true).importedFiles) {
      if (fileName.startsWith('.')) pending.push(resolve(dirname(file), fileName));
    }
  }
  return new Set([...seen].map((f) => relative(root, f)));
}

// Registered before the entry loads; writes every module URL Node loaded when it exits.
const RECORDER = `
import { registerHooks } from 'node:module';
import { writeFileSync } from 'node:fs';
const loaded = [];
registerHooks({ load: (url, context, next) => { loaded.push(url); return next(url, context); } });
process.on('exit', () => writeFileSync(process.env.GATEHOUSE_LOADED, loaded.join('\\n')));
`;

async function loadedBy(args: string[]): Promise<string[]> {
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-loaded-'));
  try {
    const file = join(dir, 'loaded.txt');
    await promisify(execFile)(
      process.execPath,
      [
        '--import',
        `data:text/javascript,${encodeURIComponent(RECORDER)}`,
        join(root, 'src/cli/main.ts'),
        ...args,
      ],
      { env: { ...process.env, GATEHOUSE_LOADED: file }, maxBuffer: 64 * 1024 * 1024 },
    );
    return (await readFile(file, 'utf8'))
      .split('\n')
      .filter((url) => url.startsWith('file:'))
      .map((url) => relative(root, fileURLToPath(url)));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('the test bed stays out of the controller', () => {
  it('is not in the controller’s module graph, dynamic imports included', async () => {
    const graph = await moduleGraph('src/controller.ts');
    assert.ok(graph.has('src/checks/probes/index.ts'), 'the walk follows dynamic imports');
    assert.deepEqual(
      [...graph].filter((f) => TEST_BED.test(f)),
      [],
    );
  });

  it('is not loaded by the CLI for a command that is neither sandbox nor demo', async () => {
    // Help defines every command (one command named first loads only its own module).
    const loaded = await loadedBy(['--help']);
    assert.ok(loaded.includes('src/controller.ts'), 'the recorder sees the CLI’s modules');
    assert.ok(loaded.includes('src/cli/sandbox.ts'), 'every command is defined, sandbox too');
    assert.deepEqual(
      loaded.filter((f) => TEST_BED.test(f)),
      [],
    );
  });

  it('is not loaded, nor is the Talos client or another command, by the controller', async () => {
    const loaded = await loadedBy(['controller', '--help']);
    assert.ok(loaded.includes('src/controller.ts'), 'the recorder sees the controller');
    assert.deepEqual(
      loaded.filter(
        (f) => TEST_BED.test(f) || /^src\/(talos\/client|talos-gate\/pki|cli\/sandbox)\.ts$/.test(f),
      ),
      [],
    );
  });

  it('is loaded by the commands that need it', async () => {
    const graph = await moduleGraph('src/cli/main.ts');
    assert.ok(graph.has('sandbox/cluster.ts'));
    assert.ok(graph.has('src/demo/demo.ts'));
  });

  it('is reported as missing, with what to do, where it is not installed (the image)', async () => {
    const notInstalled = '../../sandbox/not-installed.ts';
    await assert.rejects(
      loadTestBed('sandbox', () => import(notInstalled)),
      (error: unknown) =>
        error instanceof CliError &&
        error.code === EXIT.usage &&
        /gatehouse sandbox runs from a clone of the gatehouse repository/.test(error.message),
    );
  });
});

describe('client-node stays out of the controller process', () => {
  // Its KubeConfig imports the library's whole generated API: 50 MiB of resident memory
  // the controller has no use for (src/kube/kubeconfig.ts reads its credentials).
  it('is not loaded when the CLI starts, for the controller or any other command', async () => {
    const loaded = await loadedBy(['controller', '--help']);
    assert.ok(loaded.includes('src/kube/kubeconfig.ts'), 'the recorder sees the controller’s modules');
    assert.deepEqual(
      loaded.filter((f) => f.includes('@kubernetes/client-node')),
      [],
    );
  });
});
