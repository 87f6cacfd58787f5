import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ACTION_POLL_MS, decideBoot, type BootDecision, type BootInput } from '../../src/boots/decide.ts';
import { jobKey } from '../../src/hooks/plan.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import { at, hook, job, webhookHook } from './action-fixtures.ts';
import { announcement, bootInput, bootNode, doneRecord, stage } from './boots-fixtures.ts';

function created(d: BootDecision): { name: string; env: Record<string, string> }[] {
  return d.effects.flatMap((e) =>
    e.type === 'createJob'
      ? [
          {
            name: e.job.metadata?.name ?? '',
            env: Object.fromEntries(
              (e.job.spec?.template.spec?.containers[0]?.env ?? []).map((v) => [v.name, v.value ?? '']),
            ),
          },
        ]
      : [],
  );
}

function reasons(d: BootDecision): string[] {
  return d.events.map((e) => `${e.type}:${e.reason}`);
}

/** The node as it is after the decision's change is written (and re-read). */
function written(i: BootInput, d: BootDecision, changes: Partial<BootInput['node']> = {}): BootInput['node'] {
  const { announcement: previous, ...rest } = i.node;
  const record = d.change?.record ?? i.node.record;
  const kept = d.change?.removeAnnouncement ? undefined : previous;
  return {
    ...rest,
    ...(record ? { record } : {}),
    ...(kept ? { announcement: kept } : {}),
    tainted: d.change?.taint ?? i.node.tainted,
    ...changes,
  };
}

/** The Jobs a decision created, in the given phase, as the next observation. */
function jobsOf(
  d: BootDecision,
  phase: 'Pending' | 'Running' | 'Succeeded' | 'Failed',
  namespace = 'rook-ceph',
) {
  return new Map(created(d).map((j) => [jobKey(namespace, j.name), job(phase)]));
}

describe('decideBoot: nodes no boot hook selects', () => {
  it('records nothing and leaves an untainted node alone', () => {
    const elsewhere = hook('NodePrereadyJob', 'prep', { nodeSelector: { matchLabels: { pool: 'compute' } } });
    const d = decideBoot(bootInput({ hooks: [elsewhere, hook('PreRebootJob', 'noout')] }));
    assert.equal(d.change, undefined);
    assert.deepEqual(d.effects, []);
    assert.equal(d.message, 'no boot hooks select the node');
  });

  it('takes off a preready taint no NodePrereadyJob justifies', () => {
    const d = decideBoot(bootInput({ node: bootNode({ tainted: true }) }));
    assert.deepEqual(d.change, { taint: false });
    assert.deepEqual(reasons(d), ['Normal:PrereadyUntainted']);
    assert.match(d.events[0]?.message ?? '', /no NodePrereadyJob selects the node/);
  });
});

