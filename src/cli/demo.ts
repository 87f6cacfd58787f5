// `gatehouse demo`: see src/demo/demo.ts.
import { join } from 'node:path';
import { Command } from 'commander';
import { cacheDir } from '../cache-dir.ts';
import { handled } from './exit.ts';
import { loadTestBed } from './test-bed.ts';

export function demoCommand(): Command {
  return new Command('demo')
    .description('run gatehouse on a local sandbox cluster: checks, the gate, and where to look next')
    .option('--exit', 'finish when the demo is done instead of running until Ctrl-C (for CI)', false)
    .option('--sandbox-dir <path>', "the demo sandbox's directory", join(cacheDir(), 'sandboxes', 'demo'))
    .action(
      handled(async (opts: { exit: boolean; sandboxDir: string }) => {
        const { runDemo } = await loadTestBed('demo', () => import('../demo/demo.ts'));
        await runDemo({ exit: opts.exit, sandboxDir: opts.sandboxDir });
      }),
    );
}
