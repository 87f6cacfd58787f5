// The rollout's plan (src/rollouts/plan.ts) and gates (src/rollouts/gates.ts), decided:
// a dry run starts nothing and plans the same order the rollout then takes, with skips,
// expected durations, window starts and preflight findings; a canary runs alone, a soak
// holds until its time is over with its checks healthy and halts when one is not, a pause
// holds until promoted; a promotion is taken once, for the gate that waits.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  PROMOTE_ANNOTATION,
  PROMOTED_BY_ANNOTATION,
  PROMOTE_REASON_ANNOTATION,
} from '../../src/api/names.ts';
import type { NodeRolloutSpec, ObservedNodeRollout } from '../../src/api/node-rollout.ts';
import { decide } from '../../src/rollouts/decide.ts';
import { PLAN_PLACEMENT_NODES } from '../../src/rollouts/plan-drain.ts';
import type { PodObject } from '../../src/actions/pod-placement.ts';
import {
  type RolloutActionFacts,
  type RolloutInput,
  type RolloutNodeFacts,
  type RolloutCheckFacts,
} from '../../src/rollouts/facts.ts';

const NOW = new Date('2026-03-02T10:00:00Z');
const at = (minutes: number) => new Date(NOW.getTime() + minutes * 60_000);

function rollout(
  spec: Partial<NodeRolloutSpec> = {},
  status?: ObservedNodeRollout['status'],
  annotations?: Record<string, string>,
): ObservedNodeRollout {
  return {
    metadata: { name: 'r', uid: 'uid-r', generation: 1, ...(annotations ? { annotations } : {}) },
    spec: {
      action: 'Upgrade',
      upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
      requestedBy: 'alice',
      ...spec,
    },
    ...(status ? { status } : {}),
  };
}

const node = (name: string, version = 'v1.13.0', labels: Record<string, string> = {}): RolloutNodeFacts => ({
  name,
  labels: { pool: 'a', ...labels },
  osImage: `Talos (${version})`,
});

function input(partial: Partial<RolloutInput>): RolloutInput {
  return { rollout: rollout(), nodes: [], actions: [], policies: [], history: [], now: NOW, ...partial };
}

const check = (healthy: boolean | undefined, changedAt = at(-60).toISOString()): RolloutCheckFacts => ({
  name: 'ceph',
  spec: { nodes: { selector: {} } },
  healthy,
  changedAt,
});

describe('a dry run', () => {
  it('starts nothing and plans the order the rollout then takes, skips and findings included', () => {
    const nodes = [node('w3'), node('w1'), node('w2', 'v1.13.1'), node('w4', 'v1.10.7')];
    const dry = decide(input({ rollout: rollout({ dryRun: true, maxParallel: 1 }), nodes }));
    assert.deepEqual(dry.create, []);
    const plan = dry.status.plan;
    assert.ok(plan);
    assert.deepEqual(
      plan.nodes.map((p) => [p.node, p.skip !== undefined]),
      [
        ['w1', false],
        ['w2', true],
        ['w3', false],
        ['w4', false],
      ],
    );
    assert.equal(plan.feasible, false);
    assert.match(plan.nodes[3]?.findings?.[0] ?? '', /v1\.10\.7 is too old/);
    assert.match(plan.findings?.join(' ') ?? '', /1 node cannot go: w4/);
    // One at a time, 10 minutes each (no history): back to back.
    assert.equal(plan.nodes[0]?.start, NOW.toISOString());
    assert.equal(plan.nodes[2]?.start, at(10).toISOString());
    assert.equal(plan.nodes[0].basis, 'default');
    assert.equal(dry.status.conditions?.find((c) => c.type === 'Progressing')?.reason, 'Planned');
    // Started without w4: it goes in the planned order.
    const started = decide(input({ rollout: rollout({ maxParallel: 1 }), nodes: nodes.slice(0, 3) }));
    assert.deepEqual(
      started.create.map((c) => c.node),
      ['w1'],
    );
  });

  it('plans a node to start in the first window it fits in, and is made again only when the spec changes', () => {
    const nodes = [node('w1')];
    const policies = [
      { name: 'weekend', spec: { nodeSelector: {}, windows: [{ schedule: '0 12 * * *', duration: '1h' }] } },
    ];
    const dry = decide(input({ rollout: rollout({ dryRun: true }), nodes, policies }));
    assert.equal(dry.status.plan?.nodes[0]?.start, at(120).toISOString(), 'at noon, when the window opens');
    assert.deepEqual(dry.status.plan.nodes[0].policies, ['weekend (windows)']);
    const again = decide(
      input({ rollout: rollout({ dryRun: true }, dry.status), nodes, policies, now: at(1) }),
    );
    assert.equal(again.status.plan?.time, dry.status.plan.time, 'not made again on every pass');
    assert.deepEqual(again.events, []);
  });
});

