// What the rollout benchmark (bench/rollout.ts) sets up in its sandbox: simulated Talos
// nodes in groups, the Pods and PodDisruptionBudget that make some of them undrainable,
// the one health check and the ActionPolicy a rollout runs under, and gatehouse's
// controller as the Deployment runs it — a process of its own, under its ServiceAccount,
// whose requests the API server counts under a FlowSchema of the benchmark's own.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Sandbox } from '../sandbox/cluster.ts';
import { CONTROL_PLANE_LABEL, talosNode } from '../sandbox/nodes.ts';
import { BOOT_DELAY_ANNOTATION } from '../sandbox/talos-faults.ts';
import { Controller } from '../src/controller.ts';
import { silentLogger } from '../src/log.ts';
import { CONTROLLER_NODE_OPTIONS, CONTROLLER_MALLOC_ARENA_MAX } from '../src/manifests/controller.ts';
import { loadTalosConfig } from '../src/talos/config.ts';
import type { RestClient } from '../src/kube/rest.ts';
import { waitFor } from '../src/wait.ts';
import { MAIN, NODE } from '../test/support/cli.ts';
import { controllerKubeConfig } from '../test/support/kube.ts';

export const API = '/apis/talos.dev/v1alpha1';
export const GROUP_LABEL = 'bench.gatehouse.dev/rollout-group';
export const NAMESPACE = 'bench-rollout';
export const CHECK = 'bench-rollout-control-plane';
/** The FlowSchema that holds the controller's ServiceAccount alone: its requests, counted apart. */
const FLOW_SCHEMA = 'bench-gatehouse-controller';
const UNDRAINABLE_LABEL = 'bench.gatehouse.dev/undrainable';
const BOOT_DELAY = '2s';
/** The nodes' Talos version; the rollouts upgrade them to the next patch release. */
export const FROM_VERSION = 'v1.13.0';
export const TARGET_IMAGE = 'ghcr.io/siderolabs/installer:v1.13.1';

interface NodeView {
  metadata: { name: string };
  status?: { conditions?: { type: string; status: string }[] };
}

const ready = (n: NodeView) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

/**
 * `count` simulated Talos worker nodes `${group}-0001`…, labelled with their group, each at
 * an address of its own in 10.<octet>.x.y (the simulator routes calls by it), rebooting in
 * BOOT_DELAY; resolves once every one is Ready.
 */
export async function createGroup(
  sandbox: Sandbox,
  api: RestClient,
  group: string,
  count: number,
  octet: number,
): Promise<string[]> {
  const names = Array.from({ length: count }, (_, i) => `${group}-${String(i + 1).padStart(4, '0')}`);
  for (let i = 0; i < names.length; i += 100) {
    await Promise.all(
      names.slice(i, i + 100).map((name, j) => {
        const k = i + j;
        const node = talosNode(
          {
            name,
            role: 'worker',
            internalIP: `10.${String(octet)}.${String(Math.floor(k / 250))}.${String((k % 250) + 2)}`,
            talosVersion: FROM_VERSION,
          },
          sandbox.state.kubernetesVersion,
        );
        const metadata = node.metadata ?? {};
        metadata.labels = { ...metadata.labels, [GROUP_LABEL]: group };
        metadata.annotations = { ...metadata.annotations, [BOOT_DELAY_ANNOTATION]: BOOT_DELAY };
        node.metadata = metadata;
        return api.request('/api/v1/nodes', { method: 'POST', body: node });
      }),
    );
  }
  await waitFor(
    `the ${String(count)} nodes of ${group} to be Ready`,
    async (observe) => {
      const list = await api.request<{ items: NodeView[] }>('/api/v1/nodes', {
        query: { labelSelector: `${GROUP_LABEL}=${group}` },
      });
      const up = list.items.filter(ready).length;
      observe(`${String(up)} Ready`);
      return up === count ? true : undefined;
    },
    { timeoutMs: 300_000, intervalMs: 1000 },
  );
  return names;
}

export async function deleteGroup(api: RestClient, group: string): Promise<void> {
  await api.request('/api/v1/nodes', {
    method: 'DELETE',
    query: { labelSelector: `${GROUP_LABEL}=${group}` },
  });
}

/**
 * Makes `nodes` undrainable: a Pod on each, all covered by one PodDisruptionBudget whose
 * minAvailable is their number, so that no eviction of any of them is ever allowed (429).
 * Resolves once the budget counts every Pod healthy and allows no disruption.
 */
