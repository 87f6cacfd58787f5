// `gatehouse gate NODE --action ACTION [--key K]`: the one command another tool's hook
// runs (a system-upgrade-controller `prepare` container, a tuppr hook, a script around
// talosctl). It asks for an External NodeAction, waits until gatehouse approves it, and
// exits 0 — or non-zero with the reason. The caller then performs the action itself and
// may run `gatehouse gate --done NAME`.
//
// With --key the request is idempotent: a re-run (a restarted container, a retried Job)
// finds the action its first run created instead of asking again. With a kubeconfig the
// name is derived from the key; through the HTTP API the key is the Idempotency-Key.
import { createHash } from 'node:crypto';
import { type Command, Option } from 'commander';
import { ACTIONS, type Action } from '../api/common.ts';
import { APPROVED_OR_SUCCEEDED } from '../api/phases.ts';
import { parseDuration } from '../duration.ts';
import { duration } from './arguments.ts';
import type { ActionObject, Backend, Progress, RequestSpec } from './backend.ts';
import { clusterCommand, connect, type ConnectionOptions } from './connection.ts';
import { LiveDisplay } from './display.ts';
import { CliError, EXIT, handled, type ExitCode } from './exit.ts';
import { commonSpec } from './node-actions.ts';
import { outcomeLine } from './progress.ts';
import { colourWanted, makeStyle } from './style.ts';
import { oneLine } from './table.ts';

interface GateFlags extends ConnectionOptions {
  action?: Action;
  key?: string;
  timeout?: string;
  image?: string;
  stage?: boolean;
  mode?: string;
  skipChecks?: boolean;
  skipHooks?: boolean;
  reason?: string;
  done?: string;
}

const REBOOT_MODES = ['Default', 'PowerCycle'] as const;
const CONFIG_MODES = ['NoReboot', 'Reboot', 'Staged', 'Try'] as const;

function usage(message: string): CliError {
  return new CliError(message, EXIT.usage);
}

/**
 * The NodeAction name a key stands for: readable, and the same for the same key on every
 * run. `gate-<the key, made a name>-<digest>`: the digest keeps two keys apart that read
 * alike once lower-cased and cut (`Plan/A` and `plan-a`).
 *
 * @example gateName('k3s-plan-worker-1') // 'gate-k3s-plan-worker-1-3b1f0c9a'
 */
export function gateName(key: string): string {
  const slug = key
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+/, '')
    .slice(0, 200)
    .replace(/-+$/, '');
  const digest = createHash('sha256').update(key).digest('hex').slice(0, 8);
  return slug ? `gate-${slug}-${digest}` : `gate-${digest}`;
}

/** The action's parameters from the flags, refusing those that do not belong to it. */
export function gateSpec(node: string, flags: GateFlags): RequestSpec {
  const action = flags.action;
  if (action === undefined) throw usage(`--action is required: one of ${ACTIONS.join(', ')}`);
  if (flags.image !== undefined && action !== 'Upgrade') throw usage('--image goes with --action Upgrade');
  if (flags.stage && action !== 'Upgrade') throw usage('--stage goes with --action Upgrade');
  if (flags.mode !== undefined && action !== 'Reboot' && action !== 'ConfigChange') {
    throw usage('--mode goes with --action Reboot or ConfigChange');
  }
  const common = commonSpec({ ...flags, external: true, concurrency: 1, drain: true, output: 'text' }, [
    node,
  ]);
  const base = { nodeName: node, action, ...common };
  switch (action) {
    case 'Upgrade':
      if (!flags.image) throw usage('--action Upgrade needs --image, the installer image the node will run');
      return { ...base, upgrade: { image: flags.image, ...(flags.stage ? { stage: true } : {}) } };
    case 'Reboot': {
      const mode = flags.mode;
      if (mode === undefined) return base;
      if (!REBOOT_MODES.some((m) => m === mode))
        throw usage(`--mode for a Reboot is one of ${REBOOT_MODES.join(', ')}`);
      return { ...base, reboot: { mode: mode as (typeof REBOOT_MODES)[number] } };
    }
    case 'ConfigChange': {
      const mode = flags.mode;
      if (mode === undefined || !CONFIG_MODES.some((m) => m === mode)) {
        throw usage(
          `--action ConfigChange needs --mode, how you will apply it: ${CONFIG_MODES.join(', ')} (gatehouse must know whether to wait for a reboot)`,
        );
      }
      return { ...base, configChange: { mode: mode as (typeof CONFIG_MODES)[number] } };
    }
    case 'Shutdown':
    case 'Reset':
    case 'EtcdLeave':
    case 'Maintenance':
      return base;
  }
}

