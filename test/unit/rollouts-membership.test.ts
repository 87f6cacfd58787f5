// A rollout counts only the NodeActions it made (src/rollouts/membership.ts): one that
// claims it by ownerReference with another name, action, target or requester — or holds
// the name of one of its actions — is an impostor, whose node waits and is never done.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ROLLOUT_LABEL } from '../../src/api/names.ts';
import type { NodeActionSpec, ObservedNodeAction } from '../../src/api/node-action.ts';
import type { ObservedNodeRollout } from '../../src/api/node-rollout.ts';
import { decide } from '../../src/rollouts/decide.ts';
import { notMadeBy, sortClaims } from '../../src/rollouts/membership.ts';

const NOW = new Date('2026-03-02T10:00:00Z');
const IMAGE = 'ghcr.io/siderolabs/installer:v1.13.1';

const rollout: ObservedNodeRollout = {
  metadata: { name: 'r', uid: 'uid-r', generation: 1 },
  spec: { action: 'Upgrade', upgrade: { image: IMAGE }, requestedBy: 'alice', execution: 'External' },
};

/** What the rollout itself makes for `node`, with `change` made to it. */
function action(
  node: string,
  change: { name?: string; owner?: string; label?: string; spec?: Partial<NodeActionSpec> } = {},
): ObservedNodeAction {
  return {
    metadata: {
      name: change.name ?? `r-${node}`,
      uid: `uid-${change.name ?? node}`,
      labels: { [ROLLOUT_LABEL]: change.label ?? 'r' },
      ownerReferences: [{ kind: 'NodeRollout', name: 'r', uid: change.owner ?? 'uid-r' }],
    } as ObservedNodeAction['metadata'],
    spec: {
      nodeName: node,
      action: 'Upgrade',
      upgrade: { image: IMAGE },
      execution: 'External',
      requestedBy: 'alice',
      ...change.spec,
    },
  };
}

describe('rollout membership', () => {
  it('counts what it would have made, whatever of its editable fields changed since', () => {
    assert.equal(notMadeBy(rollout, action('w1')), undefined);
    // Execution, drain, deadlines and bypass may have been edited on the rollout since.
    assert.equal(notMadeBy(rollout, action('w1', { spec: { execution: 'Managed' } })), undefined);
  });

  it('names every way an action differs from what the rollout makes', () => {
    const forged = action('w1', {
      name: 'harmless',
      spec: {
        action: 'ConfigChange',
        upgrade: undefined,
        configChange: { mode: 'NoReboot' },
        requestedBy: 'mallory',
      },
    });
    assert.equal(
      notMadeBy(rollout, forged),
      'its name is not r-w1; it is a ConfigChange, not a Upgrade; it was requested by mallory, not alice',
    );
    assert.equal(
      notMadeBy(
        rollout,
        action('w1', { spec: { upgrade: { image: 'ghcr.io/siderolabs/installer:v1.12.0' } } }),
      ),
      `it installs ghcr.io/siderolabs/installer:v1.12.0, not ${IMAGE}`,
    );
    assert.equal(
      notMadeBy(rollout, action('w1', { label: 'other' })),
      `its label ${ROLLOUT_LABEL} does not name this rollout`,
    );
    assert.equal(notMadeBy(rollout, action('w1', { owner: 'uid-other' })), 'it is not owned by this rollout');
  });

  it('sorts the claims on it into its own and impostors, and leaves other rollouts’ alone', () => {
    const { own, impostors } = sortClaims(rollout, [
      action('w1'),
      action('w2', { name: 'sneaky', spec: { requestedBy: 'mallory' } }),
      action('w3', { owner: 'uid-other' }),
    ]);
    assert.deepEqual(
      own.map((a) => a.metadata.name),
      ['r-w1'],
    );
    assert.deepEqual(impostors, [
      {
        name: 'sneaky',
        uid: 'uid-sneaky',
        node: 'w2',
        why: 'its name is not r-w2; it was requested by mallory, not alice',
      },
    ]);
  });

  it('holds an impostor’s node and never counts it done: the rollout is not Complete', () => {
    const nodes = [
      { name: 'w1', labels: {}, osImage: 'Talos (v1.13.0)' },
      { name: 'w2', labels: {}, osImage: 'Talos (v1.13.0)' },
    ];
    const impostor = { name: 'harmless', uid: 'u', node: 'w2', why: 'it is a ConfigChange, not a Upgrade' };
    const plan = decide({
      rollout: { ...rollout, spec: { ...rollout.spec, maxParallel: 2 } },
      nodes,
      // w1 done by its own action; w2's "done" action was the impostor, so it is not here.
      actions: [{ name: 'r-w1', node: 'w1', phase: 'Succeeded' }],
      impostors: [impostor],
      policies: [],
      history: [],
      now: NOW,
    });
    assert.deepEqual(plan.create, [], 'nothing started beside the impostor');
    const w2 = plan.status.nodes?.find((n) => n.node === 'w2');
    assert.equal(w2?.phase, 'Waiting');
    assert.equal(w2.action, undefined, 'the impostor is not remembered as the node’s action');
    assert.match(
      w2.message ?? '',
      /^NodeAction harmless is not one this rollout made \(it is a ConfigChange, not a Upgrade\): not counted; w2 waits until it is gone$/,
    );
    assert.equal(plan.status.conditions?.find((c) => c.type === 'Complete')?.status, 'False');
    assert.equal(plan.status.counts?.succeeded, 1);

    // Once it is gone, the rollout makes its own action for w2.
    const after = decide({
      rollout: { ...rollout, spec: { ...rollout.spec, maxParallel: 2 }, status: plan.status },
      nodes,
      actions: [{ name: 'r-w1', node: 'w1', phase: 'Succeeded' }],
      policies: [],
      history: [],
      now: NOW,
    });
    assert.deepEqual(after.create, [{ name: 'r-w2', node: 'w2' }]);
  });
});
