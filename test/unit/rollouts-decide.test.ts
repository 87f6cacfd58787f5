// The rollout core (src/rollouts/decide.ts): order, maxParallel, skipping, failure
// budget, pause, memory across restarts, vanished and new nodes, window fit — and, as
// properties over random histories, its invariants: never more than maxParallel
// unfinished, each node at most one action, nothing started once the budget is spent.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { NodeActionPhase } from '../../src/api/node-action.ts';
import type { NodeRolloutSpec, ObservedNodeRollout } from '../../src/api/node-rollout.ts';
import { decide } from '../../src/rollouts/decide.ts';
import {
  type RolloutActionFacts,
  type RolloutInput,
  type RolloutNodeFacts,
} from '../../src/rollouts/facts.ts';
import { expectedDuration, median } from '../../src/rollouts/expected-duration.ts';
import { rolloutActionName, rolloutLabelValue } from '../../src/rollouts/naming.ts';
import {
  PROMOTE_ANNOTATION,
  PROMOTED_BY_ANNOTATION,
  PROMOTE_REASON_ANNOTATION,
} from '../../src/api/names.ts';

const NOW = new Date('2026-03-02T10:00:00Z');
const CP = 'node-role.kubernetes.io/control-plane';

function rollout(
  spec: Partial<NodeRolloutSpec> = {},
  status?: ObservedNodeRollout['status'],
): ObservedNodeRollout {
  return {
    metadata: { name: 'r', uid: 'uid-r', generation: 1 },
    spec: {
      action: 'Upgrade',
      upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
      requestedBy: 'alice',
      ...spec,
    },
    ...(status ? { status } : {}),
  };
}

function node(name: string, labels: Record<string, string> = {}, version = 'v1.13.0'): RolloutNodeFacts {
  return { name, labels, osImage: `Talos (${version})` };
}

function input(partial: Partial<RolloutInput>): RolloutInput {
  return { rollout: rollout(), nodes: [], actions: [], policies: [], history: [], now: NOW, ...partial };
}

const workers = (n: number) => Array.from({ length: n }, (_, i) => node(`w${String(i + 1)}`));

