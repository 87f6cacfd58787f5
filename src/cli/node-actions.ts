// `gatehouse reboot | upgrade | shutdown | reset | apply-config NODE...`: one NodeAction
// per node, rolled through the nodes one at a time (or --concurrency N, still within the
// controller's policies), with live progress; Ctrl-C cancels the actions in flight.
import { readFile } from 'node:fs/promises';
import { type Command, Option } from 'commander';
import type { Action } from '../api/common.ts';
import { objectView } from '../http/objects.ts';
import { errorMessage } from '../wait.ts';
import { duration, wholeNumber } from './arguments.ts';
import { followToEnd } from './actions.ts';
import type { ActionObject, Backend, CreateOptions, RequestSpec } from './backend.ts';
import { clusterCommand, connect, type ConnectionOptions } from './connection.ts';
import { LiveDisplay } from './display.ts';
import { CliError, EXIT, handled, type ExitCode } from './exit.ts';
import { formatDocument } from './output.ts';
import { rollout, worstCode, type RolloutResult } from './rollout.ts';
import { upgradeAsRollout } from './node-rollouts.ts';
import { colourWanted, makeStyle } from './style.ts';
import { table } from './table.ts';

interface CommonFlags extends ConnectionOptions {
  external?: boolean;
  concurrency: number;
  skipChecks?: boolean;
  skipHooks?: boolean;
  reason?: string;
  drain: boolean;
  drainTimeout?: string;
  output: 'text' | 'json' | 'name';
}

const positiveInteger = wholeNumber(1);

function usage(message: string): CliError {
  return new CliError(message, EXIT.usage);
}

/** The parts of the spec every action shares, from the common flags; usage errors for bad combinations. */
export function commonSpec(
  flags: CommonFlags,
  nodes: readonly string[],
): Omit<RequestSpec, 'nodeName' | 'action'> {
  const duplicates = nodes.filter((n, i) => nodes.indexOf(n) !== i);
  if (duplicates.length > 0) throw usage(`node ${duplicates[0] ?? ''} is named twice`);
  const bypass = flags.skipChecks === true || flags.skipHooks === true;
  const reason = flags.reason?.trim();
  if (bypass && !reason) {
    throw usage('--skip-checks and --skip-hooks need --reason "<why>": the bypass is recorded with it');
  }
  if (!bypass && flags.reason !== undefined) {
    throw usage('--reason goes with --skip-checks or --skip-hooks');
  }
  if (flags.external && nodes.length > 1) {
    throw usage(
      '--external takes one node: it stops once the action is Approved so that you can perform it, and the next node waits for that',
    );
  }
  if (flags.external && (!flags.drain || flags.drainTimeout !== undefined)) {
    throw usage(
      '--no-drain and --drain-timeout are for Managed actions; with --external you drain, if you want to',
    );
  }
  return {
    ...(flags.external ? { execution: 'External' as const } : {}),
    ...(!flags.drain || flags.drainTimeout
      ? {
          drain: {
            ...(!flags.drain ? { enabled: false } : {}),
            ...(flags.drainTimeout ? { timeout: flags.drainTimeout } : {}),
          },
        }
      : {}),
    ...(bypass
      ? {
          bypass: {
            ...(flags.skipChecks ? { healthChecks: true } : {}),
            ...(flags.skipHooks ? { hooks: true } : {}),
            reason: reason ?? '',
          },
        }
      : {}),
  };
}

function addCommonOptions(command: Command): Command {
  return command
    .option(
      '--external',
      'you perform the action (e.g. with talosctl): stop once it is Approved and exit 0; then run `gatehouse actions executed NAME`',
    )
    .option('--concurrency <n>', 'actions in flight at once (policies still apply)', positiveInteger, 1)
    .option('--skip-checks', 'bypass the health checks (needs the bypass verb and --reason)')
    .option('--skip-hooks', 'bypass the pre-action hooks (needs the bypass verb and --reason)')
    .option('--reason <text>', 'why the checks or hooks are bypassed; recorded in the status and an Event')
    .option('--no-drain', 'do not cordon and drain the node first (Managed execution)')
    .option(
      '--drain-timeout <duration>',
      'how long the drain may take, e.g. 10m (Managed execution)',
      duration,
    )
    .addOption(
      new Option(
        '-o, --output <format>',
        'what to print on stdout at the end: a table, the actions as JSON, or their names',
      )
        .choices(['text', 'json', 'name'])
        .default('text'),
    )
    .addHelpText(
      'after',
      `
Progress goes to stderr: redrawn in place on a terminal, one line per change otherwise.
Without a kubeconfig-reachable cluster, use --server and --token to go through the
gatehouse HTTP API instead.`,
    );
}

