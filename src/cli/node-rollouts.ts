// `gatehouse rollout create|status|pause|resume|list`: NodeRollouts, which the controller
// carries out (src/rollouts/) — the CLI only asks and follows, so a laptop that sleeps
// stops nothing. With a kubeconfig only: the HTTP API serves actions, not rollouts.
import { Command, InvalidArgumentError, Option } from 'commander';
import { INSTANCE_LABEL } from '../api/names.ts';
import type { NodeRolloutSpec, ObservedNodeRollout, RolloutNode } from '../api/node-rollout.ts';
import { NODE_ROLLOUTS_PATH } from '../api/paths.ts';
import type { KubeConfig } from '@kubernetes/client-node';
import { KubeApiError, RestClient } from '../kube/rest.ts';
import { errorMessage } from '../wait.ts';
import { wholeNumber } from './arguments.ts';
import { clusterCommand, loadKubeConfig, type ConnectionOptions } from './connection.ts';
import { CliError, EXIT, handled, type ExitCode } from './exit.ts';
import { LiveDisplay } from './display.ts';
import { KubeBackend } from './kube-backend.ts';
import { followRollout } from './rollout-follow.ts';
import { formatDocument, outputOption, type Format } from './output.ts';
import { colourWanted, makeStyle, type Style } from './style.ts';
import { age, oneLine, table } from './table.ts';
import { API_VERSION } from '../api/common.ts';

export type Rollout = ObservedNodeRollout & { metadata: { creationTimestamp?: string } };

interface Connection {
  rest: RestClient;
  kubeConfig: KubeConfig;
}

async function client(options: ConnectionOptions): Promise<RestClient> {
  return (await connection(options)).rest;
}

export async function connection(options: ConnectionOptions): Promise<Connection> {
  if (options.server !== undefined)
    throw new CliError(
      'rollout needs a kubeconfig (--kubeconfig/--context): the HTTP API does not serve NodeRollouts',
      EXIT.usage,
    );
  try {
    const kubeConfig = await loadKubeConfig(options);
    return { rest: new RestClient(kubeConfig), kubeConfig };
  } catch (error) {
    throw new CliError(`cannot load the kubeconfig: ${errorMessage(error)}`, EXIT.unreachable);
  }
}

export async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    if (error instanceof KubeApiError) {
      const code: ExitCode =
        error.code === 404
          ? EXIT.failed
          : error.code === 422 || error.code === 400
            ? EXIT.usage
            : error.code === 401
              ? EXIT.unreachable
              : EXIT.failed;
      throw new CliError(`cannot ${what}: ${error.message}`, code);
    }
    throw new CliError(`cannot ${what}: ${errorMessage(error)}`, EXIT.unreachable);
  }
}

/** `key=value,key2=value2` as matchLabels. */
function selector(value: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const part of value.split(',')) {
    const [key, v, ...rest] = part.split('=');
    if (!key || v === undefined || rest.length > 0)
      throw new InvalidArgumentError('must be key=value[,key=value…]');
    labels[key.trim()] = v.trim();
  }
  return labels;
}

function nodeMark(n: RolloutNode, style: Style): string {
  const marks: Record<RolloutNode['phase'], string> = {
    Pending: style.dim('· pending  '),
    Waiting: style.warn('… waiting  '),
    Running: style.busy('▶ running  '),
    Succeeded: style.good('✓ succeeded'),
    Failed: style.bad('✗ failed   '),
    Skipped: style.dim('= skipped  '),
    Vanished: style.warn('? vanished '),
    Quarantined: style.bad('⊘ quarantined'),
  };
  return marks[n.phase];
}

