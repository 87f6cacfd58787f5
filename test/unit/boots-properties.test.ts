// Property-based tests of the safety invariants for boots (DESIGN.md), over the boot
// decision core:
//   4. the preready taint is never removed before every matching NodePrereadyJob
//      succeeded (or failed under Ignore) for the node's current boot ID — nor while an
//      approved action announced that the node is about to boot;
//   5. a boot hook Job is created at most once per (boot, hook, attempt);
//   and NodeReadyJobs start only on a Ready node seen without the taint.
//
// A simulated world runs the real decideBoot() the way the boot reconciler does — node
// writes conditional on the resourceVersion decided upon, effects only after a successful
// write, the create guard (the record read afresh from the node) — while fast-check
// chooses stale caches (which is also what a restarted controller's first look can be),
// crashes between effects, Jobs finishing or failing, reboots, NotReady, hooks created,
// deleted and created again, the clock, and an action announcing, claiming or dropping a
// boot.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { BootAnnouncement, BootRecord } from '../../src/api/boot-record.ts';
import { HOOK_JOB_LABELS as LABELS } from '../../src/api/names.ts';
import type { NodeActionPhase } from '../../src/api/node-action.ts';
import { decideBoot, type BootActionFacts, type NodeJob } from '../../src/boots/decide.ts';
import { type JobFacts } from '../../src/hooks/job.ts';
import { isRecordPending, jobKey, type HookRunRecord } from '../../src/hooks/plan.ts';
import { selectHooks, type HookObject } from '../../src/hooks/select.ts';
import { T0, hook } from './action-fixtures.ts';
import { announcement } from './boots-fixtures.ts';

const RUNS = Number(process.env.GATEHOUSE_PROPERTY_RUNS ?? 300);
const ENDED = new Set<NodeActionPhase | undefined>(['Failed', 'Cancelled', 'Denied']);

type Op =
  | { type: 'reconcile'; nodeLag: number; jobLag: number; crashAfter: number }
  | { type: 'jobProgress'; index: number; outcome: 'Running' | 'Succeeded' | 'Failed' }
  | { type: 'jobVanish'; index: number }
  | { type: 'tick'; seconds: number }
  | { type: 'reboot' }
  | { type: 'ready'; ready: boolean }
  | { type: 'addHook'; kind: 'NodePrereadyJob' | 'NodeReadyJob'; ignore: boolean; order: number }
  | { type: 'deleteHook'; index: number }
  | { type: 'recreateHook'; index: number }
  | { type: 'action'; step: 'announce' | 'fail' | 'succeed' };

interface Scenario {
  hooks: { kind: 'NodePrereadyJob' | 'NodeReadyJob' | 'elsewhere'; ignore: boolean; order: number }[];
  ops: Op[];
}

const scenarioArb: fc.Arbitrary<Scenario> = fc.record({
  hooks: fc.array(
    fc.record({
      kind: fc.constantFrom('NodePrereadyJob', 'NodePrereadyJob', 'NodeReadyJob', 'elsewhere'),
      ignore: fc.boolean(),
      order: fc.integer({ min: 0, max: 1 }),
    }),
    { maxLength: 4 },
  ),
  ops: fc.array(
    fc.oneof(
      {
        weight: 24,
        arbitrary: fc.record({
          type: fc.constant('reconcile' as const),
          nodeLag: fc.constantFrom(0, 0, 0, 1, 2, 3),
          jobLag: fc.constantFrom(0, 0, 1, 2, 3),
          crashAfter: fc.integer({ min: -1, max: 3 }),
        }),
      },
      {
        weight: 12,
        arbitrary: fc.record({
          type: fc.constant('jobProgress' as const),
          index: fc.nat(),
          outcome: fc.constantFrom(
            'Running' as const,
            'Succeeded' as const,
            'Succeeded' as const,
            'Failed' as const,
          ),
        }),
      },
      { weight: 2, arbitrary: fc.record({ type: fc.constant('jobVanish' as const), index: fc.nat() }) },
      {
        weight: 2,
        arbitrary: fc.record({ type: fc.constant('tick' as const), seconds: fc.constantFrom(1, 60, 1000) }),
      },
      { weight: 2, arbitrary: fc.record({ type: fc.constant('reboot' as const) }) },
      {
        weight: 6,
        arbitrary: fc.record({
          type: fc.constant('ready' as const),
          ready: fc.constantFrom(true, true, true, true, true, false),
        }),
      },
      {
        weight: 2,
        arbitrary: fc.record({
          type: fc.constant('addHook' as const),
          kind: fc.constantFrom('NodePrereadyJob' as const, 'NodeReadyJob' as const),
          ignore: fc.boolean(),
          order: fc.integer({ min: 0, max: 1 }),
        }),
      },
      { weight: 1, arbitrary: fc.record({ type: fc.constant('deleteHook' as const), index: fc.nat() }) },
      { weight: 2, arbitrary: fc.record({ type: fc.constant('recreateHook' as const), index: fc.nat() }) },
      {
        weight: 4,
        arbitrary: fc.record({
          type: fc.constant('action' as const),
          step: fc.constantFrom(
            'announce' as const,
            'announce' as const,
            'fail' as const,
            'succeed' as const,
          ),
        }),
      },
    ),
    { minLength: 40, maxLength: 120 },
  ),
});