/** Prints what the rollout ended with on stdout, in the chosen format. */
function report(result: RolloutResult, format: CommonFlags['output']): void {
  const created = result.outcomes.filter(
    (o): o is typeof o & { action: ActionObject } => o.action !== undefined,
  );
  if (format === 'json') {
    process.stdout.write(
      formatDocument('json', { items: created.map((o) => objectView({ ...o.action, kind: 'NodeAction' })) }),
    );
    return;
  }
  if (format === 'name') {
    for (const o of created) process.stdout.write(`${o.action.metadata.name}\n`);
    return;
  }
  const rows = result.outcomes.map((o) => [
    o.node,
    o.action?.spec.action ?? '-',
    o.action?.metadata.name ?? '-',
    o.action?.status?.phase ?? (o.note === 'not started' ? 'not started' : o.action ? 'New' : 'not created'),
  ]);
  process.stdout.write(table(['NODE', 'ACTION', 'NAME', 'PHASE'], rows));
}

async function run(
  flags: CommonFlags,
  nodes: string[],
  action: Action,
  specific: (node: string) => Partial<RequestSpec>,
  createOptions?: (spec: RequestSpec) => CreateOptions,
): Promise<void> {
  const common = commonSpec(flags, nodes);
  const specs = nodes.map((nodeName) => ({ nodeName, action, ...common, ...specific(nodeName) }));
  const backend = await connect(flags);
  if (backend.mode === 'kubernetes') {
    // Fail before anything is requested rather than after the first nodes are done.
    for (const node of nodes) {
      const view = await backend.node(node);
      if (view && !view.exists) throw usage(`node ${node} does not exist`);
    }
  }
  const style = makeStyle(colourWanted(process.stderr));
  const display = new LiveDisplay(process.stderr, { live: process.stderr.isTTY, style });
  const interrupt = new AbortController();
  let interrupts = 0;
  const onSigint = () => {
    interrupts++;
    if (interrupts > 1) {
      display.close();
      process.stderr.write('gatehouse: interrupted again: exiting without waiting\n');
      process.exit(EXIT.interrupted);
    }
    interrupt.abort(new Error('interrupted'));
  };
  process.on('SIGINT', onSigint);
  let result: RolloutResult;
  try {
    result = await rollout({
      backend,
      specs,
      concurrency: flags.concurrency,
      external: flags.external === true,
      display,
      style,
      interrupt: interrupt.signal,
      ...(createOptions ? { createOptions } : {}),
    });
  } finally {
    process.off('SIGINT', onSigint);
    display.close();
  }
  report(result, flags.output);
  process.exitCode = result.code;
}

function actionCommand(name: string, description: string): Command {
  return addCommonOptions(
    clusterCommand(name).description(description).argument('<nodes...>', 'nodes to act on, in order'),
  );
}

export function rebootCommand(): Command {
  return actionCommand(
    'reboot',
    'reboot nodes, one at a time, once their checks hold and pre-reboot hooks succeed',
  )
    .addOption(
      new Option(
        '--mode <mode>',
        'Default (kexec when possible), PowerCycle, or Force (Talos 1.12+: pods and services are not stopped gracefully; only when named)',
      ).choices(['Default', 'PowerCycle', 'Force']),
    )
    .action(
      handled(async (nodes: string[], _: unknown, command: Command) => {
        const flags = command.optsWithGlobals<CommonFlags & { mode?: 'Default' | 'PowerCycle' | 'Force' }>();
        await run(flags, nodes, 'Reboot', () => (flags.mode ? { reboot: { mode: flags.mode } } : {}));
      }),
    );
}

export function upgradeCommand(): Command {
  return actionCommand('upgrade', 'upgrade Talos on nodes, one at a time, through the same gate')
    .requiredOption(
      '--image <image>',
      'installer image with a tag or digest, e.g. factory.talos.dev/installer/<id>:v1.11.5',
    )
    .option('--stage', 'stage the upgrade and perform it on the next reboot')
    .option(
      '--rollout <name>',
      'create a NodeRollout of these nodes instead (the controller carries it out, --concurrency at once, control plane last) and follow it; see `gatehouse rollout`',
    )
    .action(
      handled(async (nodes: string[], _: unknown, command: Command) => {
        const flags = command.optsWithGlobals<
          CommonFlags & { image: string; stage?: boolean; rollout?: string }
        >();
        if (flags.rollout !== undefined) {
          await upgradeAsRollout(flags.rollout, nodes, {
            ...flags,
            maxParallel: flags.concurrency,
            maxFailures: 0,
            watch: true,
          });
          return;
        }
        await run(flags, nodes, 'Upgrade', () => ({
          upgrade: { image: flags.image, ...(flags.stage ? { stage: true } : {}) },
        }));
      }),
    );
}

