// `gatehouse status`: the checks, the policies and the actions, as tables (coloured on
// a terminal) or as one JSON/YAML document of stable shape (see statusDocument).
import type { Command } from 'commander';
import { isTerminal } from '../api/phases.ts';
import type { ActionObject, Backend, CheckSummary, PolicyObject } from './backend.ts';
import { clusterCommand, connect, type ConnectionOptions } from './connection.ts';
import { handled } from './exit.ts';
import { formatDocument, outputOption, type Format } from './output.ts';
import { phaseStyle } from './progress.ts';
import { colourWanted, makeStyle, type Style } from './style.ts';
import { age, oneLine, table } from './table.ts';

/** How many finished actions status shows, most recent first, besides every unfinished one. */
export const RECENT_FINISHED = 10;

export interface CheckEntry {
  name: string;
  state: CheckSummary['state'];
  healthy: boolean;
  probe: string;
  message: string;
  lastProbeTime: string | null;
  /** Node-scoped checks only: the unsafe nodes the status names (at most 20). */
  unsafeNodes?: { name: string; message: string }[];
}

export interface PolicyEntry {
  name: string;
  maxConcurrent: number | string;
  matchingNodes: number | null;
  activeActions: number | null;
  windowOpen: boolean | null;
  nextWindowStart: string | null;
}

export interface ActionEntry {
  name: string;
  node: string;
  action: string;
  phase: string;
  execution: string;
  requestedBy: string;
  createdAt: string | null;
  message: string;
}

export interface StatusDocument {
  checks: CheckEntry[];
  policies: PolicyEntry[];
  actions: ActionEntry[];
}

export function checkEntry(c: CheckSummary): CheckEntry {
  return {
    name: c.name,
    state: c.state,
    healthy: c.healthy,
    probe: c.probe,
    message: c.message,
    lastProbeTime: c.lastProbeTime,
    ...(c.nodes
      ? { unsafeNodes: c.nodes.unsafeNodes.map((n) => ({ name: n.name, message: n.message })) }
      : {}),
  };
}

/** Below the checks table: one line per unsafe node of a Node-scoped check, "worker-2: NAME: message". */
function unsafeNodeLines(checks: readonly CheckEntry[], style: Style): string {
  const lines = checks.flatMap((c) =>
    (c.unsafeNodes ?? []).map((n) => `  ${style.bad(n.name)}: ${c.name}: ${oneLine(n.message, 200)}`),
  );
  return lines.length ? `${lines.join('\n')}\n` : '';
}

export function policyEntry(p: PolicyObject): PolicyEntry {
  return {
    name: p.metadata.name,
    maxConcurrent: p.spec?.maxConcurrent ?? 1,
    matchingNodes: p.status?.matchingNodes ?? null,
    activeActions: p.status?.activeActions ?? null,
    windowOpen: p.status?.windowOpen ?? null,
    nextWindowStart: p.status?.nextWindowStart ?? null,
  };
}

export function actionEntry(a: ActionObject): ActionEntry {
  return {
    name: a.metadata.name,
    node: a.spec.nodeName,
    action: a.spec.action,
    phase: a.status?.phase ?? 'New',
    execution: a.spec.execution ?? 'Managed',
    requestedBy: a.spec.requestedBy,
    createdAt: a.metadata.creationTimestamp ?? null,
    message: a.status?.message ?? '',
  };
}