interface NodeVersion {
  rv: number;
  bootID: string;
  ready: boolean;
  tainted: boolean;
  record?: BootRecord;
  announcement?: BootAnnouncement;
}

interface WorldJob {
  facts: JobFacts;
  bootID: string;
}

const LABELS_ON_NODE = { 'kubernetes.io/hostname': 'w1', pool: 'storage' };

const coverage = {
  runs: 0,
  untainted: 0,
  bootsDone: 0,
  jobs: 0,
  staleWrites: 0,
  guarded: 0,
  claimed: 0,
  failed: 0,
};

/** Whether every one of these hooks has a newest run in `runs` that succeeded (or failed under Ignore), its Job too. */
function succeeded(
  hooks: readonly HookObject[],
  runs: readonly HookRunRecord[],
  jobs: ReadonlyMap<string, WorldJob>,
) {
  return hooks.every((h) => {
    const mine = runs.filter((r) => r.uid === h.metadata.uid);
    const newest = mine.reduce<HookRunRecord | undefined>(
      (a, b) => (!a || b.attempt > a.attempt ? b : a),
      undefined,
    );
    if (!newest) return false;
    const world = newest.jobName
      ? jobs.get(jobKey(newest.namespace, newest.jobName))?.facts.phase
      : undefined;
    if (newest.phase === 'Succeeded') return world === 'Succeeded';
    return newest.phase === 'Failed' && newest.failurePolicy === 'Ignore';
  });
}

