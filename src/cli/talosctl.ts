// `gatehouse talosctl -- <talosctl args>`: a talosctl reboot | upgrade | shutdown | reset
// | apply-config, gated node by node. For each node named by -n/--nodes, one at a time:
// an External NodeAction, its approval, the real `talosctl` (from PATH) with the same
// arguments for that node alone, the executed mark, and the node followed back to the
// action's end. The first node that does not end Succeeded stops the run.
import { spawn } from 'node:child_process';
import type { Command } from 'commander';
import { errorMessage } from '../wait.ts';
import type { Backend, Progress } from './backend.ts';
import { clusterCommand, connect, type ConnectionOptions } from './connection.ts';
import { LiveDisplay } from './display.ts';
import { CliError, EXIT, handled, type ExitCode } from './exit.ts';
import { gateCode, gateOpen } from './gate.ts';
import { outcomeLine } from './progress.ts';
import { codeOf } from './rollout.ts';
import { colourWanted, makeStyle, type Style } from './style.ts';
import { parseTalosctl, TalosctlRefusal, type TalosctlCommand } from './talosctl-args.ts';

interface TalosctlFlags extends ConnectionOptions {
  nodeName: string[];
  talosctl: string;
}

/** `ADDRESS=NODE` pairs of --node-name, as a map. */
export function nodeNameMap(pairs: readonly string[]): Map<string, string> {
  const map = new Map<string, string>();
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0 || eq === pair.length - 1) {
      throw new CliError(`--node-name ${pair}: write ADDRESS=NODE, e.g. 10.0.0.21=worker-1`, EXIT.usage);
    }
    map.set(pair.slice(0, eq), pair.slice(eq + 1));
  }
  return map;
}

/** The Node name for each talosctl node address: mapped, looked up, or (HTTP API) as given. */
async function nodeNames(backend: Backend, addresses: readonly string[], mapped: Map<string, string>) {
  const names: string[] = [];
  for (const address of addresses) {
    const given = mapped.get(address);
    if (given !== undefined) {
      names.push(given);
      continue;
    }
    if (!backend.nodeNamed) {
      names.push(address);
      continue;
    }
    const name = await backend.nodeNamed(address);
    if (name === undefined) {
      throw new CliError(
        `no Node is named ${address} or has it as an address: give its name with --node-name ${address}=NODE`,
        EXIT.usage,
      );
    }
    names.push(name);
  }
  return names;
}

