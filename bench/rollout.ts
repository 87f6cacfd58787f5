// The rollout benchmark (issue 28, item 8): a NodeRollout upgrading 1,000 simulated Talos
// nodes (boot delay 2 s) at maxParallel 50, no hooks, one cheap healthy check, against
// the ideal makespan — ceil(nodes ÷ maxParallel) × the per-node floor measured in the same
// run — with the API requests and controller CPU it costs per node; then the same with
// 10 % of the nodes undrainable (a PodDisruptionBudget that allows no eviction) under
// onDrainTimeout: Quarantine.
//
// The floor is a rollout of a few nodes one at a time (maxParallel 1) in the same sandbox,
// beside the idle nodes of the big one: its makespan ÷ its nodes. That is what a node
// costs when nothing else competes — its action from cordon to uncordon, and the
// rollout's own start and hand-over to the next node — so the ideal is what perfect
// parallelism would give. (The median action duration of the big rollout would not do:
// it leaves out the hand-over between nodes, and is inflated by the very load whose
// cost the ratio is meant to show. It is printed beside the floor's own as a diagnosis.)
//
// Requests: the controller runs under its ServiceAccount, which a FlowSchema of the
// benchmark's own matches alone, so the API server's dispatched count for that schema
// is the controller's; the breakdown by verb and resource is apiserver_request_total of
// every client (the Talos simulator and kwok write nodes too; the talos.dev lines are the
// controller's). CPU: the controller's process, from /proc/<pid>/stat. Both are taken
// less what the controller costs idle (measured before the first rollout), per node, and
// set against the serial rollout's per-node figures.
import { availableParallelism, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import { ROLLOUT_LABEL } from '../src/api/names.ts';
import { RestClient } from '../src/kube/rest.ts';
import { sleep, waitFor } from '../src/wait.ts';
import { installGatehouseAPI } from '../test/support/install.ts';
import { lessBackground, perMs, served, serverCounters } from './api-requests.ts';
import type { ServerCounters } from './api-requests.ts';
import {
  API,
  CHECK,
  GROUP_LABEL,
  TARGET_IMAGE,
  requestLatencies,
  controllerRequests,
  startInProcessController,
  createGroup,
  deleteGroup,
  makeUndrainable,
  setUp,
  startController,
  sandboxCpuMs,
  type ControllerProcess,
} from './rollout-cluster.ts';
import { floorFromSerialMs, idealMakespanMs, perNodeBeyondIdle, ratio, times } from './rollout-figures.ts';
import {
  costRows,
  medianActionMs,
  phaseRow,
  timingRows,
  type Action,
  type Rollout,
  type RunFigures,
} from './rollout-report.ts';
import { ms, report } from './stats.ts';
import { record } from './summary.ts';

export interface RolloutBenchOptions {
  nodes: number;
  maxParallel: number;
  /** Nodes of the serial rollout that gives the per-node floor. */
  floorNodes: number;
  /** Share of the nodes undrainable in the Quarantine variant, in percent. */
  undrainablePercent: number;
  /** drain.timeout of the Quarantine variant's rollout. */
  drainTimeout: string;
  /** How long the idle controller is measured before the first rollout. */
  idleMs: number;
}

const GOAL = 1.15;
const POLL_MS = 1000;
const QUEUE_SAMPLE_MS = 200;
/** No node changing phase for this long is a stall, not a slow rollout. */
const STALL_MS = Number(process.env.BENCH_ROLLOUT_STALL_MS ?? 120_000);
const log = (line: string) => process.stderr.write(`rollout bench: ${line}\n`);

interface Idle {
  requestsPerMs: number;
  cpuPerMs: number;
  server: ServerCounters;
}

interface Context {
  sandbox: Sandbox;
  api: RestClient;
  controller: ControllerProcess;
  me: string;
  idle: Idle;
}

const isTrue = (r: Rollout, type: string) =>
  r.status?.conditions?.some((c) => c.type === type && c.status === 'True') === true;

/** A rollout of the group's nodes, from its creation to Complete, and what it cost. */
async function runRollout(
  ctx: Context,
  group: string,
  nodes: number,
  spec: Record<string, unknown>,
): Promise<RunFigures> {
  const { api, controller, idle } = ctx;
  const name = `bench-${group}`;
  const before = await serverCounters(api);
  const latency0 = await requestLatencies(api);
  const requests0 = await controllerRequests(api);
  const cpu0 = await controller.cpuMs();
  const sandboxCpu0 = await sandboxCpuMs(ctx.sandbox);
  const queued = { actions: [] as number[], rollouts: [] as number[] };
  const sampler = setInterval(() => {
    const q = controller.queues?.();
    if (!q) return;
    queued.actions.push(q.actions);
    queued.rollouts.push(q.rollouts);
  }, QUEUE_SAMPLE_MS);
  const t0 = performance.now();
  const created = Date.now();
  await api.request(`${API}/noderollouts`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NodeRollout',
      metadata: { name },
      spec: {
        action: 'Upgrade',
        upgrade: { image: TARGET_IMAGE },
        nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
        requestedBy: ctx.me,
        ...spec,
      },
    },
  });
  const { rollout, polls } = await untilComplete(api, name, controller.gone)
    .catch((error: unknown) => {
      if (error instanceof DidNotComplete) error.created = created;
      throw error;
    })
    .finally(() => clearInterval(sampler));
  const windowMs = performance.now() - t0;
  const cpu = (await controller.cpuMs()) - cpu0;
  const sandboxCpu = new Map(
    [...(await sandboxCpuMs(ctx.sandbox))].map(([k, v]) => [k, v - (sandboxCpu0.get(k) ?? 0)]),
  );
  const requests = (await controllerRequests(api)) - requests0;
  // Two readings of /metrics for the FlowSchema count besides serverCounters' own.
  const counts = served(before, await serverCounters(api), 4);
  const latency = new Map(
    [...(await requestLatencies(api))].map(([k, v]) => {
      const b = latency0.get(k) ?? { seconds: 0, count: 0 };
      return [k, { seconds: v.seconds - b.seconds, count: v.count - b.count }];
    }),
  );
  const polled = `GET noderollouts.talos.dev`;
  counts.requests.set(polled, Math.max(0, (counts.requests.get(polled) ?? 0) - polls));
  const end = Date.parse(rollout.status?.completionTime ?? '');
  const list = await api.request<{ items: Action[] }>(`${API}/nodeactions`, {
    query: { labelSelector: `${ROLLOUT_LABEL}=${name}` },
  });
  return {
    nodes,
    created,
    makespanMs: Number.isNaN(end) ? windowMs : end - created,
    windowMs,
    rollout,
    actions: list.items,
    requestsPerNode: perNodeBeyondIdle(requests, windowMs, idle.requestsPerMs, nodes),
    cpuMsPerNode: perNodeBeyondIdle(cpu, windowMs, idle.cpuPerMs, nodes),
    server: lessBackground(counts, idle.server, windowMs),
    latency,
    queued,
    cpuMs: cpu,
    sandboxCpu,
  };
}

