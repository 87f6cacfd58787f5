// The dashboard's rollout view (src/http/rollout-view.ts): the node map's tiles and
// groups, the swimlanes' phase segments (from phaseHistory, or from the status
// timestamps of an older action), failure and hold marks, and the window bands of the
// policies that govern the rollout's nodes.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide } from '../../src/actions/decide.ts';
import type { ActionObject } from '../../src/api/node-action.ts';
import type { NodeActionStatus } from '../../src/api/node-action.ts';
import type { NodeRolloutStatus } from '../../src/api/node-rollout.ts';
import { withPhaseEntered } from '../../src/api/phases.ts';
import { dashboardView } from '../../src/http/dashboard-view.ts';
import { rolloutViews, type RolloutObject, type RolloutViewInput } from '../../src/http/rollout-view.ts';
import { windowIntervals } from '../../src/policies/window.ts';
import { action, at, input, T0 } from './action-fixtures.ts';

const iso = (s: number) => at(s).toISOString();

function rollout(
  status: NodeRolloutStatus | undefined,
  spec: Partial<RolloutObject['spec']> = {},
): RolloutObject {
  return {
    metadata: { name: 'upgrade-all', uid: 'uid-r', creationTimestamp: iso(0) },
    spec: {
      action: 'Upgrade',
      upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
      requestedBy: 'alice',
      groupBy: 'zone',
      ...spec,
    },
    ...(status ? { status } : {}),
  };
}

/** An action that entered the given phases at the given seconds, in one status each. */
function walked(name: string, node: string, steps: [NodeActionStatus['phase'] & string, number][]) {
  const status: NodeActionStatus = { startTime: iso(steps[0]?.[1] ?? 0) };
  for (const [phase, s] of steps) withPhaseEntered(status, phase, at(s));
  const last = steps.at(-1);
  if (last && ['Succeeded', 'Failed', 'Denied', 'Cancelled'].includes(last[0]))
    status.completionTime = iso(last[1]);
  status.message = `${last?.[0] ?? ''} message`;
  return action({ nodeName: node }, status, { name }) as ActionObject;
}

const MAIN: [NodeActionStatus['phase'] & string, number][] = [
  ['Pending', 10],
  ['WaitingForHealth', 12],
  ['RunningPreHooks', 15],
  ['Approved', 20],
  ['Executing', 21],
  ['WaitingForNode', 40],
  ['RunningPostHooks', 70],
  ['Succeeded', 80],
];

const nodes: RolloutViewInput['nodes'] = [
  { metadata: { name: 'w1', labels: { zone: 'a' } } },
  { metadata: { name: 'w2', labels: { zone: 'a' } } },
  { metadata: { name: 'w3', labels: { zone: 'b' } } },
  { metadata: { name: 'w4', labels: { zone: 'b' } } },
  { metadata: { name: 'cp1', labels: {} } },
];

const status: NodeRolloutStatus = {
  startTime: iso(5),
  targetVersion: 'v1.13.1',
  message: '1 node running',
  nodes: [
    { node: 'w1', phase: 'Succeeded', action: 'ro-w1', actionPhase: 'Succeeded', group: 'a' },
    { node: 'w2', phase: 'Failed', action: 'ro-w2', actionPhase: 'Failed', group: 'a' },
    { node: 'w3', phase: 'Running', action: 'ro-w3', actionPhase: 'Executing', group: 'b' },
    { node: 'w4', phase: 'Waiting', group: 'b', message: 'waiting for the next window' },
    { node: 'cp1', phase: 'Pending', controlPlane: true },
  ],
};

function viewOf(partial: Partial<RolloutViewInput> = {}) {
  const actions = [
    walked('ro-w1', 'w1', MAIN),
    walked('ro-w2', 'w2', [
      ['Pending', 81],
      ['WaitingForHealth', 82],
      ['RunningPreHooks', 83],
      ['Approved', 84],
      ['Executing', 85],
      ['Failed', 95],
    ]),
    walked('ro-w3', 'w3', [
      ['Pending', 96],
      ['WaitingForHealth', 97],
      ['Executing', 99],
    ]),
  ];
  const [view] = rolloutViews({
    now: at(120),
    rollouts: [rollout(status)],
    actions,
    nodes,
    policies: [],
    ...partial,
  });
  assert.ok(view);
  return view;
}

