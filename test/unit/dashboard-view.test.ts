// The dashboard's view model (src/http/dashboard-view.ts): what the page shows of the
// checks, policies, actions and nodes. The timeline is checked against statuses written
// by the real decision core (decide, planAdmissions), not against hand-made ones.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planAdmissions } from '../../src/actions/admission.ts';
import { decide, type ActionInput } from '../../src/actions/decide.ts';
import type { ActionObject } from '../../src/api/node-action.ts';
import type { ClusterHealthCheckSpec } from '../../src/api/cluster-health-check.ts';
import { PREREADY_TAINT } from '../../src/api/names.ts';
import type { NodeActionStatus } from '../../src/api/node-action.ts';
import type { CheckView } from '../../src/checks/runner.ts';
import { jobKey } from '../../src/hooks/plan.ts';
import {
  actionTimeline,
  dashboardView,
  type DashboardInput,
  type NodeInput,
  type PolicyObject,
  type StepState,
  type TimelineStep,
} from '../../src/http/dashboard-view.ts';
import { action, at, hook, input, job, node, state, T0 } from './action-fixtures.ts';

const GROUP = { pool: 'storage' };

function kubeNode(
  name: string,
  labels: Record<string, string> = GROUP,
  extra: Partial<NodeInput> = {},
): NodeInput {
  return {
    metadata: { name, labels },
    status: { conditions: [{ type: 'Ready', status: 'True' }], nodeInfo: { bootID: `boot-${name}` } },
    ...extra,
  };
}

function checkView(
  name: string,
  healthy: boolean | undefined,
  spec: Partial<ClusterHealthCheckSpec> = {},
): CheckView {
  return { name, generation: 1, state: state(healthy), spec: { nodes: {}, ...spec } };
}

function policy(name: string, spec: PolicyObject['spec']): PolicyObject {
  return { metadata: { name }, spec };
}

function view(partial: Partial<DashboardInput> = {}) {
  return dashboardView({ now: T0, checks: [], policies: [], nodes: [], actions: [], ...partial });
}

function steps(timeline: TimelineStep[]): [string, StepState][] {
  return timeline.map((s) => [s.phase, s.state]);
}

describe('dashboard view: checks', () => {
  it('says each state in words and what each check gates', () => {
    const nodes = [kubeNode('w1'), kubeNode('w2'), kubeNode('w3', { pool: 'compute' })];
    const waiting = action({ nodeName: 'w1' }, { phase: 'WaitingForHealth' }, { name: 'reboot-w1' });
    const done = action({ nodeName: 'w2' }, { phase: 'Succeeded' }, { name: 'reboot-w2', uid: 'u2' });
    const v = view({
      nodes,
      actions: [waiting, done] as ActionObject[],
      checks: [
        checkView('ceph', true, { actions: ['Reboot', 'Upgrade'], nodeSelector: { matchLabels: GROUP } }),
        checkView('etcd', false),
        checkView('new', undefined, { actions: ['Shutdown'] }),
      ],
    });
    assert.deepEqual(
      v.checks.map((c) => [c.name, c.state]),
      [
        ['ceph', 'Healthy'],
        ['etcd', 'Unhealthy'],
        ['new', 'Unknown'],
      ],
    );
    const [ceph, etcd, fresh] = v.checks;
    assert.deepEqual(ceph?.gates, {
      actions: ['Upgrade', 'Reboot'],
      allActions: false,
      nodeSelector: 'pool=storage',
      nodeCount: 2,
      nodes: ['w1', 'w2'],
    });
    assert.equal(ceph.lastProbeTime, '2026-03-02T10:00:00Z');
    assert.deepEqual(ceph.gatedActions, ['reboot-w1'], 'only unfinished actions it gates');
    assert.equal(etcd?.gates.allActions, true);
    assert.equal(etcd.gates.nodeSelector, null);
    assert.equal(etcd.gates.nodeCount, 3);
    assert.deepEqual(etcd.gatedActions, ['reboot-w1']);
    assert.equal(fresh?.lastProbeTime, null);
    assert.deepEqual(fresh.gatedActions, [], 'a Shutdown check does not gate a Reboot');
    assert.deepEqual(v.summary.checks, { total: 3, healthy: 1, unhealthy: 1, unknown: 1 });
  });
});

