// `gatehouse check NAME`: is this check healthy now?
//
// Through the HTTP API (--server) the controller probes it afresh — the same shared,
// fresh evaluation a gate asks for. With a kubeconfig the CLI has no way to make the
// controller probe (the API server's service proxy does not pass our credentials on),
// so it shows what the controller last recorded in the check's status and how old that
// is; the controller re-probes on the check's interval. See docs/decisions.md.
import type { Command } from 'commander';
import { clusterCommand, connect, type ConnectionOptions } from './connection.ts';
import { CliError, EXIT, handled } from './exit.ts';
import { formatDocument, outputOption, type Format } from './output.ts';
import { colourWanted, makeStyle, type Style } from './style.ts';
import type { CheckSummary } from './backend.ts';
import { age } from './table.ts';

export function checkText(
  summary: CheckSummary,
  fresh: boolean,
  now: Date,
  style: Style,
  interval?: string,
): string {
  const state =
    summary.state === 'Healthy'
      ? style.good(summary.state)
      : summary.state === 'Unhealthy'
        ? style.bad(summary.state)
        : style.warn(summary.state);
  // The status keeps the probe time it was last written with, and an unchanged result is
  // written once a minute: the time recorded is not the last probe, and is not shown as one.
  const recorded = summary.lastProbeTime ? `recorded ${age(summary.lastProbeTime, now)} ago` : 'never probed';
  const cadence = interval
    ? `; probed every ${interval}, and an unchanged result is recorded at most once a minute`
    : '';
  const source = fresh
    ? 'probed just now by the controller'
    : `as the controller last recorded it (${recorded}${cadence}; --server asks for a fresh probe)`;
  const streak =
    summary.consecutiveFailures > 0
      ? `${String(summary.consecutiveFailures)} failed probes in a row`
      : `${String(summary.consecutiveSuccesses)} successful probes in a row`;
  if (summary.nodes) return nodeSummaryText(summary, summary.nodes, source, style);
  const title =
    summary.node === undefined
      ? style.bold(summary.name)
      : `${style.bold(summary.node)}: ${style.bold(summary.name)}`;
  return [
    `${title}: ${state} (${summary.probe} probe, ${summary.reason})`,
    `  ${summary.message}`,
    `  ${style.dim(`${source}; ${streak}`)}`,
    '',
  ].join('\n');
}

/** A Node-scoped check without --node: one line per unsafe node, "worker-2: NAME: message". */
function nodeSummaryText(
  summary: CheckSummary,
  nodes: NonNullable<CheckSummary['nodes']>,
  source: string,
  style: Style,
): string {
  const head = `${style.bold(summary.name)}: ${String(nodes.safe)} of ${String(nodes.evaluated)} evaluated nodes safe (Node-scoped ${summary.probe} probe)`;
  const lines = nodes.unsafeNodes.map((n) => `  ${style.bad(n.name)}: ${summary.name}: ${n.message}`);
  const more = nodes.unsafe - nodes.unsafeNodes.length;
  if (more > 0) lines.push(`  and ${String(more)} more unsafe nodes`);
  return [head, ...lines, `  ${style.dim(`${source}; --node NAME judges one node`)}`, ''].join('\n');
}

export function checkCommand(): Command {
  return clusterCommand('check')
    .description(
      'show whether a ClusterHealthCheck holds: a fresh probe through the HTTP API (--server), or its recorded status with a kubeconfig',
    )
    .argument('<name>', 'the ClusterHealthCheck')
    .option('--node <node>', 'a Node-scoped check: judge it for this node')
    .addOption(outputOption())
    .addHelpText(
      'after',
      `
Exits 0 when the check is healthy and 1 when it is unhealthy or unknown (never probed
counts as unhealthy, as it does for the gate). -o json prints the check's summary:
name, healthy, state, reason, message, probe, consecutiveSuccesses, consecutiveFailures,
lastProbeTime, lastTransitionTime, and fresh (whether it was probed for this command).
A Node-scoped check is judged for --node; without it the summary lists its unsafe nodes
(state PerNode, exit 0 when none is unsafe).`,
    )
    .action(
      handled(async (name: string, _: unknown, command: Command) => {
        const flags = command.optsWithGlobals<ConnectionOptions & { output: Format; node?: string }>();
        const backend = await connect(flags);
        const found = await backend.check(name, flags.node);
        if (!found) throw new CliError(`ClusterHealthCheck ${name} does not exist`, EXIT.failed);
        const { summary, fresh, interval } = found;
        if (flags.output === 'text') {
          process.stdout.write(
            checkText(summary, fresh, new Date(), makeStyle(colourWanted(process.stdout)), interval),
          );
        } else {
          process.stdout.write(formatDocument(flags.output, { ...summary, fresh }));
        }
        const ok = summary.nodes
          ? summary.nodes.unsafe === 0 && summary.nodes.evaluated > 0
          : summary.healthy;
        process.exitCode = ok ? EXIT.ok : EXIT.failed;
      }),
    );
}
