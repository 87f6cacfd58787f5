// onDrainTimeout (src/rollouts/quarantine.ts): an undrainable node fails, is skipped, or
// is set aside — cordoned, labelled, tried once more at the end, never forced — within
// maxQuarantined; and, as a property over random histories with restarts, a node set
// aside is never acted on but by its one retry.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { NodeActionPhase } from '../../src/api/node-action.ts';
import type { NodeRolloutSpec, ObservedNodeRollout } from '../../src/api/node-rollout.ts';
import { CORDONED_BY_ANNOTATION, QUARANTINED_LABEL } from '../../src/api/names.ts';
import { decide, type RolloutPlan } from '../../src/rollouts/decide.ts';
import type { RolloutActionFacts, RolloutInput, RolloutNodeFacts } from '../../src/rollouts/facts.ts';
import { rolloutActionName, rolloutRetryName } from '../../src/rollouts/naming.ts';
import { markPatch } from '../../src/rollouts/reconciler.ts';

const NOW = new Date('2026-03-02T10:00:00Z');

function rollout(
  spec: Partial<NodeRolloutSpec>,
  status?: ObservedNodeRollout['status'],
): ObservedNodeRollout {
  return {
    metadata: { name: 'r', uid: 'uid-r', generation: 1 },
    spec: { action: 'Reboot', requestedBy: 'alice', ...spec },
    ...(status ? { status } : {}),
  };
}

const nodes = (n: number): RolloutNodeFacts[] =>
  Array.from({ length: n }, (_, i) => ({
    name: `w${String(i + 1)}`,
    labels: {},
    osImage: 'Talos (v1.13.0)',
  }));

function input(r: ObservedNodeRollout, n: number, actions: RolloutActionFacts[]): RolloutInput {
  return { rollout: r, nodes: nodes(n), actions, policies: [], history: [], now: NOW };
}

const first = (node: string) => rolloutActionName('r', node);
const retry = (node: string) => rolloutRetryName('r', node);
const ok = (name: string, node: string): RolloutActionFacts => ({ name, node, phase: 'Succeeded' });
const stuck = (name: string, node: string): RolloutActionFacts => ({
  name,
  node,
  phase: 'Failed',
  drainTimedOut: true,
  blockedBy: 'db-0 blocked by PodDisruptionBudget prod/db (0 disruptions allowed)',
  message: 'the drain failed',
});
const entry = (plan: RolloutPlan, node: string) => plan.status.nodes?.find((e) => e.node === node);

