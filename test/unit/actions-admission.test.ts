import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planAdmissions } from '../../src/actions/admission.ts';
import { nodeFacts } from '../../src/actions/observations.ts';
import { planRetention } from '../../src/actions/retention.ts';
import {
  CONTROL_PLANE_LABEL as CP,
  NODE_ACTION_FINALIZER as FINALIZER,
  instanceSelector,
} from '../../src/api/names.ts';
import type { NodeActionPhase, ObservedNodeAction } from '../../src/api/node-action.ts';
import { sameJSON } from '../../src/canonical-json.ts';
import type { PolicyFacts } from '../../src/policies/evaluate.ts';
import { T0, action, at } from './action-fixtures.ts';

const nodes = new Map<string, Record<string, string>>([
  ['w1', { pool: 'storage' }],
  ['w2', { pool: 'storage' }],
  ['w3', { pool: 'storage' }],
  ['w4', { pool: 'compute' }],
]);
const storage: PolicyFacts = {
  name: 'storage',
  spec: { nodeSelector: { matchLabels: { pool: 'storage' } }, maxConcurrent: 2 },
};

function inPhase(
  name: string,
  node: string,
  phase: NodeActionPhase,
  createdAt = 0,
  extra: Partial<ObservedNodeAction['metadata']> = {},
) {
  return action(
    { nodeName: node },
    { phase, message: 'waiting for its policies to allow it' },
    {
      name,
      uid: `uid-${name}`,
      creationTimestamp: at(createdAt).toISOString(),
      ...extra,
    },
  );
}

