// Bundles the CLI and the controller into a few ES modules for the container image and
// the single-file executable (scripts/image-rootfs.sh), with esbuild:
//
//   node scripts/bundle.ts DIR [--cache-uid UID]
//
// writes DIR/main.mjs (the CLI: `node DIR/main.mjs controller ...`, src/cli/bundled.ts),
// the chunks it loads on demand beside it (esbuild's code splitting keeps each dynamic
// import lazy: the Kubernetes client library, the probes), DIR/dashboard/, which the
// dashboard reads beside its code at run time, and DIR/compile-cache/, Node's compiled
// code of every module. Every production dependency is inside.
//
// Why a bundle (docs/decisions.md, "The controller starts from a bundle"): Node's module
// loader spends about 0.18 ms on each of the 1,300 modules the controller loads — 215 ms of
// a cold start before the first list — and a bundle loads in under 100.
//
// The dependencies' licences travel with their code: DIR/THIRD-PARTY-LICENSES.txt holds,
// for every package with a file in the bundle, its name, version and licence text.
//
// The test bed (sandbox/, src/demo) stays out, as from the npm package: its imports are
// left as they are written, and fail in the image the way test-bed.ts explains.
import { execFileSync } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build, type Plugin } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Leaves every import of the test bed unresolved: the image has none (src/cli/test-bed.ts). */
const withoutTestBed: Plugin = {
  name: 'without-test-bed',
  setup(plugin) {
    plugin.onResolve({ filter: /(^|\/)(sandbox|demo)\/[^/]+\.ts$/ }, (args) => {
      const path = resolve(args.resolveDir, args.path);
      const testBed =
        path.startsWith(join(root, 'sandbox') + '/') || path.startsWith(join(root, 'src', 'demo') + '/');
      return testBed ? { path: args.path, external: true } : undefined;
    });
  },
};

/**
 * Node's own modules are required, not imported. Importing one as an ES module makes Node
 * copy every export of it first, getters too: `node:http`'s WebSocket getters load undici,
 * 18 ms of every start for names nobody reads (`import('node:http')` takes 20 ms here,
 * `require('node:http')` 2). Each import of `node:*` becomes a CommonJS module that
 * requires it, which esbuild then imports like any other; named imports read the
 * exports only when used.
 */
const builtinsRequired: Plugin = {
  name: 'builtins-required',
  setup(plugin) {
    plugin.onResolve({ filter: /^node:/ }, (args) =>
      args.namespace === 'builtin'
        ? { path: args.path, external: true }
        : { path: args.path, namespace: 'builtin' },
    );
    plugin.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({
      contents: `module.exports = require(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

/** The directory of the package each bundled file came from (paths relative to the root). */
function packageDirs(inputs: string[]): string[] {
  const dirs = new Set<string>();
  for (const input of inputs) {
    const match = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input);
    if (match?.[1]) dirs.add(join(root, match[1]));
  }
  return [...dirs].sort();
}

/** Each package's name, version, declared licence and licence files, one after another. */
function licenses(inputs: string[]): string {
  return packageDirs(inputs)
    .map((dir) => {
      const { name, version, license } = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name: string;
        version: string;
        license?: string;
      };
      const texts = readdirSync(dir)
        .filter((file) => /^(licen[cs]e|copying|notice)/i.test(file))
        .sort()
        .map((file) => readFileSync(join(dir, file), 'utf8').trim());
      if (texts.length === 0)
        texts.push('(the package ships no licence file; its package.json declares the licence above)');
      return `${name}@${version} (${license ?? 'no licence declared'})\n\n${texts.join('\n\n')}\n`;
    })
    .join(`\n${'-'.repeat(78)}\n\n`);
}

export interface BundleOptions {
  /**
   * The user whose compile cache the bundle carries (Node keeps one per user): the image's,
   * 65532, for the image; by default whoever builds it.
   */
  cacheUid?: number;
}

/** Writes the bundle into `out`; resolves with the source files it holds (relative to the root). */
export async function bundle(out: string, options: BundleOptions = {}): Promise<string[]> {
  rmSync(out, { recursive: true, force: true });
  const result = await build({
    absWorkingDir: root,
    entryPoints: { main: join(root, 'src', 'cli', 'bundled.ts') },
    outdir: out,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node24',
    outExtension: { '.js': '.mjs' },
    // CommonJS dependencies (@grpc/grpc-js, pino) require Node's modules: an ES module has
    // no `require` of its own, so each file gets one.
    banner: {
      js: "import { createRequire as __gatehouseRequire } from 'node:module';\nconst require = __gatehouseRequire(import.meta.url);",
    },
    // Names stay readable in stack traces and profiles; whitespace is all minifying saves
    // that matters to a parser.
    minifyWhitespace: true,
    legalComments: 'eof',
    plugins: [withoutTestBed, builtinsRequired],
    logLevel: 'warning',
    metafile: true,
  });
  const inputs = Object.keys(result.metafile.inputs);
  writeFileSync(join(out, 'THIRD-PARTY-LICENSES.txt'), licenses(inputs));
  cpSync(join(root, 'src', 'http', 'dashboard'), join(out, 'dashboard'), {
    recursive: true,
    filter: (path) => !path.endsWith('.ts') && !path.endsWith('tsconfig.json'),
  });
  fillCompileCache(out, options.cacheUid);
  return inputs;
}

/**
 * Node's compile cache for every module of the bundle (src/cli/bundled.ts reads it): each
 * one imported once by this Node, in a process of its own, which writes the cache as it
 * exits. Importing runs no command (the entry runs the CLI only as the main module).
 * Node names the cache's directory `<version>-<arch>-<flags>-<uid>`, and the image's user
 * is not the builder: the directory is renamed for `uid`. Should Node name it otherwise
 * one day, the bundle compiles as it did before the cache (test/unit/bundle.test.ts checks
 * that another user reads it).
 */
function fillCompileCache(out: string, uid = process.getuid?.()): void {
  const dir = join(out, 'compile-cache');
  const modules = readdirSync(out)
    .filter((file) => file.endsWith('.mjs'))
    .map((file) => pathToFileURL(join(out, file)).href);
  const script = [
    "import { enableCompileCache } from 'node:module';",
    `enableCompileCache({ directory: ${JSON.stringify(dir)}, portable: true });`,
    `for (const url of ${JSON.stringify(modules)}) await import(url);`,
  ].join('\n');
  execFileSync(process.execPath, ['--input-type=module', '--eval', script], { stdio: 'inherit' });
  const builder = process.getuid?.();
  if (uid === undefined || builder === undefined || uid === builder) return;
  for (const name of readdirSync(dir)) {
    const renamed = name.replace(new RegExp(`-${String(builder)}$`), `-${String(uid)}`);
    if (renamed !== name) renameSync(join(dir, name), join(dir, renamed));
  }
}

if (import.meta.main) {
  const [out, flag, uid] = process.argv.slice(2);
  if (!out || (flag !== undefined && (flag !== '--cache-uid' || !/^\d+$/.test(uid ?? '')))) {
    process.stderr.write('usage: node scripts/bundle.ts DIR [--cache-uid UID]\n');
    process.exit(2);
  }
  await bundle(resolve(out), uid === undefined ? {} : { cacheUid: Number(uid) });
}
