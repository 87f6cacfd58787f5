// The gatehouse command line.
import { Command } from 'commander';
import packageJson from '../../package.json' with { type: 'json' };
import { errorMessage } from '../wait.ts';
import { actionsCommand, explainCommand } from './actions.ts';
import { approveCommand } from './approve.ts';
import { checkCommand } from './check.ts';
import { addConnectionOptions } from './connection.ts';
import { controllerCommand } from './controller.ts';
import { demoCommand } from './demo.ts';
import { EXIT, EXIT_CODES_HELP } from './exit.ts';
import { gateCommand } from './gate.ts';
import { manifestsCommand } from './manifests.ts';
import { nodeActionCommands } from './node-actions.ts';
import { rolloutCommand } from './node-rollouts.ts';
import { rolloutPlanCommands } from './rollout-plan.ts';
import { sandboxCommand } from './sandbox.ts';
import { statusCommand } from './status.ts';
import { talosctlCommand } from './talosctl.ts';
import { talosGateCommand } from './talos-gate.ts';
import { talosconfigCommand } from './talosconfig.ts';

/** Commander's own refusals (unknown option, missing argument) exit 2 like every usage error; help exits 0. */
function usageExits(command: Command): void {
  command.exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : EXIT.usage));
  for (const sub of command.commands) usageExits(sub);
}

/** `gatehouse rollout` with plan, start and promote (rollout-plan.ts builds on node-rollouts.ts). */
function withPlanCommands(rollout: Command): Command {
  for (const command of rolloutPlanCommands()) rollout.addCommand(command);
  return rollout;
}

export function program(): Command {
  // Connection options may come before the command (gatehouse --server URL status) or
  // after it; before it they belong to the program, so each command keeps its own.
  const gatehouse = addConnectionOptions(new Command('gatehouse'))
    .description('health checks and action hooks that gate every disruptive action on Talos Linux nodes')
    .version(packageJson.version)
    .enablePositionalOptions()
    .showHelpAfterError()
    .addCommand(statusCommand())
    .addCommand(checkCommand());
  for (const command of nodeActionCommands()) gatehouse.addCommand(command);
  gatehouse
    .addCommand(actionsCommand())
    .addCommand(explainCommand())
    .addCommand(approveCommand())
    .addCommand(withPlanCommands(rolloutCommand()))
    .addCommand(gateCommand())
    .addCommand(talosctlCommand())
    .addCommand(talosconfigCommand())
    .addCommand(talosGateCommand())
    .addCommand(sandboxCommand())
    .addCommand(manifestsCommand())
    .addCommand(controllerCommand())
    .addCommand(demoCommand())
    .addHelpText('after', EXIT_CODES_HELP);
  usageExits(gatehouse);
  return gatehouse;
}

/** Runs the CLI on `argv`; a failure is written to stderr and sets the exit code. */
export async function main(argv: string[]): Promise<void> {
  try {
    await program().parseAsync(argv);
  } catch (error) {
    process.stderr.write(`gatehouse: ${errorMessage(error)}\n`);
    process.exitCode = 1;
  }
}

if (import.meta.main) await main(process.argv);
