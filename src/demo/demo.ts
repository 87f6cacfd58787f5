// `gatehouse demo` (npm run demo): gatehouse on a local sandbox cluster, from nothing,
// in a few minutes — the sandbox's control plane and simulated Talos nodes, gatehouse's
// API and controller with its Talos executor, the Rook/Ceph recipe from examples/
// (health check, noout hooks) with a Ceph stand-in that degrades while a node is down,
// and a rolling Talos upgrade as a NodeRollout the CLI follows, the gate waiting Ceph out
// between nodes, its controller restarted mid-roll.
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { attachSandbox, startSandbox, type Sandbox } from '../../sandbox/cluster.ts';
import { defaultNodeSpecs, TALOS_VERSION } from '../../sandbox/nodes.ts';
import { ROLLOUT_LABEL } from '../api/names.ts';
import type { ObservedNodeRollout } from '../api/node-rollout.ts';
import { NODE_ACTIONS_PATH, NODE_ROLLOUTS_PATH } from '../api/paths.ts';
import { Controller, type ControllerOptions } from '../controller.ts';
import { serverSideApply, type Manifest } from '../kube/apply.ts';
import { RestClient } from '../kube/rest.ts';
import { silentLogger } from '../log.ts';
import { installGatehouse } from '../manifests/install.ts';
import { loadTalosConfig } from '../talos/config.ts';
import { ETCD_CHECK_NAME } from '../talos/etcd-health.ts';
import { waitFor } from '../wait.ts';
import { formatDuration } from '../duration.ts';
import { CEPH_NAMESPACE, CephStandIn, installCephCluster } from './ceph.ts';
import { API_VERSION } from '../api/common.ts';

export interface DemoOptions {
  /** Where the demo's sandbox lives; reused if it is already up. */
  sandboxDir: string;
  /** Finish (and stop what the demo started) instead of running until Ctrl-C. */
  exit: boolean;
  out?: (line: string) => void;
}

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const examples = join(root, 'examples');
const CHECK = 'ceph-health-ok';
const WORKERS = ['worker-1', 'worker-2', 'worker-3'];
const ROLLOUT = 'demo-upgrade';
/** The release the demo upgrades the simulated nodes to: the sandbox's next patch. */
const TARGET_VERSION = TALOS_VERSION.replace(/\d+$/, (patch) => String(Number(patch) + 1));
const TARGET_IMAGE = `ghcr.io/siderolabs/installer:${TARGET_VERSION}`;
/** How long the simulated nodes stay down in a reboot, and Ceph takes to recover after. */
const BOOT_DELAY = '6s';
const RECOVERY_MS = 10_000;
/** The shipped check probes every 30s; the demo probes more often so that it moves along. */
const DEMO_INTERVAL = '5s';

type Document = Manifest & { spec?: Record<string, unknown> };

async function example(file: string): Promise<Document[]> {
  return parseAllDocuments(await readFile(join(examples, file), 'utf8'))
    .map((d) => d.toJS() as Document | null)
    .filter((m): m is Document => m !== null);
}

/** The Rook/Ceph recipe as the demo applies it: examples/ as shipped, with the changes said. */
async function rookRecipe(): Promise<Document[]> {
  const check = await example('rook-ceph-health.yaml');
  for (const m of check)
    if (m.kind === 'ClusterHealthCheck') (m.spec as Record<string, unknown>).interval = DEMO_INTERVAL;
  const hooks = await example('ceph-noout.yaml');
  // An upgrade reboots the node too: the same noout Job, as a PreUpgradeJob.
  const preReboot = hooks.find((m) => m.kind === 'PreRebootJob');
  if (!preReboot) throw new Error('examples/ceph-noout.yaml has no PreRebootJob');
  const preUpgrade = structuredClone(preReboot);
  preUpgrade.kind = 'PreUpgradeJob';
  const policy: Document = {
    apiVersion: API_VERSION,
    kind: 'ActionPolicy',
    metadata: { name: 'workers-one-at-a-time' },
    spec: {
      nodeSelector: {
        matchExpressions: [{ key: 'node-role.kubernetes.io/control-plane', operator: 'DoesNotExist' }],
      },
      maxConcurrent: 1,
    },
  };
  return [...check, ...hooks, preUpgrade, policy];
}