describe('decideBoot: NodePrereadyJobs and the taint', () => {
  it('taints a node a NodePrereadyJob selects whose boot has no record, records the run, then creates its Job', () => {
    const prep = hook('NodePrereadyJob', 'prep');
    const d = decideBoot(bootInput({ hooks: [prep] }));
    assert.equal(d.change?.taint, true);
    assert.deepEqual(reasons(d), ['Normal:PrereadyTainted']);
    assert.match(d.events[0]?.message ?? '', /the NodePrereadyJobs of boot boot-1 are not done/);
    const record = d.change.record;
    assert.equal(record?.bootID, 'boot-1');
    assert.equal(record.action, undefined);
    assert.equal(record.preready.phase, 'Running');
    assert.deepEqual(record.preready.hooks, [prep.metadata.uid]);
    assert.deepEqual(
      record.preready.runs.map((r) => [r.name, r.attempt, r.phase]),
      [['prep', 1, 'Pending']],
    );
    assert.equal(record.ready.phase, 'Pending');
    const jobs = created(d);
    assert.equal(jobs.length, 1);
    assert.equal(jobs[0]?.name, record.preready.runs[0]?.jobName, 'the Job named in the persisted record');
    assert.deepEqual(jobs[0]?.env, {
      GATEHOUSE_NODE: 'w1',
      GATEHOUSE_ACTION: '',
      GATEHOUSE_ACTION_NAME: '',
      GATEHOUSE_BOOT_ID: 'boot-1',
    });
    const createJob = d.effects.find((e) => e.type === 'createJob');
    assert.deepEqual(
      createJob?.type === 'createJob' ? createJob.job.metadata?.ownerReferences : undefined,
      [{ apiVersion: 'v1', kind: 'Node', name: 'w1', uid: 'uid-node-w1' }],
      'owned by the Node, not by an action',
    );
  });

  it('keeps the taint while the Job runs, and removes it in the write that records success', () => {
    const prep = hook('NodePrereadyJob', 'prep');
    let i = bootInput({ hooks: [prep] });
    const first = decideBoot(i);
    i = { ...i, now: at(5), node: written(i, first), jobs: jobsOf(first, 'Running') };
    const running = decideBoot(i);
    assert.equal(running.change?.taint, undefined, 'still tainted');
    assert.equal(running.change?.record?.preready.runs[0]?.phase, 'Running');
    assert.deepEqual(created(running), []);
    i = { ...i, now: at(10), node: written(i, running), jobs: jobsOf(first, 'Succeeded') };
    const done = decideBoot(i);
    assert.equal(done.change?.taint, false);
    assert.equal(done.change.record?.preready.phase, 'Succeeded');
    assert.equal(done.change.record.preready.time, at(10).toISOString());
    assert.deepEqual(reasons(done), ['Normal:PrereadyUntainted']);
    assert.match(done.events[0]?.message ?? '', /the 1 NodePrereadyJob of boot boot-1 succeeded/);
  });

  it('runs NodePrereadyJobs in ascending order, equal orders together', () => {
    const a = hook('NodePrereadyJob', 'a', { order: 1 });
    const b = hook('NodePrereadyJob', 'b', { order: 1 });
    const c = hook('NodePrereadyJob', 'c', { order: 2 });
    const i = bootInput({ hooks: [c, b, a] });
    const d = decideBoot(i);
    assert.deepEqual(
      d.change?.record?.preready.runs.map((r) => r.name),
      ['a', 'b'],
    );
    const next = decideBoot({ ...i, node: written(i, d), jobs: jobsOf(d, 'Succeeded') });
    assert.deepEqual(
      next.change?.record?.preready.runs.map((r) => [r.name, r.phase]),
      [
        ['a', 'Succeeded'],
        ['b', 'Succeeded'],
        ['c', 'Pending'],
      ],
    );
    assert.equal(next.change.taint, undefined, 'tainted until c is done too');
  });

  it('counts a failure under Ignore as done', () => {
    const flaky = hook('NodePrereadyJob', 'flaky', { failurePolicy: 'Ignore' });
    const i = bootInput({ hooks: [flaky] });
    const d = decideBoot(i);
    const next = decideBoot({ ...i, node: written(i, d), jobs: jobsOf(d, 'Failed') });
    assert.equal(next.change?.record?.preready.phase, 'Succeeded');
    assert.match(next.change.record.preready.message ?? '', /failures ignored/);
    assert.equal(next.change.taint, false);
  });

  it('keeps the taint after a failure under Fail, says why, and does not run the hook again for the boot', () => {
    const breaks = hook('NodePrereadyJob', 'breaks');
    const i = bootInput({ hooks: [breaks] });
    const d = decideBoot(i);
    const failedInput = { ...i, node: written(i, d), jobs: jobsOf(d, 'Failed') };
    const failed = decideBoot(failedInput);
    assert.equal(failed.change?.record?.preready.phase, 'Failed');
    assert.equal(failed.change.taint, undefined, 'still tainted');
    assert.deepEqual(reasons(failed), ['Warning:PrereadyHookFailed']);
    assert.match(
      failed.events[0]?.message ?? '',
      /^boot boot-1: NodePrereadyJob rook-ceph\/breaks failed: .*; the node keeps the talos\.dev\/preready taint/,
    );
    const again = decideBoot({ ...failedInput, now: at(60), node: written(failedInput, failed) });
    assert.equal(again.change, undefined, 'nothing more happens');
    assert.deepEqual(again.effects, []);
    assert.deepEqual(reasons(again), [], 'the failure is told once');
  });

  it('lets a failed boot go once the failing hook is deleted', () => {
    const breaks = hook('NodePrereadyJob', 'breaks');
    const record = { bootID: 'boot-1', preready: stage([breaks], 'Failed'), ready: stage([], 'Pending') };
    const d = decideBoot(bootInput({ node: bootNode({ tainted: true, record }), hooks: [] }));
    assert.equal(d.change?.taint, false);
  });

  it('runs a hook created after the boot was done, and again one deleted and created anew (a new UID)', () => {
    const prep = hook('NodePrereadyJob', 'prep');
    const record = doneRecord('boot-1', [prep], []);
    const late = hook('NodePrereadyJob', 'late');
    const d = decideBoot(bootInput({ node: bootNode({ record }), hooks: [prep, late] }));
    assert.equal(d.change?.taint, true, 'not covered by the completion: tainted again');
    assert.deepEqual(
      created(d).map((j) => j.name.replace(/-[0-9a-f]{10}-1$/, '')),
      ['late'],
      'only the hook the completion does not cover runs',
    );
    const recreated: HookObject = { ...prep, metadata: { ...prep.metadata, uid: 'uid-prep-recreated' } };
    const again = decideBoot(bootInput({ node: bootNode({ record }), hooks: [recreated] }));
    assert.equal(again.change?.taint, true);
    assert.equal(created(again).length, 1);
    assert.notEqual(created(again)[0]?.name, record.preready.runs[0]?.jobName);
  });

  it('does not taint again for a hook deleted after the boot was done, nor for an edit of one (same UID)', () => {
    const prep = hook('NodePrereadyJob', 'prep');
    const gone = hook('NodePrereadyJob', 'gone');
    const record = doneRecord('boot-1', [prep, gone], []);
    const edited: HookObject = {
      ...prep,
      metadata: { ...prep.metadata, generation: 7 },
      spec: { timeout: '1h' },
    };
    const d = decideBoot(bootInput({ node: bootNode({ record }), hooks: [edited] }));
    assert.equal(d.change, undefined);
    assert.deepEqual(d.effects, []);
  });

  it('taints a NotReady node, starts nothing while it is NotReady, and untaints it once Ready (same boot)', () => {
    const prep = hook('NodePrereadyJob', 'prep');
    const record = doneRecord('boot-1', [prep], []);
    const down = decideBoot(bootInput({ node: bootNode({ record, ready: false }), hooks: [prep] }));
    assert.equal(down.change?.taint, true);
    assert.match(down.events[0]?.message ?? '', /the node is NotReady/);
    const fresh = decideBoot(bootInput({ node: bootNode({ ready: false }), hooks: [prep] }));
    assert.deepEqual(created(fresh), [], 'NodePrereadyJobs run once the node is Ready');
    assert.equal(fresh.change?.record?.preready.phase, 'Pending');
    assert.equal(fresh.change.taint, true);
    const up = decideBoot(bootInput({ node: bootNode({ record, tainted: true }), hooks: [prep] }));
    assert.deepEqual(up.change, { taint: false });
    assert.deepEqual(up.effects, [], 'a boot is done once');
  });

  it('never counts a record of another boot: a new boot is tainted and run afresh, the old runs stopped and their Jobs deleted', () => {
    const prep = hook('NodePrereadyJob', 'prep');
    const ready = hook('NodeReadyJob', 'ready');
    const old = {
      bootID: 'boot-1',
      preready: stage([prep], 'Succeeded'),
      ready: stage([ready], 'Running'),
    };
    const d = decideBoot(
      bootInput({
        node: bootNode({ bootID: 'boot-2', record: old }),
        hooks: [prep, ready],
        nodeJobs: [
          { namespace: 'rook-ceph', name: 'prep-job', bootID: 'boot-1', deleting: false },
          { namespace: 'rook-ceph', name: 'older', bootID: 'boot-0', deleting: false },
          { namespace: 'rook-ceph', name: 'going', bootID: 'boot-0', deleting: true },
          { namespace: 'rook-ceph', name: 'current', bootID: 'boot-2', deleting: false },
        ],
      }),
    );
    assert.equal(d.change?.taint, true);
    assert.equal(d.change.record?.bootID, 'boot-2');
    assert.deepEqual(d.effects.flatMap((e) => (e.type === 'deleteJob' ? [e.name] : [])).sort(), [
      'older',
      'prep-job',
      'ready-job',
    ]);
    const stopped = d.effects.find((e) => e.type === 'hookRun' && e.run.bootID === 'boot-1');
    assert.ok(stopped?.type === 'hookRun');
    assert.equal(stopped.run.phase, 'Failed');
    assert.match(stopped.run.message ?? '', /booted again \(boot ID boot-2\)/);
    assert.equal(created(d)[0]?.env.GATEHOUSE_BOOT_ID, 'boot-2');
  });

  it('keeps the taint on a node that has not reported a boot ID, and runs nothing', () => {
    const d = decideBoot(
      bootInput({ node: bootNode({ bootID: undefined }), hooks: [hook('NodePrereadyJob', 'p')] }),
    );
    assert.deepEqual(d.change, { taint: true });
    assert.deepEqual(d.effects, []);
  });

  it('calls webhook boot hooks with the node and boot only', () => {
    const w = webhookHook('NodePrereadyJob', 'osd-check');
    const d = decideBoot(bootInput({ hooks: [w] }));
    const call = d.effects.find((e) => e.type === 'callWebhook');
    assert.ok(call?.type === 'callWebhook');
    assert.deepEqual(call.request.action, { node: 'w1', bootID: 'boot-1' });
    assert.equal(d.change?.record?.preready.runs[0]?.jobName, undefined);
  });
});