/**
 * Reads the rollout every POLL_MS until it is Complete; throws DidNotComplete when it
 * halts or no node of it changes phase for STALL_MS (waitFor would retry those).
 */
async function untilComplete(
  api: RestClient,
  name: string,
  gone: AbortSignal,
): Promise<{ rollout: Rollout; polls: number }> {
  let polls = 0;
  let progress = '';
  let progressAt = Date.now();
  for (;;) {
    polls++;
    const r = await api.request<Rollout>(`${API}/noderollouts/${name}`);
    if (isTrue(r, 'Complete')) return { rollout: r, polls };
    if (isTrue(r, 'Halted')) throw new DidNotComplete(`rollout ${name} halted: ${r.status?.message ?? '?'}`);
    const now = JSON.stringify(r.status?.nodes?.map((n) => [n.phase, n.actionPhase]) ?? []);
    if (now !== progress) [progress, progressAt] = [now, Date.now()];
    else if (Date.now() - progressAt > STALL_MS)
      throw new DidNotComplete(`rollout ${name} ${await stalled(api, r)}`);
    await sleep(POLL_MS, gone);
  }
}

/** A rollout that halted, or stopped moving: the figures are not a makespan. */
class DidNotComplete extends Error {
  /** When the rollout was created (epoch ms), for what can still be said of its nodes. */
  created = Number.NaN;
}