describe('rollout decide', () => {
  it('starts maxParallel nodes in name order, workers before the control plane', () => {
    const nodes = [node('cp1', { [CP]: '' }), ...workers(3)];
    const plan = decide(input({ rollout: rollout({ maxParallel: 2 }), nodes }));
    assert.deepEqual(
      plan.create.map((c) => c.node),
      ['w1', 'w2'],
    );
    assert.equal(plan.create[0]?.name, 'r-w1');
    assert.deepEqual(
      plan.events.map((e) => `${e.reason} ${e.message}`),
      ['NodeStarted w1: NodeAction r-w1', 'NodeStarted w2: NodeAction r-w2'],
    );
    // Once the status shows them, the same world is no news.
    const again = decide(
      input({
        rollout: rollout({ maxParallel: 2 }, plan.status),
        nodes,
        actions: plan.create.map((c) => ({ name: c.name, node: c.node, phase: 'Pending' })),
      }),
    );
    assert.deepEqual(again.events, []);
    assert.deepEqual(again.create, []);
    assert.deepEqual(plan.status.counts, {
      pending: 2,
      running: 2,
      succeeded: 0,
      failed: 0,
      skipped: 0,
      vanished: 0,
    });
    assert.deepEqual(
      plan.status.nodes?.map((n) => n.node),
      ['w1', 'w2', 'w3', 'cp1'],
    );
  });

  it('with controlPlaneFirst starts the control plane first and waits for it', () => {
    const nodes = [node('cp1', { [CP]: '' }), ...workers(2)];
    const first = decide(input({ rollout: rollout({ maxParallel: 3, order: 'controlPlaneFirst' }), nodes }));
    assert.deepEqual(
      first.create.map((c) => c.node),
      ['cp1'],
    );
  });

  it('skips nodes already at the target version, and counts them', () => {
    const nodes = [node('w1', {}, 'v1.13.1'), node('w2')];
    const plan = decide(input({ nodes, rollout: rollout({ maxParallel: 5 }) }));
    assert.deepEqual(
      plan.create.map((c) => c.node),
      ['w2'],
    );
    assert.equal(plan.status.counts?.skipped, 1);
    assert.equal(plan.status.targetVersion, 'v1.13.1');
  });

  it('does nothing for a finished rollout applied again: every node at target', () => {
    const nodes = [node('w1', {}, 'v1.13.1'), node('w2', {}, 'v1.13.1')];
    const plan = decide(input({ nodes }));
    assert.equal(plan.create.length, 0);
    assert.equal(plan.status.conditions?.find((c) => c.type === 'Complete')?.status, 'True');
  });

  it('never starts a node twice: an action, or a memory of one, is enough', () => {
    const nodes = workers(2);
    const actions: RolloutActionFacts[] = [{ name: 'r-w1', node: 'w1', phase: 'Succeeded' }];
    const remembered = rollout(
      { maxParallel: 2 },
      { nodes: [{ node: 'w2', phase: 'Running', action: 'r-w2' }] },
    );
    const plan = decide(input({ rollout: remembered, nodes, actions }));
    assert.equal(plan.create.length, 0);
    assert.equal(plan.status.nodes?.find((n) => n.node === 'w2')?.phase, 'Running');
  });

  it('reports a remembered action confirmed deleted as a failure, not a new start', () => {
    const remembered = rollout(
      { maxFailures: 1 },
      { nodes: [{ node: 'w1', phase: 'Running', action: 'r-w1' }] },
    );
    const plan = decide(input({ rollout: remembered, nodes: workers(1), deletedActions: new Set(['r-w1']) }));
    assert.equal(plan.create.length, 0);
    assert.match(plan.status.nodes?.[0]?.message ?? '', /was deleted before it finished/);
  });

  it('halts when failures exceed maxFailures, naming the node and why', () => {
    const nodes = workers(3);
    const actions: RolloutActionFacts[] = [
      { name: 'r-w1', node: 'w1', phase: 'Failed', message: 'drain timed out' },
    ];
    const plan = decide(input({ nodes, actions }));
    assert.equal(plan.create.length, 0);
    const halted = plan.status.conditions?.find((c) => c.type === 'Halted');
    assert.equal(halted?.status, 'True');
    assert.ok(halted);
    assert.match(halted.message, /w1: Failed: drain timed out/);
    assert.ok(plan.events.some((e) => e.reason === 'Halted'));
    const tolerant = decide(input({ rollout: rollout({ maxFailures: 1 }), nodes, actions }));
    assert.deepEqual(
      tolerant.create.map((c) => c.node),
      ['w2'],
    );
  });

  it('paused starts none and says so', () => {
    const plan = decide(input({ rollout: rollout({ paused: true }), nodes: workers(2) }));
    assert.equal(plan.create.length, 0);
    assert.equal(plan.status.conditions?.find((c) => c.type === 'Halted')?.reason, 'Paused');
  });

  it('finishes one group before the next, nodes without the label last', () => {
    const nodes = [
      node('a1', { zone: 'b' }),
      node('a2', { zone: 'a' }),
      node('a3', {}),
      node('a4', { zone: 'a' }),
    ];
    const spec = { groupBy: 'zone', maxParallel: 5 };
    const first = decide(input({ rollout: rollout(spec), nodes }));
    assert.deepEqual(
      first.create.map((c) => c.node),
      ['a2', 'a4'],
    );
    const actions: RolloutActionFacts[] = [
      { name: 'r-a2', node: 'a2', phase: 'Succeeded' },
      { name: 'r-a4', node: 'a4', phase: 'Executing' },
    ];
    assert.equal(decide(input({ rollout: rollout(spec), nodes, actions })).create.length, 0);
    actions[1] = { name: 'r-a4', node: 'a4', phase: 'Succeeded' };
    assert.deepEqual(
      decide(input({ rollout: rollout(spec), nodes, actions })).create.map((c) => c.node),
      ['a1'],
    );
  });

  it('includes a new matching node and reports a vanished one', () => {
    const remembered = rollout({ maxParallel: 1 }, { nodes: [{ node: 'gone', phase: 'Pending' }] });
    const plan = decide(input({ rollout: remembered, nodes: [node('new')] }));
    assert.deepEqual(
      plan.create.map((c) => c.node),
      ['new'],
    );
    assert.equal(plan.status.nodes?.find((n) => n.node === 'gone')?.phase, 'Vanished');
  });

  it('respects the nodeSelector', () => {
    const nodes = [node('w1', { pool: 'a' }), node('w2', { pool: 'b' })];
    const plan = decide(input({ rollout: rollout({ nodeSelector: { matchLabels: { pool: 'b' } } }), nodes }));
    assert.deepEqual(
      plan.create.map((c) => c.node),
      ['w2'],
    );
    assert.equal(plan.status.nodes?.length, 1);
  });

  describe('window fit', () => {
    // A daily window 09:30–10:09 UTC: at 10:00, 9 minutes are left.
    const policies = [
      { name: 'nightly', spec: { windows: [{ schedule: '30 9 * * *', duration: '39m', timeZone: 'UTC' }] } },
    ];
    const history = (node: string, minutes: number, daysAgo: number) => ({
      node,
      action: 'Upgrade' as const,
      phase: 'Succeeded',
      startTime: new Date(NOW.getTime() - daysAgo * 86_400_000).toISOString(),
      completionTime: new Date(NOW.getTime() - daysAgo * 86_400_000 + minutes * 60_000).toISOString(),
    });

    it('refuses a node whose expected duration does not fit in what is left', () => {
      const plan = decide(
        input({
          nodes: [node('worker-4')],
          policies,
          history: [history('worker-4', 14, 1), history('worker-4', 14, 2)],
        }),
      );
      assert.equal(plan.create.length, 0);
      assert.match(plan.status.message ?? '', /waiting for the next window: worker-4 needs ~14m, 9m left/);
      assert.ok(plan.requeueAfterMs !== undefined && plan.requeueAfterMs > 60_000);
    });

    it('starts one that fits, from its own history or else its pool', () => {
      const short = decide(
        input({ nodes: [node('worker-4')], policies, history: [history('worker-4', 5, 1)] }),
      );
      assert.equal(short.create.length, 1);
      const pooled = decide(
        input({ nodes: [node('w1'), node('w2')], policies, history: [history('w2', 20, 1)] }),
      );
      assert.equal(pooled.create.length, 0, 'w1 has no history; its pool (w2) needs 20m');
    });

    it('uses the default without history, and the median of the last five', () => {
      assert.equal(expectedDuration('x', new Set(['x']), 'Upgrade', []).basis, 'default');
      assert.equal(median([3, 1, 2]), 2);
      assert.equal(median([4, 1, 2, 3]), 2.5);
      const entries = [1, 2, 3, 4, 5, 100].map((m, i) => history('x', m, 6 - i));
      // The oldest (1m) is beyond the last five: median of 2, 3, 4, 5, 100.
      assert.equal(expectedDuration('x', new Set(['x']), 'Upgrade', entries).ms, 4 * 60_000);
    });

    it('does not start anything while the window is closed', () => {
      const closed = [{ name: 'night', spec: { windows: [{ schedule: '0 2 * * *', duration: '1h' }] } }];
      const plan = decide(input({ nodes: workers(1), policies: closed }));
      assert.equal(plan.create.length, 0);
      assert.match(plan.status.message ?? '', /waiting for the next window of ActionPolicy night/);
    });
  });

  it('names actions deterministically and within the limits', () => {
    assert.equal(rolloutActionName('r', 'n'), 'r-n');
    const long = rolloutActionName('r'.repeat(200), 'n'.repeat(200));
    assert.ok(long.length <= 253);
    assert.equal(long, rolloutActionName('r'.repeat(200), 'n'.repeat(200)));
    assert.notEqual(long, rolloutActionName('r'.repeat(200), `${'n'.repeat(199)}m`));
    assert.ok(rolloutLabelValue('x'.repeat(100)).length <= 63);
    assert.equal(rolloutLabelValue('upgrade-1'), 'upgrade-1');
  });
});

