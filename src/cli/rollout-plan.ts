// `gatehouse rollout plan -f rollout.yaml`, `rollout start NAME` and `rollout promote NAME`:
// a rollout planned before anything moves (the controller plans it as a dry run, so the
// plan is what the rollout then does: the same order, skips and windows), started once
// the plan looks right, and promoted past the gates it stops at (a canary soak, a soak
// between groups, a pause before a node) by someone holding the verb promote.
import { readFile } from 'node:fs/promises';
import { Command } from 'commander';
import { parse } from 'yaml';
import { API_VERSION } from '../api/common.ts';
import {
  INSTANCE_LABEL,
  PROMOTE_ANNOTATION,
  PROMOTED_BY_ANNOTATION,
  PROMOTE_REASON_ANNOTATION,
} from '../api/names.ts';
import type { NodeRolloutSpec, PlannedNode, RolloutPlanRecord } from '../api/node-rollout.ts';
import { hasVisibleWords } from '../api/node-action.ts';
import { NODE_ROLLOUTS_PATH } from '../api/paths.ts';
import { formatDuration } from '../duration.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { sleep } from '../wait.ts';
import { clusterCommand, type ConnectionOptions } from './connection.ts';
import { CliError, EXIT, handled } from './exit.ts';
import { call, connection, whoami, type Rollout } from './node-rollouts.ts';
import { formatDocument, outputOption, type Format } from './output.ts';
import { oneLine, table } from './table.ts';

/** How long `plan` waits for the controller to write the plan. */
const PLAN_WAIT_MS = 60_000;

interface RolloutFile {
  metadata?: { name?: string; labels?: Record<string, string> };
  kind?: string;
  spec?: Partial<NodeRolloutSpec>;
}

async function readRolloutFile(path: string): Promise<{ name: string; file: RolloutFile }> {
  let file: RolloutFile;
  try {
    file = parse(await readFile(path, 'utf8')) as RolloutFile;
  } catch (error) {
    throw new CliError(`cannot read ${path}: ${(error as Error).message}`, EXIT.usage);
  }
  if (file.kind !== 'NodeRollout' || !file.metadata?.name || !file.spec)
    throw new CliError(`${path} must hold one NodeRollout, with metadata.name and spec`, EXIT.usage);
  return { name: file.metadata.name, file };
}