describe('decideBoot: NodeReadyJobs', () => {
  const prep = hook('NodePrereadyJob', 'prep');
  const unset = hook('NodeReadyJob', 'unset-noout');

  it('start only once the node is Ready and seen without the taint, after the NodePrereadyJobs', () => {
    const record = { bootID: 'boot-1', preready: stage([prep], 'Running'), ready: stage([], 'Pending') };
    const jobs = new Map([[jobKey('rook-ceph', 'prep-job'), job('Succeeded')]]);
    const i = bootInput({ node: bootNode({ record, tainted: true }), hooks: [prep, unset], jobs });
    const untaint = decideBoot(i);
    assert.equal(untaint.change?.taint, false);
    assert.equal(untaint.change.record?.ready.runs.length, 0, 'not in the write that removes the taint');
    const next = decideBoot({ ...i, node: written(i, untaint) });
    assert.deepEqual(
      next.change?.record?.ready.runs.map((r) => [r.name, r.phase]),
      [['unset-noout', 'Pending']],
    );
    assert.equal(created(next).length, 1);
    const notReady = decideBoot({ ...i, node: written(i, untaint, { ready: false }) });
    assert.deepEqual(created(notReady), []);
  });

  it('run on nodes without NodePrereadyJobs once Ready, and a success is told in an Event', () => {
    const i = bootInput({ hooks: [unset] });
    const d = decideBoot(i);
    assert.equal(d.change?.taint, undefined, 'no taint without NodePrereadyJobs');
    assert.equal(d.change?.record?.preready.phase, 'Succeeded');
    assert.equal(created(d).length, 1);
    const done = decideBoot({ ...i, node: written(i, d), jobs: jobsOf(d, 'Succeeded') });
    assert.equal(done.change?.record?.ready.phase, 'Succeeded');
    assert.deepEqual(reasons(done), ['Normal:BootHooksSucceeded']);
  });

  it('go on once started, even if the node is tainted or NotReady again; a failure is a Warning Event', () => {
    const record = {
      bootID: 'boot-1',
      preready: stage([prep], 'Succeeded'),
      ready: stage([unset], 'Running'),
    };
    const jobs = new Map([[jobKey('rook-ceph', 'unset-noout-job'), job('Failed')]]);
    const d = decideBoot(
      bootInput({ node: bootNode({ record, ready: false, tainted: true }), hooks: [prep, unset], jobs }),
    );
    assert.equal(d.change?.record?.ready.phase, 'Failed');
    assert.deepEqual(reasons(d), ['Warning:ReadyHookFailed']);
  });
});

