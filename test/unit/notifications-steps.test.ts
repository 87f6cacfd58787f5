// Which Events are steps, and which policies want them.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NODE_ACTION_PHASES } from '../../src/api/node-action.ts';
import { NOTIFICATION_STEPS } from '../../src/api/notification-policy.ts';
import { ACTION_STEPS, ROLLOUT_STEPS, rolloutEventNode, stepOf } from '../../src/notifications/steps.ts';
import { policyWants, subjectOf } from '../../src/notifications/subject.ts';

const webhook = { url: 'http://127.0.0.1:1/hook', signingSecretRef: { name: 's', key: 'k' } };

describe('notification steps', () => {
  it('classify an action’s life: requested, held, approved, done or failed', () => {
    assert.equal(stepOf('NodeAction', 'Requested')?.step, 'Started');
    assert.deepEqual(stepOf('NodeAction', 'Pending'), { step: 'Held', tentative: true });
    assert.deepEqual(stepOf('NodeAction', 'WaitingForHealth'), { step: 'Held', tentative: true });
    assert.equal(stepOf('NodeAction', 'DoNotDisrupt')?.step, 'Held');
    assert.equal(stepOf('NodeAction', 'Approved')?.step, 'Approved');
    assert.deepEqual(stepOf('NodeAction', 'Succeeded'), { step: 'Done', final: true });
    for (const end of ['Failed', 'Denied', 'Cancelled'])
      assert.deepEqual(stepOf('NodeAction', end), { step: 'Failed', final: true });
    // Steps between approval and the end are not sent.
    for (const quiet of ['RunningPreHooks', 'Executing', 'WaitingForNode', 'RunningPostHooks', 'Draining'])
      assert.equal(stepOf('NodeAction', quiet), undefined, quiet);
    // Another kind's Event of the same reason is not a step.
    assert.equal(stepOf('Node', 'Approved'), undefined);
    assert.equal(stepOf(undefined, 'Approved'), undefined);
    assert.equal(stepOf('NodeAction', 'toString'), undefined, 'no prototype keys');
  });

  it('name only phases and steps that exist, and every terminal phase is final', () => {
    for (const [reason, rule] of Object.entries(ACTION_STEPS)) {
      assert.ok(NOTIFICATION_STEPS.includes(rule.step));
      if (['Succeeded', 'Failed', 'Denied', 'Cancelled'].includes(reason)) assert.equal(rule.final, true);
    }
    for (const phase of ['Pending', 'WaitingForHealth', 'Approved', 'Succeeded', 'Failed'])
      assert.ok(NODE_ACTION_PHASES.includes(phase as never));
    assert.deepEqual(
      Object.entries(ROLLOUT_STEPS)
        .filter(([, r]) => r.final)
        .map(([reason]) => reason),
      ['Completed'],
    );
  });

  it('find the node a rollout’s per-node Event names', () => {
    assert.equal(rolloutEventNode('NodeStarted', 'worker-1: NodeAction r-1'), 'worker-1');
    assert.equal(rolloutEventNode('Completed', 'worker-1: x'), undefined);
  });
});

describe('policyWants', () => {
  const labels: Record<string, Record<string, string>> = {
    'worker-1': { pool: 'a' },
    'worker-2': { pool: 'b' },
  };
  const nodeLabels = (n: string) => labels[n];
  const action = subjectOf(
    'NodeAction',
    {
      metadata: { name: 'r1', uid: 'u1', labels: { 'talos.dev/rollout': 'roll' } },
      spec: { nodeName: 'worker-1', action: 'Reboot', requestedBy: 'alice', execution: 'External' },
    } as never,
    'Requested',
    'alice requested',
  );

  it('takes the subject’s facts from the object', () => {
    assert.deepEqual(action, {
      kind: 'NodeAction',
      name: 'r1',
      uid: 'u1',
      action: 'Reboot',
      requestedBy: 'alice',
      execution: 'External',
      node: 'worker-1',
      rollout: 'roll',
      nodes: ['worker-1'],
    });
  });

  it('matches by node selector, action kind and step', () => {
    assert.ok(policyWants({ webhook }, action, 'Started', nodeLabels));
    assert.ok(
      policyWants({ webhook, nodeSelector: { matchLabels: { pool: 'a' } } }, action, 'Started', nodeLabels),
    );
    assert.ok(
      !policyWants({ webhook, nodeSelector: { matchLabels: { pool: 'b' } } }, action, 'Started', nodeLabels),
    );
    assert.ok(!policyWants({ webhook, actions: ['Upgrade'] }, action, 'Started', nodeLabels));
    assert.ok(policyWants({ webhook, actions: ['Upgrade', 'Reboot'] }, action, 'Started', nodeLabels));
    assert.ok(!policyWants({ webhook, steps: ['Done', 'Failed'] }, action, 'Started', nodeLabels));
    assert.ok(policyWants({ webhook, steps: ['Done', 'Failed'] }, action, 'Failed', nodeLabels));
  });

  it('matches a rollout by any of its nodes, unless rollouts are off', () => {
    const rollout = subjectOf(
      'NodeRollout',
      {
        metadata: { name: 'roll' },
        spec: { action: 'Upgrade', requestedBy: 'bob' },
        status: { nodes: [{ node: 'worker-2' }] },
      } as never,
      'NodeStarted',
      'worker-1: NodeAction roll-worker-1',
    );
    assert.deepEqual(rollout.nodes, ['worker-2', 'worker-1']);
    assert.equal(rollout.node, 'worker-1');
    const poolB = { webhook, nodeSelector: { matchLabels: { pool: 'b' } } };
    assert.ok(policyWants(poolB, rollout, 'Started', nodeLabels));
    assert.ok(!policyWants({ ...poolB, rollouts: false }, rollout, 'Started', nodeLabels));
    assert.ok(
      !policyWants({ webhook, nodeSelector: { matchLabels: { pool: 'c' } } }, rollout, 'Started', nodeLabels),
    );
  });

  it('does not match a gone node against a selector', () => {
    const gone = { ...action, nodes: ['gone'] };
    assert.ok(!policyWants({ webhook, nodeSelector: {} }, gone, 'Started', nodeLabels));
    assert.ok(policyWants({ webhook }, gone, 'Started', nodeLabels));
  });
});
