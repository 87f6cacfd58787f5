// Property-based tests of the undo of pre-action hooks (src/actions/phases/undo.ts) over
// the decision core: across crashes within and between passes, stale caches, controller
// restarts, cancellations, deadlines, hook Jobs that succeed or fail, Talos calls that
// succeed, fail or get no answer, and a node that reboots —
//   - an undo Job is created at most once per (action, hook);
//   - never when the node may have been disrupted before the action ended (a Talos call
//     made and not refused, the executed mark, a new boot);
//   - always when the action ended undisrupted after the hook's Job had succeeded (a
//     Talos call recorded whose outcome is unknown counts as a disruption);
//   - and the action's finalizer goes only once its undo runs finished.
//
// The simulated world runs the real decide() the way the reconciler does: status writes
// conditional on the resourceVersion decided upon, effects only after a successful write,
// a Job created only while a fresh read shows its record pending (confirmPending), and
// creating an existing Job a no-op (409).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { decide, type NodeFacts } from '../../src/actions/decide.ts';
import { EXECUTED_ANNOTATION, NODE_ACTION_FINALIZER as FINALIZER } from '../../src/api/names.ts';
import { isTerminal } from '../../src/api/phases.ts';
import type { NodeActionSpec, ObservedNodeAction } from '../../src/api/node-action.ts';
import type { JobFacts } from '../../src/hooks/job.ts';
import { isRecordPending, jobKey, type HookRunRecord } from '../../src/hooks/plan.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import type { ExecutionFacts, ExecutionStep } from '../../src/talos/facts.ts';
import { PRE_HOOK_KIND } from '../../src/actions/kinds/index.ts';
import { T0, action, hook, node } from './action-fixtures.ts';

const RUNS = Number(process.env.GATEHOUSE_PROPERTY_RUNS ?? 300);
const NAME = 'reboot-w1';

const UNDO = {
  template: {
    spec: {
      template: {
        spec: { restartPolicy: 'Never', containers: [{ name: 'undo', image: 'ceph', args: ['unset'] }] },
      },
    },
  },
};

type Op =
  | { type: 'reconcile'; statusLag: number; crashAfter: number }
  /** A hook Job (the `index`th unfinished one) ends. */
  | { type: 'job'; index: number; outcome: 'Succeeded' | 'Failed' }
  | { type: 'finish'; index: number; outcome: 'succeeded' | 'failed' | 'noAnswer' }
  | { type: 'restart' }
  | { type: 'tick'; seconds: number }
  | { type: 'reboot' }
  | { type: 'mark' }
  | { type: 'delete' };

interface Scenario {
  spec: Partial<NodeActionSpec>;
  hooks: number;
  ops: Op[];
}

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 20,
    arbitrary: fc.record({
      type: fc.constant('reconcile' as const),
      statusLag: fc.nat({ max: 2 }),
      crashAfter: fc.integer({ min: -1, max: 3 }),
    }),
  },
  {
    weight: 8,
    arbitrary: fc.record({
      type: fc.constant('job' as const),
      index: fc.nat(),
      outcome: fc.constantFrom('Succeeded' as const, 'Succeeded' as const, 'Failed' as const),
    }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      type: fc.constant('finish' as const),
      index: fc.nat(),
      outcome: fc.constantFrom(
        'succeeded' as const,
        'succeeded' as const,
        'failed' as const,
        'noAnswer' as const,
      ),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ type: 'restart' as const }) },
  {
    weight: 2,
    arbitrary: fc.record({ type: fc.constant('tick' as const), seconds: fc.constantFrom(1, 30, 600, 3600) }),
  },
  { weight: 1, arbitrary: fc.constant({ type: 'reboot' as const }) },
  { weight: 1, arbitrary: fc.constant({ type: 'mark' as const }) },
);

const scenarioArb: fc.Arbitrary<Scenario> = fc
  .record({
    execution: fc.constantFrom('Managed' as const, 'Managed' as const, 'External' as const),
    // A Maintenance is performed by draining alone, and disrupts once it is Held.
    kind: fc.constantFrom('Reboot' as const, 'Reboot' as const, 'Maintenance' as const),
    hooks: fc.integer({ min: 1, max: 2 }),
    ops: fc.array(opArb, { minLength: 10, maxLength: 80 }),
    deleteAt: fc.oneof(fc.constant(null), fc.nat({ max: 60 })),
  })
  .map(({ execution, kind, hooks, ops, deleteAt }) => {
    const all: Op[] = [...ops];
    if (deleteAt !== null) all.splice(deleteAt, 0, { type: 'delete' });
    return {
      spec: { action: kind, execution },
      hooks,
      ops: all,
    };
  });