describe('rollout view: the node map', () => {
  it('has one tile per node, grouped by groupBy in the order they go, each state in words', () => {
    const view = viewOf();
    assert.deepEqual(
      view.groups.map((g) => [g.label, g.tiles.map((t) => `${t.node} ${t.state} (${t.word})`)]),
      [
        ['zone=a', ['w1 done (done)', 'w2 failed (failed)']],
        ['zone=b', ['w3 running (running: Executing)', 'w4 waiting (waiting)']],
        ['without zone', ['cp1 notYet (not yet)']],
      ],
    );
    assert.equal(view.groups[2]?.tiles[0]?.controlPlane, true);
    assert.equal(view.state, 'Progressing');
    assert.equal(view.target, 'to v1.13.1');
  });

  it('says waiting for a node whose action its policies hold back, and one group without groupBy', () => {
    const view = viewOf({
      rollouts: [
        rollout(
          { nodes: [{ node: 'w1', phase: 'Running', action: 'ro-w1', actionPhase: 'Pending' }] },
          { groupBy: undefined },
        ),
      ],
    });
    assert.deepEqual(
      view.groups.map((g) => [g.label, g.tiles.map((t) => t.word)]),
      [['all nodes', ['waiting: Pending']]],
    );
  });
});

describe('rollout view: the swimlanes', () => {
  it('draws a finished action as its phases end to end, each labelled, ending at its completion', () => {
    const lane = viewOf().lanes.find((l) => l.node === 'w1');
    assert.deepEqual(
      lane?.segments.map((s) => [s.label, s.start, s.end]),
      [
        ['waiting for policies', iso(10), iso(12)],
        ['waiting for health', iso(12), iso(15)],
        ['pre-hooks', iso(15), iso(20)],
        ['approved', iso(20), iso(21)],
        ['executing', iso(21), iso(40)],
        ['waiting for node', iso(40), iso(70)],
        ['post-hooks', iso(70), iso(80)],
      ],
    );
    assert.deepEqual(lane.marks, []);
  });

  it('marks a failure at its time with why, leaves the current phase open, and marks a node held back', () => {
    const view = viewOf();
    const failed = view.lanes.find((l) => l.node === 'w2');
    assert.deepEqual(failed?.marks, [
      { kind: 'failed', time: iso(95), end: null, text: 'Failed: Failed message' },
    ]);
    assert.deepEqual(failed.segments.at(-1), {
      phase: 'Executing',
      label: 'executing',
      start: iso(85),
      end: iso(95),
    });
    const running = view.lanes.find((l) => l.node === 'w3');
    assert.equal(running?.segments.at(-1)?.end, null, 'still executing');
    assert.deepEqual(view.lanes.find((l) => l.node === 'w4')?.marks, [
      { kind: 'hold', time: null, end: null, text: 'waiting for the next window' },
    ]);
    assert.deepEqual(view.lanes.find((l) => l.node === 'cp1')?.segments, []);
    assert.deepEqual(view.range, { start: '2026-03-02T10:00:00Z', end: null });
  });

  it('marks a drain held by PodDisruptionBudgets as a hold from when it was first refused', () => {
    const held = walked('ro-w3', 'w3', [
      ['Pending', 96],
      ['Executing', 99],
    ]);
    held.status = {
      ...held.status,
      drain: { blockers: [{ namespace: 'db', pod: 'pg-0', since: iso(100) }] },
    };
    const lane = viewOf({ actions: [held] }).lanes.find((l) => l.node === 'w3');
    assert.deepEqual(lane?.marks, [
      { kind: 'hold', time: iso(100), end: null, text: 'drain held: PodDisruptionBudgets refuse evictions' },
    ]);
  });

  it('reads the phases of an older action (no phaseHistory) from its status timestamps', () => {
    const requested = decide(input({ now: at(10) })).status;
    const old = action(
      {},
      {
        ...requested,
        phase: 'Approved',
        phaseTime: iso(20),
        approvalTime: iso(20),
        conditions: [
          {
            type: 'Admitted',
            status: 'True',
            reason: 'PolicyAllowed',
            message: '',
            lastTransitionTime: iso(12),
          },
          {
            type: 'HealthChecksPassed',
            status: 'True',
            reason: 'Healthy',
            message: '',
            lastTransitionTime: iso(15),
          },
        ],
      },
      { name: 'ro-w1' },
    ) as ActionObject;
    delete old.status?.phaseHistory;
    const lane = viewOf({ actions: [old] }).lanes.find((l) => l.node === 'w1');
    assert.deepEqual(
      lane?.segments.map((s) => [s.phase, s.start, s.end]),
      [
        ['Pending', iso(10), iso(12)],
        ['WaitingForHealth', iso(12), iso(15)],
        ['RunningPreHooks', iso(15), iso(20)],
        ['Approved', iso(20), null],
      ],
    );
  });
});

