// The main script of the single-file executable (scripts/sea.ts). Node's single
// executable applications run one CommonJS script and load nothing else from inside the
// file, so the CLI travels as an asset, `app.gz`: the CLI bundled with its production
// dependencies (the container image's /app, scripts/bundle.ts) in a small archive. On its first run the
// executable unpacks it into ~/.cache/gatehouse/sea/<its digest>/ (once per build) and
// imports the CLI from there; later runs import it at once.
'use strict';
const { mkdirSync, renameSync, rmSync, writeFileSync, existsSync } = require('node:fs');
const { homedir } = require('node:os');
const { dirname, join } = require('node:path');
const { pathToFileURL } = require('node:url');
const { gunzipSync } = require('node:zlib');
const sea = require('node:sea');

/** The archive: a 4-byte length, a JSON list of [path, size, mode], then the files' bytes in that order. */
function unpack(archive, into) {
  const length = archive.readUInt32BE(0);
  const entries = JSON.parse(archive.subarray(4, 4 + length).toString('utf8'));
  let offset = 4 + length;
  for (const [path, size, mode] of entries) {
    const target = join(into, path);
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, archive.subarray(offset, offset + size), { mode });
    offset += size;
  }
}

function appDir() {
  const digest = sea.getAsset('app.sha256', 'utf8').trim();
  const cache = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  const dir = join(process.env.GATEHOUSE_SEA_DIR || join(cache, 'gatehouse', 'sea'), digest);
  if (existsSync(join(dir, 'main.mjs'))) return dir;
  // Unpacked beside, then renamed: a run that is interrupted, or one racing another,
  // never leaves a half-written directory where the next run looks.
  const partial = `${dir}.${process.pid}.partial`;
  rmSync(partial, { recursive: true, force: true });
  unpack(gunzipSync(Buffer.from(sea.getAsset('app.gz'))), partial);
  try {
    renameSync(partial, dir);
  } catch (error) {
    rmSync(partial, { recursive: true, force: true });
    if (!existsSync(join(dir, 'main.mjs'))) throw error;
  }
  return dir;
}

async function main() {
  const dir = appDir();
  const cli = await import(pathToFileURL(join(dir, 'main.mjs')).href);
  await cli.main(process.argv);
}

main().catch((error) => {
  process.stderr.write(`gatehouse: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
