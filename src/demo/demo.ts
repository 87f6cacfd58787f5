// `gatehouse demo` (npm run demo): gatehouse on a local sandbox cluster, from nothing,
// in a few minutes — the sandbox's control plane and simulated Talos nodes, gatehouse's
// API and controller, a Rook/Ceph health check from examples/, and the gate at work.
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { attachSandbox, startSandbox, type Sandbox } from '../../sandbox/cluster.ts';
import { defaultNodeSpecs } from '../../sandbox/nodes.ts';
import type { CheckState } from '../checks/state.ts';
import { Controller } from '../controller.ts';
import { serverSideApply, type Manifest } from '../kube/apply.ts';
import { RestClient } from '../kube/rest.ts';
import { silentLogger } from '../log.ts';
import { installGatehouse } from '../manifests/install.ts';
import { formatDuration } from '../wait.ts';
import { installCephCluster, setCephHealth } from './ceph.ts';

export interface DemoOptions {
  /** Where the demo's sandbox lives; reused if it is already up. */
  sandboxDir: string;
  /** Finish (and stop what the demo started) instead of running until Ctrl-C. */
  exit: boolean;
  out?: (line: string) => void;
}

const examples = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples');
const CHECK = 'ceph-health-ok';

async function example(file: string): Promise<Manifest[]> {
  return parseAllDocuments(await readFile(join(examples, file), 'utf8'))
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null);
}

function describeState(state: CheckState | undefined): string {
  if (!state) return 'not known to the controller';
  const word = state.healthy === undefined ? 'Unknown' : state.healthy ? 'Healthy' : 'Unhealthy';
  return `${word} — ${state.message}`;
}

export async function runDemo(options: DemoOptions): Promise<void> {
  const out = options.out ?? ((line: string) => process.stdout.write(`${line}\n`));
  const step = (n: number, title: string) => out(`\n[${String(n)}/5] ${title}`);
  const began = Date.now();

  step(1, 'sandbox: a real Kubernetes control plane with simulated Talos nodes');
  let sandbox: Sandbox | undefined = await attachSandbox(options.sandboxDir);
  const startedHere = !sandbox;
  if (sandbox) out(`  reusing the sandbox at ${sandbox.state.server}`);
  else {
    sandbox = await startSandbox({
      dir: options.sandboxDir,
      nodes: defaultNodeSpecs(4, 1),
      log: (line) => out(`  ${line}`),
    });
  }
  const client = new RestClient(sandbox.kubeConfig());

  let controller: Controller | undefined;
  const shutdown = async () => {
    await controller?.stop();
    if (startedHere) await sandbox.stop();
  };
  try {
    step(2, 'install gatehouse: CRDs, RBAC, admission policy');
    await installGatehouse(client, { withoutDeployment: true, fieldManager: 'gatehouse-demo' });
    out('  applied the install set of `gatehouse manifests` (the controller runs here, not as a Deployment)');

    step(3, 'start the controller');
    controller = await Controller.start({
      kubeConfig: sandbox.kubeConfig(),
      log: silentLogger(),
      host: '127.0.0.1',
      port: 0,
      leaderElection: { leaseDurationMs: 5000, renewDeadlineMs: 4000, retryPeriodMs: 1000 },
    });
    await controller.waitForSync();
    out(
      `  serving ${controller.url} (health: ${controller.url}/v1/health, metrics: ${controller.url}/metrics)`,
    );

    step(4, 'a Rook/Ceph health check (examples/rook-ceph-health.yaml)');
    await installCephCluster(client);
    await serverSideApply(client, await example('rook-ceph-health.yaml'), 'gatehouse-demo');
    const running = controller;
    const fresh = async () => (await running.checks.evaluateNow([CHECK])).get(CHECK);
    const health = async () => {
      const res = await fetch(`${running.url}/v1/health`);
      const body = (await res.json()) as { message: string };
      return `GET /v1/health → ${String(res.status)}: ${body.message}`;
    };
    // The check appears through the controller's watch; a gate then asks for a fresh probe.
    for (let i = 0; i < 50 && !running.checks.view(CHECK); i++) await new Promise((r) => setTimeout(r, 100));
    out(`  ${CHECK}: ${describeState(await fresh())}`);
    out(`  ${await health()}`);

    step(5, 'Ceph degrades, and the gate closes (fresh evaluations, as a gate asks for them)');
    await setCephHealth(client, 'HEALTH_WARN', { code: 'OSD_DOWN', message: '1 osds down' });
    out('  CephCluster rook-ceph reports HEALTH_WARN (OSD_DOWN: 1 osds down)');
    out(`  probe 1: ${describeState(await fresh())}`);
    out(`  probe 2: ${describeState(await fresh())}`);
    out(`  ${await health()}`);
    await setCephHealth(client, 'HEALTH_OK');
    out('  CephCluster rook-ceph reports HEALTH_OK again');
    out(`  probe 3: ${describeState(await fresh())}`);
    out(`  ${await health()}`);

    out(`\ndone in ${formatDuration(Date.now() - began)}. Where to look:`);
    out(`  export KUBECONFIG=${sandbox.kubeconfig}`);
    out('  kubectl get clusterhealthchecks            # or: kubectl get gatehouse');
    out(`  kubectl describe clusterhealthcheck ${CHECK}  # status, conditions, events`);
    out(`  curl -s ${controller.url}/v1/health`);
    out(`  curl -s '${controller.url}/v1/health?action=Reboot&node=worker-1'`);
    if (options.exit) return;
    out('\nthe controller keeps running; Ctrl-C stops it and the sandbox');
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
  } finally {
    await shutdown();
  }
}
