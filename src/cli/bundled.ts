// The entry of the bundle that the container image and the single-file executable run
// (scripts/bundle.ts): Node's compile cache first, then the CLI. The bundle carries a
// cache made when it was built (compile-cache/ beside it, portable: keyed by paths
// relative to it), so a start reads the compiled code of its 3 MB of JavaScript instead
// of compiling it again: about 45 ms of a cold start. A cache Node cannot use (another
// Node version) is ignored, and one it cannot write (a read-only root) stays as it is.
import { enableCompileCache } from 'node:module';
import { fileURLToPath } from 'node:url';

enableCompileCache({ directory: fileURLToPath(new URL('compile-cache', import.meta.url)), portable: true });

const cli = await import('./main.ts');

export const { main } = cli;

if (import.meta.main) await main(process.argv);