export function statusText(r: Rollout, style: Style): string {
  const c = r.status?.counts;
  const lines = [
    `NodeRollout ${r.metadata.name}: ${r.spec.action}${r.spec.upgrade ? ` to ${r.spec.upgrade.image}` : ''}${r.spec.paused ? ' (paused)' : ''}`,
    c
      ? `  ${String(c.succeeded)} succeeded, ${String(c.running)} running, ${String(c.pending)} pending, ${String(c.failed)} failed, ${String(c.skipped)} skipped${c.vanished ? `, ${String(c.vanished)} vanished` : ''}${c.quarantined ? `, ${String(c.quarantined)} quarantined` : ''}`
      : '  not processed by the controller yet',
    `  ${r.status?.message ?? ''}`,
    ...(r.status?.nodes ?? []).map(
      (n) =>
        `  ${nodeMark(n, style)} ${n.node}${n.group ? ` [${n.group}]` : ''}${n.actionPhase ? ` (${n.actionPhase})` : ''}: ${oneLine(n.message, 100)}`,
    ),
  ];
  return `${lines.join('\n')}\n`;
}

function listText(rollouts: readonly Rollout[], now: Date): string {
  if (rollouts.length === 0) return 'No rollouts.\n';
  return table(
    ['NAME', 'ACTION', 'TARGET', 'DONE', 'RUNNING', 'FAILED', 'SKIPPED', 'PAUSED', 'AGE', 'MESSAGE'],
    rollouts.map((r) => [
      r.metadata.name,
      r.spec.action,
      r.status?.targetVersion ?? '',
      String(r.status?.counts?.succeeded ?? 0),
      String(r.status?.counts?.running ?? 0),
      String(r.status?.counts?.failed ?? 0),
      String(r.status?.counts?.skipped ?? 0),
      r.spec.paused ? 'yes' : 'no',
      age(r.metadata.creationTimestamp, now),
      oneLine(r.status?.message, 60),
    ]),
  );
}

/** Follows a rollout to its end with the node commands' live progress; sets the exit code. */
async function followUntilDone({ rest, kubeConfig }: Connection, name: string): Promise<void> {
  const style = makeStyle(colourWanted(process.stdout));
  const display = new LiveDisplay(process.stdout, { live: process.stdout.isTTY, style });
  const interrupt = new AbortController();
  const onSigint = () => interrupt.abort();
  process.once('SIGINT', onSigint);
  try {
    const backend = new KubeBackend(kubeConfig);
    const code = await followRollout(name, { rest, backend, display, style, signal: interrupt.signal });
    if (code === EXIT.interrupted)
      display.note(
        `stopped following NodeRollout ${name}; it goes on without us (gatehouse rollout status ${name})`,
      );
    process.exitCode = code;
  } finally {
    process.off('SIGINT', onSigint);
    display.close();
  }
}

interface CreateFlags extends ConnectionOptions {
  image?: string;
  reboot?: boolean;
  selector?: Record<string, string>;
  maxParallel: number;
  maxFailures: number;
  groupBy?: string;
  controlPlaneFirst?: boolean;
  paused?: boolean;
  external?: boolean;
  skipChecks?: boolean;
  skipHooks?: boolean;
  reason?: string;
  watch?: boolean;
  drain?: boolean;
  postCheck?: string[];
  postCheckWithin?: string;
  rollback?: boolean;
  onDrainTimeout?: 'Fail' | 'Quarantine' | 'Skip';
  maxQuarantined?: number;
}

export async function whoami(rest: RestClient): Promise<string> {
  const review = await rest.request<{ status?: { userInfo?: { username?: string } } }>(
    '/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { method: 'POST', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
  );
  const name = review.status?.userInfo?.username;
  if (!name)
    throw new CliError('the API server did not say who you are (SelfSubjectReview)', EXIT.unreachable);
  return name;
}

