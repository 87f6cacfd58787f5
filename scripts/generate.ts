// Writes deploy/ from the API schemas (src/api) and install objects (src/manifests):
// one CRD per file under deploy/crds/, rbac.yaml, admission-policy.yaml and
// controller.yaml; the Helm chart charts/gatehouse from the same objects; and the
// TypeScript of the Talos messages (src/talos/gen) from proto/, by buf and
// protoc-gen-es (buf.gen.yaml). With --check it writes nothing and fails when any of
// them differs from a fresh generation, which is how CI catches a schema change
// without regenerated files.
//
//   node scripts/generate.ts [--check] [--namespace gatehouse-system] [--out deploy]
//
// --namespace is where the controller runs; it also names the ServiceAccount that the
// admission policy exempts (see src/manifests/admission-policy.ts for why).
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { chartFiles } from '../src/manifests/chart.ts';
import { DEFAULT_INSTALL, deployFiles, namespaceProblem } from '../src/manifests/install-set.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** Files under dir, relative to it; nothing if dir does not exist. */
async function listFiles(dir: string): Promise<string[]> {
  try {
    const entries = await readdir(dir, { recursive: true, withFileTypes: true });
    return entries.filter((e) => e.isFile()).map((e) => relative(dir, join(e.parentPath, e.name)));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

const TALOS_GEN = join('src', 'talos', 'gen');

/**
 * The files buf generates from proto/ (by buf.gen.yaml), as a map like deployFiles:
 * generated into a scratch directory, so that --check compares without writing.
 */
async function talosMessageFiles(): Promise<Map<string, string>> {
  const scratch = await mkdtemp(join(tmpdir(), 'gatehouse-buf-'));
  try {
    const bin = join(root, 'node_modules', '.bin');
    await promisify(execFile)(join(bin, 'buf'), ['generate', '--output', scratch], {
      cwd: root,
      // protoc-gen-es is found on PATH, and runs on the project's pinned node.
      env: { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH ?? ''}` },
    });
    const out = join(scratch, TALOS_GEN);
    const files = new Map<string, string>();
    for (const f of await listFiles(out)) files.set(f, await readFile(join(out, f), 'utf8'));
    if (files.size === 0) throw new Error(`buf generated nothing into ${TALOS_GEN}`);
    return files;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      check: { type: 'boolean', default: false },
      namespace: { type: 'string', default: DEFAULT_INSTALL.namespace },
      out: { type: 'string', default: join(root, 'deploy') },
    },
  });
  const problem = namespaceProblem(values.namespace);
  if (problem) {
    process.stderr.write(`generate: --namespace ${values.namespace} ${problem}\n`);
    return 2;
  }
  // deploy/ holds the plain manifests; charts/gatehouse the Helm chart rendered from the
  // same objects. In deploy/ the generated files are the YAML in crds/ and at the top
  // level (anything else there is left alone); the chart is generated whole.
  const targets = [
    {
      dir: values.out,
      files: deployFiles({ ...DEFAULT_INSTALL, namespace: values.namespace }),
      generatedPlace: (f: string) =>
        f.endsWith('.yaml') && (f.startsWith('crds/') ? !f.slice(5).includes('/') : !f.includes('/')),
    },
    { dir: join(root, 'charts', 'gatehouse'), files: chartFiles(), generatedPlace: () => true },
    { dir: join(root, TALOS_GEN), files: await talosMessageFiles(), generatedPlace: () => true },
  ];

  if (values.check) {
    const lines: string[] = [];
    for (const { dir, files, generatedPlace } of targets) {
      for (const [path, content] of files) {
        if ((await readIfExists(join(dir, path))) !== content) {
          lines.push(`  differs from a fresh generation: ${relative(root, join(dir, path))}`);
        }
      }
      for (const f of await listFiles(dir)) {
        if (generatedPlace(f) && !files.has(f))
          lines.push(`  not generated any more: ${relative(root, join(dir, f))}`);
      }
    }
    if (lines.length === 0) return 0;
    process.stderr.write(
      `generate --check: generated files are out of date:\n${lines.join('\n')}\nrun: npm run generate\n`,
    );
    return 1;
  }

  for (const { dir, files, generatedPlace } of targets) {
    for (const [path, content] of files) {
      await mkdir(dirname(join(dir, path)), { recursive: true });
      await writeFile(join(dir, path), content);
    }
    for (const f of await listFiles(dir)) if (generatedPlace(f) && !files.has(f)) await rm(join(dir, f));
    process.stderr.write(`generate: wrote ${String(files.size)} files to ${relative(root, dir) || '.'}\n`);
  }
  return 0;
}

process.exitCode = await main();
