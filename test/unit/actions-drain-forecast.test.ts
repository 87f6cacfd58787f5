// The drain forecast (src/actions/drain-forecast.ts): which of a node's Pods a budget at
// its limit holds, which nothing recreates, which no other node could take (a first-fit
// placement by requests, selectors, required affinity, taints); DaemonSet and mirror Pods
// are not judged (a drain leaves them). Then at the gate through decide(): recorded under
// Warn, a hold under Block (builtin:drain-forecast), passed by a bypass on the record.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionDecision } from '../../src/actions/decide.ts';
import {
  forecastDrain,
  nodesToRead,
  type BudgetObject,
  type DrainForecastFacts,
  type DrainForecastRead,
} from '../../src/actions/drain-forecast.ts';
import { forecastRecord } from '../../src/actions/drain-forecast-record.ts';
import {
  DRAIN_FORECAST_CHECK,
  drainForecastBlockedBy,
} from '../../src/actions/phases/drain-forecast-gate.ts';
import { podRequests, type CandidateNode, type PodObject } from '../../src/actions/pod-placement.ts';
import type { NodeActionSpec } from '../../src/api/node-action.ts';
import { describeText } from '../../src/cli/actions.ts';
import { PLAIN } from '../../src/cli/style.ts';
import { forecastRow } from '../../src/http/forecast-view.ts';
import { parseQuantity } from '../../src/kube/quantity.ts';
import { T0, action, admitted, at, input } from './action-fixtures.ts';

const GiB = 2 ** 30;

/** A Pod on w1 in namespace app, owned by a ReplicaSet unless `owner` says otherwise. */
function pod(
  name: string,
  spec: PodObject['spec'] = {},
  meta: Partial<PodObject['metadata']> = {},
): PodObject {
  return {
    metadata: {
      name,
      namespace: 'app',
      labels: { app: name },
      ownerReferences: [{ kind: 'ReplicaSet', name: `${name}-rs`, controller: true }],
      ...meta,
    },
    spec: {
      nodeName: 'w1',
      containers: [{ resources: { requests: { cpu: '100m', memory: '128Mi' } } }],
      ...spec,
    },
    status: { phase: 'Running' },
  };
}

function candidate(name: string, extra: Partial<CandidateNode> = {}): CandidateNode {
  return {
    name,
    labels: { 'kubernetes.io/hostname': name },
    taints: [],
    unschedulable: false,
    ready: true,
    allocatable: { cpu: 4, memory: 16 * GiB, pods: 110 },
    ...extra,
  };
}

const budget = (name: string, app: string, allowed: number): BudgetObject => ({
  metadata: { name, namespace: 'app' },
  spec: { selector: { matchLabels: { app } } },
  status: { disruptionsAllowed: allowed },
});

/** Facts with every other node read and empty, unless `used` says otherwise. */
function facts(pods: PodObject[], extra: Partial<DrainForecastFacts> = {}): DrainForecastFacts {
  const nodes = extra.nodes ?? [candidate('w1'), candidate('w2')];
  return {
    nodeName: 'w1',
    pods,
    budgets: [],
    nodes,
    used: new Map(nodes.map((n) => [n.name, { cpu: 0, memory: 0, pods: 0 }])),
    ...extra,
  };
}

const verdict = (f: DrainForecastFacts, name: string) =>
  forecastDrain(f).verdicts.find((v) => v.pod === name);