describe('decideBoot: boots an action announced', () => {
  const prep = hook('NodePrereadyJob', 'prep');
  const unset = hook('NodeReadyJob', 'unset-noout');
  const done = doneRecord('boot-1', [prep], [unset]);

  it('keeps the taint the action put on while the action may still make the node boot', () => {
    for (const phase of ['RunningPreHooks', 'Approved', 'WaitingForNode'] as const) {
      const d = decideBoot(
        bootInput({
          node: bootNode({ record: done, tainted: true, announcement: announcement('boot-1') }),
          hooks: [prep, unset],
          actions: new Map([['uid-action-1', { phase }]]),
        }),
      );
      assert.equal(d.change, undefined, phase);
    }
    const d = decideBoot(
      bootInput({
        node: bootNode({ record: done, announcement: announcement('boot-1') }),
        hooks: [prep, unset],
        actions: new Map([['uid-action-1', { phase: 'Approved' }]]),
      }),
    );
    assert.equal(d.change?.taint, true, 'and puts it back if someone took it off');
    assert.match(d.events[0]?.message ?? '', /NodeAction reboot-w1 is about to make the node boot again/);
  });

  it('drops the announcement, and the taint with it, when the action ended without the node booting', () => {
    for (const actions of [
      new Map([['uid-action-1', { phase: 'Failed' as const }]]),
      new Map([['uid-action-1', { phase: 'Cancelled' as const }]]),
      new Map(),
    ]) {
      const d = decideBoot(
        bootInput({
          node: bootNode({ record: done, tainted: true, announcement: announcement('boot-1') }),
          hooks: [prep, unset],
          actions,
        }),
      );
      assert.deepEqual(d.change, { removeAnnouncement: true, taint: false });
    }
  });

  it('keeps the announcement of an action that succeeded without a new boot (a Shutdown): the node comes back tainted', () => {
    const d = decideBoot(
      bootInput({
        node: bootNode({ record: done, tainted: true, announcement: announcement('boot-1') }),
        hooks: [prep, unset],
        actions: new Map([['uid-action-1', { phase: 'Succeeded' }]]),
      }),
    );
    assert.equal(d.change, undefined);
  });

  it("records the new boot as the action's, and waits for the action to see the node return", () => {
    const i = bootInput({
      node: bootNode({ bootID: 'boot-2', record: done, tainted: true, announcement: announcement('boot-1') }),
      hooks: [prep, unset],
      actions: new Map([['uid-action-1', { phase: 'WaitingForNode' }]]),
    });
    const d = decideBoot(i);
    assert.equal(d.change?.removeAnnouncement, true);
    assert.equal(d.change.record?.bootID, 'boot-2');
    assert.equal(d.change.record.action?.uid, 'uid-action-1');
    assert.equal(d.change.record.preready.phase, 'Pending');
    assert.equal(d.change.taint, undefined, 'still tainted');
    assert.deepEqual(created(d), [], 'no hook before the action saw the node return');
    assert.equal(d.requeueAfterMs, ACTION_POLL_MS);
    assert.match(d.message, /waiting for NodeAction reboot-w1 to see node w1 return/);

    const claimed = decideBoot({
      ...i,
      node: written(i, d),
      actions: new Map([['uid-action-1', { phase: 'RunningPostHooks', bootIDAfter: 'boot-2' }]]),
    });
    const jobs = created(claimed);
    assert.equal(jobs.length, 1);
    assert.deepEqual(jobs[0]?.env, {
      GATEHOUSE_NODE: 'w1',
      GATEHOUSE_ACTION: 'Reboot',
      GATEHOUSE_ACTION_NAME: 'reboot-w1',
      GATEHOUSE_BOOT_ID: 'boot-2',
    });
    const gone = decideBoot({ ...i, node: written(i, d), actions: new Map() });
    assert.equal(created(gone).length, 1, 'an action that is gone is not waited for');
  });

  it("does not take a boot that began before the action was approved as the action's", () => {
    const i = bootInput({
      node: bootNode({ bootID: 'boot-2', record: done, announcement: announcement('boot-1') }),
      hooks: [prep, unset],
      actions: new Map([['uid-action-1', { phase: 'RunningPreHooks' }]]),
    });
    const d = decideBoot(i);
    assert.deepEqual(d.change, { taint: true }, 'tainted, the announcement left for the action to renew');
    assert.equal(d.requeueAfterMs, ACTION_POLL_MS);
    const renewed = decideBoot({
      ...i,
      node: written(i, d, { announcement: announcement('boot-2') }),
    });
    assert.equal(renewed.change?.record?.bootID, 'boot-2');
    assert.equal(renewed.change.record.action, undefined, 'a boot nobody caused');
    assert.equal(created(renewed).length, 1);
  });

  it('on a node it does not own, handles only the boots its own actions caused', () => {
    const theirs = decideBoot(
      bootInput({
        node: bootNode({ bootID: 'boot-2', record: done }),
        hooks: [prep, unset],
        onlyActions: new Set(['uid-action-1']),
      }),
    );
    assert.equal(theirs.change, undefined);
    assert.deepEqual(theirs.effects, []);
    const ours = decideBoot(
      bootInput({
        node: bootNode({
          bootID: 'boot-2',
          record: done,
          tainted: true,
          announcement: announcement('boot-1'),
        }),
        hooks: [prep, unset],
        actions: new Map([['uid-action-1', { phase: 'RunningPostHooks', bootIDAfter: 'boot-2' }]]),
        onlyActions: new Set(['uid-action-1']),
      }),
    );
    assert.equal(ours.change?.record?.action?.uid, 'uid-action-1');
    assert.equal(created(ours).length, 1);
    const released = decideBoot(
      bootInput({
        node: bootNode({ record: done, tainted: true, announcement: announcement('boot-1') }),
        hooks: [prep, unset],
        actions: new Map([['uid-action-1', { phase: 'Failed' }]]),
        onlyActions: new Set(['uid-action-1']),
      }),
    );
    assert.deepEqual(released.change, { removeAnnouncement: true }, 'its own announcement, nothing else');
  });
});