interface NodeFacts {
  metadata: { name: string };
  status?: { nodeInfo?: { osImage?: string; bootID?: string } };
}

async function nodeFacts(client: RestClient): Promise<Map<string, { osImage: string; bootID: string }>> {
  const list = await client.request<{ items: NodeFacts[] }>('/api/v1/nodes');
  return new Map(
    list.items.map((n) => [
      n.metadata.name,
      { osImage: n.status?.nodeInfo?.osImage ?? '?', bootID: n.status?.nodeInfo?.bootID ?? '?' },
    ]),
  );
}

/** Runs the gatehouse CLI as a person would, its output (live on a terminal) straight to ours. */
function runCli(args: readonly string[], signal: AbortSignal): Promise<number> {
  const child = spawn(process.execPath, [join(root, 'src', 'cli', 'main.ts'), ...args], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const interrupt = () => child.kill('SIGINT');
  signal.addEventListener('abort', interrupt, { once: true });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code, killedBy) => {
      signal.removeEventListener('abort', interrupt);
      resolve(code ?? (killedBy === 'SIGINT' ? 130 : 1));
    });
  });
}

/**
 * Once the rollout's first node is done, stops the controller and starts a new one (as a
 * crash and a restart, or a new leader, would), and says so; resolves with the new one.
 */
async function restartMidRoll(
  client: RestClient,
  controller: Controller,
  options: ControllerOptions,
  signal: AbortSignal,
  out: (line: string) => void,
): Promise<Controller> {
  const done = await waitFor(
    `NodeRollout ${ROLLOUT} to finish its first node`,
    async () => {
      if (signal.aborted) return '';
      const r = await client
        .request<ObservedNodeRollout>(`${NODE_ROLLOUTS_PATH}/${ROLLOUT}`)
        .catch(() => undefined);
      const first = r?.status?.nodes?.find((n) => n.phase === 'Succeeded');
      return first?.node;
    },
    { timeoutMs: 300_000, intervalMs: 500 },
  );
  if (signal.aborted) return controller;
  out(`\n  >>> ${done} is done: the demo stops the controller mid-roll…`);
  await controller.stop();
  const restarted = await Controller.start(options);
  await restarted.waitForSync();
  out(`  >>> …and starts a new one (${restarted.url}); the rollout goes on where it was\n`);
  return restarted;
}

/** Step 4, once the stand-in runs: the Rook recipe, and what /v1/health says of it. */
async function describeCeph(
  client: RestClient,
  running: Controller,
  out: (line: string) => void,
): Promise<void> {
  out(`  CephCluster ${CEPH_NAMESPACE}/rook-ceph: one OSD on each of ${WORKERS.join(', ')}; a stand-in for`);
  out(
    `  Rook reports HEALTH_WARN while an OSD's node is down, and for ${formatDuration(RECOVERY_MS)} of recovery after`,
  );
  await serverSideApply(client, await rookRecipe(), 'gatehouse-demo');
  out(
    `  ClusterHealthCheck ${CHECK}       examples/rook-ceph-health.yaml (probing every ${DEMO_INTERVAL} here)`,
  );
  out('  PreUpgradeJob ceph-set-noout      examples/ceph-noout.yaml, the PreRebootJob as a PreUpgradeJob');
  out('  NodeReadyJob ceph-unset-noout     examples/ceph-noout.yaml');
  out('  ActionPolicy workers-one-at-a-time  maxConcurrent: 1 for nodes that are not control plane');
  await waitFor(`${CHECK} to be probed healthy`, () =>
    running.checks.view(CHECK)?.state.healthy === true ? true : undefined,
  );
  const health = await fetch(`${running.url}/v1/health`);
  out(
    `  GET /v1/health → ${String(health.status)}: ${((await health.json()) as { message: string }).message}`,
  );
  // What a control-plane reboot would be judged on: the checks that gate it, and etcd.
  const cp = await fetch(`${running.url}/v1/health?action=Reboot&node=cp-1`);
  const etcd = ((await cp.json()) as { checks: { name: string; message: string }[] }).checks.find(
    (c) => c.name === ETCD_CHECK_NAME,
  );
  out(
    `  GET /v1/health?action=Reboot&node=cp-1 → ${String(cp.status)}: ${etcd ? `${ETCD_CHECK_NAME}: ${etcd.message}` : 'etcd not judged'}`,
  );
}