describe('dashboard view: policies', () => {
  const nodes = [kubeNode('w1'), kubeNode('w2'), kubeNode('w3'), kubeNode('w4'), kubeNode('c1', {})];

  it('shows the budget in use against maxConcurrent resolved over the governed nodes', () => {
    const holding = action({ nodeName: 'w1' }, { phase: 'RunningPreHooks' }, { name: 'a1' });
    const approved = action({ nodeName: 'c1' }, { phase: 'Approved' }, { name: 'a2', uid: 'u2' });
    const pending = action({ nodeName: 'w2' }, { phase: 'Pending' }, { name: 'a3', uid: 'u3' });
    const v = view({
      nodes,
      actions: [holding, approved, pending] as ActionObject[],
      policies: [policy('storage', { nodeSelector: { matchLabels: GROUP }, maxConcurrent: '50%' })],
    });
    const [storage] = v.policies ?? [];
    assert.equal(storage?.governedNodes, 4);
    assert.equal(storage.maxConcurrent, '50%');
    assert.equal(storage.allowed, 2);
    assert.equal(
      storage.inUse,
      1,
      'a pending action holds no slot; one on an ungoverned node does not count',
    );
    assert.deepEqual(storage.holders, ['a1']);
    assert.equal(storage.window.open, true);
    assert.equal(storage.window.always, true);
  });

  it('counts a holder whose node is gone against every policy, as the gate does', () => {
    const orphan = action({ nodeName: 'gone' }, { phase: 'Executing' }, { name: 'orphan' });
    const v = view({ nodes, actions: [orphan] as ActionObject[], policies: [policy('p', {})] });
    assert.equal(v.policies?.[0]?.inUse, 1);
    assert.deepEqual(v.policies[0].holders, ['orphan']);
  });

  it('says whether a maintenance window is open, when it closes, and when the next opens', () => {
    // T0 is Monday 2026-03-02 10:00 UTC.
    const v = view({
      nodes,
      policies: [
        policy('nights', { windows: [{ schedule: '0 22 * * *', duration: '4h' }] }),
        policy('mornings', { windows: [{ schedule: '0 9 * * *', duration: '2h', timeZone: 'UTC' }] }),
        policy('broken', { windows: [{ schedule: '0 2 * * *', duration: '1h', timeZone: 'Mars/Olympus' }] }),
      ],
    });
    const byName = new Map((v.policies ?? []).map((p) => [p.name, p.window]));
    assert.deepEqual(byName.get('nights'), {
      open: false,
      always: false,
      closesAt: null,
      nextStart: '2026-03-02T22:00:00Z',
      windows: ['0 22 * * * for 4h (UTC)'],
      problems: [],
    });
    assert.equal(byName.get('mornings')?.open, true);
    assert.equal(byName.get('mornings')?.closesAt, '2026-03-02T11:00:00Z');
    assert.equal(byName.get('broken')?.open, false);
    assert.match(byName.get('broken')?.problems[0] ?? '', /Mars\/Olympus/);
    assert.deepEqual(
      v.policies?.map((p) => p.name),
      ['broken', 'mornings', 'nights'],
    );
  });

  it('is null when the controller does not watch policies', () => {
    assert.equal(view({ policies: undefined }).policies, null);
  });
});