/** Nothing moved for STALL_MS: the nodes not done, and what each waits for. */
async function stalled(api: RestClient, r: Rollout): Promise<string> {
  const open = (r.status?.nodes ?? []).filter((n) => n.phase === 'Running' || n.phase === 'Pending');
  const shown = await Promise.all(
    open.slice(0, 3).map(async (n) => {
      // What the API server holds of the node, beside what the controller saw: a boot the
      // simulator made that the Node does not show was undone by another writer.
      const node = await api
        .request<{ status?: { nodeInfo?: { bootID?: string; osImage?: string } } }>(`/api/v1/nodes/${n.node}`)
        .catch(() => undefined);
      const info = node?.status?.nodeInfo;
      return `${n.node} (${n.actionPhase ?? n.phase}): ${n.message ?? ''} [the Node now: boot ID ${info?.bootID ?? '?'}, ${info?.osImage ?? '?'}]`;
    }),
  );
  return `made no progress for ${ms(STALL_MS)} with ${String(open.length)} node(s) not done: ${shown.join('; ')}`;
}

async function measureIdle(api: RestClient, controller: ControllerProcess, idleMs: number): Promise<Idle> {
  const before = await serverCounters(api);
  const requests0 = await controllerRequests(api);
  const cpu0 = await controller.cpuMs();
  const t0 = performance.now();
  await sleep(idleMs);
  const cpu = (await controller.cpuMs()) - cpu0;
  const requests = (await controllerRequests(api)) - requests0;
  const wall = performance.now() - t0;
  return {
    requestsPerMs: requests / wall,
    cpuPerMs: cpu / wall,
    server: perMs(served(before, await serverCounters(api), 3), wall),
  };
}

/** Whether the API server's NodeRollout has onDrainTimeout (the Quarantine variant needs it). */
async function quarantineSupported(api: RestClient): Promise<boolean> {
  const crd = await api.request<{
    spec: {
      versions: {
        schema?: { openAPIV3Schema?: { properties?: { spec?: { properties?: Record<string, unknown> } } } };
      }[];
    };
  }>('/apis/apiextensions.k8s.io/v1/customresourcedefinitions/noderollouts.talos.dev');
  return crd.spec.versions.some(
    (v) => v.schema?.openAPIV3Schema?.properties?.spec?.properties?.onDrainTimeout !== undefined,
  );
}

/** When the last node that could be drained was done, after the rollout's creation; and how many were. */
function drainableDone(
  actions: readonly Action[],
  undrainable: readonly string[],
  created: number,
): { ms: number; nodes: number } {
  const blocked = new Set(undrainable);
  const ends = actions
    .filter((a) => !blocked.has(a.spec.nodeName) && a.status?.phase === 'Succeeded')
    .map((a) => Date.parse(a.status?.completionTime ?? ''));
  return { ms: Math.max(...ends) - created, nodes: ends.length };
}