describe('canary and soak', () => {
  const nodes = [node('w1'), node('w2'), node('w3')];
  const spec = { maxParallel: 3, canary: { nodes: 1, soak: '30m' } };
  const actions = (phase: RolloutActionFacts['phase']): RolloutActionFacts[] => [
    { name: 'r-w1', node: 'w1', phase },
  ];

  it('runs the canary alone, then soaks, then starts the rest', () => {
    const first = decide(input({ rollout: rollout(spec), nodes, checks: [check(true)] }));
    assert.deepEqual(
      first.create.map((c) => c.node),
      ['w1'],
    );
    const soaking = decide(
      input({
        rollout: rollout(spec, first.status),
        nodes,
        actions: actions('Succeeded'),
        checks: [check(true)],
      }),
    );
    assert.deepEqual(soaking.create, []);
    assert.equal(soaking.status.gate?.id, 'canary-soak');
    assert.equal(soaking.status.gate.until, at(30).toISOString());
    const over = decide(
      input({
        rollout: rollout(spec, soaking.status),
        nodes,
        actions: actions('Succeeded'),
        checks: [check(true)],
        now: at(31),
      }),
    );
    assert.deepEqual(
      over.create.map((c) => c.node),
      ['w2', 'w3'],
    );
    assert.deepEqual(over.status.passedGates, ['canary-soak']);
  });

  it('halts when a check is not healthy throughout the soak, stays halted when it recovers, and goes on once promoted', () => {
    const soaking = decide(
      input({
        rollout: rollout(spec, { nodes: [] }),
        nodes,
        actions: actions('Succeeded'),
        checks: [check(true)],
      }),
    );
    // Unhealthy for a moment and back: its condition changed after the soak began.
    const flapped = decide(
      input({
        rollout: rollout(spec, soaking.status),
        nodes,
        actions: actions('Succeeded'),
        checks: [check(true, at(5).toISOString())],
        now: at(6),
      }),
    );
    assert.equal(flapped.status.conditions?.find((c) => c.type === 'Halted')?.reason, 'SoakFailed');
    assert.match(flapped.status.gate?.failed ?? '', /ClusterHealthCheck ceph was not healthy throughout/);
    const later = decide(
      input({
        rollout: rollout(spec, flapped.status),
        nodes,
        actions: actions('Succeeded'),
        checks: [check(true)],
        now: at(60),
      }),
    );
    assert.deepEqual(later.create, [], 'a failed soak does not pass by itself');
    const promotion = {
      [PROMOTE_ANNOTATION]: 'canary-soak',
      [PROMOTED_BY_ANNOTATION]: 'bob',
      [PROMOTE_REASON_ANNOTATION]: 'probe restart',
    };
    const promoted = decide(
      input({
        rollout: rollout(spec, later.status, promotion),
        nodes,
        actions: actions('Succeeded'),
        checks: [check(true)],
        now: at(61),
      }),
    );
    assert.deepEqual(
      promoted.create.map((c) => c.node),
      ['w2', 'w3'],
    );
    assert.deepEqual(
      promoted.status.promotions?.map((p) => [p.gate, p.by]),
      [['canary-soak', 'bob']],
    );
    assert.ok(promoted.events.some((e) => e.reason === 'Promoted'));
    // The annotation stays: it is not taken twice.
    const after = decide(
      input({
        rollout: rollout(spec, promoted.status, promotion),
        nodes,
        actions: [...actions('Succeeded'), { name: 'r-w2', node: 'w2', phase: 'Pending' }],
        checks: [check(true)],
        now: at(62),
      }),
    );
    assert.equal(after.status.promotions?.length, 1);
  });

  it('halts when the canary fails, whatever maxFailures says', () => {
    const failed = decide(
      input({
        rollout: rollout({ ...spec, maxFailures: 5 }),
        nodes,
        actions: actions('Failed'),
        checks: [check(true)],
      }),
    );
    assert.deepEqual(failed.create, []);
    assert.equal(failed.status.conditions?.find((c) => c.type === 'Halted')?.reason, 'CanaryFailed');
  });
});