/** The spec `rollout create` and `upgrade --rollout` ask for. */
export function rolloutSpec(flags: CreateFlags, requestedBy: string): NodeRolloutSpec {
  if (!flags.image === !flags.reboot)
    throw new CliError('say what to roll out: --image IMAGE (an upgrade) or --reboot', EXIT.usage);
  if (flags.rollback && !flags.postCheck?.length)
    throw new CliError(
      '--rollback needs --post-check: it rolls back a node whose post-checks fail',
      EXIT.usage,
    );
  if ((flags.skipChecks || flags.skipHooks) && !flags.reason?.trim())
    throw new CliError(
      '--skip-checks and --skip-hooks need --reason: it is recorded on every NodeAction',
      EXIT.usage,
    );
  return {
    action: flags.image ? 'Upgrade' : 'Reboot',
    ...(flags.image ? { upgrade: { image: flags.image } } : {}),
    ...(flags.selector ? { nodeSelector: { matchLabels: flags.selector } } : {}),
    maxParallel: flags.maxParallel,
    maxFailures: flags.maxFailures,
    ...(flags.groupBy ? { groupBy: flags.groupBy } : {}),
    ...(flags.controlPlaneFirst ? { order: 'controlPlaneFirst' as const } : {}),
    ...(flags.paused ? { paused: true } : {}),
    ...(flags.external ? { execution: 'External' as const } : {}),
    ...(flags.postCheck?.length
      ? {
          postChecks: {
            checks: flags.postCheck,
            ...(flags.postCheckWithin ? { within: flags.postCheckWithin } : {}),
          },
        }
      : {}),
    ...(flags.rollback ? { onPostCheckFailure: 'Rollback' as const } : {}),
    ...(flags.onDrainTimeout ? { onDrainTimeout: flags.onDrainTimeout } : {}),
    ...(flags.maxQuarantined !== undefined ? { maxQuarantined: flags.maxQuarantined } : {}),
    ...(flags.skipChecks || flags.skipHooks
      ? {
          bypass: {
            healthChecks: flags.skipChecks === true,
            hooks: flags.skipHooks === true,
            reason: flags.reason ?? '',
          },
        }
      : {}),
    requestedBy,
  };
}

/** Creates a NodeRollout; returns its name. */
export async function createRollout(
  rest: RestClient,
  name: string,
  spec: NodeRolloutSpec,
  instance?: string,
): Promise<string> {
  await call(`create NodeRollout ${name}`, () =>
    rest.request(NODE_ROLLOUTS_PATH, {
      method: 'POST',
      body: {
        apiVersion: API_VERSION,
        kind: 'NodeRollout',
        metadata: { name, ...(instance ? { labels: { [INSTANCE_LABEL]: instance } } : {}) },
        spec,
      },
    }),
  );
  return name;
}

/** `gatehouse upgrade --rollout NAME NODE...`: a NodeRollout of exactly these nodes, followed to its end. */
export async function upgradeAsRollout(
  name: string,
  nodes: readonly string[],
  flags: CreateFlags & { stage?: boolean },
): Promise<void> {
  const conn = await connection(flags);
  const { rest } = conn;
  const spec = rolloutSpec({ ...flags, reboot: false }, await call('learn who you are', () => whoami(rest)));
  await createRollout(
    rest,
    name,
    {
      ...spec,
      ...(spec.upgrade && flags.stage ? { upgrade: { ...spec.upgrade, stage: true } } : {}),
      ...(flags.external === true ? {} : flags.drain === false ? { drain: { enabled: false } } : {}),
      nodeSelector: { matchExpressions: [{ key: HOSTNAME_LABEL, operator: 'In', values: [...nodes] }] },
    },
    flags.controllerInstance,
  );
  process.stdout.write(`NodeRollout ${name} created for ${nodes.join(', ')}\n`);
  await followUntilDone(conn, name);
}

/** The label the kubelet sets to the node's host name, which on Talos is the Node's name. */
const HOSTNAME_LABEL = 'kubernetes.io/hostname';

function setPaused(paused: boolean): Command {
  return clusterCommand(paused ? 'pause' : 'resume')
    .description(paused ? 'start no new node (running ones finish)' : 'let a paused rollout go on')
    .argument('<name>', 'the NodeRollout')
    .action(
      handled(async (name: string, flags: ConnectionOptions) => {
        const rest = await client(flags);
        await call(`${paused ? 'pause' : 'resume'} NodeRollout ${name}`, () =>
          rest.request(`${NODE_ROLLOUTS_PATH}/${name}`, {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: { spec: { paused } },
          }),
        );
        process.stdout.write(`NodeRollout ${name} ${paused ? 'paused' : 'resumed'}\n`);
      }),
    );
}