export function shutdownCommand(): Command {
  return actionCommand('shutdown', 'shut nodes down, one at a time, through the gate').action(
    handled(async (nodes: string[], _: unknown, command: Command) => {
      await run(command.optsWithGlobals<CommonFlags>(), nodes, 'Shutdown', () => ({}));
    }),
  );
}

export function etcdLeaveCommand(): Command {
  return actionCommand(
    'etcd-leave',
    "make control-plane nodes' etcd members leave etcd for good, one at a time, after the etcd guard and the pre-reset hooks",
  ).action(
    handled(async (nodes: string[], _: unknown, command: Command) => {
      await run(command.optsWithGlobals<CommonFlags>(), nodes, 'EtcdLeave', () => ({}));
    }),
  );
}

/**
 * `gatehouse maintenance NODE...`: each node cordoned and drained through the gate, then
 * held out of service (the command stops there, successfully) until
 * `gatehouse maintenance release NODE`.
 */
export function maintenanceCommand(): Command {
  const command = actionCommand(
    'maintenance',
    'take nodes out of service for work on them (hardware, hypervisor): cordoned and drained through the gate, then held until released',
  )
    .option(
      '--max-duration <duration>',
      'release the node by itself after this long (e.g. 4h), with a Warning',
      duration,
    )
    .option('--for <reason>', 'what the node is taken out for, shown with the hold (e.g. "replace DIMM B2")')
    .action(
      handled(async (nodes: string[], _: unknown, cmd: Command) => {
        const flags = cmd.optsWithGlobals<CommonFlags & { maxDuration?: string; for?: string }>();
        const maintenance = {
          ...(flags.maxDuration ? { maxDuration: flags.maxDuration } : {}),
          ...(flags.for?.trim() ? { reason: flags.for.trim() } : {}),
        };
        await run(flags, nodes, 'Maintenance', () =>
          Object.keys(maintenance).length > 0 ? { maintenance } : {},
        );
      }),
    );
  command.addCommand(
    clusterCommand('release')
      .description(
        "release nodes held for maintenance: their NodeReadyJobs run, then the gate's cordon is lifted",
      )
      .argument('<nodes...>', 'the held nodes (or the names of their Maintenance NodeActions)')
      .option('--no-wait', 'release them and exit without following them to the end')
      .action(
        handled(async (nodes: string[], _: unknown, cmd: Command) => {
          const flags = cmd.optsWithGlobals<ConnectionOptions & { wait: boolean }>();
          const backend = await connect(flags);
          const names: string[] = [];
          for (const node of nodes) names.push(await heldMaintenance(backend, node));
          for (const name of names) {
            await backend.release(name);
            process.stdout.write(`${name} released\n`);
          }
          if (flags.wait) {
            let code: ExitCode = EXIT.ok;
            for (const name of names) code = worstCode([code, await followToEnd(backend, name)]);
            process.exitCode = code;
          }
        }),
      ),
  );
  return command;
}

/** The Maintenance NodeAction held for `node` (or named `node`): the one to release. */
async function heldMaintenance(backend: Backend, node: string): Promise<string> {
  const named = await backend.action(node);
  if (named) return node;
  const held = (await backend.actions()).filter(
    (a) => a.spec.nodeName === node && a.status?.phase === 'Held',
  );
  const [first, ...more] = held;
  if (!first) throw usage(`no action holds node ${node} for maintenance (no NodeAction of it is Held)`);
  if (more.length > 0) {
    throw usage(
      `node ${node} is held by ${String(held.length)} actions (${held.map((a) => a.metadata.name).join(', ')}): name the one to release`,
    );
  }
  return first.metadata.name;
}

export function resetCommand(): Command {
  return actionCommand(
    'reset',
    'reset (wipe) nodes and remove them from the cluster, after the pre-reset hooks',
  )
    .option('--no-graceful', 'do not leave etcd and the cluster cleanly first')
    .addOption(
      new Option(
        '--wipe-mode <mode>',
        'what to wipe: All (the system disk and the --user-disk ones), SystemDisk, UserDisks (only the --user-disk ones), SystemData (STATE, EPHEMERAL and on Talos 1.14 ETCD, CRI, KUBELET, LOG; Talos stays installed)',
      ).choices(['All', 'SystemDisk', 'UserDisks', 'SystemData']),
    )
    .option(
      '--user-disk <path...>',
      'a user disk to wipe, e.g. /dev/sdb (required with --wipe-mode UserDisks: Talos wipes only the disks it is given)',
    )
    .action(
      handled(async (nodes: string[], _: unknown, command: Command) => {
        const flags = command.optsWithGlobals<
          CommonFlags & {
            graceful: boolean;
            wipeMode?: 'All' | 'SystemDisk' | 'UserDisks' | 'SystemData';
            userDisk?: string[];
          }
        >();
        if (flags.wipeMode === 'UserDisks' && !flags.userDisk?.length)
          throw new CliError(
            '--wipe-mode UserDisks needs --user-disk PATH (e.g. --user-disk /dev/sdb): Talos wipes only the user disks it is given, so it would wipe nothing',
            EXIT.usage,
          );
        const reset = {
          ...(flags.graceful ? {} : { graceful: false }),
          ...(flags.wipeMode ? { wipeMode: flags.wipeMode } : {}),
          ...(flags.userDisk?.length ? { userDisks: flags.userDisk } : {}),
        };
        await run(flags, nodes, 'Reset', () => (Object.keys(reset).length > 0 ? { reset } : {}));
      }),
    );
}