/** Why an existing action found under the key is not this request, or undefined if it is. */
export function keyConflict(existing: ActionObject, spec: RequestSpec, key: string): string | undefined {
  const s = existing.spec;
  const same =
    s.nodeName === spec.nodeName &&
    s.action === spec.action &&
    s.execution === 'External' &&
    s.upgrade?.image === spec.upgrade?.image;
  if (same) return undefined;
  const what = `${s.execution ?? 'Managed'} ${s.action} of node ${s.nodeName}${s.upgrade ? ` to ${s.upgrade.image}` : ''}`;
  return `--key ${key} already names NodeAction ${existing.metadata.name} (${what}), not this ${spec.action} of node ${spec.nodeName}${spec.upgrade ? ` to ${spec.upgrade.image}` : ''}: use another --key`;
}

/** Approved, or past it without having failed: the gate is open (a re-run after the act finds it so). */
export function gateOpen(action: ActionObject | undefined): boolean {
  const phase = action?.status?.phase;
  return phase !== undefined && APPROVED_OR_SUCCEEDED.has(phase);
}

/** The exit code of a gate that stopped following at `progress` (open, or ended otherwise). */
export function gateCode(progress: Progress): ExitCode {
  if (gateOpen(progress.action)) return EXIT.ok;
  const phase = progress.action?.status?.phase;
  if (!progress.action || phase === 'Cancelled') return EXIT.cancelled;
  if (phase === 'Denied' && progress.node?.exists === false) return EXIT.usage;
  return EXIT.failed;
}

/** The one line said on stderr when the gate stays shut. */
function shutReason(name: string, progress: Progress): string {
  const action = progress.action;
  if (!action) return `NodeAction ${name} was deleted (cancelled) before it was approved`;
  const status = action.status ?? {};
  return `NodeAction ${name} ${status.phase ?? 'New'}${status.message ? `: ${oneLine(status.message, 300)}` : ''}`;
}

async function cancelQuietly(backend: Backend, name: string): Promise<string> {
  try {
    await backend.cancel(name);
    return `cancelled NodeAction ${name}`;
  } catch (error) {
    return `could not cancel NodeAction ${name}: ${error instanceof Error ? error.message : String(error)}`;
  }
}