describe('planAdmissions', () => {
  it("keeps an action off a node another instance's action holds, without counting it against the budget", () => {
    const pending = (name: string, node: string) =>
      inPhase(name, node, 'Pending', 1, { finalizers: [FINALIZER] });
    const foreign = inPhase('canary', 'w1', 'Approved', 0, {
      labels: { 'talos.dev/controller-instance': 'canary' },
    });
    const plan = planAdmissions({
      now: T0,
      policies: [storage],
      nodes,
      actions: [pending('a', 'w1'), pending('b', 'w2'), pending('c', 'w3')],
      others: [foreign, inPhase('done', 'w2', 'Succeeded', 0)],
    });
    assert.deepEqual(
      plan.admit.map((u) => u.action.metadata.name),
      ['b', 'c'],
    );
    assert.match(
      plan.wait.find((u) => u.action.metadata.name === 'a')?.status.message ?? '',
      /another action on w1 is in progress: canary on w1 \(controller instance canary\)/,
    );
  });

  it("keeps a control-plane action out while another instance's holds another control-plane node", () => {
    const cpNodes = new Map<string, Record<string, string>>([
      ...nodes,
      ['cp-1', { [CP]: '' }],
      ['cp-2', { [CP]: '' }],
    ]);
    const foreign = inPhase('canary-cp', 'cp-2', 'WaitingForHealth', 0, {
      labels: { 'talos.dev/controller-instance': 'canary' },
    });
    const plan = planAdmissions({
      now: T0,
      policies: [],
      nodes: cpNodes,
      actions: [inPhase('ours', 'cp-1', 'Pending', 1, { finalizers: [FINALIZER] })],
      others: [foreign],
    });
    assert.deepEqual(plan.admit, []);
    assert.match(
      plan.wait[0]?.status.message ?? '',
      /never two control-plane nodes at once: canary-cp on cp-2 \(controller instance canary\) in progress/,
    );
    // Not counted against our budget: without it, the default policy admits ours.
    assert.equal(
      planAdmissions({
        now: T0,
        policies: [],
        nodes: cpNodes,
        actions: [inPhase('ours', 'cp-1', 'Pending', 1, { finalizers: [FINALIZER] })],
        others: [
          inPhase('canary-w', 'w4', 'Approved', 0, { labels: { 'talos.dev/controller-instance': 'canary' } }),
        ],
      }).admit.length,
      1,
    );
  });

  it('admits the oldest pending actions up to the budget, counting those admitted ahead of them', () => {
    const plan = planAdmissions({
      now: T0,
      policies: [storage],
      nodes,
      actions: [
        inPhase('c', 'w3', 'Pending', 3),
        inPhase('a', 'w1', 'Pending', 1),
        inPhase('b', 'w2', 'Pending', 2),
      ],
    });
    assert.deepEqual(
      plan.admit.map((u) => u.action.metadata.name),
      ['a', 'b'],
    );
    for (const u of plan.admit) {
      assert.equal(u.status.phase, 'WaitingForHealth');
      assert.equal(u.status.phaseTime, T0.toISOString());
      assert.match(u.status.message ?? '', /allowed by ActionPolicy storage; evaluating its health checks/);
      assert.equal(u.status.conditions?.find((c) => c.type === 'Admitted')?.status, 'True');
    }
    assert.deepEqual(
      plan.wait.map((u) => u.action.metadata.name),
      ['c'],
    );
    assert.match(
      plan.wait[0]?.status.message ?? '',
      /ActionPolicy storage allows 2 at once and 2 are in progress \(a on w1, b on w2\)/,
    );
    assert.deepEqual(
      plan.holders.map((h) => h.name),
      ['a', 'b'],
    );
    assert.equal(plan.requeueAfterMs, 60_000);
  });

  it('counts every slot-holding phase, from WaitingForHealth to RunningPostHooks, and nothing finished', () => {
    const holding = [
      'WaitingForHealth',
      'RunningPreHooks',
      'Approved',
      'Executing',
      'WaitingForNode',
      'RunningPostHooks',
    ] as const;
    for (const phase of holding) {
      const plan = planAdmissions({
        now: T0,
        policies: [{ name: 'one', spec: { maxConcurrent: 1 } }],
        nodes,
        actions: [inPhase('busy', 'w1', phase), inPhase('next', 'w2', 'Pending', 5)],
      });
      assert.equal(plan.admit.length, 0, phase);
    }
    for (const phase of ['Succeeded', 'Failed', 'Denied', 'Cancelled'] as const) {
      const plan = planAdmissions({
        now: T0,
        policies: [{ name: 'one', spec: { maxConcurrent: 1 } }],
        nodes,
        actions: [inPhase('done', 'w1', phase), inPhase('next', 'w2', 'Pending', 5)],
      });
      assert.equal(plan.admit.length, 1, phase);
    }
  });

  it('skips actions not yet set up (no finalizer), being deleted, or on a node that does not exist', () => {
    const plan = planAdmissions({
      now: T0,
      policies: [],
      nodes,
      actions: [
        inPhase('new', 'w1', 'Pending', 1, { finalizers: [] }),
        inPhase('deleted', 'w2', 'Pending', 2, {
          deletionTimestamp: T0.toISOString(),
          finalizers: [FINALIZER],
        }),
        inPhase('nowhere', 'w9', 'Pending', 3),
        inPhase('ok', 'w4', 'Pending', 4),
      ],
    });
    assert.deepEqual(
      plan.admit.map((u) => u.action.metadata.name),
      ['ok'],
    );
    assert.deepEqual(plan.wait, []);
  });

  it('does not rewrite a waiting action whose reason is unchanged, and wakes when a window opens', () => {
    const nightly: PolicyFacts = {
      name: 'nightly',
      spec: { windows: [{ schedule: '0 12 * * *', duration: '1h' }] },
    };
    const first = planAdmissions({
      now: T0,
      policies: [nightly],
      nodes,
      actions: [inPhase('a', 'w1', 'Pending')],
    });
    assert.equal(first.wait.length, 1);
    assert.equal(first.requeueAfterMs, 60_000, 'the resync comes before the window (at 12:00)');
    const again = planAdmissions({
      now: T0,
      policies: [nightly],
      nodes,
      actions: [{ ...inPhase('a', 'w1', 'Pending'), status: first.wait[0]?.status }],
    });
    assert.deepEqual(again.wait, []);
    const soon = planAdmissions({
      now: new Date('2026-03-02T11:59:30Z'),
      policies: [nightly],
      nodes,
      actions: [inPhase('a', 'w1', 'Pending')],
    });
    assert.equal(soon.requeueAfterMs, 30_000);
  });
});