/** Runs talosctl with stdio passed through; resolves to its exit code (127 when it cannot be started). */
function runTalosctl(program: string, args: readonly string[], style: Style, display: LiveDisplay) {
  return new Promise<number>((resolve) => {
    display.note(`${style.dim('$')} ${program} ${args.join(' ')}`);
    const child = spawn(program, args, { stdio: ['inherit', 'inherit', 'inherit'] });
    child.on('error', (error) => {
      display.note(`${style.bad('✗')} cannot run ${program}: ${errorMessage(error)}`);
      resolve(127);
    });
    child.on('close', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

interface NodeRun {
  backend: Backend;
  command: TalosctlCommand;
  address: string;
  node: string;
  program: string;
  display: LiveDisplay;
  style: Style;
  signal: AbortSignal;
}

/** One node through the gate: ask, wait, act, mark, follow. Returns its exit code. */
async function gateOneNode(run: NodeRun): Promise<ExitCode> {
  const { backend, display, style } = run;
  const action = await backend.createAction({ nodeName: run.node, ...run.command.request });
  const name = action.metadata.name;
  const observe = (p: Progress) => display.update(name, p);
  observe({ action, node: undefined });
  let progress: Progress;
  try {
    progress = await backend.follow(name, observe, { until: (p) => gateOpen(p.action), signal: run.signal });
  } catch (error) {
    if (!run.signal.aborted) throw error;
    await backend.cancel(name).catch(() => undefined);
    display.finish(name, `${style.warn('–')} ${run.node}: interrupted before approval; cancelled ${name}`);
    return EXIT.interrupted;
  }
  if (!gateOpen(progress.action)) {
    display.finish(name, outcomeLine(name, progress, style));
    return gateCode(progress);
  }
  display.finish(name, outcomeLine(name, progress, style));

  const code = await runTalosctl(run.program, run.command.argsFor(run.address), style, display);
  if (code !== 0) {
    const now = await backend.action(name);
    if (now?.status?.phase === 'Approved') {
      // Nothing happened to the node that gatehouse saw: give the slot back.
      await backend.cancel(name).catch(() => undefined);
      display.note(
        `${style.bad('✗')} ${run.node}: talosctl exited ${String(code)}; the node did not change, so ${name} was cancelled`,
      );
    } else {
      display.note(
        `${style.bad('✗')} ${run.node}: talosctl exited ${String(code)}, but gatehouse saw the node change (${name} ${now?.status?.phase ?? 'gone'}); look at it before going on`,
      );
    }
    return EXIT.failed;
  }
  await backend.markExecuted(name);
  try {
    progress = await backend.follow(name, observe, { signal: run.signal });
  } catch (error) {
    if (!run.signal.aborted) throw error;
    display.finish(name, `${style.warn('–')} stopped following ${name}; it goes on without us`);
    return EXIT.interrupted;
  }
  display.finish(name, outcomeLine(name, progress, style));
  return codeOf(progress, false);
}

async function gatedTalosctl(words: string[], flags: TalosctlFlags): Promise<void> {
  let command: TalosctlCommand;
  try {
    command = parseTalosctl(words);
  } catch (error) {
    if (error instanceof TalosctlRefusal) throw new CliError(error.message, EXIT.usage);
    throw error;
  }
  const mapped = nodeNameMap(flags.nodeName);
  const backend = await connect(flags);
  const names = await nodeNames(backend, command.nodes, mapped);
  const style = makeStyle(colourWanted(process.stderr));
  const display = new LiveDisplay(process.stderr, { live: process.stderr.isTTY, style });
  const interrupt = new AbortController();
  const onSigint = () => interrupt.abort(new Error('interrupted'));
  process.on('SIGINT', onSigint);
  let code: ExitCode = EXIT.ok;
  try {
    for (const [i, address] of command.nodes.entries()) {
      const node = names[i] ?? address;
      code = await gateOneNode({
        backend,
        command,
        address,
        node,
        program: flags.talosctl,
        display,
        style,
        signal: interrupt.signal,
      });
      if (code !== EXIT.ok) {
        const left = command.nodes.slice(i + 1);
        if (left.length > 0) display.note(`${style.warn('!')} stopped: not started on ${left.join(', ')}`);
        break;
      }
    }
  } finally {
    process.off('SIGINT', onSigint);
    display.close();
  }
  process.exitCode = code;
}

export function talosctlCommand(): Command {
  return clusterCommand('talosctl')
    .description(
      'run talosctl reboot|upgrade|shutdown|reset|apply-config through the gate, one node at a time',
    )
    .argument('<talosctl-args...>', 'the talosctl command line, after --')
    .option(
      '--node-name <address=node>',
      'the Node name of a talosctl -n address, when it is neither a Node name nor one of its addresses (repeatable)',
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .option('--talosctl <program>', 'the talosctl to run', 'talosctl')
    .passThroughOptions()
    .addHelpText(
      'after',
      `
Example:
  gatehouse talosctl -- -n 10.0.0.21,10.0.0.22 upgrade --image ghcr.io/siderolabs/installer:v1.13.1

For each node in turn: an External NodeAction, its approval (checks, policies, hooks),
talosctl with the same arguments and -n that node alone, the executed mark, then the node
followed until the action Succeeded. A node that fails (talosctl's exit code, or the
action) stops the run. Other talosctl commands, flags or arguments are refused.`,
    )
    .action(
      handled(async (words: string[], _: unknown, command: Command) => {
        await gatedTalosctl(words, command.optsWithGlobals<TalosctlFlags>());
      }),
    );
}