/** Creates the rollout as a dry run, or replans an existing dry run; refuses a running one. */
async function submitDryRun(
  rest: RestClient,
  name: string,
  file: RolloutFile,
  instance?: string,
): Promise<void> {
  const requestedBy = file.spec?.requestedBy ?? (await call('learn who you are', () => whoami(rest)));
  const spec = { ...file.spec, requestedBy, dryRun: true };
  const labels = { ...file.metadata?.labels, ...(instance ? { [INSTANCE_LABEL]: instance } : {}) };
  const created = await call(`create NodeRollout ${name}`, () =>
    rest
      .request(NODE_ROLLOUTS_PATH, {
        method: 'POST',
        body: { apiVersion: API_VERSION, kind: 'NodeRollout', metadata: { name, labels }, spec },
      })
      .then(
        () => true,
        (error: unknown) => {
          // There already: replanned below if it is a dry run.
          if (error instanceof KubeApiError && error.code === 409) return false;
          throw error;
        },
      ),
  );
  if (created) return;
  const existing = await call(`read NodeRollout ${name}`, () =>
    rest.request<Rollout>(`${NODE_ROLLOUTS_PATH}/${name}`),
  );
  if (existing.spec.dryRun !== true)
    throw new CliError(
      `NodeRollout ${name} exists and is not a dry run: plan under another name`,
      EXIT.failed,
    );
  await call(`replan NodeRollout ${name}`, () =>
    rest.request(`${NODE_ROLLOUTS_PATH}/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec },
    }),
  );
}

/** The plan once the controller made it for the rollout's current spec. */
async function awaitPlan(
  rest: RestClient,
  name: string,
): Promise<Rollout & { status: { plan: RolloutPlanRecord } }> {
  const deadline = Date.now() + PLAN_WAIT_MS;
  for (;;) {
    const r = await call(`read NodeRollout ${name}`, () =>
      rest.request<Rollout>(`${NODE_ROLLOUTS_PATH}/${name}`),
    );
    const plan = r.status?.plan;
    if (plan && r.status?.observedGeneration === r.metadata.generation)
      return r as Rollout & { status: { plan: RolloutPlanRecord } };
    if (Date.now() > deadline)
      throw new CliError(
        `the controller did not plan NodeRollout ${name} within ${formatDuration(PLAN_WAIT_MS)}: is it running (and of this instance)?`,
        EXIT.unreachable,
      );
    await sleep(500);
  }
}

function roleOf(p: PlannedNode): string {
  return [
    p.controlPlane ? 'control plane' : '',
    p.canary ? 'canary' : '',
    p.pauseBefore ? 'pause before' : '',
  ]
    .filter(Boolean)
    .join(', ');
}

function clock(iso: string | undefined, from: number): string {
  if (!iso) return '';
  const ms = Date.parse(iso) - from;
  return ms < 60_000 ? 'now' : `+${formatDuration(ms)}`;
}

/** The plan as a person reads it: one row per node, then the whole. */
export function planText(name: string, plan: RolloutPlanRecord): string {
  const from = Date.parse(plan.time);
  const rows = plan.nodes.map((p) => [
    String(p.position),
    p.node,
    p.group ?? '',
    roleOf(p),
    p.skip !== undefined ? `skip: ${oneLine(p.skip, 40)}` : (p.policies ?? []).join(', '),
    p.expectedSeconds !== undefined ? `${formatDuration(p.expectedSeconds * 1000)} (${p.basis ?? ''})` : '',
    clock(p.start, from),
    clock(p.end, from),
    p.drain
      ? oneLine(
          `${String(p.drain.pods)} pod${p.drain.pods === 1 ? '' : 's'}: ${p.drain.words?.[0] ?? ''}`,
          60,
        )
      : '',
    oneLine((p.findings ?? []).join('; '), 80),
  ]);
  const head = table(
    ['#', 'NODE', 'GROUP', 'ROLE', 'POLICIES / SKIP', 'EXPECTED', 'START', 'END', 'DRAIN', 'FINDINGS'],
    rows,
  );
  const total =
    plan.expectedSeconds !== undefined
      ? `expected to take ${formatDuration(plan.expectedSeconds * 1000)}, done by ${plan.expectedEnd ?? '?'}`
      : 'no end can be expected';
  const findings = (plan.findings ?? []).map((f) => `  - ${f}\n`).join('');
  const verdict = plan.feasible
    ? `start it: gatehouse rollout start ${name}`
    : 'it cannot succeed as it stands: fix the findings, then plan again';
  return `${head}\nNodeRollout ${name} (dry run): ${String(plan.nodes.length)} nodes, ${total}\n${findings}${verdict}\n`;
}

function planCommand(): Command {
  return clusterCommand('plan')
    .description(
      'plan a NodeRollout from a file without touching a node: order, skips, policies, windows, durations, preflight, drain forecast',
    )
    .requiredOption(
      '-f, --file <path>',
      'the NodeRollout (YAML or JSON); it is created (or replanned) as a dry run',
    )
    .addOption(outputOption())
    .action(
      handled(async (flags: ConnectionOptions & { file: string; output?: Format }) => {
        const { rest } = await connection(flags);
        const { name, file } = await readRolloutFile(flags.file);
        await submitDryRun(rest, name, file, flags.controllerInstance);
        const r = await awaitPlan(rest, name);
        const plan = r.status.plan;
        process.stdout.write(
          flags.output && flags.output !== 'text' ? formatDocument(flags.output, plan) : planText(name, plan),
        );
        if (!plan.feasible) process.exitCode = EXIT.failed;
      }),
    );
}

function startCommand(): Command {
  return clusterCommand('start')
    .description('start a planned NodeRollout (spec.dryRun: false): it goes as planned')
    .argument('<name>', 'the NodeRollout')
    .action(
      handled(async (name: string, flags: ConnectionOptions) => {
        const { rest } = await connection(flags);
        await call(`start NodeRollout ${name}`, () =>
          rest.request(`${NODE_ROLLOUTS_PATH}/${name}`, {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: { spec: { dryRun: false } },
          }),
        );
        process.stdout.write(`NodeRollout ${name} started\n`);
      }),
    );
}

function promoteCommand(): Command {
  return clusterCommand('promote')
    .description(
      'promote a NodeRollout past the gate it waits at (a soak, a pause before a node); needs the verb promote on noderollouts (ClusterRole gatehouse:promote), recorded with your name',
    )
    .argument('<name>', 'the NodeRollout')
    .requiredOption('--reason <reason>', 'why, in your words: recorded with your name')
    .action(
      handled(async (name: string, flags: ConnectionOptions & { reason: string }) => {
        const reason = flags.reason.trim();
        if (!hasVisibleWords(reason))
          throw new CliError('--reason must say why, in words: it is recorded with your name', EXIT.usage);
        const { rest } = await connection(flags);
        const by = await call('learn who you are', () => whoami(rest));
        const gate = await promoteOnce(rest, name, by, reason);
        process.stdout.write(`NodeRollout ${name} promoted past ${gate.id}\n`);
      }),
    );
}

/**
 * Promotes past the gate the rollout waits at, on the version read: the controller writes
 * the rollout's status as it goes, and a write between the read and the promotion is a
 * conflict, read again (a few times) as long as the rollout still waits at the gate first read.
 */
async function promoteOnce(
  rest: RestClient,
  name: string,
  by: string,
  reason: string,
): Promise<{ id: string }> {
  let firstGate: string | undefined;
  for (let attempt = 1; ; attempt++) {
    const r = await call(`read NodeRollout ${name}`, () =>
      rest.request<Rollout>(`${NODE_ROLLOUTS_PATH}/${name}`),
    );
    const gate = r.status?.gate;
    if (!gate)
      throw new CliError(`NodeRollout ${name} waits at no gate: there is nothing to promote`, EXIT.failed);
    // Never a gate other than the one first read: the caller meant that one.
    if (firstGate !== undefined && gate.id !== firstGate)
      throw new CliError(
        `NodeRollout ${name} moved on from ${firstGate} to ${gate.id} while it was promoted: nothing was promoted; run promote again if ${gate.id} is meant`,
        EXIT.failed,
      );
    firstGate = gate.id;
    try {
      await rest.request(`${NODE_ROLLOUTS_PATH}/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: {
          metadata: {
            resourceVersion: r.metadata.resourceVersion,
            annotations: {
              [PROMOTE_ANNOTATION]: gate.id,
              [PROMOTED_BY_ANNOTATION]: by,
              [PROMOTE_REASON_ANNOTATION]: reason,
            },
          },
        },
      });
      return gate;
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 409) || attempt >= 5)
        return call(`promote NodeRollout ${name}`, () => Promise.reject(error as Error));
    }
  }
}

/** The commands that plan, start and promote rollouts. */
export function rolloutPlanCommands(): Command[] {
  return [planCommand(), startCommand(), promoteCommand()];
}