describe('decideBoot: persisting before acting', () => {
  it('names in the record to be written every Job it asks to create', () => {
    const hooks = [
      hook('NodePrereadyJob', 'a'),
      hook('NodePrereadyJob', 'b'),
      hook('NodeReadyJob', 'c'),
      webhookHook('NodeReadyJob', 'd'),
    ];
    let i = bootInput({ hooks });
    for (let step = 0; step < 6; step++) {
      const d = decideBoot(i);
      const persisted = new Set(
        [...(d.change?.record?.preready.runs ?? []), ...(d.change?.record?.ready.runs ?? [])].map(
          (r) => r.jobName,
        ),
      );
      for (const j of created(d))
        assert.ok(persisted.has(j.name), `${j.name} is in the record written first`);
      i = {
        ...i,
        now: at(step + 1),
        node: written(i, d),
        jobs: new Map([...i.jobs, ...jobsOf(d, 'Succeeded')]),
      };
    }
    assert.equal(i.node.record?.ready.runs.find((r) => r.name === 'c')?.phase, 'Succeeded');
  });

  it('comes to rest: with nothing new observed, a record read back from the node decides no write', () => {
    const hooks = [hook('NodePrereadyJob', 'a'), hook('NodeReadyJob', 'b')];
    let i = bootInput({ hooks });
    /** Decides and writes (through JSON, as the API server stores it) until nothing changes. */
    const settle = () => {
      for (let pass = 0; pass < 5; pass++) {
        const d = decideBoot(i);
        if (!d.change) return d;
        const node = written(i, d);
        const record = node.record
          ? (JSON.parse(JSON.stringify(node.record)) as typeof node.record)
          : undefined;
        i = {
          ...i,
          node: { ...node, ...(record ? { record } : {}) },
          jobs: new Map([...i.jobs, ...jobsOf(d, 'Pending')]),
        };
      }
      assert.fail(`no rest after 5 passes: ${JSON.stringify(i.node)}`);
    };
    for (const phase of ['Running', 'Succeeded', 'Running', 'Succeeded'] as const) {
      settle();
      i = { ...i, now: at(1), jobs: new Map([...i.jobs.keys()].map((k) => [k, job(phase)])) };
      const rest = settle();
      assert.deepEqual(rest.events, []);
      assert.deepEqual(
        rest.effects.filter((e) => e.type === 'createJob'),
        [],
      );
    }
    assert.equal(i.node.record?.ready.phase, 'Succeeded');
    assert.equal(i.node.tainted, false);
  });

  it('keeps a run that timed out as failed, and deletes its Job', () => {
    const slow = hook('NodePrereadyJob', 'slow', { timeout: '1m' });
    const record = { bootID: 'boot-1', preready: stage([slow], 'Running'), ready: stage([], 'Pending') };
    const d = decideBoot(
      bootInput({
        now: at(120),
        node: bootNode({ record, tainted: true }),
        hooks: [slow],
        jobs: new Map([[jobKey('rook-ceph', 'slow-job'), job('Running')]]),
      }),
    );
    assert.equal(d.change?.record?.preready.phase, 'Failed');
    assert.match(d.change.record.preready.message ?? '', /timed out after 1m/);
    assert.ok(d.effects.some((e) => e.type === 'deleteJob' && e.name === 'slow-job'));
    assert.equal(d.change.taint, undefined);
  });
});
