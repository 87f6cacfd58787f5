// The gate's costs, each against the floor measured in the same run:
//  - gate latency: a NodeAction created → Approved, with 10 healthy checks gating it
//    (`gate-node`: one of the ten a Node-scoped resource check, evaluated for the action's node)
//    and no hooks, beside the raw watch round trip (create → watch event);
//  - per-hook overhead: a hook Job seen Complete → the action seen in its next phase;
//  - API requests per completed action, from the API server's own request counters.
// (Scale, the controller's memory and sync time at 5,000 nodes, is in scale.ts.)
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import { Controller } from '../src/controller.ts';
import { UNFINISHED_FIELD_SELECTOR } from '../src/api/phases.ts';
import { RestClient, type WatchEvent } from '../src/kube/rest.ts';
import { silentLogger } from '../src/log.ts';
import { installGatehouse } from '../src/manifests/install.ts';
import { sleep, waitFor } from '../src/wait.ts';
import { ms, percentile, report } from './stats.ts';
import { record } from './summary.ts';
import { measureWatchRoundTrip } from './watch-round-trip.ts';

const API = '/apis/talos.dev/v1alpha1';

/** Watches NodeActions and Jobs, noting when each is first seen in a phase (our clock). */
class Observer {
  readonly seen = new Map<string, number>();
  private readonly abort = new AbortController();
  private readonly api: RestClient;
  constructor(api: RestClient) {
    this.api = api;
  }

  /** Resolves once both watches are open: nothing created after it goes unseen. */
  async start(): Promise<void> {
    const note = (key: string) => {
      if (!this.seen.has(key)) this.seen.set(key, performance.now());
    };
    await Promise.all([
      this.watch(`${API}/nodeactions`, (e) => {
        const o = e.object as { metadata: { name: string }; status?: { phase?: string } };
        if (e.type === 'ADDED') note(`${o.metadata.name}:added`);
        if (o.status?.phase) note(`${o.metadata.name}:${o.status.phase}`);
      }),
      this.watch('/apis/batch/v1/jobs', (e) => {
        const o = e.object as {
          metadata: { name: string; labels?: Record<string, string> };
          status?: { conditions?: { type: string; status: string }[] };
        };
        const action = o.metadata.labels?.['talos.dev/action'];
        if (action && o.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True'))
          note(`${action}:job-complete`);
      }),
    ]);
  }

  /**
   * Watches until stopped, resuming where the last event left off. A just-installed CRD's
   * watch cache answers 429 for a moment ("storage is (re)initializing"): opening is retried.
   */
  private async watch(path: string, onEvent: (e: WatchEvent) => void): Promise<void> {
    const opened = Promise.withResolvers<undefined>();
    const run = async () => {
      let resourceVersion: string | undefined;
      while (!this.abort.signal.aborted) {
        try {
          resourceVersion ??= (
            await this.api.request<{ metadata: { resourceVersion: string } }>(path, { query: { limit: 1 } })
          ).metadata.resourceVersion;
          await this.api.watch(
            path,
            { resourceVersion, allowWatchBookmarks: true },
            (e) => {
              const rv = (e.object as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion;
              if (rv) resourceVersion = rv;
              if (e.type !== 'BOOKMARK') onEvent(e);
            },
            this.abort.signal,
            () => opened.resolve(undefined),
          );
        } catch {
          await sleep(100);
        }
      }
    };
    void run();
    await opened.promise;
  }

  stop(): void {
    this.abort.abort();
  }

  async when(key: string, timeoutMs = 60_000): Promise<number> {
    try {
      return await waitFor(`the benchmark to see ${key}`, () => this.seen.get(key), {
        timeoutMs,
        intervalMs: 2,
      });
    } catch (error) {
      // Say whether the controller or the benchmark's watch was late: the object as it is now.
      const name = key.slice(0, key.lastIndexOf(':'));
      const now = await this.api
        .request<{ status?: { phase?: string; message?: string } }>(`${API}/nodeactions/${name}`)
        .then(
          (o) => `the NodeAction is ${o.status?.phase ?? '(no phase)'}: ${o.status?.message ?? ''}`,
          (e: unknown) => `reading it failed: ${String(e)}`,
        );
      throw new Error(`${(error as Error).message}; ${now}`, { cause: error });
    }
  }
}

export async function requestsServed(api: RestClient): Promise<number> {
  const text = await api.request<string>('/metrics', { headers: { Accept: 'text/plain' } });
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('apiserver_request_total{')) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function whoami(api: RestClient): Promise<string> {
  const review = await api.request<{ status: { userInfo: { username: string } } }>(
    '/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { method: 'POST', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
  );
  return review.status.userInfo.username;
}

/**
 * What no controller of this design can beat: the requester's create seen on a watch, then
 * one status write (the approval) seen on it — with no thinking in between. Measured on
 * actions of an instance no controller serves, deleted afterwards.
 */
async function measureDesignFloor(
  api: RestClient,
  observer: Observer,
  me: string,
  count: number,
): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const name = `floor-${String(i)}`;
    const t0 = performance.now();
    await api.request(`${API}/nodeactions`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeAction',
        metadata: { name, labels: { 'talos.dev/controller-instance': 'bench-floor' } },
        spec: {
          nodeName: 'worker-2',
          action: 'ConfigChange',
          execution: 'External',
          requestedBy: me,
          configChange: { mode: 'NoReboot' },
        },
      },
    });
    await observer.when(`${name}:added`);
    await api.request(`${API}/nodeactions/${name}/status`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { status: { phase: 'Approved', message: 'floor' } },
    });
    out.push((await observer.when(`${name}:Approved`)) - t0);
  }
  for (let i = 0; i < count; i++)
    await api.request(`${API}/nodeactions/floor-${String(i)}`, { method: 'DELETE' });
  return out;
}