function simulate(s: Scenario, options = { conditional: true, guard: true }): string[] {
  const violations: string[] = [];
  let now = T0;
  let serial = 0;
  const hooks: HookObject[] = s.hooks.map((h, i) =>
    hook(h.kind === 'elsewhere' ? 'NodePrereadyJob' : h.kind, `h${i}`, {
      order: h.order,
      failurePolicy: h.ignore ? 'Ignore' : 'Fail',
      timeout: '10m',
      ...(h.kind === 'elsewhere' ? { nodeSelector: { matchLabels: { pool: 'compute' } } } : {}),
    }),
  );
  const history: NodeVersion[] = [{ rv: 1, bootID: 'boot-1', ready: true, tainted: false }];
  const current = () => history[history.length - 1] as NodeVersion;
  const write = (next: Omit<NodeVersion, 'rv'>) => history.push({ ...next, rv: history.length + 1 });
  const jobs = new Map<string, WorldJob>();
  const jobHistory: Map<string, WorldJob>[] = [new Map<string, WorldJob>()];
  const snapshot = () =>
    jobHistory.push(
      new Map<string, WorldJob>([...jobs].map(([k, j]) => [k, { ...j, facts: { ...j.facts } }])),
    );
  const created = new Map<string, number>();
  /** What this run reached, for the coverage counts. */
  const seen = { untainted: false, done: false, failed: false };
  // The one action on this node: its UID and phase (the world's truth; the controller reads it live).
  let action: { uid: string; phase: NodeActionPhase; bootIDAfter?: string } | undefined;

  /** The action follows its node as the action reconciler does: the new boot, Ready, then its record. */
  const follow = () => {
    const node = current();
    if (action?.phase === 'Approved' && node.announcement?.action.uid === action.uid) {
      if (node.bootID !== node.announcement.bootID && node.ready) {
        action = { ...action, phase: 'RunningPostHooks', bootIDAfter: node.bootID };
        coverage.claimed++;
      }
    } else if (action?.phase === 'Approved' && node.record?.action?.uid === action.uid && node.ready) {
      action = { ...action, phase: 'RunningPostHooks', bootIDAfter: node.bootID };
      coverage.claimed++;
    } else if (action?.phase === 'RunningPostHooks') {
      const r = node.record;
      if (r !== undefined && r.bootID === action.bootIDAfter && r.ready.phase === 'Succeeded')
        action = { ...action, phase: 'Succeeded' };
    }
  };

  for (const op of s.ops) {
    follow();
    switch (op.type) {
      case 'tick':
        now = new Date(now.getTime() + op.seconds * 1000);
        break;
      case 'reboot':
        write({ ...current(), bootID: `boot-${String(history.length + 1)}`, ready: false });
        break;
      case 'ready':
        write({ ...current(), ready: op.ready });
        break;
      case 'addHook':
        hooks.push(
          hook(op.kind, `late${String(hooks.length)}`, {
            order: op.order,
            failurePolicy: op.ignore ? 'Ignore' : 'Fail',
            timeout: '10m',
          }),
        );
        break;
      case 'deleteHook':
      case 'recreateHook': {
        if (hooks.length === 0) break;
        const index = op.index % hooks.length;
        const old = hooks[index] as HookObject;
        hooks.splice(index, 1);
        if (op.type === 'recreateHook')
          hooks.push({
            ...old,
            metadata: { ...old.metadata, uid: `${old.metadata.uid}-again${String(++serial)}` },
          });
        break;
      }
      case 'action': {
        const node = current();
        if (op.step === 'announce') {
          if (action && !ENDED.has(action.phase) && action.phase !== 'Succeeded') break;
          action = { uid: `uid-action-${String(++serial)}`, phase: 'Approved' };
          // What the action reconciler writes before approval (one conditional write).
          write({
            ...node,
            tainted: true,
            announcement: announcement(node.bootID, action.uid, `a${String(serial)}`),
          });
        } else if (action && !ENDED.has(action.phase) && action.phase !== 'Succeeded') {
          action = { ...action, phase: op.step === 'fail' ? 'Failed' : 'Succeeded' };
        }
        break;
      }
      case 'jobProgress':
      case 'jobVanish': {
        // Among the Jobs this can happen to: unfinished ones progress, deleted ones vanish.
        const keys = [...jobs]
          .filter(([, j]) =>
            op.type === 'jobVanish'
              ? j.facts.deleting
              : j.facts.phase === 'Pending' || j.facts.phase === 'Running',
          )
          .map(([k]) => k);
        if (keys.length === 0) break;
        const key = keys[op.index % keys.length] as string;
        const j = jobs.get(key) as WorldJob;
        if (op.type === 'jobVanish') {
          // Only gatehouse deletes its Jobs; a vanish is one of its deletes completing.
          if (j.facts.deleting) jobs.delete(key);
        } else if (j.facts.phase === 'Pending' || j.facts.phase === 'Running') {
          j.facts = { ...j.facts, phase: op.outcome, message: `job ${op.outcome}` };
        }
        snapshot();
        break;
      }
      case 'reconcile': {
        const view = history[Math.max(0, history.length - 1 - op.nodeLag)] as NodeVersion;
        const cachedJobs = jobHistory[Math.max(0, jobHistory.length - 1 - op.jobLag)] as Map<
          string,
          WorldJob
        >;
        // Like HookRunner.jobFacts: an unfinished run's Job missing from the cache is read live.
        const facts = new Map([...cachedJobs].map(([k, j]) => [k, j.facts]));
        const record = view.record?.bootID === view.bootID ? view.record : undefined;
        for (const r of record ? [...record.preready.runs, ...record.ready.runs] : []) {
          if (!r.jobName || r.phase === 'Succeeded' || r.phase === 'Failed') continue;
          const key = jobKey(r.namespace, r.jobName);
          const live = jobs.get(key);
          if (!facts.has(key) && live) facts.set(key, live.facts);
        }
        const nodeJobs: NodeJob[] = [...cachedJobs].map(([key, j]) => ({
          namespace: key.split('/')[0] as string,
          name: key.split('/')[1] as string,
          bootID: j.bootID,
          deleting: j.facts.deleting,
        }));
        const actions = new Map<string, BootActionFacts>(
          action
            ? [
                [
                  action.uid,
                  { phase: action.phase, ...(action.bootIDAfter ? { bootIDAfter: action.bootIDAfter } : {}) },
                ],
              ]
            : [],
        );
        const d = decideBoot({
          now,
          node: {
            name: 'w1',
            uid: 'uid-node',
            labels: LABELS_ON_NODE,
            bootID: view.bootID,
            ready: view.ready,
            tainted: view.tainted,
            ...(view.record ? { record: view.record } : {}),
            ...(view.announcement ? { announcement: view.announcement } : {}),
          },
          hooks: [...hooks],
          jobs: facts,
          webhooks: new Map(),
          actions,
          nodeJobs,
        });
        if (d.change) {
          const base = current();
          if (options.conditional && view.rv !== base.rv) {
            coverage.staleWrites++;
            break;
          }
          const { announcement: kept, ...rest } = base;
          const next: Omit<NodeVersion, 'rv'> = {
            ...rest,
            ...(d.change.record ? { record: d.change.record } : {}),
            ...(kept && !d.change.removeAnnouncement ? { announcement: kept } : {}),
            tainted: d.change.taint ?? base.tainted,
          };
          // Invariant 4, on what the write leaves on the node.
          const prereadys = selectHooks(hooks, 'NodePrereadyJob', LABELS_ON_NODE);
          if (!next.tainted && prereadys.length > 0) {
            const r = next.record;
            const live = action && !ENDED.has(action.phase) && next.announcement?.bootID === next.bootID;
            if (!r || r.bootID !== next.bootID || !succeeded(prereadys, r.preready.runs, jobs))
              violations.push(
                `4: untainted at boot ${next.bootID} without its NodePrereadyJobs all succeeded`,
              );
            else if (!next.ready) violations.push(`4: untainted while NotReady`);
            else if (live) violations.push(`4: untainted while an action announced a boot`);
          }
          if (base.tainted && !next.tainted) seen.untainted = true;
          // NodeReadyJobs begin on a Ready node seen untainted, once the NodePrereadyJobs are done.
          const readyRuns = (v: { record?: BootRecord; bootID: string }) =>
            v.record?.bootID === v.bootID ? v.record.ready.runs.length : 0;
          if (readyRuns(next) > 0 && readyRuns(base) === 0 && (base.tainted || !base.ready))
            violations.push(`NodeReadyJobs of boot ${next.bootID} began on a node tainted or NotReady`);
          if (next.record?.ready.phase === 'Succeeded' && next.record.bootID === next.bootID)
            seen.done = true;
          if (next.record?.preready.phase === 'Failed') seen.failed = true;
          write(next);
        }
        let done = 0;
        for (const effect of d.effects) {
          if (op.crashAfter >= 0 && done >= op.crashAfter) break;
          done++;
          if (effect.type === 'createJob') {
            const name = effect.job.metadata?.name ?? '';
            const key = jobKey(effect.record.namespace, name);
            if (jobs.has(key)) continue; // 409: adopt it
            const bootID = effect.job.metadata?.labels?.[LABELS.bootID] ?? '';
            if (options.guard) {
              // The runner's guard: the node read afresh holds this run, unfinished, for this boot.
              const live = current();
              const r = live.record;
              if (
                !r ||
                r.bootID !== bootID ||
                live.bootID !== bootID ||
                !isRecordPending([...r.preready.runs, ...r.ready.runs], effect.record)
              ) {
                coverage.guarded++;
                continue;
              }
            }
            jobs.set(key, { facts: { phase: 'Pending', message: 'created', deleting: false }, bootID });
            created.set(key, (created.get(key) ?? 0) + 1);
            snapshot();
          } else if (effect.type === 'deleteJob') {
            // The runner's sweep guard: an earlier boot's Job goes only once the node, read
            // afresh, has booted past it.
            if (
              options.guard &&
              effect.earlierBoot !== undefined &&
              current().bootID === effect.earlierBoot
            ) {
              coverage.guarded++;
              continue;
            }
            const j = jobs.get(jobKey(effect.namespace, effect.name));
            if (j) j.facts = { ...j.facts, deleting: true };
            snapshot();
          }
        }
        break;
      }
    }
  }
  coverage.runs++;
  coverage.jobs += created.size;
  if (seen.untainted) coverage.untainted++;
  if (seen.done) coverage.bootsDone++;
  if (seen.failed) coverage.failed++;
  for (const [key, count] of created)
    if (count > 1) violations.push(`5: Job ${key} created ${String(count)} times`);
  return violations;
}