export async function makeUndrainable(api: RestClient, nodes: readonly string[]): Promise<void> {
  const ns = `/api/v1/namespaces/${NAMESPACE}`;
  await api.request(`/apis/policy/v1/namespaces/${NAMESPACE}/poddisruptionbudgets`, {
    method: 'POST',
    body: {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'undrainable' },
      spec: { minAvailable: nodes.length, selector: { matchLabels: { [UNDRAINABLE_LABEL]: 'true' } } },
    },
  });
  for (let i = 0; i < nodes.length; i += 100)
    await Promise.all(
      nodes.slice(i, i + 100).map((node) =>
        api.request(`${ns}/pods`, {
          method: 'POST',
          body: {
            apiVersion: 'v1',
            kind: 'Pod',
            metadata: { name: `singleton-${node}`, labels: { [UNDRAINABLE_LABEL]: 'true' } },
            spec: { nodeName: node, containers: [{ name: 'app', image: 'registry.k8s.io/pause:3.10' }] },
          },
        }),
      ),
    );
  await waitFor(
    'the PodDisruptionBudget to count every undrainable Pod healthy',
    async (observe) => {
      const pdb = await api.request<{ status?: { currentHealthy?: number; disruptionsAllowed?: number } }>(
        `/apis/policy/v1/namespaces/${NAMESPACE}/poddisruptionbudgets/undrainable`,
      );
      observe(JSON.stringify(pdb.status ?? {}));
      return pdb.status?.currentHealthy === nodes.length && pdb.status.disruptionsAllowed === 0
        ? true
        : undefined;
    },
    { timeoutMs: 180_000, intervalMs: 1000 },
  );
}

/**
 * The namespace, a healthy and cheap ClusterHealthCheck (the sandbox's control-plane
 * node Ready: the rollout's nodes are workers), an ActionPolicy
 * letting `maxConcurrent` of the benchmark's nodes go at once (without one, gatehouse's
 * default is one action at a time), and the FlowSchema that counts the controller apart.
 */
export async function setUp(api: RestClient, maxConcurrent: number): Promise<void> {
  await api.request('/api/v1/namespaces', { method: 'POST', body: { metadata: { name: NAMESPACE } } });
  await api.request(`${API}/clusterhealthchecks`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ClusterHealthCheck',
      metadata: { name: CHECK },
      spec: {
        interval: '10s',
        nodes: { selector: { matchExpressions: [{ key: CONTROL_PLANE_LABEL, operator: 'Exists' }] } },
      },
    },
  });
  await api.request(`${API}/actionpolicies`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ActionPolicy',
      metadata: { name: 'bench-rollout' },
      spec: {
        nodeSelector: { matchExpressions: [{ key: GROUP_LABEL, operator: 'Exists' }] },
        maxConcurrent,
      },
    },
  });
  // Everything else in the sandbox (kwok, the Talos simulator, this process) is
  // system:masters — exempt, counted under the built-in schema of that name with no way to
  // tell them apart; the kube-controller-manager's controllers are kube-system
  // ServiceAccounts. The controller gets the priority level the built-in service-accounts
  // schema would give it, so that it is treated as in a real cluster.
  await api.request('/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas', {
    method: 'POST',
    body: {
      apiVersion: 'flowcontrol.apiserver.k8s.io/v1',
      kind: 'FlowSchema',
      metadata: { name: FLOW_SCHEMA },
      spec: {
        matchingPrecedence: 500,
        priorityLevelConfiguration: { name: 'workload-low' },
        distinguisherMethod: { type: 'ByUser' },
        rules: [
          {
            subjects: [
              {
                kind: 'ServiceAccount',
                serviceAccount: { namespace: 'gatehouse-system', name: 'gatehouse' },
              },
            ],
            resourceRules: [
              { verbs: ['*'], apiGroups: ['*'], resources: ['*'], clusterScope: true, namespaces: ['*'] },
            ],
            nonResourceRules: [{ verbs: ['*'], nonResourceURLs: ['*'] }],
          },
        ],
      },
    },
  });
}

/** The requests the API server has dispatched for the controller so far (its FlowSchema's count). */
export async function controllerRequests(api: RestClient): Promise<number> {
  const text = await api.request<string>('/metrics', { headers: { Accept: 'text/plain' } });
  let sum = 0;
  for (const line of text.split('\n'))
    if (
      line.startsWith('apiserver_flowcontrol_dispatched_requests_total{') &&
      line.includes(`flow_schema="${FLOW_SCHEMA}"`)
    )
      sum += Number(line.slice(line.lastIndexOf('}') + 1).trim());
  return sum;
}