describe('dashboard view: an action through its phases', () => {
  it('shows a Maintenance held in Held, where other kinds wait for their node', () => {
    const history = [
      'Pending',
      'WaitingForHealth',
      'RunningPreHooks',
      'Approved',
      'Executing',
      'Held',
    ] as const;
    const status: NodeActionStatus = {
      phase: 'Held',
      phaseTime: at(5).toISOString(),
      phaseHistory: history.map((phase, i) => ({ phase, since: at(i).toISOString() })),
      message: 'node w1 is held out of service until released',
    };
    const held = action({ action: 'Maintenance' }, status) as ActionObject;
    assert.deepEqual(steps(actionTimeline(held)), [
      ['Pending', 'done'],
      ['WaitingForHealth', 'done'],
      ['RunningPreHooks', 'done'],
      ['Approved', 'done'],
      ['Executing', 'done'],
      ['Held', 'current'],
      ['RunningPostHooks', 'upcoming'],
      ['Succeeded', 'upcoming'],
    ]);
    assert.equal(actionTimeline(held)[5]?.note, 'node w1 is held out of service until released');
  });

  it('shows each phase as the decision core records it, with its hook runs', () => {
    const noout = hook('PreRebootJob', 'noout');
    const nodes = new Map([['w1', { 'kubernetes.io/hostname': 'w1' }]]);
    let i: ActionInput = input({ hooks: [noout] });
    const observe = (status: NodeActionStatus, changes: Partial<ActionInput> = {}) => {
      i = { ...i, action: { ...i.action, status }, ...changes };
      return actionTimeline(i.action);
    };

    // Requested, not yet seen by the controller.
    const fresh = actionTimeline(i.action);
    assert.deepEqual(fresh[0], {
      phase: 'Pending',
      state: 'current',
      time: null,
      note: 'not yet picked up by the controller',
      hooks: [],
    });

    let timeline = observe(decide(i).status);
    assert.deepEqual(steps(timeline).slice(0, 2), [
      ['Pending', 'current'],
      ['WaitingForHealth', 'upcoming'],
    ]);
    assert.equal(timeline[0]?.time, T0.toISOString());

    const plan = planAdmissions({ now: at(1), actions: [i.action], nodes, policies: [] });
    timeline = observe(plan.admit[0]?.status ?? {}, { now: at(2) });
    assert.deepEqual(steps(timeline).slice(0, 3), [
      ['Pending', 'done'],
      ['WaitingForHealth', 'current'],
      ['RunningPreHooks', 'upcoming'],
    ]);
    assert.equal(timeline[1]?.time, at(1).toISOString());

    let d = decide({ ...i, fresh: { at: at(2), states: new Map() } });
    timeline = observe(d.status);
    assert.equal(timeline[2]?.state, 'current');
    assert.equal(timeline[2].time, at(2).toISOString());
    assert.deepEqual(
      timeline[2].hooks.map((r) => [r.kind, r.name, r.attempt, r.phase]),
      [['PreRebootJob', 'noout', 1, 'Pending']],
    );

    const jobName = d.status.hooks?.[0]?.jobName ?? '';
    d = decide({ ...i, now: at(5), jobs: new Map([[jobKey('rook-ceph', jobName), job('Succeeded')]]) });
    assert.equal(d.status.phase, 'Approved');
    timeline = observe(d.status, { now: at(10) });
    assert.deepEqual(steps(timeline), [
      ['Pending', 'done'],
      ['WaitingForHealth', 'done'],
      ['RunningPreHooks', 'done'],
      ['Approved', 'current'],
      ['Executing', 'upcoming'],
      ['WaitingForNode', 'upcoming'],
      ['RunningPostHooks', 'upcoming'],
      ['Succeeded', 'upcoming'],
    ]);
    assert.equal(timeline[2]?.hooks[0]?.phase, 'Succeeded');
    assert.equal(timeline[2].hooks[0].job, jobName);

    // The requester marks it executed, the node reboots and is Ready: no boot hooks.
    i = {
      ...i,
      action: {
        ...i.action,
        metadata: { ...i.action.metadata, annotations: { 'talos.dev/executed': 'true' } },
      },
    };
    d = decide(i);
    assert.equal(d.status.phase, 'WaitingForNode');
    timeline = observe(d.status, { now: at(20), node: node('w1', { bootID: 'boot-2' }) });
    assert.deepEqual(steps(timeline).slice(3, 6), [
      ['Approved', 'done'],
      ['Executing', 'skipped'],
      ['WaitingForNode', 'current'],
    ]);
    d = decide(i);
    assert.equal(d.status.phase, 'Succeeded');
    timeline = observe(d.status);
    assert.deepEqual(steps(timeline), [
      ['Pending', 'done'],
      ['WaitingForHealth', 'done'],
      ['RunningPreHooks', 'done'],
      ['Approved', 'done'],
      ['Executing', 'skipped'],
      ['WaitingForNode', 'done'],
      ['RunningPostHooks', 'done'],
      ['Succeeded', 'done'],
    ]);
    assert.deepEqual(timeline[6]?.hooks, [], 'it passed RunningPostHooks with no boot hooks to run');
    assert.equal(timeline[7]?.time, at(20).toISOString());
  });

  it('ends a failed action with how it ended, after the phases it reached', () => {
    const failing = action(
      {},
      {
        phase: 'Failed',
        startTime: T0.toISOString(),
        completionTime: at(9).toISOString(),
        message: 'pre-action hook failed: PreRebootJob rook-ceph/noout failed',
        conditions: [
          {
            type: 'Admitted',
            status: 'True',
            reason: 'PolicyAllowed',
            message: '',
            lastTransitionTime: at(1).toISOString(),
          },
          {
            type: 'HealthChecksPassed',
            status: 'True',
            reason: 'Healthy',
            message: '',
            lastTransitionTime: at(2).toISOString(),
          },
          {
            type: 'PreHooksSucceeded',
            status: 'False',
            reason: 'HookFailed',
            message: '',
            lastTransitionTime: at(9).toISOString(),
          },
        ],
        hooks: [
          {
            kind: 'PreRebootJob',
            namespace: 'rook-ceph',
            name: 'noout',
            attempt: 1,
            phase: 'Failed',
            jobName: 'j',
          },
        ],
      },
    );
    const timeline = actionTimeline(failing);
    assert.deepEqual(steps(timeline), [
      ['Pending', 'done'],
      ['WaitingForHealth', 'done'],
      ['RunningPreHooks', 'done'],
      ['Approved', 'notReached'],
      ['Executing', 'notReached'],
      ['WaitingForNode', 'notReached'],
      ['RunningPostHooks', 'notReached'],
      ['Succeeded', 'notReached'],
      ['Failed', 'ended'],
    ]);
    assert.equal(timeline[8]?.time, at(9).toISOString());
    assert.match(timeline[8].note ?? '', /pre-action hook failed/);
    assert.equal(timeline[2]?.hooks[0]?.phase, 'Failed');
  });

  it('puts boot hook runs under RunningPostHooks', () => {
    const a = action(
      {},
      {
        phase: 'RunningPostHooks',
        phaseTime: at(30).toISOString(),
        hooks: [
          { kind: 'PreRebootJob', namespace: 'n', name: 'pre', attempt: 1, phase: 'Succeeded' },
          { kind: 'NodeReadyJob', namespace: 'n', name: 'unset-noout', attempt: 1, phase: 'Running' },
        ],
      },
    );
    const timeline = actionTimeline(a);
    assert.deepEqual(
      timeline[2]?.hooks.map((r) => r.name),
      ['pre'],
    );
    assert.deepEqual(
      timeline[6]?.hooks.map((r) => r.name),
      ['unset-noout'],
    );
    assert.equal(timeline[6].state, 'current');
    assert.equal(timeline[6].time, at(30).toISOString());
  });
});