type ConfigMode = 'Auto' | 'NoReboot' | 'Reboot' | 'Staged' | 'Try';

export function applyConfigCommand(): Command {
  return actionCommand(
    'apply-config',
    'apply a machine configuration to nodes through the gate (a ConfigChange)',
  )
    .option(
      '--file <path>',
      "the machine configuration; with a kubeconfig it is stored in a Secret in the controller's namespace",
    )
    .option(
      '--config-secret <name[/key]>',
      "a Secret already in the controller's namespace holding the configuration",
    )
    .addOption(
      new Option(
        '--mode <mode>',
        'as talosctl apply-config --mode; Auto (the default, Managed only) lets Talos decide whether to reboot',
      ).choices(['Auto', 'NoReboot', 'Reboot', 'Staged', 'Try']),
    )
    .option(
      '--confirm <check>',
      'with --mode Try: a ClusterHealthCheck that must be healthy for the node before the window ends, or Talos reverts the change (repeatable)',
      (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
    )
    .option('--confirm-window <duration>', "with --confirm: Talos's TRY timeout (default 2m)")
    .action(
      handled(async (nodes: string[], _: unknown, command: Command) => {
        const flags = command.optsWithGlobals<
          CommonFlags & {
            file?: string;
            configSecret?: string;
            mode?: ConfigMode;
            confirm?: string[];
            confirmWindow?: string;
          }
        >();
        if (flags.confirmWindow && !flags.confirm?.length)
          throw usage('--confirm-window needs --confirm CHECK');
        if (flags.confirm?.length && (flags.mode !== 'Try' || flags.external))
          throw usage('--confirm needs --mode Try, with Managed execution: gatehouse commits the change');
        if (flags.external) {
          if (flags.file !== undefined || flags.configSecret !== undefined) {
            throw usage(
              'with --external you apply the configuration yourself: leave out --file and --config-secret',
            );
          }
          if (flags.mode === undefined || flags.mode === 'Auto') {
            throw usage('with --external, say how you will apply it: --mode NoReboot, Reboot, Staged or Try');
          }
          const mode = flags.mode;
          await run(flags, nodes, 'ConfigChange', () => ({ configChange: { mode } }));
          return;
        }
        if ((flags.file === undefined) === (flags.configSecret === undefined)) {
          throw usage('give the configuration with either --file or --config-secret');
        }
        const mode = {
          ...(flags.mode ? { mode: flags.mode } : {}),
          ...(flags.confirm?.length
            ? {
                confirm: {
                  checks: flags.confirm,
                  ...(flags.confirmWindow ? { window: flags.confirmWindow } : {}),
                },
              }
            : {}),
        };
        if (flags.configSecret !== undefined) {
          const [name = '', key] = flags.configSecret.split('/');
          const ref = { name, ...(key ? { key } : {}) };
          await run(flags, nodes, 'ConfigChange', () => ({
            configChange: { ...mode, configSecretRef: ref },
          }));
          return;
        }
        let content: Buffer;
        try {
          content = await readFile(flags.file ?? '');
        } catch (error) {
          throw usage(`cannot read --file: ${errorMessage(error)}`);
        }
        const namespace = flags.controllerNamespace ?? 'gatehouse-system';
        await run(
          flags,
          nodes,
          'ConfigChange',
          () => ({ configChange: { ...mode } }),
          () => ({ configFile: { content, namespace } }),
        );
      }),
    );
}

/**
 * The command that asks for each action kind, in the order `gatehouse --help` lists them:
 * a kind added to the API does not compile here until it has one.
 */
const COMMANDS: { readonly [A in Action]: () => Command } = {
  Reboot: rebootCommand,
  Upgrade: upgradeCommand,
  Shutdown: shutdownCommand,
  Reset: resetCommand,
  ConfigChange: applyConfigCommand,
  EtcdLeave: etcdLeaveCommand,
  Maintenance: maintenanceCommand,
};

export function nodeActionCommands(): Command[] {
  return Object.values(COMMANDS).map((command) => command());
}