describe('boot invariants (property-based)', () => {
  it('4 and 5 hold for a node through reboots, stale caches, crashes, hook changes and actions', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        assert.deepEqual(simulate(s), []);
      }),
      { numRuns: RUNS, ...(process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {}) },
    );
    // The runs reach the interesting places, not only the first steps.
    const share = (n: number) => n / coverage.runs;
    assert.ok(share(coverage.untainted) > 0.3, JSON.stringify(coverage));
    assert.ok(share(coverage.bootsDone) > 0.05, JSON.stringify(coverage));
    assert.ok(coverage.claimed > 0 && coverage.failed > 0, JSON.stringify(coverage));
    assert.ok(
      coverage.staleWrites > coverage.runs && coverage.jobs > coverage.runs,
      JSON.stringify(coverage),
    );
    console.log(`# coverage: ${JSON.stringify(coverage)}`);
  });

  it('lets a boot through: an announced reboot, the NodePrereadyJob, the taint off, the NodeReadyJob', () => {
    const reconcile = { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: -1 } as const;
    const s: Scenario = {
      hooks: [
        { kind: 'NodePrereadyJob', ignore: false, order: 0 },
        { kind: 'NodeReadyJob', ignore: false, order: 0 },
      ],
      ops: [
        reconcile, // the first boot: tainted, its NodePrereadyJob
        { type: 'jobProgress', index: 0, outcome: 'Succeeded' },
        reconcile, // untainted
        reconcile, // its NodeReadyJob
        { type: 'jobProgress', index: 0, outcome: 'Succeeded' },
        reconcile, // done
        { type: 'action', step: 'announce' },
        reconcile, // kept tainted for the coming boot
        { type: 'reboot' },
        reconcile, // the new boot, the action's: waits for it
        { type: 'ready', ready: true },
        reconcile, // the action claimed it: the NodePrereadyJob
        { type: 'jobProgress', index: 0, outcome: 'Succeeded' },
        reconcile, // untainted
        reconcile, // the NodeReadyJob
        { type: 'jobProgress', index: 0, outcome: 'Succeeded' },
        reconcile,
      ],
    };
    const before = { ...coverage };
    assert.deepEqual(simulate(s), []);
    assert.equal(coverage.untainted - before.untainted, 1);
    assert.equal(coverage.bootsDone - before.bootsDone, 1);
    assert.equal(coverage.claimed - before.claimed, 1);
    assert.equal(coverage.jobs - before.jobs, 4, 'two Jobs for each of two boots');
  });

  const rebootDuringUntaint: Scenario = {
    hooks: [{ kind: 'NodePrereadyJob', ignore: false, order: 0 }],
    ops: [
      { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: -1 }, // taint, record, Job
      { type: 'jobProgress', index: 0, outcome: 'Succeeded' },
      { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: -1 }, // untaint with the record
      { type: 'ready', ready: false },
      { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: -1 }, // NotReady: tainted again
      { type: 'ready', ready: true },
      { type: 'reboot' }, // the node booted again, as the controller decides on the Ready version
      { type: 'reconcile', nodeLag: 1, jobLag: 0, crashAfter: -1 },
    ],
  };

  it('can fail: a write not conditional on the version decided upon untaints a new boot', () => {
    assert.deepEqual(simulate(rebootDuringUntaint), []);
    assert.deepEqual(
      simulate(rebootDuringUntaint, { conditional: false, guard: true }).map((v) => v.slice(0, 2)),
      ['4:'],
    );
  });

  it("can fail: without the sweep guard, a view from before a reboot deletes the new boot's Job, then creates it again", () => {
    const reconcile = { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: -1 } as const;
    const s: Scenario = {
      hooks: [{ kind: 'NodePrereadyJob', ignore: false, order: 0 }],
      ops: [
        reconcile, // boot-1: tainted, its NodePrereadyJob
        { type: 'jobProgress', index: 0, outcome: 'Succeeded' },
        reconcile, // untainted
        reconcile, // its (empty) NodeReadyJob stage: nothing left to do at boot-1
        { type: 'reboot' },
        { type: 'ready', ready: true },
        reconcile, // boot-2: its record, its Job; boot-1's Job swept
        { type: 'jobVanish', index: 0 },
        { type: 'reconcile', nodeLag: 3, jobLag: 0, crashAfter: -1 }, // the node as it was at boot-1
        { type: 'jobVanish', index: 0 },
        reconcile, // boot-2's run has no Job any more
      ],
    };
    assert.deepEqual(simulate(s), []);
    assert.deepEqual(
      simulate(s, { conditional: true, guard: false }).map((v) => v.slice(0, 2)),
      ['5:'],
    );
  });

  it('can fail: without the create guard, a stale view after a reboot creates a Job of the old boot twice', () => {
    const s: Scenario = {
      hooks: [{ kind: 'NodePrereadyJob', ignore: false, order: 0 }],
      ops: [
        { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: 0 }, // the record, then a crash before the Job
        { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: -1 }, // the Job, once
        { type: 'reboot' },
        { type: 'reconcile', nodeLag: 0, jobLag: 0, crashAfter: -1 }, // the new boot: the old Job deleted
        { type: 'jobVanish', index: 0 },
        { type: 'reconcile', nodeLag: 2, jobLag: 0, crashAfter: -1 }, // a view from before the reboot
      ],
    };
    assert.deepEqual(simulate(s), []);
    assert.deepEqual(
      simulate(s, { conditional: true, guard: false }).map((v) => v.slice(0, 2)),
      ['5:'],
    );
  });
});