/** Every unfinished action (oldest first), then the most recent finished ones. */
export function selectActions(actions: readonly ActionObject[], recent = RECENT_FINISHED): ActionObject[] {
  const byCreation = (a: ActionObject, b: ActionObject) =>
    (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') ||
    a.metadata.name.localeCompare(b.metadata.name);
  const open = actions.filter((a) => !isTerminal(a.status?.phase)).sort(byCreation);
  const done = actions
    .filter((a) => isTerminal(a.status?.phase))
    .sort((a, b) => byCreation(b, a))
    .slice(0, recent);
  return [...open, ...done];
}

export async function statusDocument(backend: Backend): Promise<StatusDocument> {
  const [checks, policies, actions] = await Promise.all([
    backend.checks(),
    backend.policies(),
    backend.actions(),
  ]);
  return {
    checks: checks.map(checkEntry).sort((a, b) => a.name.localeCompare(b.name)),
    policies: policies.map(policyEntry),
    actions: selectActions(actions).map(actionEntry),
  };
}

function stateText(state: CheckEntry['state'], style: Style): string {
  return state === 'Healthy'
    ? style.good(state)
    : state === 'Unhealthy'
      ? style.bad(state)
      : style.warn(state);
}

export function statusText(doc: StatusDocument, now: Date, style: Style): string {
  const sections: string[] = [];
  sections.push(
    doc.checks.length === 0
      ? `${style.bold('CHECKS')}: none (without checks, nothing holds actions back but policies and hooks)\n`
      : `${style.bold('CHECKS')}\n${table(
          ['NAME', 'STATE', 'PROBE', 'PROBED', 'MESSAGE'],
          doc.checks.map((c) => [
            c.name,
            stateText(c.state, style),
            c.probe,
            age(c.lastProbeTime, now),
            oneLine(c.message),
          ]),
        )}${unsafeNodeLines(doc.checks, style)}`,
  );
  sections.push(
    doc.policies.length === 0
      ? `${style.bold('POLICIES')}: none (the default applies: one action at a time, never two control-plane nodes)\n`
      : `${style.bold('POLICIES')}\n${table(
          ['NAME', 'MAX', 'NODES', 'ACTIVE', 'WINDOW'],
          doc.policies.map((p) => [
            p.name,
            String(p.maxConcurrent),
            p.matchingNodes === null ? '-' : String(p.matchingNodes),
            p.activeActions === null ? '-' : String(p.activeActions),
            p.windowOpen === null
              ? '-'
              : p.windowOpen
                ? style.good('open')
                : `closed${p.nextWindowStart ? ` until ${p.nextWindowStart}` : ''}`,
          ]),
        )}`,
  );
  sections.push(
    doc.actions.length === 0
      ? `${style.bold('ACTIONS')}: none\n`
      : `${style.bold('ACTIONS')}\n${table(
          ['NAME', 'NODE', 'ACTION', 'PHASE', 'REQUESTED BY', 'AGE', 'MESSAGE'],
          doc.actions.map((a) => [
            a.name,
            a.node,
            a.action,
            phaseStyle(
              a.phase === 'New' ? undefined : (a.phase as Parameters<typeof phaseStyle>[0]),
              style,
            )(a.phase),
            a.requestedBy,
            age(a.createdAt, now),
            oneLine(a.message, 60),
          ]),
        )}`,
  );
  return sections.join('\n');
}

export function statusCommand(): Command {
  return clusterCommand('status')
    .description(
      'show the health checks, the action policies and the actions (unfinished ones and the latest finished)',
    )
    .addOption(outputOption())
    .addHelpText(
      'after',
      `
-o json and -o yaml print {checks, policies, actions} with fixed fields:
  checks:   name, state (Healthy|Unhealthy|Unknown|PerNode), healthy, probe, message, lastProbeTime,
            and for a Node-scoped check unsafeNodes [{name, message}] (at most 20)
  policies: name, maxConcurrent, matchingNodes, activeActions, windowOpen, nextWindowStart
  actions:  name, node, action, phase, execution, requestedBy, createdAt, message
Missing values are null. Actions: every unfinished one (oldest first), then the ${String(RECENT_FINISHED)} latest finished.`,
    )
    .action(
      handled(async (_: unknown, command: Command) => {
        const flags = command.optsWithGlobals<ConnectionOptions & { output: Format }>();
        const backend = await connect(flags);
        const doc = await statusDocument(backend);
        if (flags.output === 'text') {
          process.stdout.write(statusText(doc, new Date(), makeStyle(colourWanted(process.stdout))));
        } else {
          process.stdout.write(formatDocument(flags.output, doc));
        }
      }),
    );
}