describe('pauseBefore', () => {
  it('stops before the node named, and after a promotion of that pause goes on', () => {
    const nodes = [node('w1'), node('w2'), node('w3')];
    const spec = { maxParallel: 3, pauseBefore: { nodes: ['w2'] } };
    const first = decide(input({ rollout: rollout(spec), nodes }));
    assert.deepEqual(
      first.create.map((c) => c.node),
      ['w1'],
      'w1, then a pause: nothing after it',
    );
    assert.equal(first.status.gate?.id, 'pause/w2');
    assert.equal(first.status.conditions?.find((c) => c.type === 'Halted')?.reason, 'PausedBefore');
    const wrong = decide(
      input({
        rollout: rollout(spec, first.status, {
          [PROMOTE_ANNOTATION]: 'pause/w3',
          [PROMOTED_BY_ANNOTATION]: 'bob',
          [PROMOTE_REASON_ANNOTATION]: 'looks fine',
        }),
        nodes,
        actions: [{ name: 'r-w1', node: 'w1', phase: 'Executing' }],
      }),
    );
    assert.deepEqual(wrong.create, [], 'a promotion of another gate passes nothing');
    const promoted = decide(
      input({
        rollout: rollout(spec, first.status, {
          [PROMOTE_ANNOTATION]: 'pause/w2',
          [PROMOTED_BY_ANNOTATION]: 'bob',
          [PROMOTE_REASON_ANNOTATION]: 'looks fine',
        }),
        nodes,
        actions: [{ name: 'r-w1', node: 'w1', phase: 'Executing' }],
      }),
    );
    assert.deepEqual(
      promoted.create.map((c) => c.node),
      ['w2', 'w3'],
    );
  });
});

