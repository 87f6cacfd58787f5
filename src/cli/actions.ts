// `gatehouse actions list | describe NAME | cancel NAME | executed NAME`.
import { Command, Option } from 'commander';
import { isTerminal } from '../api/phases.ts';
import { objectView } from '../http/objects.ts';
import type { ActionObject, Backend, Progress } from './backend.ts';
import { clusterCommand, connect, type ConnectionOptions } from './connection.ts';
import { LiveDisplay } from './display.ts';
import { CliError, EXIT, EXIT_CODES_HELP, handled, type ExitCode } from './exit.ts';
import { forecastLines } from './forecast.ts';
import { etcdSnapshotLine } from './etcd-snapshot.ts';
import { formatDocument, type Format } from './output.ts';
import { DRAIN_BLOCKERS_LISTED } from '../api/node-action.ts';
import { drainLines, hookLine, nodeLine, outcomeLine, phaseStyle, undoLines } from './progress.ts';
import { codeOf } from './rollout.ts';
import { actionEntry } from './status.ts';
import { colourWanted, makeStyle, type Style } from './style.ts';
import { age, oneLine, table } from './table.ts';
import { redactURL } from '../redact.ts';

async function mustGet(backend: Backend, name: string): Promise<ActionObject> {
  const action = await backend.action(name);
  if (!action) throw new CliError(`NodeAction ${name} does not exist`, EXIT.failed);
  return action;
}

export function listText(actions: readonly ActionObject[], now: Date, style: Style): string {
  if (actions.length === 0) return 'No actions.\n';
  return table(
    ['NAME', 'NODE', 'ACTION', 'PHASE', 'REQUESTED BY', 'AGE', 'MESSAGE'],
    actions.map((a) => [
      a.metadata.name,
      a.spec.nodeName,
      // A ConfigChange says how it disrupts, once classified.
      a.status?.configDisruption ? `${a.spec.action} (${a.status.configDisruption.class})` : a.spec.action,
      phaseStyle(a.status?.phase, style)(a.status?.phase ?? 'New'),
      a.spec.requestedBy,
      age(a.metadata.creationTimestamp, now),
      oneLine(a.status?.message, 60),
    ]),
  );
}

function parameters(action: ActionObject): string {
  const s = action.spec;
  const parts: string[] = [];
  if (s.upgrade) parts.push(`image ${s.upgrade.image}${s.upgrade.stage ? ', staged' : ''}`);
  if (s.reboot?.mode) parts.push(`mode ${s.reboot.mode}`);
  if (s.reset) {
    if (s.reset.graceful === false) parts.push('not graceful');
    if (s.reset.wipeMode) parts.push(`wipe ${s.reset.wipeMode}`);
    if (s.reset.userDisks?.length) parts.push(`user disks ${s.reset.userDisks.join(', ')}`);
  }
  if (s.configChange) {
    parts.push(`mode ${s.configChange.mode ?? 'Auto'}`);
    if (s.configChange.configSecretRef)
      parts.push(`config from Secret ${s.configChange.configSecretRef.name}`);
    if (s.configChange.disruptionClass) parts.push(`stated ${s.configChange.disruptionClass}`);
  }
  return parts.length > 0 ? ` (${parts.join(', ')})` : '';
}

/** `actions describe NAME`, and `explain NAME` (the same, at the top level). */
function describeCommand(word: 'describe' | 'explain'): Command {
  return clusterCommand(word)
    .description(
      `show one NodeAction: its request, where it is, and how it was judged (checks, hooks, boots, the drain forecast)${word === 'explain' ? '; the same as actions describe' : ''}`,
    )
    .argument('<name>', 'the NodeAction')
    .addOption(
      new Option('-o, --output <format>', 'output format (json and yaml: the object itself)')
        .choices(['text', 'json', 'yaml'])
        .default('text'),
    )
    .action(
      handled(async (name: string, _: unknown, command: Command) => {
        const flags = command.optsWithGlobals<ConnectionOptions & { output: Format }>();
        const backend = await connect(flags);
        const action = await mustGet(backend, name);
        if (flags.output !== 'text') {
          process.stdout.write(formatDocument(flags.output, objectView({ ...action, kind: 'NodeAction' })));
          return;
        }
        const node = await backend.node(action.spec.nodeName);
        process.stdout.write(
          describeText(action, { action, node }, new Date(), makeStyle(colourWanted(process.stdout))),
        );
      }),
    );
}

/** `gatehouse explain NAME`: `gatehouse actions describe NAME`, under the name people look for. */
export function explainCommand(): Command {
  return describeCommand('explain');
}

