// Builds gatehouse as one executable file with Node's single executable application
// support (Node 24: `node --experimental-sea-config`, then postject injects the blob):
//
//   node scripts/sea.ts [OUTPUT]      (default .build/gatehouse)
//
// The executable is the Node 24 binary this repository runs on (stripped) with
// scripts/sea/main.cjs and, as an asset, the CLI bundled with its production
// dependencies: the tree scripts/image-rootfs.sh makes for the container image's /app,
// in a small archive main.cjs unpacks on the first run (see there for why).
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

/** The fuse postject flips so that Node looks for the blob (Node's documented sentinel). */
const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return files(path);
    if (entry.isFile()) return [path];
    throw new Error(`${path}: only files and directories go into the executable`);
  });
}

/** The archive main.cjs unpacks: a 4-byte length, a JSON list of [path, size, mode], then the bytes. */
export function archive(dir: string): Buffer {
  const paths = files(dir).sort();
  const entries = paths.map((p) => [relative(dir, p), lstatSync(p).size, lstatSync(p).mode & 0o777]);
  const header = Buffer.from(JSON.stringify(entries));
  const length = Buffer.alloc(4);
  length.writeUInt32BE(header.length);
  return Buffer.concat([length, header, ...paths.map((p) => readFileSync(p))]);
}

function build(output: string): void {
  const work = mkdtempSync(join(tmpdir(), 'gatehouse-sea-'));
  try {
    const app = join(work, 'app');
    execFileSync('bash', [join(root, 'scripts', 'image-rootfs.sh'), 'app', app], {
      stdio: 'inherit',
      env: { ...process.env, NODE: process.execPath },
    });
    const packed = gzipSync(archive(app), { level: 9 });
    writeFileSync(join(work, 'app.gz'), packed);
    writeFileSync(join(work, 'app.sha256'), createHash('sha256').update(packed).digest('hex').slice(0, 16));
    const config = {
      main: join(root, 'scripts', 'sea', 'main.cjs'),
      output: join(work, 'sea.blob'),
      disableExperimentalSEAWarning: true,
      assets: { 'app.gz': join(work, 'app.gz'), 'app.sha256': join(work, 'app.sha256') },
    };
    writeFileSync(join(work, 'sea-config.json'), JSON.stringify(config));
    execFileSync(process.execPath, ['--experimental-sea-config', join(work, 'sea-config.json')], {
      stdio: 'inherit',
    });

    mkdirSync(dirname(output), { recursive: true });
    rmSync(output, { force: true });
    copyFileSync(process.execPath, output);
    chmodSync(output, 0o755);
    // The npm package's binary keeps its debug information; postject injects into the stripped one.
    try {
      execFileSync('strip', ['--strip-all', output]);
    } catch {
      process.stderr.write("sea: no strip (binutils): the executable keeps Node's debug information\n");
    }
    execFileSync(
      process.execPath,
      [
        join(root, 'node_modules', 'postject', 'dist', 'cli.js'),
        output,
        'NODE_SEA_BLOB',
        config.output,
        '--sentinel-fuse',
        SEA_FUSE,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    process.stdout.write(`sea: ${output} (${String(Math.round(lstatSync(output).size / 1e6))} MB)\n`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (import.meta.main) build(resolve(process.argv[2] ?? join(root, '.build', 'gatehouse')));