async function openGate(node: string, flags: GateFlags): Promise<void> {
  const spec = gateSpec(node, flags);
  const timeoutMs = flags.timeout === undefined ? undefined : parseDuration(flags.timeout);
  const backend = await connect(flags);
  if (backend.mode === 'kubernetes') {
    const view = await backend.node(node);
    if (view && !view.exists) throw usage(`node ${node} does not exist`);
  }
  const key = flags.key;
  const action = await backend.createAction(
    spec,
    key === undefined ? {} : { idempotencyKey: key, name: gateName(key) },
  );
  const name = action.metadata.name;
  if (key !== undefined) {
    const conflict = keyConflict(action, spec, key);
    if (conflict) throw new CliError(conflict, EXIT.failed);
  }

  const style = makeStyle(colourWanted(process.stderr));
  const display = new LiveDisplay(process.stderr, { live: process.stderr.isTTY, style });
  const stop = new AbortController();
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  const onSignal = () => stop.abort(new Error('interrupted'));
  for (const s of signals) process.on(s, onSignal);
  const timer =
    timeoutMs === undefined ? undefined : setTimeout(() => stop.abort(new Error('timeout')), timeoutMs);
  let latest: Progress = { action, node: undefined };
  let stoppedBy: 'interrupt' | 'timeout' | undefined;
  try {
    latest = await backend.follow(
      name,
      (p) => {
        latest = p;
        display.update(name, p);
      },
      { until: (p) => gateOpen(p.action), signal: stop.signal },
    );
  } catch (error) {
    if (!stop.signal.aborted) throw error;
    stoppedBy = (stop.signal.reason as Error).message === 'timeout' ? 'timeout' : 'interrupt';
  } finally {
    clearTimeout(timer);
    for (const s of signals) process.off(s, onSignal);
  }
  if (stoppedBy) {
    // Nobody waits for this action any more: an approval now would hold a slot for nothing.
    const cancelled = await cancelQuietly(backend, name);
    display.close();
    const phase = latest.action?.status?.phase ?? 'New';
    if (stoppedBy === 'timeout') {
      throw new CliError(
        `NodeAction ${name} was not approved within ${flags.timeout ?? ''} (still ${phase}${latest.action?.status?.message ? `: ${oneLine(latest.action.status.message, 200)}` : ''}); ${cancelled}`,
        EXIT.timedOut,
      );
    }
    throw new CliError(`interrupted while ${name} was ${phase}; ${cancelled}`, EXIT.interrupted);
  }
  display.finish(name, outcomeLine(name, latest, style));
  display.close();
  const code = gateCode(latest);
  if (code !== EXIT.ok) throw new CliError(shutReason(name, latest), code);
  process.stdout.write(`${name}\n`);
}

async function markDone(name: string, flags: GateFlags): Promise<void> {
  const backend = await connect(flags);
  await backend.markExecuted(name);
  process.stdout.write(`${name} marked executed\n`);
}

export function gateCommand(): Command {
  return clusterCommand('gate')
    .description(
      'ask for an External action on a node and wait until gatehouse approves it (for the hooks of other tools)',
    )
    .argument('[node]', 'the node the action will be performed on')
    .addOption(new Option('--action <action>', 'what will be done to the node').choices(ACTIONS))
    .option(
      '--key <key>',
      'makes the request idempotent: a re-run with the same key finds the same action (e.g. "$PLAN-$NODE")',
    )
    .option(
      '--timeout <duration>',
      'give up if not approved within this time (exit 5, the action is cancelled); default: wait',
      duration,
    )
    .option('--image <image>', 'with --action Upgrade: the installer image the node will run')
    .option('--stage', 'with --action Upgrade: the upgrade is staged for the next reboot')
    .option(
      '--mode <mode>',
      'with --action Reboot: Default or PowerCycle; with ConfigChange (required): NoReboot, Reboot, Staged or Try',
    )
    .option('--skip-checks', 'bypass the health checks (needs the bypass verb and --reason)')
    .option('--skip-hooks', 'bypass the pre-action hooks (needs the bypass verb and --reason)')
    .option('--reason <text>', 'why the checks or hooks are bypassed; recorded in the status and an Event')
    .option('--done <name>', 'mark the approved action NAME executed (you performed it), instead of asking')
    .addHelpText(
      'after',
      `
Prints the action's name on stdout once it is Approved (progress goes to stderr: live on
a terminal, one line per change otherwise); perform the action, then mark it:

  name=$(gatehouse gate worker-1 --action Reboot --key "reboot-worker-1-$(date +%F)")
  talosctl -n 10.0.0.21 reboot
  gatehouse gate --done "$name"

An action already past Approved (a re-run after the act) opens the gate at once.
Ctrl-C, SIGTERM and --timeout cancel the action if it is not approved yet.`,
    )
    .action(
      handled(async (node: string | undefined, _: unknown, command: Command) => {
        const flags = command.optsWithGlobals<GateFlags>();
        if (flags.done !== undefined) {
          if (node !== undefined || flags.action !== undefined || flags.key !== undefined) {
            throw usage('--done NAME takes no node, --action or --key: it marks the action NAME executed');
          }
          await markDone(flags.done, flags);
          return;
        }
        if (node === undefined) throw usage('name the node: gatehouse gate NODE --action ACTION');
        await openGate(node, flags);
      }),
    );
}
