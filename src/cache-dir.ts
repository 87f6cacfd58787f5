// Where gatehouse keeps what it builds and runs locally: the sandbox's binaries and the
// sandboxes themselves. A module of its own so that the CLI can name the default
// directories without loading the sandbox.
import { homedir } from 'node:os';
import { join } from 'node:path';

export function cacheDir(): string {
  return process.env.GATEHOUSE_CACHE ?? join(homedir(), '.cache', 'gatehouse');
}
