// The gatehouse command line.
import { Command } from 'commander';
import packageJson from '../../package.json' with { type: 'json' };
import { errorMessage } from '../wait.ts';
import { addConnectionOptions } from './connection.ts';
import { EXIT, EXIT_CODES_HELP } from './exit.ts';

/** Commander's own refusals (unknown option, missing argument) exit 2 like every usage error; help exits 0. */
function usageExits(command: Command): void {
  command.exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : EXIT.usage));
  for (const sub of command.commands) usageExits(sub);
}

/**
 * The commands, in the order help lists them, each loaded with its module only when the
 * command line needs it: `gatehouse controller` (the Deployment's command) loads the
 * controller's code and not the Talos API gate's, the CLI's or the sandbox's — a third
 * less to parse before its first list. `name` marks a module that makes one command.
 */
const COMMANDS: { name?: string; load: () => Promise<Command[]> }[] = [
  { name: 'status', load: async () => [(await import('./status.ts')).statusCommand()] },
  { name: 'check', load: async () => [(await import('./check.ts')).checkCommand()] },
  { load: async () => (await import('./node-actions.ts')).nodeActionCommands() },
  {
    load: async () => {
      const { actionsCommand, explainCommand } = await import('./actions.ts');
      return [actionsCommand(), explainCommand()];
    },
  },
  { name: 'approve', load: async () => [(await import('./approve.ts')).approveCommand()] },
  {
    name: 'rollout',
    load: async () => {
      // `gatehouse rollout` with plan, start and promote (rollout-plan.ts builds on node-rollouts.ts).
      const [{ rolloutCommand }, { rolloutPlanCommands }] = await Promise.all([
        import('./node-rollouts.ts'),
        import('./rollout-plan.ts'),
      ]);
      const rollout = rolloutCommand();
      for (const command of rolloutPlanCommands()) rollout.addCommand(command);
      return [rollout];
    },
  },
  { name: 'gate', load: async () => [(await import('./gate.ts')).gateCommand()] },
  { name: 'talosctl', load: async () => [(await import('./talosctl.ts')).talosctlCommand()] },
  { name: 'talosconfig', load: async () => [(await import('./talosconfig.ts')).talosconfigCommand()] },
  { name: 'talos-gate', load: async () => [(await import('./talos-gate.ts')).talosGateCommand()] },
  { name: 'sandbox', load: async () => [(await import('./sandbox.ts')).sandboxCommand()] },
  { name: 'manifests', load: async () => [(await import('./manifests.ts')).manifestsCommand()] },
  { name: 'controller', load: async () => [(await import('./controller.ts')).controllerCommand()] },
  { name: 'demo', load: async () => [(await import('./demo.ts')).demoCommand()] },
];

/**
 * The program for `argv`: with only the command named first when a module makes just it
 * (options before the command, help, or another command: every command).
 */
export async function program(argv: readonly string[] = []): Promise<Command> {
  const named = COMMANDS.find((c) => c.name !== undefined && c.name === argv[2]);
  // Connection options may come before the command (gatehouse --server URL status) or
  // after it; before it they belong to the program, so each command keeps its own.
  const gatehouse = addConnectionOptions(new Command('gatehouse'))
    .description('health checks and action hooks that gate every disruptive action on Talos Linux nodes')
    .version(packageJson.version)
    .enablePositionalOptions()
    .showHelpAfterError()
    .addHelpText('after', EXIT_CODES_HELP);
  const groups = await Promise.all((named ? [named] : COMMANDS).map((c) => c.load()));
  for (const command of groups.flat()) gatehouse.addCommand(command);
  usageExits(gatehouse);
  return gatehouse;
}

/** Runs the CLI on `argv`; a failure is written to stderr and sets the exit code. */
export async function main(argv: string[]): Promise<void> {
  try {
    await (await program(argv)).parseAsync(argv);
  } catch (error) {
    process.stderr.write(`gatehouse: ${errorMessage(error)}\n`);
    process.exitCode = 1;
  }
}

if (import.meta.main) await main(process.argv);