describe('drain forecast: the simulation', () => {
  it('names a Pod a PodDisruptionBudget at its limit selects, not one whose budget allows a disruption', () => {
    const f = facts([pod('db-0'), pod('web-0')], {
      budgets: [budget('db', 'db-0', 0), budget('web', 'web-0', 1)],
    });
    assert.deepEqual(verdict(f, 'db-0'), { namespace: 'app', pod: 'db-0', podDisruptionBudget: 'db' });
    assert.equal(verdict(f, 'web-0'), undefined);
    // A budget of another namespace selects nothing here.
    const elsewhere = { ...budget('db', 'db-0', 0), metadata: { name: 'db', namespace: 'other' } };
    assert.equal(verdict(facts([pod('db-0')], { budgets: [elsewhere] }), 'db-0'), undefined);
  });

  it('names an unmanaged Pod: no controller owner', () => {
    const bare = pod('scratch', {}, { ownerReferences: [] });
    const owned = pod('owned', {}, { ownerReferences: [{ kind: 'Foo', name: 'f' }] });
    const r = forecastDrain(facts([bare, owned]));
    assert.deepEqual(
      r.verdicts.map((v) => [v.pod, v.unmanaged]),
      [
        ['owned', true],
        ['scratch', true],
      ],
      'an owner that is not its controller recreates nothing either',
    );
  });

  it('names a Pod whose nodeSelector or required affinity matches only the drained node', () => {
    const pinned = pod('pinned', { nodeSelector: { 'kubernetes.io/hostname': 'w1' } });
    const affine = pod('affine', {
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [{ matchExpressions: [{ key: 'disk', operator: 'In', values: ['nvme'] }] }],
          },
        },
      },
    });
    const big = pod('big', {
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [{ matchExpressions: [{ key: 'cores', operator: 'Gt', values: ['32'] }] }],
          },
        },
      },
    });
    const nodes = [
      candidate('w1', { labels: { 'kubernetes.io/hostname': 'w1', disk: 'nvme', cores: '64' } }),
      candidate('w2', { labels: { 'kubernetes.io/hostname': 'w2', disk: 'hdd', cores: '16' } }),
      candidate('w3', { labels: { 'kubernetes.io/hostname': 'w3', cores: '64' } }),
    ];
    const f = facts([pinned, affine, big], { nodes });
    assert.equal(
      verdict(f, 'pinned')?.fitsNowhere,
      '2 nodes: node selector or required affinity does not match',
    );
    assert.equal(
      verdict(f, 'affine')?.fitsNowhere,
      '2 nodes: node selector or required affinity does not match',
    );
    assert.equal(verdict(f, 'big'), undefined, 'w3 has more than 32 cores');
  });

  it('names a Pod that does not tolerate the taint of the only other node, not one that does', () => {
    const nodes = [
      candidate('w1'),
      candidate('w2', { taints: [{ key: 'dedicated', value: 'db', effect: 'NoSchedule' }] }),
    ];
    const tolerant = pod('tolerant', {
      tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'db', effect: 'NoSchedule' }],
    });
    const f = facts([pod('plain'), tolerant], { nodes });
    assert.equal(verdict(f, 'plain')?.fitsNowhere, '1 node: taint dedicated=db:NoSchedule not tolerated');
    assert.equal(verdict(f, 'tolerant'), undefined);
    // PreferNoSchedule ranks, never refuses; a cordoned or NotReady node refuses.
    const soft = [candidate('w1'), candidate('w2', { taints: [{ key: 'x', effect: 'PreferNoSchedule' }] })];
    assert.equal(verdict(facts([pod('plain')], { nodes: soft }), 'plain'), undefined);
    const away = [
      candidate('w1'),
      candidate('w2', { unschedulable: true }),
      candidate('w3', { ready: false }),
    ];
    assert.equal(
      verdict(facts([pod('plain')], { nodes: away }), 'plain')?.fitsNowhere,
      '1 node: cordoned; 1 node: not Ready',
    );
  });

  it('places the Pods first-fit, largest first, so that two Pods never count the same free room', () => {
    const three = (name: string) =>
      pod(name, { containers: [{ resources: { requests: { cpu: '3', memory: '1Gi' } } }] });
    const nodes = [candidate('w1'), candidate('w2'), candidate('w3')];
    // w2 has 2 cores free, w3 has 4: one 3-core Pod fits (on w3), the second nowhere.
    const used = new Map([
      ['w2', { cpu: 2, memory: GiB, pods: 3 }],
      ['w3', { cpu: 0, memory: 0, pods: 0 }],
    ]);
    const r = forecastDrain(facts([three('a'), three('b'), pod('small')], { nodes, used }));
    assert.deepEqual(
      r.verdicts.map((v) => [v.pod, v.fitsNowhere]),
      [['b', '2 nodes: too little free cpu']],
    );
    assert.equal(r.evicted, 3);
    // Memory and the Pod count are room too.
    const full = new Map([['w2', { cpu: 0, memory: 0, pods: 110 }]]);
    assert.equal(
      verdict(facts([pod('p')], { used: full }), 'p')?.fitsNowhere,
      '1 node: too little free pods',
    );
    const huge = pod('huge', { containers: [{ resources: { requests: { memory: '64Gi' } } }] });
    assert.equal(verdict(facts([huge]), 'huge')?.fitsNowhere, '1 node: allocatable memory too small');
  });

  it('leaves DaemonSet, mirror, finished and hook Pods out, and Pods already leaving', () => {
    const ds = pod(
      'agent',
      { nodeSelector: { 'kubernetes.io/hostname': 'w1' } },
      {
        ownerReferences: [{ kind: 'DaemonSet', name: 'agent', controller: true }],
      },
    );
    const mirror = pod(
      'kube-proxy',
      {},
      { ownerReferences: [], annotations: { 'kubernetes.io/config.mirror': 'x' } },
    );
    const done = { ...pod('job-1', {}, { ownerReferences: [] }), status: { phase: 'Succeeded' } };
    const leaving = pod('old', {}, { ownerReferences: [], deletionTimestamp: T0.toISOString() });
    const r = forecastDrain(facts([ds, mirror, done, leaving, pod('web')]));
    assert.deepEqual(r.verdicts, []);
    assert.equal(r.evicted, 1);
    assert.equal(r.leftInPlace, 3);
    // spec.drain.podSelector: only the Pods it selects are evicted.
    const only = forecastDrain(
      facts([pod('scratch', {}, { ownerReferences: [] }), pod('web')], {
        podSelector: { matchLabels: { app: 'web' } },
      }),
    );
    assert.equal(only.evicted, 1);
    assert.deepEqual(only.verdicts, []);
  });

  it('reads a bounded number of nodes, each Pod’s first chances first, and does not judge a Pod it could not place on them', () => {
    const nodes = ['w1', 'w2', 'w3', 'w4', 'w5'].map((n) => candidate(n));
    const pinned = pod('pinned', { nodeSelector: { zone: 'b' } });
    const zoned = nodes.map((n) => (n.name === 'w5' ? { ...n, labels: { ...n.labels, zone: 'b' } } : n));
    const f = facts([pod('web'), pinned], { nodes: zoned, used: new Map() });
    assert.deepEqual(nodesToRead(f, 2), ['w5', 'w2'], 'the pinned Pod’s only node, then the other’s first');
    // w2 read and full: the web Pod fits on none read, and w3, w4 are unread.
    const read = forecastDrain({ ...f, used: new Map([['w2', { cpu: 4, memory: 0, pods: 0 }]]) });
    const web = read.verdicts.find((v) => v.pod === 'web');
    assert.deepEqual(web, { namespace: 'app', pod: 'web', notJudged: true });
    const record = forecastRecord({ at: T0, result: read });
    assert.equal(record.notJudged, 2);
    assert.equal(record.fitsNowhere, 0);
    assert.equal(record.pods, undefined, 'a Pod not judged is counted, not named');
    assert.match(record.message, /2 Pods fit on none of the 1 node read and were not judged/);
  });

  it('counts requests as the scheduler does: containers and sidecars, or the largest init container, plus overhead', () => {
    const p = pod('p', {
      containers: [
        { resources: { requests: { cpu: '250m', memory: '1Gi' } } },
        { resources: { requests: { cpu: '0.25' } } },
      ],
      initContainers: [
        { resources: { requests: { cpu: '2', memory: '512Mi' } } },
        { restartPolicy: 'Always', resources: { requests: { memory: '1e9' } } },
      ],
      overhead: { cpu: '100m' },
    });
    const r = podRequests(p);
    assert.ok(Math.abs(r.cpu - 2.1) < 1e-9, String(r.cpu));
    assert.equal(r.memory, GiB + 1e9 + 0);
    assert.equal(r.pods, 1);
    assert.equal(parseQuantity('1.5Gi'), 1.5 * GiB);
    assert.equal(parseQuantity('2k'), 2000);
    assert.equal(parseQuantity('bogus'), undefined);
  });
});

