// A Node-scoped check over 1,000 nodes against the same check Cluster-scoped, run by the
// real controller in the same run: an httpGet + CEL probe of a local target, the
// Node-scoped one with $(NODE_NAME) in its path, evaluated for every node each
// nodeInterval. Reports the controller's CPU for each, and their
// ratio (the baseline is the Cluster-scoped check, measured first), over one and a half
// nodeIntervals each.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import { talosNode } from '../sandbox/nodes.ts';
import { Controller } from '../src/controller.ts';
import { parseDuration } from '../src/duration.ts';
import { RestClient } from '../src/kube/rest.ts';
import { silentLogger } from '../src/log.ts';
import { sleep, waitFor } from '../src/wait.ts';
import { ms, report } from './stats.ts';
import { record } from './summary.ts';

const API = '/apis/talos.dev/v1alpha1';
const LABEL = 'bench.gatehouse.dev/node-checks';

/** A local probe target in a process of its own, so its CPU is not counted as ours. */
async function startTarget(): Promise<{ url: string; stop: () => void }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      "require('http').createServer((q,s)=>{s.setHeader('content-type','application/json');s.end('{\"status\":\"ok\"}')}).listen(0,'127.0.0.1',function(){console.log(this.address().port)})",
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<string>((resolve) =>
    child.stdout.once('data', (d: Buffer) => resolve(d.toString().trim())),
  );
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill() };
}

async function createNodes(sandbox: Sandbox, api: RestClient, count: number): Promise<void> {
  const names = Array.from({ length: count }, (_, i) => `node-check-${String(i).padStart(4, '0')}`);
  for (let i = 0; i < names.length; i += 100) {
    await Promise.all(
      names.slice(i, i + 100).map((name, j) => {
        const node = talosNode(
          {
            name,
            role: 'worker',
            internalIP: `10.98.${String(Math.floor((i + j) / 250))}.${String(((i + j) % 250) + 2)}`,
          },
          sandbox.state.kubernetesVersion,
        );
        // Not simulated by kwok: the point is the controller's work per node.
        node.metadata = { name, labels: { ...node.metadata?.labels, [LABEL]: 'true' } };
        return api.request('/api/v1/nodes', { method: 'POST', body: node });
      }),
    );
  }
}

/** The controller's CPU (ms per second of wall time) while `check` runs for `windowMs`. */
async function measure(
  controller: Controller,
  api: RestClient,
  name: string,
  spec: Record<string, unknown>,
  settled: () => boolean,
  windowMs: number,
): Promise<{ cpuMsPerS: number; wall: number; probes: number }> {
  await api.request(`${API}/clusterhealthchecks`, {
    method: 'POST',
    body: { apiVersion: 'talos.dev/v1alpha1', kind: 'ClusterHealthCheck', metadata: { name }, spec },
  });
  try {
    await waitFor(`${name} to settle`, () => (settled() ? true : undefined), {
      timeoutMs: 300_000,
      intervalMs: 250,
    });
    // Every probe replaces a state and tells the listeners: the count of probes made.
    let probes = 0;
    const stop = controller.checks.onChange((changed) => {
      if (changed === name) probes++;
    });
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await sleep(windowMs);
    const cpu = process.cpuUsage(cpu0);
    const wall = performance.now() - t0;
    stop();
    return { cpuMsPerS: (cpu.user + cpu.system) / 1000 / (wall / 1000), wall, probes };
  } finally {
    await api.request(`${API}/clusterhealthchecks/${name}`, { method: 'DELETE' }).catch(() => undefined);
  }
}

export async function nodeChecksBench(
  sandbox: Sandbox,
  options: { nodes: number; interval: string; nodeInterval: string },
): Promise<void> {
  const kc = sandbox.kubeConfig();
  const api = new RestClient(kc);
  await createNodes(sandbox, api, options.nodes);
  const target = await startTarget();
  const controller = await Controller.start({
    kubeConfig: kc,
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
  });
  // One and a half nodeIntervals: every window holds a whole round of every node (a node is
  // due a nodeInterval after its last probe, on the next tick of the interval).
  const windowMs = parseDuration(options.nodeInterval) * 1.5;
  const common = {
    interval: options.interval,
    timeout: '2s',
    nodeSelector: { matchLabels: { [LABEL]: 'true' } },
  };
  try {
    await controller.waitForSync();
    // The Node cache's first fill and the API server's settling are no part of either figure.
    await sleep(15_000);
    const cluster = await measure(
      controller,
      api,
      'bench-cluster-scoped',
      { ...common, httpGet: { url: `${target.url}/ok-to-stop`, bodyExpression: "body.status == 'ok'" } },
      () => controller.checks.view('bench-cluster-scoped')?.state.healthy === true,
      windowMs,
    );
    const node = await measure(
      controller,
      api,
      'bench-node-scoped',
      {
        ...common,
        scope: 'Node',
        nodeInterval: options.nodeInterval,
        httpGet: { url: `${target.url}/ok-to-stop/$(NODE_NAME)`, bodyExpression: "body.status == 'ok'" },
      },
      () => controller.checks.view('bench-node-scoped')?.nodes?.safe === options.nodes,
      windowMs,
    );
    const ratio = node.cpuMsPerS / cluster.cpuMsPerS;
    report(
      `Node-scoped check over ${String(options.nodes)} nodes (interval ${options.interval}, nodeInterval ${options.nodeInterval}) against the same check Cluster-scoped, each measured over ${ms(windowMs)}`,
      [
        [
          'controller CPU, Cluster-scoped (baseline)',
          `${cluster.cpuMsPerS.toFixed(1)} ms/s (${String(cluster.probes)} probes in the window)`,
        ],
        [
          'controller CPU, Node-scoped',
          `${node.cpuMsPerS.toFixed(1)} ms/s (${String(node.probes)} probe results and summaries in the window)`,
        ],
        ['ratio', `${ratio.toFixed(2)}× the Cluster-scoped check`],
      ],
    );
    record(
      `Node-scoped check over ${String(options.nodes)} nodes: controller CPU against Cluster-scoped`,
      `${ratio.toFixed(2)}×`,
      '≤ 2×',
    );
  } finally {
    await controller.stop();
    target.stop();
  }
}