async function quarantineVariant(
  sandbox: Sandbox,
  ctx: Context,
  options: RolloutBenchOptions,
  floor: RunFigures,
  floorMs: number,
): Promise<void> {
  const { api } = ctx;
  const heading = `… with ${String(options.undrainablePercent)} % of the nodes undrainable (a PodDisruptionBudget allows no eviction), onDrainTimeout: Quarantine, drain.timeout ${options.drainTimeout}`;
  if (!(await quarantineSupported(api))) {
    report(heading, [['skipped', 'the NodeRollout API has no spec.onDrainTimeout yet']]);
    return;
  }
  const names = await createGroup(sandbox, api, 'quarantine', options.nodes, 8);
  // Every tenth node (for 10 %): spread through the order, as undrainable nodes would be.
  const every = Math.max(1, Math.round(100 / options.undrainablePercent));
  const undrainable = names.filter((_, i) => i % every === every - 1);
  await makeUndrainable(api, undrainable);
  await sleep(5000);
  let run: RunFigures;
  try {
    run = await runRollout(ctx, 'quarantine', options.nodes, {
      maxParallel: options.maxParallel,
      onDrainTimeout: 'Quarantine',
      maxQuarantined: undrainable.length,
      drain: { timeout: options.drainTimeout },
    });
  } catch (error) {
    if (!(error instanceof DidNotComplete)) throw error;
    // The drainable nodes may all be done even so: their figure still stands.
    const list = await api.request<{ items: Action[] }>(`${API}/nodeactions`, {
      query: { labelSelector: `${ROLLOUT_LABEL}=bench-quarantine` },
    });
    const done = drainableDone(list.items, undrainable, error.created);
    const ideal = idealMakespanMs(options.nodes - undrainable.length, options.maxParallel, floorMs);
    const figure = `${ms(done.ms)} for ${String(done.nodes)} (${times(done.ms, ideal)} the ideal of ${String(options.nodes - undrainable.length)}, ${ms(ideal)})`;
    report(heading, [
      ['did not complete', error.message],
      ['drainable nodes done after', figure],
    ]);
    record(
      'rollout, 10 % undrainable under Quarantine',
      `did not complete; drainable nodes done after ${times(done.ms, ideal)} their ideal`,
    );
    return;
  }
  const drainableMs = drainableDone(run.actions, undrainable, run.created).ms;
  const ideal = idealMakespanMs(options.nodes, options.maxParallel, floorMs);
  const drainableIdeal = idealMakespanMs(options.nodes - undrainable.length, options.maxParallel, floorMs);
  const quarantined = run.rollout.status?.counts?.quarantined ?? 0;
  const counts = run.rollout.status?.counts;
  report(heading, [
    [
      'makespan (created → Complete)',
      `${ms(run.makespanMs)} (${times(run.makespanMs, ideal)} the ideal of all ${String(options.nodes)}, ${ms(ideal)})`,
    ],
    [
      `drainable ${String(options.nodes - undrainable.length)} done after`,
      `${ms(drainableMs)} (${times(drainableMs, drainableIdeal)} their ideal ${ms(drainableIdeal)})`,
    ],
    ['quarantined at the end', `${String(quarantined)} of ${String(undrainable.length)} undrainable`],
    ['counts', JSON.stringify(counts ?? {})],
    ...costRows(run, floor),
  ]);
  record(
    `rollout of ${String(options.nodes)}, ${String(options.undrainablePercent)} % undrainable under Quarantine: drainable nodes' makespan against their ideal`,
    `${times(drainableMs, drainableIdeal)} (all: ${times(run.makespanMs, ideal)}; ${String(quarantined)} quarantined)`,
  );
}

async function bigVariant(
  ctx: Context,
  options: RolloutBenchOptions,
  floor: RunFigures,
  floorMs: number,
): Promise<void> {
  const heading = `rollout: ${String(options.nodes)} simulated Talos nodes upgraded at maxParallel ${String(options.maxParallel)} (boot delay 2 s, no hooks, one check), the controller in a process of its own`;
  const load0 = loadavg()[0] ?? 0;
  let big: RunFigures;
  try {
    big = await runRollout(ctx, 'big', options.nodes, { maxParallel: options.maxParallel });
  } catch (error) {
    if (!(error instanceof DidNotComplete)) throw error;
    // What the nodes that were done say still stands: their last completion against their ideal.
    const list = await ctx.api.request<{ items: Action[] }>(`${API}/nodeactions`, {
      query: { labelSelector: `${ROLLOUT_LABEL}=bench-big` },
    });
    const done = drainableDone(list.items, [], error.created);
    const ideal = idealMakespanMs(done.nodes, options.maxParallel, floorMs);
    report(heading, [
      ['did not complete', error.message],
      [
        `the ${String(done.nodes)} nodes done, the last after`,
        `${ms(done.ms)} (${times(done.ms, ideal)} their ideal ${ms(ideal)}, floor ${ms(floorMs)})`,
      ],
      [
        'per-node action, median: alone / here',
        `${ms(medianActionMs(floor.actions))} / ${ms(medianActionMs(list.items))}`,
      ],
      ['time in each phase, median: alone → here', phaseRow(floor.actions, list.items)],
    ]);
    record(
      `rollout of ${String(options.nodes)} nodes at maxParallel ${String(options.maxParallel)}`,
      `did not complete; the ${String(done.nodes)} done after ${times(done.ms, ideal)} their ideal`,
      `≤ ${GOAL.toFixed(2)}×`,
    );
    return;
  }
  const load = `${load0.toFixed(1)} at the start, ${(loadavg()[0] ?? 0).toFixed(1)} at the end (${String(availableParallelism())} cores)`;
  const ideal = idealMakespanMs(options.nodes, options.maxParallel, floorMs);
  const makespanRatio = ratio(big.makespanMs, ideal);
  report(heading, [
    [
      `per-node floor (serial rollout of ${String(options.floorNodes)} ÷ ${String(options.floorNodes)})`,
      `${ms(floorMs)} (its makespan ${ms(floor.makespanMs)})`,
    ],
    [`ideal makespan: ceil(${String(options.nodes)} ÷ ${String(options.maxParallel)}) × floor`, ms(ideal)],
    ['makespan (created → Complete)', ms(big.makespanMs)],
    ['makespan ÷ ideal', `${makespanRatio.toFixed(2)}× (goal ≤ ${GOAL.toFixed(2)}×)`],
    ...timingRows(big, floor, floorMs, options.maxParallel),
    ...costRows(big, floor),
    [
      'controller idle (subtracted above)',
      `${(ctx.idle.requestsPerMs * 1000).toFixed(1)} requests/s, ${(ctx.idle.cpuPerMs * 1000).toFixed(0)} ms CPU/s`,
    ],
    ['load average (1 min)', load],
  ]);
  record(
    `rollout of ${String(options.nodes)} nodes at maxParallel ${String(options.maxParallel)}: makespan against ideal`,
    `${makespanRatio.toFixed(2)}×`,
    `≤ ${GOAL.toFixed(2)}×`,
  );
  record(
    `rollout of ${String(options.nodes)} nodes: controller requests / CPU per node, against the serial rollout's`,
    `${big.requestsPerNode.toFixed(1)} (${times(big.requestsPerNode, floor.requestsPerNode)}) / ${ms(big.cpuMsPerNode)} (${times(big.cpuMsPerNode, floor.cpuMsPerNode)})`,
  );
}