const coverage = {
  runs: 0,
  undone: 0,
  notUndone: 0,
  disruptedEnds: 0,
  undisruptedEnds: 0,
  crashes: 0,
  /** Maintenances that ended after their node was Held, and before. */
  maintenanceHeldEnds: 0,
  maintenanceUndisruptedEnds: 0,
};

interface WorldJob {
  hookUID: string;
  undo: boolean;
  phase: JobFacts['phase'];
  /** activeDeadlineSeconds (the hook's timeout): the Job controller fails the Job then. */
  deadline: number;
}

interface Options {
  /**
   * Model Jobs created under generated names (as with metadata.generateName) instead of
   * the run's derived one: a pass that does not see its Job yet creates another. Must fail.
   */
  generateNames?: boolean;
}

/** What the reconciler's confirmPending reads afresh before creating a Job. */
function confirmPending(live: ObservedNodeAction, record: HookRunRecord): boolean {
  const undo = live.status?.undo?.runs ?? [];
  if (undo.some((r) => r.jobName === record.jobName) && isRecordPending(undo, record)) return true;
  if (live.metadata.deletionTimestamp || isTerminal(live.status?.phase)) return false;
  return isRecordPending(live.status?.hooks ?? [], record);
}

function simulate(s: Scenario, options: Options = {}): string[] {
  const violations: string[] = [];
  let now = T0;
  const hooks: HookObject[] = Array.from({ length: s.hooks }, (_, i) =>
    hook(PRE_HOOK_KIND[s.spec.action ?? 'Reboot'], `noout-${i}`, { undo: UNDO, timeout: '15m' }),
  );
  const history: ObservedNodeAction[] = [
    action(
      s.spec,
      { phase: 'RunningPreHooks', startTime: T0.toISOString(), phaseTime: T0.toISOString() },
      { name: NAME, resourceVersion: '1', finalizers: [FINALIZER] },
    ),
  ];
  let nodeFacts: NodeFacts = node('w1', { bootID: 'boot-0', osImage: 'Talos (v1.13.0)' });
  let memory: ExecutionFacts = {};
  const jobs = new Map<string, WorldJob>();
  const undoCreated = new Map<string, number>();
  /** Hooks whose Job had succeeded before the action ended. */
  const succeededBeforeEnd = new Set<string>();
  /** Whether the node may have been disrupted by the action (ground truth), as of the end. */
  let disruptedAtEnd: boolean | undefined;
  let called = false;
  let marked = false;
  let rebootedAfterApproval = false;
  const world = { gone: false, unknownAtEnd: false };

  const current = () => history[history.length - 1] as ObservedNodeAction;
  const write = (next: ObservedNodeAction) =>
    history.push({ ...next, metadata: { ...next.metadata, resourceVersion: String(history.length + 1) } });
  const jobFacts = () =>
    new Map(
      [...jobs].map(([key, j]) => [key, { phase: j.phase, message: `job ${j.phase}`, deleting: false }]),
    );

  const reconcile = (statusLag: number, crashAfter: number) => {
    const view = history[Math.max(0, history.length - 1 - statusLag)] as ObservedNodeAction;
    const decision = decide({
      now,
      action: view,
      node: nodeFacts,
      checks: [],
      hooks,
      jobs: jobFacts(),
      webhooks: new Map(),
      // The node's neighbours as the reconciler reads them for the approval: nobody.
      neighbours: { at: now, pods: [], maintenances: [] },
      ...(s.spec.execution === 'Managed' ? { execution: { ...memory } } : {}),
    });
    if (decision.addFinalizer) return;
    const status = decision.status;
    const changed = JSON.stringify(status) !== JSON.stringify(view.status ?? {});
    if (changed) {
      if (view.metadata.resourceVersion !== current().metadata.resourceVersion) return;
      const wasTerminal = isTerminal(current().status?.phase);
      write({ ...view, status });
      // The node is out of service for its maintenance from the moment it is Held.
      if (status.phase === 'Held') called = true;
      if (!wasTerminal && isTerminal(status.phase)) {
        disruptedAtEnd = called || marked || rebootedAfterApproval;
        // A call recorded but perhaps never made counts as made: its outcome is unknown.
        const execution = status.execution;
        world.unknownAtEnd = execution?.callTime !== undefined && execution.callResult !== 'Failed';
        if (disruptedAtEnd) coverage.disruptedEnds++;
        else coverage.undisruptedEnds++;
        for (const [, j] of jobs) if (!j.undo && j.phase === 'Succeeded') succeededBeforeEnd.add(j.hookUID);
      }
    }
    let done = 0;
    for (const effect of decision.effects) {
      if (crashAfter >= 0 && done >= crashAfter) {
        coverage.crashes++;
        memory = {};
        return;
      }
      done++;
      switch (effect.type) {
        case 'createJob': {
          let key = jobKey(effect.job.metadata?.namespace ?? '', effect.job.metadata?.name ?? '');
          if (options.generateNames) key = `${key}-${String(jobs.size)}`;
          if (jobs.has(key) || !confirmPending(current(), effect.record)) break;
          const undo = effect.job.metadata?.labels?.['talos.dev/hook-purpose'] === 'undo';
          const deadline = now.getTime() + (effect.job.spec?.activeDeadlineSeconds ?? 0) * 1000;
          jobs.set(key, { hookUID: effect.record.uid ?? '', undo, phase: 'Running', deadline });
          if (!undo) break;
          const n = (undoCreated.get(effect.record.uid ?? '') ?? 0) + 1;
          undoCreated.set(effect.record.uid ?? '', n);
          if (n > 1) violations.push(`undo Job of ${effect.record.name} created ${n} times`);
          if (disruptedAtEnd !== false)
            violations.push(
              disruptedAtEnd === undefined
                ? 'an undo Job was created before the action ended'
                : 'an undo Job was created although the node was disrupted',
            );
          break;
        }
        case 'deleteJob': {
          const j = jobs.get(jobKey(effect.namespace, effect.name));
          if (j && j.phase !== 'Succeeded' && j.phase !== 'Failed') j.phase = 'Failed';
          break;
        }
        case 'drain':
          if (!memory.drain) {
            memory = { ...memory, drain: { state: 'running', message: 'draining' } };
            nodeFacts = { ...nodeFacts, cordonedBy: NAME };
          }
          break;
        case 'talos': {
          if (effect.step !== 'call') {
            memory[effect.step] ??= { state: 'running', message: effect.step };
            break;
          }
          if (memory.call) break;
          const live = current();
          const ok =
            !live.metadata.deletionTimestamp &&
            live.status?.phase === 'Executing' &&
            live.status.execution?.callTime === effect.callTime &&
            live.status.execution.callResult === undefined;
          if (!ok) {
            memory = { ...memory, call: { state: 'failed', message: 'not made', mayHaveReached: false } };
            break;
          }
          called = true;
          memory = { ...memory, call: { state: 'running', message: 'waiting for Talos' } };
          break;
        }
        case 'uncordon':
          if (nodeFacts.cordonedBy === NAME) nodeFacts = { ...nodeFacts, cordonedBy: undefined };
          break;
        case 'stopExecution':
          for (const [step, facts] of Object.entries(memory) as [ExecutionStep, ExecutionFacts['call']][])
            if (facts?.state === 'running')
              memory = {
                ...memory,
                [step]: {
                  state: 'failed',
                  message: 'stopped',
                  ...(step === 'call' ? { mayHaveReached: true } : {}),
                },
              };
          break;
        default:
          break;
      }
    }
    if (decision.removeFinalizer) {
      const live = current();
      const unfinished = [...jobs.values()].filter((j) => j.undo && j.phase === 'Running');
      if (unfinished.length > 0) violations.push('the finalizer was removed while an undo Job ran');
      if (view.metadata.resourceVersion !== live.metadata.resourceVersion) return;
      if (live.metadata.deletionTimestamp) world.gone = true;
      else write({ ...live, metadata: { ...live.metadata, finalizers: [] } });
    }
  };

  for (const op of s.ops) {
    if (world.gone) break;
    switch (op.type) {
      case 'tick':
        now = new Date(now.getTime() + op.seconds * 1000);
        for (const j of jobs.values())
          if (j.phase === 'Running' && now.getTime() >= j.deadline) j.phase = 'Failed';
        break;
      case 'restart':
        memory = {};
        break;
      case 'reboot':
        if (current().status?.bootIDBefore !== undefined && !isTerminal(current().status?.phase))
          rebootedAfterApproval = true;
        nodeFacts = { ...nodeFacts, bootID: `boot-${history.length}` };
        break;
      case 'mark': {
        const a = current();
        if (s.spec.execution !== 'External' || a.status?.phase !== 'Approved') break;
        marked = true;
        write({
          ...a,
          metadata: {
            ...a.metadata,
            annotations: { ...a.metadata.annotations, [EXECUTED_ANNOTATION]: 'true' },
          },
        });
        break;
      }
      case 'delete': {
        const a = current();
        if (!a.metadata.deletionTimestamp)
          write({ ...a, metadata: { ...a.metadata, deletionTimestamp: now.toISOString() } });
        break;
      }
      case 'job': {
        const running = [...jobs.values()].filter((j) => j.phase === 'Running');
        const j = running[op.index % Math.max(1, running.length)];
        if (j) j.phase = op.outcome;
        break;
      }
      case 'finish': {
        const running = (Object.keys(memory) as ExecutionStep[]).filter(
          (k) => memory[k]?.state === 'running',
        );
        const step = running[op.index % Math.max(1, running.length)];
        if (step === undefined) break;
        // A call Talos answered with an error was refused: it did nothing to the node.
        if (step === 'call' && op.outcome === 'failed') called = false;
        memory = {
          ...memory,
          [step]:
            op.outcome === 'succeeded'
              ? { state: 'succeeded', message: 'done', ...(step === 'call' ? { disrupts: true } : {}) }
              : {
                  state: 'failed',
                  message: op.outcome,
                  ...(step === 'call' ? { mayHaveReached: op.outcome === 'noAnswer' } : {}),
                },
        };
        break;
      }
      case 'reconcile':
        reconcile(op.statusLag, op.crashAfter);
        break;
    }
  }
  // Then quiet: a cancel if it did not end, and passes without crashes while undo Jobs finish.
  if (!world.gone && !current().metadata.deletionTimestamp) {
    const a = current();
    write({ ...a, metadata: { ...a.metadata, deletionTimestamp: now.toISOString() } });
  }
  // Deleted without a finalizer (it went once its undo was over): gone at once.
  if ((current().metadata.finalizers ?? []).length === 0) world.gone = true;
  for (let i = 0; i < 12 && !world.gone; i++) {
    reconcile(0, -1);
    for (const j of jobs.values()) if (j.undo && j.phase === 'Running') j.phase = 'Succeeded';
    now = new Date(now.getTime() + 1000);
  }
  if (!world.gone) violations.push(`the action never went: ${JSON.stringify(current().status?.phase)}`);
  if (disruptedAtEnd === false && !world.unknownAtEnd)
    for (const uid of succeededBeforeEnd)
      if (!undoCreated.has(uid))
        violations.push(`hook ${uid} succeeded, the node was never disrupted, and it was not undone`);
  coverage.runs++;
  if (s.spec.action === 'Maintenance' && disruptedAtEnd !== undefined)
    coverage[disruptedAtEnd ? 'maintenanceHeldEnds' : 'maintenanceUndisruptedEnds']++;
  if (undoCreated.size > 0) coverage.undone++;
  if (disruptedAtEnd && succeededBeforeEnd.size > 0) coverage.notUndone++;
  return violations;
}