/** Step 5: the rolling upgrade as a NodeRollout, followed by the CLI, the controller restarted mid-roll. */
async function rollingUpgrade(
  sandbox: Sandbox,
  client: RestClient,
  running: { controller: Controller },
  controllerOptions: ControllerOptions,
  interrupted: AbortSignal,
  out: (line: string) => void,
): Promise<number> {
  const args = [
    'upgrade',
    '--kubeconfig',
    sandbox.kubeconfig,
    '--image',
    TARGET_IMAGE,
    '--rollout',
    ROLLOUT,
    '--concurrency',
    String(WORKERS.length),
    ...WORKERS,
  ];
  out(`  $ gatehouse ${args.join(' ')}`);
  out('  (a NodeRollout: the controller carries it out, the CLI only follows it. All three at');
  out('  once as far as the rollout goes: the policy lets one through at a time, and Ceph must');
  out('  be HEALTH_OK again before the next; the CLI shows what each action waits for. Once the');
  out('  first node is done, the demo restarts the controller: the rollout goes on from its status)\n');
  // The restart waits for the first node; it gives up when the CLI ends first (a failure).
  const rolled = new AbortController();
  const cli = runCli(args, interrupted).finally(() => rolled.abort());
  const watching = AbortSignal.any([interrupted, rolled.signal]);
  const restart = restartMidRoll(client, running.controller, controllerOptions, watching, out).then(
    (restarted) => (running.controller = restarted),
  );
  const code = await cli;
  await restart;
  if (interrupted.aborted) return code;
  out(`\n  the CLI exited ${String(code)}${code === 0 ? ': every node upgraded' : ''}`);
  const actions = await client.request<{ items: { spec: { nodeName: string } }[] }>(
    `${NODE_ACTIONS_PATH}?labelSelector=${encodeURIComponent(`${ROLLOUT_LABEL}=${ROLLOUT}`)}`,
  );
  const perNode = actions.items.map((a) => a.spec.nodeName).sort();
  out(
    `  NodeRollout ${ROLLOUT} made ${String(perNode.length)} NodeActions, one per node (${perNode.join(', ')}), across the controller restart`,
  );
  return code;
}

/** The end of the demo: how long it took, and the commands to look around with. */
function whereToLook(
  sandbox: Sandbox,
  controller: Controller,
  talosconfig: string,
  began: number,
  out: (line: string) => void,
): void {
  out(`\ndone in ${formatDuration(Date.now() - began)}. Where to look:`);
  out(`  dashboard: ${controller.url}/`);
  out(`  export KUBECONFIG=${sandbox.kubeconfig}`);
  out(`  export TALOSCONFIG=${talosconfig}`);
  // Commands with their comments aligned after the longest.
  const commands: [string, string][] = [
    ['kubectl get gatehouse', 'checks, hooks, policies, actions'],
    [`kubectl get noderollout ${ROLLOUT}`, 'the rollout: counts, conditions'],
    ['kubectl get nodeactions -o wide', 'its three NodeActions'],
    [`kubectl describe clusterhealthcheck ${CHECK}`, 'status, conditions, events'],
  ];
  const width = Math.max(...commands.map(([c]) => c.length));
  for (const [command, comment] of commands) out(`  ${command.padEnd(width)}  # ${comment}`);
  out(`  npm run gatehouse -- reboot --kubeconfig ${sandbox.kubeconfig} worker-2   # one more, live`);
  out(`  curl -s '${controller.url}/v1/health?action=Reboot&node=worker-1'`);
}