describe('rollout decide, as a process (properties)', () => {
  const outcome = fc.constantFrom<NodeActionPhase>(
    'Succeeded',
    'Succeeded',
    'Succeeded',
    'Failed',
    'Executing',
  );

  it('never more than maxParallel unfinished, each node at most one action, nothing started past the budget', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 2 }),
        fc.array(fc.tuple(fc.nat(), outcome), { maxLength: 60 }),
        fc.array(fc.boolean(), { maxLength: 60 }),
        (count, maxParallel, maxFailures, steps, restarts) => {
          const nodes = Array.from({ length: count }, (_, i) =>
            node(`n${String(i)}`, i % 4 === 0 ? { [CP]: '' } : {}, i % 5 === 3 ? 'v1.13.1' : 'v1.13.0'),
          );
          const actions = new Map<string, RolloutActionFacts>();
          let status: ObservedNodeRollout['status'];
          let created = 0;
          for (let i = 0; i < 80; i++) {
            // A restart forgets the status' latest write half the time: the actions still say it all.
            const current = rollout(
              { maxParallel, maxFailures },
              restarts[i % Math.max(1, restarts.length)] ? undefined : status,
            );
            const plan = decide(input({ rollout: current, nodes, actions: [...actions.values()] }));
            const failedBefore = [...actions.values()].filter((a) => a.phase === 'Failed').length;
            if (failedBefore > maxFailures)
              assert.equal(plan.create.length, 0, 'started past the failure budget');
            for (const c of plan.create) {
              assert.ok(!actions.has(c.node), `${c.node} started twice`);
              actions.set(c.node, { name: c.name, node: c.node, phase: 'Pending' });
              created++;
            }
            const unfinished = [...actions.values()].filter(
              (a) => !['Succeeded', 'Failed', 'Denied', 'Cancelled'].includes(a.phase ?? ''),
            ).length;
            assert.ok(
              unfinished <= maxParallel,
              `${String(unfinished)} unfinished, maxParallel ${String(maxParallel)}`,
            );
            for (const c of plan.create)
              assert.ok(
                !nodes.find((n) => n.name === c.node)?.osImage?.includes('v1.13.1'),
                'a node at target started',
              );
            status = plan.status;
            // The world moves: one unfinished action takes a step.
            const step = steps[i % Math.max(1, steps.length)];
            const running = [...actions.values()].filter(
              (a) => a.phase === 'Pending' || a.phase === 'Executing',
            );
            if (step && running.length > 0) {
              const a = running[step[0] % running.length];
              if (a) actions.set(a.node, { ...a, phase: step[1] });
            } else if (running[0]) actions.set(running[0].node, { ...running[0], phase: 'Succeeded' });
          }
          assert.ok(created <= count);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a canary goes first and a pause holds: no other node before the canary succeeded, none past a pause not promoted', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 10 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 3 }),
        fc.array(fc.tuple(fc.nat(), outcome, fc.boolean(), fc.boolean()), { maxLength: 60 }),
        (count, maxParallel, canaryCount, steps) => {
          const nodes = Array.from({ length: count }, (_, i) => node(`n${String(i)}`));
          const paused = `n${String(count - 1)}`;
          const spec = {
            maxParallel,
            maxFailures: 9,
            canary: { nodes: canaryCount, soak: '0s' },
            pauseBefore: { nodes: [paused] },
          };
          const canary = new Set(nodes.slice(0, canaryCount).map((n) => n.name));
          const actions = new Map<string, RolloutActionFacts>();
          const promoted = new Set<string>();
          let status: ObservedNodeRollout['status'];
          let annotations: Record<string, string> | undefined;
          for (let i = 0; i < 80; i++) {
            const [pick = 0, next = 'Succeeded', restart = false, promote = false] =
              steps[i % Math.max(1, steps.length)] ?? [];
            const current = {
              ...rollout(spec, restart ? undefined : status),
              metadata: { name: 'r', uid: 'uid-r', generation: 1, ...(annotations ? { annotations } : {}) },
            };
            const plan = decide(input({ rollout: current, nodes, actions: [...actions.values()] }));
            for (const c of plan.create) {
              assert.ok(!actions.has(c.node), `${c.node} started twice`);
              const canaryDone = [...canary].every((n) => actions.get(n)?.phase === 'Succeeded');
              if (!canary.has(c.node))
                assert.ok(
                  canaryDone || promoted.has('canary-soak'),
                  `${c.node} started before the canary succeeded`,
                );
              if (c.node === paused)
                assert.ok(promoted.has(`pause/${paused}`), `${c.node} started past its pause`);
              actions.set(c.node, { name: c.name, node: c.node, phase: 'Pending' });
            }
            status = plan.status;
            // Someone promotes the gate the rollout waits at, now and then.
            const gate = plan.status.gate?.id;
            if (promote && gate) {
              promoted.add(gate);
              annotations = {
                [PROMOTE_ANNOTATION]: gate,
                [PROMOTED_BY_ANNOTATION]: 'bob',
                [PROMOTE_REASON_ANNOTATION]: 'go on',
              };
            }
            const running = [...actions.values()].filter(
              (a) => a.phase === 'Pending' || a.phase === 'Executing',
            );
            const a = running[pick % Math.max(1, running.length)];
            if (a) actions.set(a.node, { ...a, phase: next });
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('can fail: without the unfinished count, maxParallel is exceeded (control)', () => {
    const nodes = workers(4);
    // The same world, but the core is shown no actions: it would start the same nodes again.
    const plan1 = decide(input({ rollout: rollout({ maxParallel: 2 }), nodes }));
    const plan2 = decide(input({ rollout: rollout({ maxParallel: 2 }), nodes }));
    assert.equal(plan1.create.length + plan2.create.length, 4, 'blind to its actions it would run 4 at once');
  });
});