/**
 * A Node-scoped resource check, evaluated afresh for the action's node by each gate: no
 * Pod on it labelled as a primary (the CloudNativePG recipe's shape; the sandbox has none).
 */
const NODE_SCOPED_SPEC = {
  scope: 'Node',
  interval: '10s',
  resource: {
    apiVersion: 'v1',
    kind: 'Pod',
    fieldSelector: 'spec.nodeName=$(NODE_NAME)',
    expression: "has(self.metadata.labels) && 'bench.gatehouse.dev/primary' in self.metadata.labels",
    maxMatching: 0,
  },
};

/**
 * The gate with a NotificationPolicy whose receiver accepts and never answers, against
 * the gate without one, measured back to back in the same run (issue 27 item 5: within
 * 10 %). Each action's steps wait on the receiver until their timeout, fill the queue and
 * are dropped past its bound: none of it may reach the gate.
 */
async function measureHangingReceiver(
  api: RestClient,
  controller: Controller,
  runAction: (name: string) => Promise<number>,
  samples: number,
): Promise<void> {
  const sockets = new Set<import('node:net').Socket>();
  const receiver = createServer(() => undefined); // takes every request, answers none
  receiver.on('connection', (s) => sockets.add(s));
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${String((receiver.address() as AddressInfo).port)}/hook`;
  try {
    const without: number[] = [];
    for (let i = 0; i < samples; i++) without.push(await runAction(`quiet-${String(i)}`));
    await api.request('/api/v1/namespaces/gatehouse-system/secrets', {
      method: 'POST',
      body: { metadata: { name: 'bench-notify' }, stringData: { key: 'bench' } },
    });
    await api.request(`${API}/notificationpolicies`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NotificationPolicy',
        metadata: { name: 'hanging' },
        spec: { webhook: { url, signingSecretRef: { name: 'bench-notify', key: 'key' }, timeout: '30s' } },
      },
    });
    await waitFor('the controller to see the NotificationPolicy', () =>
      controller.notificationPolicyInformer.get('hanging') ? true : undefined,
    );
    const withHanging: number[] = [];
    for (let i = 0; i < samples; i++) withHanging.push(await runAction(`hanging-${String(i)}`));
    const ratio = percentile(withHanging, 50) / percentile(without, 50);
    report(
      `gate latency with a NotificationPolicy whose receiver never answers (${String(samples)} actions each)`,
      [
        ['gate p50, no NotificationPolicy (same run)', ms(percentile(without, 50))],
        ['gate p50, receiver hangs', ms(percentile(withHanging, 50))],
        ['gate p99, no NotificationPolicy', ms(percentile(without, 99))],
        ['gate p99, receiver hangs', ms(percentile(withHanging, 99))],
        ['p50 ratio (hanging / none)', ratio.toFixed(2)],
        ['requests the receiver holds open', String(sockets.size)],
      ],
    );
    record(
      'gate latency p50 with a hanging notification receiver, against none (same run)',
      `${ms(percentile(withHanging, 50))} / ${ms(percentile(without, 50))} = ${ratio.toFixed(2)}`,
      '≤ 1.10',
    );
  } finally {
    await api.request(`${API}/notificationpolicies/hanging`, { method: 'DELETE' }).catch(() => undefined);
    for (const s of sockets) s.destroy();
    receiver.close();
  }
}

export interface GateBenchOptions {
  /** One of the ten checks Node-scoped (a resource check over the node's Pods). */
  nodeScoped?: boolean;
}

export async function gateBench(
  sandbox: Sandbox,
  samples: number,
  { nodeScoped = false }: GateBenchOptions = {},
): Promise<void> {
  const variant = nodeScoped ? '10 checks, one Node-scoped' : '10 checks';
  const kc = sandbox.kubeConfig();
  const api = new RestClient(kc);
  await installGatehouse(api, { withoutDeployment: true });
  const me = await whoami(api);
  // Ten healthy checks gating every action (cheap probes: the sandbox's own nodes).
  for (let i = 0; i < 10; i++) {
    await api.request(`${API}/clusterhealthchecks`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ClusterHealthCheck',
        metadata: { name: `gate-${String(i)}` },
        spec: nodeScoped && i === 9 ? NODE_SCOPED_SPEC : { interval: '10s', nodes: { maxNotReady: 0 } },
      },
    });
  }
  await api.request('/api/v1/namespaces', { method: 'POST', body: { metadata: { name: 'bench' } } });
  const controller = await Controller.start({
    kubeConfig: kc,
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
  });
  const observer = new Observer(api);
  await observer.start();
  try {
    await controller.waitForSync();
    await waitFor(
      '10 healthy checks',
      // A Node-scoped check has no verdict of its own: its per-node summary, all safe.
      () =>
        controller.checks
          .views()
          .filter((v) => (v.scope === 'Node' ? v.nodes?.evaluated && !v.nodes.unsafe : v.state.healthy))
          .length === 10
          ? true
          : undefined,
      { timeoutMs: 60_000 },
    );
    const node = 'worker-1';
    // A ConfigChange that does not reboot finishes on the requester's mark: the quickest
    // full life of an action, so each sample frees the one slot for the next.
    const runAction = async (name: string) => {
      const t0 = performance.now();
      await api.request(`${API}/nodeactions`, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'NodeAction',
          metadata: { name },
          spec: {
            nodeName: node,
            action: 'ConfigChange',
            execution: 'External',
            requestedBy: me,
            configChange: { mode: 'NoReboot' },
          },
        },
      });
      const approved = await observer.when(`${name}:Approved`);
      await api.request(`${API}/nodeactions/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { 'talos.dev/executed': 'true' } } },
      });
      await observer.when(`${name}:Succeeded`);
      return approved - t0;
    };
    // A CRD just installed can still answer a create with 503 ("Resource kind … not
    // found") for a moment after discovery lists it: the warm-up waits that out.
    await waitFor(
      'the API server to take a NodeAction',
      async () => {
        try {
          await runAction('warm-up');
          return true;
        } catch (error) {
          if ((error as { code?: number }).code === 503) return undefined;
          throw error;
        }
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    const before = await requestsServed(api);
    const t0 = performance.now();
    const latencies: number[] = [];
    for (let i = 0; i < samples; i++) latencies.push(await runAction(`gate-${String(i)}`));
    // When the benchmark saw each action Pending, if it ever was: from its creation, and to Approved.
    const steps = latencies.flatMap((latency, i) => {
      const name = `gate-${String(i)}`;
      const pending = observer.seen.get(`${name}:Pending`);
      const approved = observer.seen.get(`${name}:Approved`);
      if (pending === undefined || approved === undefined) return [];
      return [{ toPending: latency - (approved - pending), toApproved: approved - pending }];
    });
    const busy = performance.now() - t0;
    const after = await requestsServed(api);
    // The same span with nothing to do: the cluster's own background requests.
    const idle0 = await requestsServed(api);
    await sleep(Math.min(busy, 20_000));
    const idle = ((await requestsServed(api)) - idle0) * (busy / Math.min(busy, 20_000));
    // The same gate with the actions 100–250 ms apart, as requests come in a cluster: one
    // after another, each gate's fresh probe meets the API server's 100 ms period of etcd
    // progress requests still running from the gate before (see the LIST below), and the
    // loop locks onto it.
    const spaced: number[] = [];
    for (let i = 0; i < Math.ceil(samples / 2); i++) {
      await sleep(100 + Math.random() * 150);
      spaced.push(await runAction(`gate-spaced-${String(i)}`));
    }
    if (!nodeScoped) await measureHangingReceiver(api, controller, runAction, samples);
    const floor = (await measureWatchRoundTrip(kc, 'bench', 200)).samples;
    const designFloor = await measureDesignFloor(api, observer, me, 50);
    // What the steps in between cost, one request at a time: the controller's reads and writes.
    const timed = async (count: number, request: (i: number) => Promise<unknown>) => {
      const out: number[] = [];
      for (let i = 0; i < count; i++) {
        const s = performance.now();
        await request(i);
        out.push(performance.now() - s);
      }
      return percentile(out, 50);
    };
    const listActions = await timed(50, () =>
      api.request(`${API}/nodeactions?fieldSelector=${encodeURIComponent(UNFINISHED_FIELD_SELECTOR)}`),
    );
    const listAllActions = await timed(50, () => api.request(`${API}/nodeactions`));
    const listNodes = await timed(50, () => api.request('/api/v1/nodes'));
    // The same LIST just after a write of another kind, as a gate's fresh probe meets it:
    // etcd's revision has moved, so the quorum read waits until the Nodes watch cache is
    // known to have caught up — an etcd progress notification, which kube-apiserver
    // requests at most every 100 ms per resource.
    const listNodesAfterWrite: number[] = [];
    for (let i = 0; i < 30; i++) {
      await api.request(`${API}/nodeactions/gate-0`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { 'bench.gatehouse.dev/moved': String(i) } } },
      });
      const s = performance.now();
      await api.request('/api/v1/nodes');
      listNodesAfterWrite.push(performance.now() - s);
      await sleep(20 + Math.random() * 60);
    }
    const write = await timed(50, (i) =>
      api.request(`${API}/nodeactions/gate-0`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { 'bench.gatehouse.dev/write': String(i) } } },
      }),
    );
    report(
      `gate latency: NodeAction created → Approved, ${variant} (all healthy), no hooks (${String(samples)} actions, one at a time)`,
      [
        ['gate p50', ms(percentile(latencies, 50))],
        ['gate p99', ms(percentile(latencies, 99))],
        ['floor: watch round trip p50 (same run)', ms(percentile(floor, 50))],
        ['floor: watch round trip p99 (same run)', ms(percentile(floor, 99))],
        ['gate p50 / floor p50', `${(percentile(latencies, 50) / percentile(floor, 50)).toFixed(1)}×`],
        ['gate p50, actions 100–250 ms apart', ms(percentile(spaced, 50))],
        [
          'gate p50, actions 100–250 ms apart / floor p50',
          `${(percentile(spaced, 50) / percentile(floor, 50)).toFixed(1)}×`,
        ],
        [
          'floor of the design: a NodeAction created → seen, its status written → seen (p50, same run)',
          ms(percentile(designFloor, 50)),
        ],
        [
          'gate p50 / floor of the design p50',
          `${(percentile(latencies, 50) / percentile(designFloor, 50)).toFixed(1)}×`,
        ],
      ],
    );
    // Judged against the floor of the design (create → seen, status written → seen): what
    // no controller of this design can beat, measured in the same run.
    const design = percentile(designFloor, 50);
    record(
      `gate latency p50, actions 100–250 ms apart (${variant}), against the design floor p50`,
      `${ms(percentile(spaced, 50))} / ${ms(design)} = ${(percentile(spaced, 50) / design).toFixed(1)}×`,
      '≤ 2×',
    );
    record(
      `gate latency p50, back to back (${variant}), against the design floor p50`,
      `${ms(percentile(latencies, 50))} / ${ms(design)} = ${(percentile(latencies, 50) / design).toFixed(1)}× (each gate's consistent LIST meets the API server's 100 ms period of etcd progress requests; watch round trip p50 ${ms(percentile(floor, 50))})`,
      'no regression',
    );
    const perAction = ((after - before - idle) / samples).toFixed(1);
    report('gate latency, step by step (p50; requests timed one at a time in the same run)', [
      [
        `created → seen Pending (${String(steps.length)} of ${String(samples)} seen Pending)`,
        steps.length
          ? ms(
              percentile(
                steps.map((s) => s.toPending),
                50,
              ),
            )
          : '-',
      ],
      [
        'seen Pending → seen Approved',
        steps.length
          ? ms(
              percentile(
                steps.map((s) => s.toApproved),
                50,
              ),
            )
          : '-',
      ],
      [
        'actions seen between creation and Approved (admission written apart from the approval)',
        `${String(latencies.filter((_, i) => ['Pending', 'WaitingForHealth', 'RunningPreHooks'].some((p) => observer.seen.has(`gate-${String(i)}:${p}`))).length)} of ${String(samples)}`,
      ],
      ["LIST unfinished nodeactions (the admission's quorum read)", ms(listActions)],
      [`LIST every nodeaction (${String(samples)} finished kept: what it read before)`, ms(listAllActions)],
      ['LIST nodes (one probe of a check)', ms(listNodes)],
      [
        'LIST nodes just after a write of another kind (the wait for the watch cache a fresh probe pays)',
        ms(percentile(listNodesAfterWrite, 50)),
      ],
      ['a write (PATCH of a NodeAction)', ms(write)],
    ]);
    report('API requests per completed action (apiserver_request_total, idle background subtracted)', [
      ['requests per action', perAction],
      ['of which the benchmark client made', '2 (create, mark executed; its watches are long-lived)'],
    ]);
    record('API requests per completed action', perAction);

    // Per-hook overhead: one PreRebootJob (ConfigChange runs them in every mode).
    await api.request(`${API}/namespaces/bench/prerebootjobs`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'PreRebootJob',
        metadata: { name: 'hook', namespace: 'bench' },
        spec: {
          template: {
            spec: {
              backoffLimit: 0,
              template: {
                metadata: { annotations: { 'sandbox.gatehouse.dev/run-duration': '100ms' } },
                spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'registry.example/hook' }] },
              },
            },
          },
        },
      },
    });
    await sleep(1000);
    const overheads: number[] = [];
    const hookSamples = Math.max(10, Math.floor(samples / 3));
    for (let i = 0; i < hookSamples; i++) {
      const name = `hook-${String(i)}`;
      const run = runAction(name);
      const complete = await observer.when(`${name}:job-complete`);
      const next = await observer.when(`${name}:Approved`);
      overheads.push(next - complete);
      await run;
    }
    report(
      `per-hook overhead: hook Job seen Complete → action seen Approved (${String(hookSamples)} actions)`,
      [
        ['p50', ms(percentile(overheads, 50))],
        ['p99', ms(percentile(overheads, 99))],
        // Two watches of the benchmark's own, on two resources: their events arrive in either
        // order within a few ms, so a figure near zero (or below) is within that jitter.
        ['note', 'seen on two separate watches: near 0 means within their delivery jitter'],
      ],
    );
  } finally {
    observer.stop();
    await controller.stop();
  }
}