/** CPU time (user + system) a process has used so far, in ms, from /proc/<pid>/stat. */
export async function cpuMsOf(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${String(pid)}/stat`, 'utf8')).split(') ')[1]?.split(' ') ?? [];
  // utime and stime, fields 14 and 15 of stat(5), in clock ticks (100 a second on Linux).
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Each of the sandbox's processes' CPU so far (ms), by name; a process gone counts nothing. */
export async function sandboxCpuMs(sandbox: Sandbox): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const p of sandbox.state.processes)
    out.set(p.name, (out.get(p.name) ?? 0) + (await cpuMsOf(p.pid).catch(() => 0)));
  return out;
}

export interface ControllerProcess {
  pid: number;
  /** CPU time (user + system) the process has used so far, in ms, from /proc/<pid>/stat. */
  cpuMs: () => Promise<number>;
  /** Aborted when the process exits before stop(): nothing it measured after that is true. */
  gone: AbortSignal;
  /** Keys waiting in its work queues now (in-process only). */
  queues?: () => { actions: number; rollouts: number };
  stop: () => Promise<void>;
}

/**
 * gatehouse's controller as the Deployment runs it (its ServiceAccount, NODE_OPTIONS,
 * NODE_ENV), with the sandbox's talosconfig. BENCH_ROLLOUT_CONTROLLER_FLAGS adds node
 * flags, e.g. `--cpu-prof --cpu-prof-dir=/tmp/rollout-prof` to see where its time goes;
 * BENCH_ROLLOUT_LOG=1 shows its log (info).
 */
export async function startController(sandbox: Sandbox): Promise<ControllerProcess> {
  const talosconfig = sandbox.state.talosconfig;
  if (!talosconfig) throw new Error('the sandbox runs no Talos simulator');
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-bench-rollout-'));
  const kubeconfig = join(dir, 'kubeconfig');
  await writeFile(kubeconfig, (await controllerKubeConfig(sandbox.kubeConfig())).exportConfig());
  const child: ChildProcess = spawn(
    NODE,
    [
      ...(process.env.BENCH_ROLLOUT_CONTROLLER_FLAGS ?? '').split(/\s+/).filter(Boolean),
      MAIN,
      'controller',
      '--kubeconfig',
      kubeconfig,
      '--talosconfig',
      talosconfig,
      '--listen-host',
      '127.0.0.1',
      '--port',
      '0',
      '--no-leader-elect',
      '--log-level',
      process.env.BENCH_ROLLOUT_LOG ? 'info' : 'error',
    ],
    {
      stdio: ['ignore', process.env.BENCH_ROLLOUT_LOG ? 'inherit' : 'ignore', 'inherit'],
      env: {
        ...process.env,
        NODE_OPTIONS: process.env.BENCH_CONTROLLER_NODE_OPTIONS ?? CONTROLLER_NODE_OPTIONS,
        MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? CONTROLLER_MALLOC_ARENA_MAX,
        NODE_ENV: 'production',
      },
    },
  );
  const pid = child.pid;
  if (pid === undefined) throw new Error('the controller did not start');
  const started = pid;
  const gone = new AbortController();
  let stopping = false;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      if (!stopping)
        gone.abort(new Error(`the controller exited (${String(code ?? signal)}) before the benchmark ended`));
      resolve();
    }),
  );
  return {
    pid,
    gone: gone.signal,
    cpuMs: () => cpuMsOf(started),
    stop: async () => {
      stopping = true;
      // SIGTERM: a --cpu-prof profile is written on the way out.
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The controller in this process (BENCH_ROLLOUT_IN_PROCESS=1), for a diagnosis: its work
 * queues can be sampled (how many NodeAction and NodeRollout keys wait for a worker). Its
 * CPU is process.cpuUsage(), which counts this benchmark's own polling too.
 */
export async function startInProcessController(sandbox: Sandbox): Promise<ControllerProcess> {
  const talosconfig = sandbox.state.talosconfig;
  if (!talosconfig) throw new Error('the sandbox runs no Talos simulator');
  const controller = await Controller.start({
    kubeConfig: await controllerKubeConfig(sandbox.kubeConfig()),
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
    talos: { config: await loadTalosConfig({ path: talosconfig }) },
  });
  await controller.waitForSync();
  return {
    pid: process.pid,
    gone: new AbortController().signal,
    cpuMs: () => {
      const cpu = process.cpuUsage();
      return Promise.resolve((cpu.user + cpu.system) / 1000);
    },
    queues: () => ({
      actions: controller.actions?.queue.length ?? 0,
      rollouts: controller.rollouts?.queue.length ?? 0,
    }),
    stop: () => controller.stop(),
  };
}

export interface Latency {
  seconds: number;
  count: number;
}

/** The API server's request durations so far, summed, by "VERB resource[/subresource]". */
export async function requestLatencies(api: RestClient): Promise<Map<string, Latency>> {
  const text = await api.request<string>('/metrics', { headers: { Accept: 'text/plain' } });
  const out = new Map<string, Latency>();
  for (const line of text.split('\n')) {
    const sum = line.startsWith('apiserver_request_duration_seconds_sum{');
    if (!sum && !line.startsWith('apiserver_request_duration_seconds_count{')) continue;
    const label = (name: string) => new RegExp(`[{,]${name}="([^"]*)"`).exec(line)?.[1] ?? '';
    const resource = label('resource');
    if (!resource) continue;
    const sub = label('subresource');
    const key = `${label('verb')} ${resource}${sub ? `/${sub}` : ''}`;
    const entry = out.get(key) ?? { seconds: 0, count: 0 };
    const value = Number(line.slice(line.lastIndexOf('}') + 1).trim());
    if (sum) entry.seconds += value;
    else entry.count += value;
    out.set(key, entry);
  }
  return out;
}