export async function rolloutBench(sandbox: Sandbox, options: RolloutBenchOptions): Promise<void> {
  const kc = sandbox.kubeConfig();
  const api = new RestClient(kc);
  await installGatehouseAPI(kc);
  await setUp(api, options.maxParallel);
  const me = (
    await api.request<{ status: { userInfo: { username: string } } }>(
      '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      { method: 'POST', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
    )
  ).status.userInfo.username;
  log(`creating ${String(options.floorNodes + options.nodes)} nodes`);
  await createGroup(sandbox, api, 'floor', options.floorNodes, 6);
  await createGroup(sandbox, api, 'big', options.nodes, 7);
  const inProcess = process.env.BENCH_ROLLOUT_IN_PROCESS === '1';
  const controller = await (inProcess ? startInProcessController : startController)(sandbox);
  try {
    await waitFor(
      `check ${CHECK} to be healthy`,
      async () =>
        (await api.request<{ status?: { healthy?: boolean } }>(`${API}/clusterhealthchecks/${CHECK}`)).status
          ?.healthy === true
          ? true
          : undefined,
      { timeoutMs: 120_000, intervalMs: 500, signal: controller.gone },
    );
    // The controller's caches filled and its first probes made: the idle cost is steady.
    await sleep(5000);
    const idle = await measureIdle(api, controller, options.idleMs);
    const ctx: Context = { sandbox, api, controller, me, idle };
    log(`serial rollout of ${String(options.floorNodes)} nodes (the floor)`);
    const floor = await runRollout(ctx, 'floor', options.floorNodes, { maxParallel: 1 });
    const floorMs = floorFromSerialMs(floor.makespanMs, options.floorNodes);
    log(`rollout of ${String(options.nodes)} nodes at maxParallel ${String(options.maxParallel)}`);
    await bigVariant(ctx, options, floor, floorMs);
    // The next variant's nodes replace these: kwok and the caches carry as many as before.
    await deleteGroup(api, 'big');
    await deleteGroup(api, 'floor');
    // BENCH_ROLLOUT_QUARANTINE=0 leaves the Quarantine variant out (a diagnosis of the first).
    if (process.env.BENCH_ROLLOUT_QUARANTINE !== '0')
      await quarantineVariant(sandbox, ctx, options, floor, floorMs);
  } finally {
    await controller.stop();
  }
}
