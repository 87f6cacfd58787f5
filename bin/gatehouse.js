#!/usr/bin/env node
// Runs the TypeScript sources directly: Node 24 strips the types.
import { program } from '../src/cli/main.ts';

try {
  await program().parseAsync(process.argv);
} catch (error) {
  process.stderr.write(`gatehouse: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}