describe('onDrainTimeout: Quarantine', () => {
  const spec = { onDrainTimeout: 'Quarantine' as const, maxParallel: 1 };

  it('sets the node aside (cordon handed to its retry, labelled), goes on, and tries it once more at the end', () => {
    let plan = decide(input(rollout(spec), 3, [stuck(first('w1'), 'w1')]));
    assert.equal(entry(plan, 'w1')?.phase, 'Quarantined');
    assert.match(entry(plan, 'w1')?.message ?? '', /set aside.*PodDisruptionBudget prod\/db/);
    assert.equal(entry(plan, 'w1')?.quarantine?.action, first('w1'));
    assert.deepEqual(plan.create, [{ name: first('w2'), node: 'w2' }], 'the rollout moves on');
    assert.equal(plan.status.counts?.quarantined, 1);
    assert.deepEqual(plan.marks, [
      { node: 'w1', labelled: true, cordon: { from: [first('w1')], to: retry('w1') } },
    ]);
    assert.ok(plan.events.some((e) => e.reason === 'NodeQuarantined'));

    // w2 and w3 done: now, and only now, w1's retry.
    const done = [stuck(first('w1'), 'w1'), ok(first('w2'), 'w2'), ok(first('w3'), 'w3')];
    plan = decide(input(rollout(spec, plan.status), 3, done));
    assert.deepEqual(plan.create, [{ name: retry('w1'), node: 'w1' }]);
    assert.equal(entry(plan, 'w1')?.phase, 'Running');
    assert.notEqual(plan.status.conditions?.find((c) => c.type === 'Complete')?.status, 'True');

    // The retry drains and succeeds: the label goes, the rollout is complete.
    plan = decide(input(rollout(spec, plan.status), 3, [...done, ok(retry('w1'), 'w1')]));
    assert.equal(entry(plan, 'w1')?.phase, 'Succeeded');
    assert.equal(entry(plan, 'w1')?.quarantine?.action, first('w1'), 'its record stays');
    assert.deepEqual(plan.create, []);
    assert.deepEqual(plan.marks, [{ node: 'w1', labelled: false }]);
    assert.equal(plan.status.conditions?.find((c) => c.type === 'Complete')?.status, 'True');
  });

  it('the last node, set aside and retried in the same pass, hands its cordon to the retry before it starts', () => {
    const actions = [ok(first('w1'), 'w1'), stuck(first('w2'), 'w2')];
    const plan = decide(input(rollout(spec), 2, actions));
    assert.deepEqual(plan.create, [{ name: retry('w2'), node: 'w2' }]);
    assert.deepEqual(plan.marks, [
      { node: 'w2', labelled: true, cordon: { from: [first('w2')], to: retry('w2') } },
    ]);
  });

  it('a retry that cannot drain either leaves the node quarantined for a person, and the rollout completes', () => {
    const actions = [stuck(first('w1'), 'w1'), ok(first('w2'), 'w2'), stuck(retry('w1'), 'w1')];
    const plan = decide(input(rollout(spec), 2, actions));
    assert.equal(entry(plan, 'w1')?.phase, 'Quarantined');
    assert.equal(entry(plan, 'w1')?.quarantine?.retried, true);
    assert.deepEqual(plan.create, [], 'never a third try');
    assert.deepEqual(plan.marks, [{ node: 'w1', labelled: true }], 'the cordon stays the retry’s');
    assert.equal(plan.status.conditions?.find((c) => c.type === 'Complete')?.status, 'True');
    assert.match(plan.status.message ?? '', /1 quarantined \(cordoned and labelled talos\.dev\/quarantined/);
  });

  it('at most maxQuarantined set aside: the next undrainable node fails, its kept cordon lifted', () => {
    const two = { ...spec, maxParallel: 2, maxQuarantined: 1, maxFailures: 5 };
    let plan = decide(input(rollout(two), 3, [stuck(first('w1'), 'w1')]));
    plan = decide(input(rollout(two, plan.status), 3, [stuck(first('w1'), 'w1'), stuck(first('w2'), 'w2')]));
    assert.equal(entry(plan, 'w1')?.phase, 'Quarantined', 'the first set aside stays so');
    assert.equal(entry(plan, 'w2')?.phase, 'Failed');
    assert.match(entry(plan, 'w2')?.message ?? '', /1 node is already set aside \(maxQuarantined\)/);
    assert.deepEqual(
      plan.marks?.find((m) => m.node === 'w2'),
      { node: 'w2', labelled: false, cordon: { from: [first('w2')], to: null } },
    );
  });

  it('a retry that failed after touching the node keeps its cordon: only an undrained one is lifted', () => {
    const broke = { name: retry('w1'), node: 'w1', phase: 'Failed' as const, message: 'Talos call failed' };
    const plan = decide(
      input(rollout({ ...spec, maxFailures: 5 }), 2, [
        stuck(first('w1'), 'w1'),
        ok(first('w2'), 'w2'),
        broke,
      ]),
    );
    assert.equal(entry(plan, 'w1')?.phase, 'Failed');
    assert.deepEqual(
      plan.marks?.find((m) => m.node === 'w1'),
      { node: 'w1', labelled: false },
      'the label goes, the cordon is the action’s',
    );
  });

  it('a canary that cannot be drained stops the rollout: it proves nothing', () => {
    const canary = { ...spec, canary: { nodes: 1, soak: '0s' } };
    const plan = decide(input(rollout(canary), 3, [stuck(first('w1'), 'w1')]));
    assert.deepEqual(plan.create, []);
    assert.equal(plan.status.conditions?.find((c) => c.type === 'Halted')?.reason, 'CanaryFailed');
    assert.match(plan.status.message ?? '', /canary node w1 could not be drained \(quarantined\)/);
  });
});

describe('onDrainTimeout: Skip and Fail', () => {
  it('Skip: the node is skipped with what blocked it, and the rollout goes on', () => {
    const plan = decide(input(rollout({ onDrainTimeout: 'Skip' }), 2, [stuck(first('w1'), 'w1')]));
    assert.equal(entry(plan, 'w1')?.phase, 'Skipped');
    assert.match(entry(plan, 'w1')?.message ?? '', /skipped \(onDrainTimeout: Skip\).*prod\/db/);
    assert.deepEqual(plan.create, [{ name: first('w2'), node: 'w2' }]);
    assert.ok(plan.events.some((e) => e.reason === 'NodeSkipped'));
  });

  it('Fail (the default): an undrainable node is a failure and halts at the budget', () => {
    const plan = decide(input(rollout({}), 2, [stuck(first('w1'), 'w1')]));
    assert.equal(entry(plan, 'w1')?.phase, 'Failed');
    assert.deepEqual(plan.create, []);
    assert.equal(plan.status.conditions?.find((c) => c.type === 'Halted')?.reason, 'FailureBudgetExhausted');
  });
});

describe('the node marks as patches', () => {
  const cached = (labels: Record<string, string>, by?: string) => ({
    metadata: {
      name: 'w1',
      uid: 'u',
      resourceVersion: '7',
      labels,
      ...(by ? { annotations: { [CORDONED_BY_ANNOTATION]: by } } : {}),
    },
  });

  it('hands the cordon over only while it is the first action’s, and writes nothing twice', () => {
    const mark = { node: 'w1', labelled: true, cordon: { from: ['a1'], to: 'a1-retry' } };
    assert.deepEqual(markPatch(cached({}, 'a1'), mark, 'r'), {
      metadata: {
        resourceVersion: '7',
        labels: { [QUARANTINED_LABEL]: 'r' },
        annotations: { [CORDONED_BY_ANNOTATION]: 'a1-retry' },
      },
    });
    assert.equal(markPatch(cached({ [QUARANTINED_LABEL]: 'r' }, 'a1-retry'), mark, 'r'), undefined);
    // Someone uncordoned it (no mark), or cordoned it for their own reasons: theirs.
    assert.deepEqual(markPatch(cached({ [QUARANTINED_LABEL]: 'r' }), mark, 'r'), undefined);
  });

  it('lifts a kept cordon, and removes only its own label', () => {
    const lift = { node: 'w1', labelled: false, cordon: { from: ['a1'], to: null } };
    assert.deepEqual(markPatch(cached({ [QUARANTINED_LABEL]: 'r' }, 'a1'), lift, 'r'), {
      metadata: {
        resourceVersion: '7',
        labels: { [QUARANTINED_LABEL]: null },
        annotations: { [CORDONED_BY_ANNOTATION]: null },
      },
      spec: { unschedulable: false },
    });
    assert.equal(
      markPatch(cached({ [QUARANTINED_LABEL]: 'other' }), { node: 'w1', labelled: false }, 'r'),
      undefined,
    );
  });
});

describe('quarantine as a process (property)', () => {
  const outcome = fc.constantFrom<'ok' | 'stuck' | 'failed' | 'run'>(
    'ok',
    'ok',
    'stuck',
    'stuck',
    'failed',
    'run',
  );

  it('each name made once, a node set aside acted on only by its one retry, a kept cordon never lifted while it is aside, never more than maxParallel', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 3 }),
        fc.constantFrom<'Fail' | 'Quarantine' | 'Skip'>('Quarantine', 'Quarantine', 'Skip', 'Fail'),
        fc.array(fc.tuple(fc.nat(), outcome, fc.boolean()), { maxLength: 80 }),
        (count, maxParallel, maxQuarantined, mode, steps) => {
          const spec = { onDrainTimeout: mode, maxParallel, maxQuarantined, maxFailures: 9 };
          const actions = new Map<string, RolloutActionFacts>();
          const made = new Set<string>();
          let status: ObservedNodeRollout['status'];
          for (let i = 0; i < 90; i++) {
            const [pick = 0, next = 'ok', restart = false] = steps[i % Math.max(1, steps.length)] ?? [];
            // A restart loses the status' latest write: the actions still say it all.
            const plan = decide(
              input(rollout(spec, restart ? undefined : status), count, [...actions.values()]),
            );
            const aside = new Set(
              (plan.status.nodes ?? []).filter((e) => e.phase === 'Quarantined').map((e) => e.node),
            );
            for (const c of plan.create) {
              assert.ok(!made.has(c.name), `${c.name} made twice`);
              made.add(c.name);
              if (c.name === retry(c.node)) {
                assert.equal(mode, 'Quarantine', 'a retry only under Quarantine');
                assert.ok(
                  plan.marks?.some((m) => m.node === c.node && m.cordon?.to === c.name),
                  `${c.name} made without the cordon handed to it`,
                );
                assert.ok(
                  actions.get(first(c.node))?.drainTimedOut,
                  `${c.node} retried without being undrainable`,
                );
              } else assert.equal(c.name, first(c.node));
              actions.set(c.name, { name: c.name, node: c.node, phase: 'Pending' });
            }
            for (const m of plan.marks ?? [])
              if (aside.has(m.node))
                assert.notEqual(m.cordon?.to, null, `${m.node}'s cordon lifted while set aside`);
            const unfinished = [...actions.values()].filter((a) => a.phase === 'Pending').length;
            assert.ok(unfinished <= maxParallel, `${String(unfinished)} unfinished`);
            status = plan.status;
            const running = [...actions.values()].filter((a) => a.phase === 'Pending');
            const a = running[pick % Math.max(1, running.length)];
            if (!a || next === 'run') continue;
            const phase: NodeActionPhase = next === 'ok' ? 'Succeeded' : 'Failed';
            actions.set(a.name, next === 'stuck' ? stuck(a.name, a.node) : { ...a, phase });
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
