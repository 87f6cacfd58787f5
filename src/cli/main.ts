// The gatehouse command line.
import { Command } from 'commander';
import { errorMessage } from '../wait.ts';
import { controllerCommand } from './controller.ts';
import { demoCommand } from './demo.ts';
import { manifestsCommand } from './manifests.ts';
import { sandboxCommand } from './sandbox.ts';

export function program(): Command {
  return new Command('gatehouse')
    .description('health checks and action hooks that gate every disruptive action on Talos Linux nodes')
    .showHelpAfterError()
    .addCommand(sandboxCommand())
    .addCommand(manifestsCommand())
    .addCommand(controllerCommand())
    .addCommand(demoCommand());
}

if (import.meta.main) {
  try {
    await program().parseAsync(process.argv);
  } catch (error) {
    process.stderr.write(`gatehouse: ${errorMessage(error)}\n`);
    process.exitCode = 1;
  }
}