describe('rollout view: windows', () => {
  it("shades the windows of the policies governing the rollout's nodes for its action, and only those", () => {
    const view = viewOf({
      rollouts: [rollout({ ...status, completionTime: iso(7200), conditions: [complete] })],
      policies: [
        {
          metadata: { name: 'zone-a-nights' },
          spec: {
            nodeSelector: { matchLabels: { zone: 'a' } },
            windows: [{ schedule: '30 10 * * *', duration: '15m' }],
          },
        },
        // Reboots only: it does not govern an upgrade.
        {
          metadata: { name: 'reboots' },
          spec: { actions: ['Reboot'], windows: [{ schedule: '0 11 * * *', duration: '1h' }] },
        },
        { metadata: { name: 'budget-only' }, spec: { maxConcurrent: 2 } },
      ],
    });
    assert.deepEqual(view.windows, [
      {
        policy: 'zone-a-nights',
        nodes: ['w1', 'w2'],
        open: [{ start: '2026-03-02T10:30:00Z', end: '2026-03-02T10:45:00Z' }],
      },
    ]);
    assert.equal(view.state, 'Complete');
    assert.deepEqual(view.range, { start: '2026-03-02T10:00:00Z', end: '2026-03-02T12:00:00.000Z' });
  });

  it('ends a complete rollout where its last segment ends, when that is after its completion time', () => {
    const late = walked('ro-w1', 'w1', MAIN);
    // Succeeded at 10:01:20.600, the rollout's completion written in whole seconds.
    const done = new Date(at(80).getTime() + 600).toISOString();
    const last = late.status?.phaseHistory?.at(-1);
    if (late.status && last) {
      late.status.completionTime = done;
      last.since = done;
    }
    const view = viewOf({
      actions: [late],
      rollouts: [rollout({ ...status, completionTime: iso(80).replace('.000', ''), conditions: [complete] })],
    });
    assert.equal(view.range.end, '2026-03-02T10:01:20.600Z');
    assert.equal(view.lanes[0]?.segments.at(-1)?.end, '2026-03-02T10:01:20.600Z');
  });

  it('lists the open times of windows within a range: clipped, merged, and never for one that cannot open', () => {
    const from = new Date('2026-03-02T01:00:00Z');
    const to = new Date('2026-03-03T06:00:00Z');
    const spans = (w: Parameters<typeof windowIntervals>[0]) =>
      windowIntervals(w, from, to).map((i) => [i.start.toISOString(), i.end.toISOString()]);
    assert.deepEqual(spans([{ schedule: '0 2 * * *', duration: '4h' }]), [
      ['2026-03-02T02:00:00.000Z', '2026-03-02T06:00:00.000Z'],
      ['2026-03-03T02:00:00.000Z', '2026-03-03T06:00:00.000Z'],
    ]);
    // One open before the range reaches into it; two that touch are one.
    assert.deepEqual(
      spans([
        { schedule: '0 0 * * *', duration: '90m' },
        { schedule: '0 1 * * *', duration: '1h' },
      ]),
      [
        ['2026-03-02T01:00:00.000Z', '2026-03-02T02:00:00.000Z'],
        ['2026-03-03T00:00:00.000Z', '2026-03-03T02:00:00.000Z'],
      ],
    );
    assert.deepEqual(spans([{ schedule: '0 2 * * *', duration: '1h', timeZone: 'Mars/Olympus' }]), []);
    assert.deepEqual(spans(undefined), [['2026-03-02T01:00:00.000Z', '2026-03-03T06:00:00.000Z']]);
  });
});

const complete = {
  type: 'Complete',
  status: 'True' as const,
  reason: 'AllDone',
  message: 'done',
  lastTransitionTime: iso(7200),
};

describe('rollout view in the dashboard', () => {
  it('is action data: hidden from readers who may not see actions, null without rollouts', () => {
    const base = { now: T0, checks: [], policies: [], nodes: [], actions: [] };
    const rollouts = [rollout(status)];
    assert.equal(dashboardView({ ...base, rollouts }).rollouts?.length, 1);
    assert.deepEqual(dashboardView({ ...base, rollouts, hideActions: true }).rollouts, []);
    assert.equal(dashboardView(base).rollouts, null);
  });

  it('lists unfinished rollouts first, then the most recent finished ones', () => {
    const named = (name: string, s: NodeRolloutStatus, created: number) => ({
      ...rollout(s),
      metadata: { name, uid: name, creationTimestamp: iso(created) },
    });
    const views = rolloutViews({
      now: at(9000),
      rollouts: [
        named('old-done', { completionTime: iso(100), conditions: [complete] }, 0),
        named('late', {}, 50),
        named('new-done', { completionTime: iso(8000), conditions: [complete] }, 10),
        named('early', {}, 20),
      ],
      actions: [],
      nodes,
      policies: [],
      finishedLimit: 1,
    });
    assert.deepEqual(
      views.map((v) => v.name),
      ['early', 'late', 'new-done'],
    );
  });
});
