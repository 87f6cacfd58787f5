#!/usr/bin/env node
// In a clone the TypeScript sources run directly (Node 24 strips the types); the npm
// package ships them compiled in dist/ instead, because Node strips no types under
// node_modules (scripts/package-build.ts).
async function loadCli() {
  try {
    return await import('../src/cli/main.ts');
  } catch (error) {
    if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !String(error.message).includes('src/cli/main.ts'))
      throw error;
    return await import('../dist/src/cli/main.js');
  }
}

try {
  // main() reports the CLI's own failures; this catch, a failure to load it.
  await (await loadCli()).main(process.argv);
} catch (error) {
  process.stderr.write(`gatehouse: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}