export async function runDemo(options: DemoOptions): Promise<void> {
  const out = options.out ?? ((line: string) => process.stdout.write(`${line}\n`));
  const steps = 6;
  const step = (n: number, title: string) => out(`\n[${String(n)}/${String(steps)}] ${title}`);
  const began = Date.now();
  // Ctrl-C at any point stops what the demo started (the CLI cancels its own actions).
  const interrupted = new AbortController();
  const onSignal = () => interrupted.abort(new Error('interrupted'));
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  step(1, 'sandbox: a real Kubernetes control plane with simulated Talos nodes');
  let sandbox: Sandbox | undefined = await attachSandbox(options.sandboxDir);
  const startedHere = !sandbox;
  if (sandbox) out(`  reusing the sandbox at ${sandbox.state.server}`);
  else {
    sandbox = await startSandbox({
      dir: options.sandboxDir,
      // Three control-plane nodes, one simulated etcd cluster: the etcd guard has members to judge.
      nodes: defaultNodeSpecs(6, 3),
      talosBootDelay: BOOT_DELAY,
      log: (line) => out(`  ${line}`),
    });
  }
  const client = new RestClient(sandbox.kubeConfig());
  const talosconfig = sandbox.state.talosconfig;

  let controller: Controller | undefined;
  let ceph: CephStandIn | undefined;
  try {
    if (!talosconfig) throw new Error(`the sandbox at ${options.sandboxDir} runs no Talos simulator`);

    step(2, 'install gatehouse: CRDs, RBAC, admission policy');
    await installGatehouse(client, { withoutDeployment: true, fieldManager: 'gatehouse-demo' });
    out('  applied the install set of `gatehouse manifests` (the controller runs here, not as a Deployment)');

    step(3, 'start the controller, with the Talos executor');
    const controllerOptions: ControllerOptions = {
      kubeConfig: sandbox.kubeConfig(),
      log: silentLogger(),
      host: '127.0.0.1',
      port: 0,
      leaderElection: { leaseDurationMs: 5000, renewDeadlineMs: 4000, retryPeriodMs: 1000 },
      talos: { config: await loadTalosConfig({ path: talosconfig }) },
    };
    controller = await Controller.start(controllerOptions);
    await controller.waitForSync();
    out(`  serving ${controller.url} — dashboard ${controller.url}/, health ${controller.url}/v1/health`);
    out(`  Managed actions go to the Talos API of the simulated nodes (talosconfig ${talosconfig})`);

    step(4, 'Rook/Ceph: a CephCluster, the health check and the noout hooks (examples/)');
    await installCephCluster(client);
    ceph = new CephStandIn({ client, log: silentLogger(), osdNodes: WORKERS, recoveryMs: RECOVERY_MS });
    await ceph.start();
    await describeCeph(client, controller, out);

    step(5, `a rolling upgrade to Talos ${TARGET_VERSION}: a NodeRollout, through the gate`);
    const before = await nodeFacts(client);
    // The controller the demo stops at the end is the one running then (restarted mid-roll).
    const running = { controller };
    const code = await rollingUpgrade(
      sandbox,
      client,
      running,
      controllerOptions,
      interrupted.signal,
      out,
    ).finally(() => (controller = running.controller));
    if (interrupted.signal.aborted) return;

    step(6, 'what happened');
    const after = await nodeFacts(client);
    for (const node of WORKERS) {
      const was = before.get(node);
      const is = after.get(node);
      out(
        `  ${node}: ${was?.osImage ?? '?'} → ${is?.osImage ?? '?'}, boot ${was?.bootID.slice(0, 8) ?? '?'} → ${is?.bootID.slice(0, 8) ?? '?'}`,
      );
    }
    await ceph.recovered(interrupted.signal);
    out('  Ceph, as the stand-in reported it:');
    for (const change of ceph.changes)
      out(`    ${change.at.toTimeString().slice(0, 8)} ${change.health} ${change.detail}`);
    if (code !== 0) throw new Error(`the rolling upgrade did not succeed (the CLI exited ${String(code)})`);

    whereToLook(sandbox, controller, talosconfig, began, out);
    if (options.exit) return;
    out('\nthe controller keeps running; Ctrl-C stops it and the sandbox');
    await new Promise<void>((resolve) => {
      if (interrupted.signal.aborted) resolve();
      else interrupted.signal.addEventListener('abort', () => resolve(), { once: true });
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await ceph?.stop();
    await controller?.stop();
    if (startedHere) await sandbox.stop();
  }
}
