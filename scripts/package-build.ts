// Compiles the CLI and the controller to JavaScript in dist/ for the npm package (run by
// `npm pack` as prepack). A clone runs the TypeScript sources directly, but Node strips
// types only outside node_modules, so an installed package needs them compiled.
// The dashboard's static files are read at run time: they are copied beside the code.
import { execFileSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
rmSync(join(root, 'dist'), { recursive: true, force: true });
execFileSync(
  process.execPath,
  [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.package.json')],
  {
    stdio: 'inherit',
  },
);
cpSync(join(root, 'src', 'http', 'dashboard'), join(root, 'dist', 'src', 'http', 'dashboard'), {
  recursive: true,
  filter: (path) => !path.endsWith('tsconfig.json'),
});