/** A forecast read naming `pinned` in namespace app as fitting nowhere. */
function pinnedForecast(now = T0): DrainForecastRead {
  const pinned = pod('pinned', { nodeSelector: { 'kubernetes.io/hostname': 'w1' } });
  return { at: now, result: forecastDrain(facts([pinned, pod('web')])) };
}

function gate(
  options: { forecast?: DrainForecastRead; block?: string; now?: Date; spec?: Partial<NodeActionSpec> } = {},
): ActionDecision {
  const now = options.now ?? T0;
  const i = input({
    now,
    action: action(options.spec ?? {}, admitted(T0)),
    ...(options.forecast ? { drainForecast: options.forecast } : {}),
    ...(options.block ? { drainForecastBlock: options.block } : {}),
  });
  if (!options.forecast) delete i.drainForecast;
  return decide(i);
}

const record = (d: ActionDecision) => d.status.checks?.find((c) => c.name === DRAIN_FORECAST_CHECK);
const events = (d: ActionDecision, why: string) =>
  d.effects.flatMap((e) => (e.type === 'event' && e.reason === why ? [e.message] : []));

describe('drain forecast: at the health gate', () => {
  it('asks for the forecast of an action that drains, not of one that does not', () => {
    assert.equal(gate().readDrainForecast, true);
    // A change classified None (unclassified, a live change counts as restarting CRI: drained).
    const live = gate({
      spec: {
        action: 'ConfigChange',
        execution: 'External',
        configChange: { mode: 'NoReboot', disruptionClass: 'None' },
      },
    });
    assert.equal(live.readDrainForecast, undefined);
  });

  it('under Warn: records the forecast, says so with a Warning, and goes on', () => {
    const d = gate({ forecast: pinnedForecast() });
    assert.equal(d.status.phase, 'Approved');
    assert.equal(record(d), undefined, 'no hold under Warn');
    const f = d.status.drainForecast;
    assert.equal(f?.fitsNowhere, 1);
    assert.equal(f.evicted, 2);
    assert.deepEqual(
      f.pods?.map((p) => p.pod),
      ['pinned'],
    );
    assert.match(f.message, /not simulated: pod affinity/);
    assert.equal(events(d, 'DrainForecast').length, 1);
  });

  it('under Block: waits at the gate naming the Pod, and goes once nothing would hold the drain', () => {
    const held = gate({ forecast: pinnedForecast(), block: 'workers' });
    assert.equal(held.status.phase, 'WaitingForHealth');
    const r = record(held);
    assert.equal(r?.healthy, false);
    assert.match(
      r.message ?? '',
      /app\/pinned: fits on no other node \(1 node: node selector or required affinity does not match\)/,
    );
    assert.match(r.message ?? '', /ActionPolicy workers/);
    assert.match(held.status.message ?? '', /pinned/);
    assert.ok((held.requeueAfterMs ?? Infinity) <= 5000);
    // The same forecast again: no second Warning.
    const again = decide(
      input({
        now: at(5),
        action: action({}, held.status),
        drainForecast: pinnedForecast(at(5)),
        drainForecastBlock: 'workers',
      }),
    );
    assert.equal(again.status.phase, 'WaitingForHealth');
    assert.equal(events(again, 'DrainForecast').length, 0);
    const gone = decide(
      input({
        now: at(10),
        action: action({}, held.status),
        drainForecast: { at: at(10), result: forecastDrain(facts([pod('web')])) },
        drainForecastBlock: 'workers',
      }),
    );
    assert.equal(gone.status.phase, 'Approved');
    assert.equal(record(gone)?.healthy, true);
  });

  it('under Block: a budget at its limit holds; an unmanaged Pod alone does not', () => {
    const pdb = {
      at: T0,
      result: forecastDrain(facts([pod('db-0')], { budgets: [budget('db', 'db-0', 0)] })),
    };
    const held = gate({ forecast: pdb, block: 'workers' });
    assert.equal(held.status.phase, 'WaitingForHealth');
    assert.match(record(held)?.message ?? '', /app\/db-0: PodDisruptionBudget db allows no disruption/);
    const bare = { at: T0, result: forecastDrain(facts([pod('scratch', {}, { ownerReferences: [] })])) };
    const d = gate({ forecast: bare, block: 'workers' });
    assert.equal(d.status.phase, 'Approved');
    assert.equal(d.status.drainForecast?.unmanaged, 1);
  });

  it('under Block: a forecast that could not be made holds (fail closed); under Warn it is only recorded', () => {
    const failed = { at: T0, error: 'KubeApiError: GET /api/v1/pods: 503' };
    const held = gate({ forecast: failed, block: 'workers' });
    assert.equal(held.status.phase, 'WaitingForHealth');
    assert.match(record(held)?.message ?? '', /could not be made: KubeApiError/);
    const warned = gate({ forecast: failed });
    assert.equal(warned.status.phase, 'Approved');
    assert.match(warned.status.drainForecast?.message ?? '', /could not be made/);
  });

  it('a bypass of the health checks passes it, recorded with the Pods it passed', () => {
    const spec = { bypass: { healthChecks: true, reason: 'kernel CVE, cannot wait' } };
    assert.equal(gate({ spec, block: 'workers' }).readDrainForecast, true, 'read first, for the record');
    const d = gate({ spec, forecast: pinnedForecast(), block: 'workers' });
    assert.equal(d.status.phase, 'Approved');
    const r = record(d);
    assert.equal(r?.bypassed, true);
    assert.match(r.message ?? '', /app\/pinned: .*passed, health checks bypassed by alice: kernel CVE/);
    assert.equal(events(d, 'DrainForecastBypassed').length, 1);
  });

  it('Block wins where several policies govern the action', () => {
    const spec = { action: 'Reboot' as const, nodeName: 'w1' };
    const policies = [
      { name: 'warn', spec: { drainForecast: 'Warn' as const } },
      { name: 'strict', spec: { drainForecast: 'Block' as const } },
      {
        name: 'other',
        spec: { nodeSelector: { matchLabels: { pool: 'db' } }, drainForecast: 'Block' as const },
      },
    ];
    assert.equal(drainForecastBlockedBy(policies, spec, {}), 'strict');
    assert.equal(drainForecastBlockedBy(policies.slice(0, 1), spec, {}), undefined);
  });
});

describe('drain forecast: shown', () => {
  const forecast = forecastRecord(pinnedForecast());

  it('by gatehouse actions describe (and explain): counts, each Pod named, what is not simulated', () => {
    const a = action({}, { ...admitted(T0), drainForecast: forecast });
    const text = describeText(a, undefined, at(30), PLAIN);
    assert.match(text, /\nDrain forecast \(made 2026-03-02T10:00:00.000Z, 30s ago\):\n/);
    assert.match(
      text,
      /\n {2}2 Pods to evict, 0 held by a PodDisruptionBudget, 1 fitting nowhere, 0 unmanaged\n/,
    );
    assert.match(
      text,
      /\n {2}✗ app\/pinned: fits on no other node \(1 node: node selector or required affinity does not match\)\n/,
    );
    assert.match(text, /not simulated: pod affinity/);
  });

  it('by the dashboard’s action view', () => {
    const row = forecastRow(forecast);
    assert.equal(row?.summary, '2 Pods to evict: 1 fitting nowhere');
    assert.deepEqual(
      row.pods.map((p) => [p.pod, p.holds]),
      [['pinned', true]],
    );
    assert.equal(forecastRow(undefined), null);
  });
});
