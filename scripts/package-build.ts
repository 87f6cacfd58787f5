// Compiles the CLI and the controller to JavaScript in dist/ for the npm package (run by
// `npm pack` as prepack). A clone runs the TypeScript sources directly, but Node strips
// types only outside node_modules, so an installed package needs them compiled.
// The dashboard's static files are read at run time: they are copied beside the code.
//
// `node scripts/package-build.ts DIR` compiles into DIR instead (the container image's
// build, scripts/image-rootfs.sh, so that it never replaces a dist/ that `npm pack` reads).
import { execFileSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = resolve(process.argv[2] ?? join(root, 'dist'));
rmSync(out, { recursive: true, force: true });
execFileSync(
  process.execPath,
  [
    join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
    '-p',
    join(root, 'tsconfig.package.json'),
    '--outDir',
    out,
  ],
  { stdio: 'inherit' },
);
cpSync(join(root, 'src', 'http', 'dashboard'), join(out, 'src', 'http', 'dashboard'), {
  recursive: true,
  filter: (path) => !path.endsWith('tsconfig.json'),
});