describe('Undo of pre-action hooks (property-based)', () => {
  it('runs an undo at most once per hook, never after a disruption, always after an undisrupted end', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        assert.deepEqual(simulate(s), []);
      }),
      {
        numRuns: RUNS,
        ...(process.env.FC_SEED ? { seed: Number(process.env.FC_SEED), path: process.env.FC_PATH } : {}),
      },
    );
    assert.ok(
      coverage.undone > 0 &&
        coverage.notUndone > 0 &&
        coverage.disruptedEnds > 0 &&
        coverage.crashes > 0 &&
        coverage.maintenanceHeldEnds > 0 &&
        coverage.maintenanceUndisruptedEnds > 0,
      JSON.stringify(coverage),
    );
    console.log(`# coverage: ${JSON.stringify(coverage)}`);
  });

  it('can fail: Jobs under generated names are created again by a pass that does not see them yet', () => {
    const reconcile = { type: 'reconcile', statusLag: 0, crashAfter: -1 } as const;
    const s: Scenario = {
      spec: { action: 'Reboot', execution: 'External' },
      hooks: 1,
      ops: [
        reconcile,
        { type: 'job', index: 0, outcome: 'Succeeded' },
        { type: 'delete' },
        reconcile,
        reconcile,
      ],
    };
    assert.deepEqual(simulate(s), []);
    assert.ok(
      simulate(s, { generateNames: true }).some((v) => /undo Job of noout-0 created 2 times/.test(v)),
    );
  });
});