describe('dashboard view: actions and nodes', () => {
  it('lists unfinished actions oldest first, then the newest finished, counting those left out', () => {
    const created = (s: number) => ({ creationTimestamp: at(s).toISOString() });
    const actions = [
      action(
        {},
        { phase: 'Succeeded', completionTime: at(50).toISOString() },
        { name: 'done-early', ...created(1) },
      ),
      action({}, { phase: 'Approved' }, { name: 'later', ...created(20) }),
      action(
        {},
        { phase: 'Failed', completionTime: at(60).toISOString() },
        { name: 'done-late', ...created(2) },
      ),
      action({}, { phase: 'Pending' }, { name: 'sooner', ...created(10) }),
      action(
        {},
        { phase: 'Cancelled', completionTime: at(40).toISOString() },
        { name: 'oldest', ...created(0) },
      ),
    ] as ActionObject[];
    const v = view({ actions, finishedLimit: 2 });
    assert.deepEqual(
      v.actions.map((a) => [a.name, a.finished]),
      [
        ['sooner', false],
        ['later', false],
        ['done-late', true],
        ['done-early', true],
      ],
    );
    assert.equal(v.actionsOmitted, 1);
    assert.deepEqual([v.summary.actionsInProgress, v.summary.actionsFinished], [2, 3]);
  });

  it('shows what holds the drain, in words, as the decision core records it, and the undo runs', () => {
    const approved = input({
      action: action(
        { execution: 'Managed', action: 'Reboot' },
        { phase: 'Approved', approvalTime: T0.toISOString(), bootIDBefore: 'boot-1' },
      ),
      node: node('w1', { osImage: 'Talos (v1.13.0)' }),
      execution: {},
    });
    const first = decide(approved);
    const since = at(1).toISOString();
    const blocker = (n: number) => ({
      namespace: 'rook-ceph',
      pod: `rook-ceph-osd-${String(n)}`,
      podDisruptionBudget: 'rook-ceph-osd',
      disruptionsAllowed: 0,
      since,
    });
    const held = decide({
      ...approved,
      now: at(2),
      action: { ...approved.action, status: first.status },
      execution: {
        drain: {
          state: 'running',
          message: 'waiting',
          blockers: Array.from({ length: 12 }, (_, n) => blocker(n)),
        },
      },
    });
    const [row] = view({ actions: [{ ...approved.action, status: held.status }] as ActionObject[] }).actions;
    assert.equal(row?.drain?.since, since);
    assert.equal(row.drain.blockers.length, 10);
    assert.equal(row.drain.more, 2);
    assert.deepEqual(row.drain.blockers[0], {
      namespace: 'rook-ceph',
      pod: 'rook-ceph-osd-0',
      podDisruptionBudget: 'rook-ceph-osd',
      disruptionsAllowed: 0,
      since,
      text: 'rook-ceph-osd-0 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd (0 disruptions allowed)',
    });
    assert.equal(row.undo, null);
    const undone: NodeActionStatus = {
      ...held.status,
      phase: 'Cancelled',
      undo: {
        decisionTime: at(3).toISOString(),
        nodeDisrupted: false,
        reason: 'undoing 1 pre-action hook',
        runs: [
          {
            kind: 'PreRebootJob',
            namespace: 'rook-ceph',
            name: 'noout',
            attempt: 1,
            jobName: 'noout-undo',
            phase: 'Running',
          },
        ],
      },
    };
    const [ended] = view({ actions: [{ ...approved.action, status: undone }] as ActionObject[] }).actions;
    assert.deepEqual(
      ended?.undo?.runs.map((r) => [r.kind, r.name, r.phase, r.job]),
      [['PreRebootJob', 'noout', 'Running', 'noout-undo']],
    );
    assert.equal(ended.undo.nodeDisrupted, false);
  });

  it('shows who asked, the bypass and its reason, and what the action is about', () => {
    const a = action(
      {
        action: 'Upgrade',
        upgrade: { image: 'factory.talos.dev/installer/x:v1.13.0' },
        requestedBy: 'alice',
        bypass: { healthChecks: true, reason: 'Ceph is rebuilding for days' },
      },
      undefined,
      { deletionTimestamp: at(3).toISOString() },
    );
    const [row] = view({ actions: [a] as ActionObject[] }).actions;
    assert.equal(row?.requestedBy, 'alice');
    assert.deepEqual(row.bypass, { healthChecks: true, hooks: false, reason: 'Ceph is rebuilding for days' });
    assert.equal(row.target, 'to factory.talos.dev/installer/x:v1.13.0');
    assert.equal(row.cancelling, true);
    assert.equal(row.phase, 'Pending');
    assert.equal(view({ actions: [action()] as ActionObject[] }).actions[0]?.bypass, null);
  });

  it('shows nodes: Ready, held by the preready taint, and their actions in progress', () => {
    const held = kubeNode('w2', GROUP, { spec: { taints: [{ key: PREREADY_TAINT, effect: 'NoSchedule' }] } });
    const down = kubeNode('w1', GROUP, { status: { conditions: [{ type: 'Ready', status: 'False' }] } });
    const v = view({
      nodes: [held, down],
      actions: [action({ nodeName: 'w1' }, { phase: 'WaitingForNode' })] as ActionObject[],
    });
    assert.deepEqual(
      v.nodes.map((n) => [n.name, n.ready, n.preready, n.actions]),
      [
        ['w1', 'False', false, ['reboot-w1']],
        ['w2', 'True', true, []],
      ],
    );
  });

  it('is plain JSON: what the page and the event stream receive', () => {
    const v = view({
      checks: [checkView('ceph', true)],
      nodes: [kubeNode('w1')],
      actions: [action()] as ActionObject[],
    });
    assert.deepEqual(JSON.parse(JSON.stringify(v)), v);
    assert.equal(v.generatedAt, '2026-03-02T10:00:00Z');
  });
});