describe('planRetention', () => {
  const finished = (name: string, node: string, completedSecondsAgo: number, now: Date) =>
    action(
      { nodeName: node },
      {
        phase: 'Succeeded',
        completionTime: new Date(now.getTime() - completedSecondsAgo * 1000).toISOString(),
      },
      {
        name,
        uid: name,
      },
    );

  it('deletes finished actions past the retention, keeping the newest few per node and anything unfinished', () => {
    const now = new Date('2026-03-20T00:00:00Z');
    const day = 86_400;
    const actions = [
      finished('old-1', 'w1', 10 * day, now),
      finished('old-2', 'w1', 9 * day, now),
      finished('old-3', 'w1', 8 * day, now),
      finished('old-4', 'w1', 7.5 * day, now),
      finished('recent', 'w1', 1 * day, now),
      finished('lonely-old', 'w2', 30 * day, now),
      action({ nodeName: 'w1' }, { phase: 'WaitingForNode' }, { name: 'running', uid: 'running' }),
    ];
    const plan = planRetention(actions, now, { retentionMs: 7 * day * 1000, keepPerNode: 3 });
    assert.deepEqual(plan.expired.map((a) => a.metadata.name).sort(), ['old-1', 'old-2']);
    assert.equal(plan.nextExpiryMs, undefined, 'the kept ones are the newest three, they do not expire');
    const keepOne = planRetention(actions, now, { retentionMs: 7 * day * 1000, keepPerNode: 1 });
    assert.deepEqual(keepOne.expired.map((a) => a.metadata.name).sort(), [
      'old-1',
      'old-2',
      'old-3',
      'old-4',
    ]);
    assert.equal(keepOne.nextExpiryMs, undefined);
    const keepNone = planRetention(actions, now, { retentionMs: 7 * day * 1000, keepPerNode: 0 });
    assert.deepEqual(keepNone.expired.map((a) => a.metadata.name).sort(), [
      'lonely-old',
      'old-1',
      'old-2',
      'old-3',
      'old-4',
    ]);
    assert.equal(keepNone.nextExpiryMs, 6 * day * 1000, 'recent expires in six days');
  });
});

describe('reconciler helpers', () => {
  it('select the actions of an instance, or those of no instance', () => {
    assert.equal(instanceSelector('canary'), 'talos.dev/controller-instance=canary');
    assert.equal(instanceSelector(undefined), '!talos.dev/controller-instance');
  });

  it('read a Node as labels, boot ID and readiness', () => {
    assert.equal(nodeFacts(undefined), undefined);
    const node = {
      metadata: { name: 'w1', labels: { pool: 'a' } },
      status: {
        nodeInfo: { bootID: 'b1' },
        conditions: [
          { type: 'MemoryPressure', status: 'False' },
          { type: 'Ready', status: 'True' },
        ],
      },
    };
    assert.deepEqual(nodeFacts(node), { name: 'w1', labels: { pool: 'a' }, bootID: 'b1', ready: true });
    assert.deepEqual(nodeFacts({ metadata: { name: 'w2' } }), {
      name: 'w2',
      labels: {},
      bootID: undefined,
      ready: false,
    });
  });

  it('compare statuses as JSON, whatever the key order, so an unchanged status is not written', () => {
    assert.ok(sameJSON({ a: 1, b: { c: [1, { d: 2, e: 3 }] } }, { b: { c: [1, { e: 3, d: 2 }] }, a: 1 }));
    assert.ok(sameJSON({ a: 1, gone: undefined }, { a: 1 }));
    assert.ok(!sameJSON({ a: [1, 2] }, { a: [2, 1] }));
  });
});
