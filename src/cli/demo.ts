// `gatehouse demo`: see src/demo/demo.ts.
import { join } from 'node:path';
import { Command } from 'commander';
import { cacheDir } from '../../sandbox/binaries.ts';
import { runDemo } from '../demo/demo.ts';

export function demoCommand(): Command {
  return new Command('demo')
    .description('run gatehouse on a local sandbox cluster: checks, the gate, and where to look next')
    .option('--exit', 'finish when the demo is done instead of running until Ctrl-C (for CI)', false)
    .option('--sandbox-dir <path>', "the demo sandbox's directory", join(cacheDir(), 'sandboxes', 'demo'))
    .action(async (opts: { exit: boolean; sandboxDir: string }) => {
      await runDemo({ exit: opts.exit, sandboxDir: opts.sandboxDir });
    });
}