describe('the drain forecast in a plan', () => {
  const candidate = (name: string) => ({
    name,
    labels: { 'kubernetes.io/hostname': name },
    taints: [],
    unschedulable: false,
    ready: true,
    allocatable: { cpu: 4000, memory: 8 * 2 ** 30, pods: 110 },
  });
  const pod = (
    name: string,
    nodeName: string,
    extra: Partial<PodObject['spec']> = {},
    owned = true,
  ): PodObject => ({
    metadata: {
      name,
      namespace: 'prod',
      labels: { app: name },
      ...(owned ? { ownerReferences: [{ kind: 'ReplicaSet', name: `${name}-rs`, controller: true }] } : {}),
    },
    spec: { nodeName, containers: [{ resources: { requests: { cpu: '100m' } } }], ...extra },
    status: { phase: 'Running' },
  });
  const facts = (nodes: string[], pods: PodObject[]) => {
    const podsByNode = new Map<string, PodObject[]>();
    for (const p of pods)
      podsByNode.set(p.spec?.nodeName ?? '', [...(podsByNode.get(p.spec?.nodeName ?? '') ?? []), p]);
    return {
      podsByNode,
      budgets: [
        {
          metadata: { name: 'db', namespace: 'prod' },
          spec: { selector: { matchLabels: { app: 'db' } } },
          status: { disruptionsAllowed: 0 },
        },
      ],
      nodes: nodes.map(candidate),
      used: new Map(nodes.map((n) => [n, { cpu: 0, memory: 0, pods: 0 }])),
    };
  };

  it('names, per node, the Pods a budget holds, that fit nowhere else, or that nothing recreates; the plan stays feasible', () => {
    const nodes = [node('w1'), node('w2'), node('w3')];
    const pinned = pod('pinned', 'w1', { nodeSelector: { 'kubernetes.io/hostname': 'w1' } });
    const plan = decide(
      input({
        rollout: rollout({ dryRun: true }),
        nodes,
        planDrain: {
          facts: facts(
            ['w1', 'w2', 'w3'],
            [pinned, pod('db', 'w2'), pod('loose', 'w2', {}, false), pod('web', 'w3')],
          ),
        },
      }),
    ).status.plan;
    const drain = (n: string) => plan?.nodes.find((p) => p.node === n)?.drain;
    assert.equal(drain('w1')?.pods, 1);
    assert.match(drain('w1')?.words?.[0] ?? '', /prod\/pinned: fits on no other node/);
    assert.equal(drain('w2')?.pods, 2);
    assert.match(
      drain('w2')?.words?.join(' | ') ?? '',
      /prod\/db: PodDisruptionBudget db allows no disruption.*prod\/loose: unmanaged/,
    );
    assert.equal(drain('w3'), undefined, 'a drain that meets nothing is not mentioned');
    assert.equal(plan?.feasible, true, 'a budget at its limit now is a finding, not a refusal');
    assert.match(
      plan.findings?.join('\n') ?? '',
      /drain forecast: 2 nodes would meet trouble draining now \(2 held/,
    );
  });

  it('simulates where Pods could go only for the first nodes in order; a read that failed is a finding', () => {
    const names = Array.from(
      { length: PLAN_PLACEMENT_NODES + 2 },
      (_, i) => `n${String(i).padStart(3, '0')}`,
    );
    const last = names.at(-1) ?? '';
    const stuck = pod('pinned', last, { nodeSelector: { 'kubernetes.io/hostname': last } });
    const plan = decide(
      input({
        rollout: rollout({ dryRun: true }),
        nodes: names.map((n) => node(n)),
        planDrain: { facts: facts(names, [stuck]) },
      }),
    ).status.plan;
    assert.equal(
      plan?.nodes.find((p) => p.node === last)?.drain,
      undefined,
      'past the placement limit, not judged',
    );
    const failed = decide(
      input({
        rollout: rollout({ dryRun: true }),
        nodes: [node('w1')],
        planDrain: { error: 'pods is forbidden' },
      }),
    ).status.plan;
    assert.match(
      failed?.findings?.join('\n') ?? '',
      /the drain forecast could not be made: pods is forbidden/,
    );
  });
});

describe('a node rolled back after its post-checks failed', () => {
  it('halts the rollout whatever maxFailures says, remembers it when its action is gone, and goes on once promoted', () => {
    const nodes = [node('w1'), node('w2'), node('w3')];
    const spec = { maxParallel: 1, maxFailures: 5 };
    const rolled = {
      name: 'r-w1',
      node: 'w1',
      phase: 'Failed' as const,
      message: 'rolled back',
      rolledBack: true,
    };
    const halted = decide(input({ rollout: rollout(spec), nodes, actions: [rolled] }));
    assert.deepEqual(halted.create, []);
    assert.equal(halted.status.conditions?.find((c) => c.type === 'Halted')?.reason, 'RolledBack');
    assert.equal(halted.status.gate?.id, 'rollback/w1');
    assert.equal(halted.status.gate.kind, 'Rollback');
    // Its action garbage-collected: the status remembers.
    const later = decide(input({ rollout: rollout(spec, halted.status), nodes, actions: [] }));
    assert.deepEqual(later.create, []);
    const promoted = decide(
      input({
        rollout: rollout(spec, later.status, {
          [PROMOTE_ANNOTATION]: 'rollback/w1',
          [PROMOTED_BY_ANNOTATION]: 'bob',
          [PROMOTE_REASON_ANNOTATION]: 'the CSI driver was at fault, not the version',
        }),
        nodes,
        actions: [],
      }),
    );
    assert.deepEqual(
      promoted.create.map((c) => c.node),
      ['w2'],
    );
  });
});