export function rolloutCommand(): Command {
  const rollout = new Command('rollout').description(
    'NodeRollouts: upgrade or reboot a set of nodes, carried out by the controller (docs/rollouts.md)',
  );
  rollout.addCommand(
    clusterCommand('create')
      .description('create a NodeRollout of the nodes matching --selector (default: every node)')
      .argument('<name>', 'name of the NodeRollout (also the prefix of its NodeActions)')
      .option(
        '--image <image>',
        'upgrade to this Talos installer image (nodes already at its version are skipped)',
      )
      .option('--reboot', 'reboot each node once instead')
      .option('--selector <labels>', 'nodes to cover, as key=value[,key=value…]', selector)
      .option('--max-parallel <n>', 'nodes unfinished at once (policies still apply)', wholeNumber(1), 1)
      .option('--max-failures <n>', 'failed nodes tolerated before the rollout halts', wholeNumber(0), 0)
      .option('--group-by <label>', 'finish the nodes of one value of this label before the next')
      .option('--control-plane-first', 'control-plane nodes first (default: last)')
      .option('--paused', 'create it paused')
      .option(
        '--post-check <check>',
        'a ClusterHealthCheck that must be healthy for each node after it returns (repeatable)',
        (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
      )
      .option(
        '--post-check-within <duration>',
        'how long the post-checks may take to be healthy (default 10m)',
      )
      .option('--rollback', 'roll back a node whose post-checks fail (upgrades), and halt the rollout')
      .addOption(
        new Option(
          '--on-drain-timeout <what>',
          'a node that cannot be drained in time: Fail, Quarantine or Skip',
        ).choices(['Fail', 'Quarantine', 'Skip']),
      )
      .option(
        '--max-quarantined <n>',
        'most nodes set aside by --on-drain-timeout Quarantine',
        wholeNumber(0),
      )
      .option('--external', 'External execution: you perform each approved action')
      .option('--skip-checks', 'bypass the health checks (needs the bypass verb and --reason)')
      .option('--skip-hooks', 'bypass the pre-action hooks (needs the bypass verb and --reason)')
      .option('--reason <text>', 'why the checks or hooks are bypassed')
      .option('-w, --watch', 'follow it to the end (exit codes as `rollout status -w`)')
      .action(
        handled(async (name: string, flags: CreateFlags) => {
          const conn = await connection(flags);
          const { rest } = conn;
          const spec = rolloutSpec(flags, await call('learn who you are', () => whoami(rest)));
          await createRollout(rest, name, spec, flags.controllerInstance);
          process.stdout.write(`NodeRollout ${name} created\n`);
          if (flags.watch) await followUntilDone(conn, name);
        }),
      ),
  );
  rollout.addCommand(
    clusterCommand('status')
      .description('show where a rollout is; with -w follow it until it is complete or halted')
      .argument('<name>', 'the NodeRollout')
      .option(
        '-w, --watch',
        'follow it: exit 0 once complete without failures, 1 when halted or complete with failures, 3 if deleted, 130 on Ctrl-C (the rollout goes on)',
      )
      .addOption(outputOption())
      .action(
        handled(async (name: string, flags: ConnectionOptions & { watch?: boolean; output?: Format }) => {
          const conn = await connection(flags);
          const { rest } = conn;
          const style = makeStyle(colourWanted(process.stdout));
          if (flags.watch) {
            await followUntilDone(conn, name);
            return;
          }
          const r = await call(`read NodeRollout ${name}`, () =>
            rest.request<Rollout>(`${NODE_ROLLOUTS_PATH}/${name}`),
          );
          process.stdout.write(
            flags.output && flags.output !== 'text' ? formatDocument(flags.output, r) : statusText(r, style),
          );
        }),
      ),
  );
  rollout.addCommand(setPaused(true));
  rollout.addCommand(setPaused(false));
  rollout.addCommand(
    clusterCommand('list')
      .description('list the NodeRollouts')
      .action(
        handled(async (flags: ConnectionOptions) => {
          const rest = await client(flags);
          const list = await call('list NodeRollouts', () =>
            rest.request<{ items: Rollout[] }>(NODE_ROLLOUTS_PATH),
          );
          process.stdout.write(listText(list.items, new Date()));
        }),
      ),
  );
  return rollout;
}