/** `actions describe` for people: the request, where it is, and the record of how it was judged. */
export function describeText(
  action: ActionObject,
  progress: Progress | undefined,
  now: Date,
  style: Style,
): string {
  const s = action.spec;
  const status = action.status ?? {};
  const created = action.metadata.creationTimestamp;
  const rows: [string, string][] = [
    ['Name', action.metadata.name],
    ['Node', s.nodeName],
    ['Action', `${s.action}${parameters(action)}`],
    [
      'Execution',
      `${s.execution ?? 'Managed'}${action.metadata.annotations?.['talos.dev/executed'] === 'true' ? ' (marked executed)' : ''}`,
    ],
    ['Requested by', s.requestedBy],
    ['Created', created ? `${created} (${age(created, now)} ago)` : '-'],
    [
      'Phase',
      `${phaseStyle(status.phase, style)(status.phase ?? 'New')}${status.phaseTime && !isTerminal(status.phase) ? ` for ${age(status.phaseTime, now)}` : ''}${action.metadata.deletionTimestamp && !isTerminal(status.phase) ? ' (being cancelled)' : ''}`,
    ],
  ];
  if (status.message) rows.push(['Message', status.message]);
  if (s.bypass && (s.bypass.healthChecks || s.bypass.hooks)) {
    const what = [s.bypass.healthChecks ? 'health checks' : '', s.bypass.hooks ? 'hooks' : ''].filter(
      Boolean,
    );
    rows.push(['Bypass', `${what.join(' and ')}: ${s.bypass.reason ?? ''}`]);
  }
  const disruption = status.configDisruption;
  if (disruption)
    rows.push([
      'Disruption',
      `${disruption.class} (${disruption.basis}): ${oneLine(disruption.message, 400)}`,
    ]);
  if (status.etcdSnapshot) rows.push(['etcd snapshot', etcdSnapshotLine(status.etcdSnapshot)]);
  if (status.bootIDBefore) rows.push(['Boot before', status.bootIDBefore]);
  if (status.bootIDAfter) rows.push(['Boot after', status.bootIDAfter]);
  for (const [label, time] of [
    ['Approved', status.approvalTime],
    ['Executed', status.executionTime],
    ['Completed', status.completionTime],
  ] as const) {
    if (time) rows.push([label, time]);
  }
  const node = nodeLine(progress?.node, action, style);
  if (node) rows.push(['Node now', node.replace(/^node [^:]+: /, '')]);
  const width = Math.max(...rows.map(([label]) => label.length)) + 2;
  const lines = rows.map(([label, value]) => `${`${label}:`.padEnd(width)}${value}`);
  const checks = status.checks ?? [];
  if (checks.length > 0) {
    lines.push('Checks:');
    for (const c of checks) {
      const icon = c.bypassed ? style.warn('–') : c.healthy ? style.good('✓') : style.bad('✗');
      const what = c.bypassed ? 'bypassed' : c.healthy ? 'healthy' : 'unhealthy';
      lines.push(`  ${icon} ${c.name} ${what}${c.message ? `: ${oneLine(c.message, 160)}` : ''}`);
    }
  }
  const hooks = status.hooks ?? [];
  if (hooks.length > 0) {
    lines.push('Hooks:');
    for (const h of hooks) lines.push(`  ${hookLine(h, now, style)}`);
  }
  lines.push(...forecastLines(status.drainForecast, now, style));
  // Every pod the status lists, not the live view's first few.
  const drain = drainLines(status, now, style, DRAIN_BLOCKERS_LISTED);
  if (drain.length > 0) {
    lines.push(`Drain (condition DrainBlocked):`);
    for (const l of drain) lines.push(`  ${l}`);
  }
  if (status.undo) {
    lines.push(
      `Undo (decided ${status.undo.decisionTime}, node ${status.undo.nodeDisrupted ? 'maybe disrupted' : 'undisrupted'}):`,
    );
    if (status.undo.runs?.length) lines.push(`  ${oneLine(status.undo.reason, 200)}`);
    for (const l of undoLines(status, now, style, true)) lines.push(`  ${l}`);
  }
  const silences = status.silences ?? [];
  if (silences.length > 0) {
    lines.push('Silences:');
    for (const silence of silences) {
      const until = silence.endsAt ? ` until ${silence.endsAt}` : '';
      const id = silence.id ? ` (id ${silence.id})` : '';
      lines.push(
        `  ${silence.state} ${silence.nodeLabel}="${s.nodeName}" in ${redactURL(silence.url)}${until}${id}`,
      );
    }
  }
  const conditions = status.conditions ?? [];
  if (conditions.length > 0) {
    lines.push('Conditions:');
    lines.push(
      ...table(
        ['TYPE', 'STATUS', 'REASON', 'MESSAGE'],
        conditions.map((c) => [c.type, c.status, c.reason, oneLine(c.message, 100)]),
      )
        .trimEnd()
        .split('\n')
        .map((l) => `  ${l}`),
    );
  }
  return `${lines.join('\n')}\n`;
}

/** Follows one action to its end with live progress on stderr; returns its exit code. */
export async function followToEnd(backend: Backend, name: string): Promise<ExitCode> {
  const style = makeStyle(colourWanted(process.stderr));
  const display = new LiveDisplay(process.stderr, { live: process.stderr.isTTY, style });
  const interrupt = new AbortController();
  const onSigint = () => interrupt.abort(new Error('interrupted'));
  process.once('SIGINT', onSigint);
  try {
    const progress = await backend.follow(name, (p) => display.update(name, p), { signal: interrupt.signal });
    display.finish(name, outcomeLine(name, progress, style));
    return codeOf(progress, false);
  } catch (error) {
    // Ctrl-C while following a mark: stop watching; the action goes on (it has been performed).
    if (interrupt.signal.aborted) {
      display.note(`stopped following ${name}; it goes on without us (gatehouse actions describe ${name})`);
      return EXIT.interrupted;
    }
    throw error;
  } finally {
    process.off('SIGINT', onSigint);
    display.close();
  }
}

export function actionsCommand(): Command {
  const actions = new Command('actions').description('list, describe, cancel and mark NodeActions');

  actions.addCommand(
    clusterCommand('list')
      .description('list NodeActions, oldest first')
      .option('--node <node>', 'only actions on this node')
      .option('--phase <phase>', 'only actions in this phase')
      .addOption(
        new Option('-o, --output <format>', 'output format')
          .choices(['text', 'json', 'yaml', 'name'])
          .default('text'),
      )
      .addHelpText(
        'after',
        '\n-o json prints {items: [...]} with, per action: name, node, action, phase, execution,\nrequestedBy, createdAt, message (null when missing).',
      )
      .action(
        handled(async (_: unknown, command: Command) => {
          const flags = command.optsWithGlobals<
            ConnectionOptions & { node?: string; phase?: string; output: Format | 'name' }
          >();
          const backend = await connect(flags);
          const items = (await backend.actions())
            .filter(
              (a) =>
                (flags.node === undefined || a.spec.nodeName === flags.node) &&
                (flags.phase === undefined || (a.status?.phase ?? 'New') === flags.phase),
            )
            .sort(
              (a, b) =>
                (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') ||
                a.metadata.name.localeCompare(b.metadata.name),
            );
          if (flags.output === 'text') {
            process.stdout.write(listText(items, new Date(), makeStyle(colourWanted(process.stdout))));
          } else if (flags.output === 'name') {
            for (const a of items) process.stdout.write(`${a.metadata.name}\n`);
          } else {
            process.stdout.write(formatDocument(flags.output, { items: items.map(actionEntry) }));
          }
        }),
      ),
  );

  actions.addCommand(describeCommand('describe'));

  actions.addCommand(
    clusterCommand('cancel')
      .description(
        'cancel an unfinished NodeAction (it is deleted once the controller has stopped its hooks)',
      )
      .argument('<name>', 'the NodeAction')
      .action(
        handled(async (name: string, _: unknown, command: Command) => {
          const backend = await connect(command.optsWithGlobals<ConnectionOptions>());
          await backend.cancel(name);
          process.stdout.write(`cancelling ${name}\n`);
        }),
      ),
  );

  actions.addCommand(
    clusterCommand('executed')
      .description(
        'mark an Approved External action performed (after e.g. talosctl reboot), then follow it to its end',
      )
      .argument('<name>', 'the NodeAction')
      .option('--no-wait', 'mark it and exit without following it')
      .action(
        handled(async (name: string, _: unknown, command: Command) => {
          const flags = command.optsWithGlobals<ConnectionOptions & { wait: boolean }>();
          const backend = await connect(flags);
          await backend.markExecuted(name);
          process.stdout.write(`${name} marked executed\n`);
          if (flags.wait) process.exitCode = await followToEnd(backend, name);
        }),
      ),
  );
  return actions.addHelpText('after', EXIT_CODES_HELP);
}
