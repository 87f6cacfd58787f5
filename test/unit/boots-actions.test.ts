// The action's side of boot hooks (src/actions/phases/approval.ts and running-post-hooks.ts):
// the coming boot announced on the node, with the preready taint, before approval; and
// RunningPostHooks waiting for the boot reconciler's record of the boot the action caused,
// without running boot hooks itself.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import { jobKey } from '../../src/hooks/plan.ts';
import { action, admitted, at, hook, input, job, node, T0 } from './action-fixtures.ts';
import { announcement, doneRecord, stage } from './boots-fixtures.ts';

const prep = hook('NodePrereadyJob', 'prep');
const unset = hook('NodeReadyJob', 'unset-noout');
const noout = hook('PreRebootJob', 'noout');

function announced(d: ActionDecision) {
  const e = d.effects.find((x) => x.type === 'announceBoot');
  return e?.type === 'announceBoot' ? e : undefined;
}

/** An action whose pre-hooks are all done: the next pass approves it, or announces first. */
function ready(spec = {}, hooks = [prep, unset], nodeOptions = {}): ActionInput {
  return input({
    action: action(spec, admitted(T0, { phase: 'RunningPreHooks' })),
    hooks,
    node: node('w1', nodeOptions),
  });
}

describe('approval announces the coming boot first', () => {
  it('puts the preready taint and the announcement on a node a NodePrereadyJob selects, and only then approves', () => {
    const d = decide(ready());
    assert.equal(d.status.phase, 'RunningPreHooks', 'not approved yet');
    assert.equal(d.status.approvalTime, undefined);
    const e = announced(d);
    assert.ok(e);
    assert.equal(e.taint, true);
    assert.deepEqual(e.announcement, {
      action: { name: 'reboot-w1', uid: 'uid-action-1', action: 'Reboot', parameters: {} },
      bootID: 'boot-1',
      time: T0.toISOString(),
    });
    assert.match(d.status.message ?? '', /putting the preready taint on node w1 before approval/);
    assert.equal(d.requeueAfterMs !== undefined && d.requeueAfterMs <= 2000, true);

    const onlyAnnounced = decide(ready({}, [prep, unset], { announcement: announcement('boot-1') }));
    assert.equal(onlyAnnounced.status.phase, 'RunningPreHooks', 'the taint is not on yet');
    const tainted = decide(
      ready({}, [prep, unset], { announcement: announcement('boot-1'), prereadyTaint: true }),
    );
    assert.equal(tainted.status.phase, 'Approved');
    assert.equal(announced(tainted), undefined);
  });

  it('announces without the taint when only NodeReadyJobs select the node', () => {
    const d = decide(ready({}, [unset]));
    assert.equal(announced(d)?.taint, false);
    assert.match(d.status.message ?? '', /announcing the coming boot of node w1/);
    assert.equal(
      decide(ready({}, [unset], { announcement: announcement('boot-1') })).status.phase,
      'Approved',
    );
  });

  it('approves at once when no boot hook selects the node, or the action makes no boot', () => {
    const elsewhere = hook('NodePrereadyJob', 'x', { nodeSelector: { matchLabels: { pool: 'none' } } });
    for (const i of [
      ready({}, []),
      ready({}, [elsewhere]),
      ready({ action: 'ConfigChange', configChange: { mode: 'NoReboot' } }),
      ready({ action: 'ConfigChange', configChange: { mode: 'Staged' } }),
    ]) {
      const d = decide(i);
      assert.equal(d.status.phase, 'Approved', i.action.spec.action);
      assert.equal(announced(d), undefined);
    }
  });

  it('announces for every action that makes the node boot or go down, an upgrade with its image', () => {
    for (const spec of [
      { action: 'Upgrade' as const, upgrade: { image: 'factory.talos.dev/installer/x:v1.13.1' } },
      { action: 'Shutdown' as const },
      // A reset node goes down (and, reset with `reboot`, boots again: the same node).
      { action: 'Reset' as const },
      { action: 'ConfigChange' as const, configChange: { mode: 'Reboot' as const } },
    ]) {
      const e = announced(decide(ready(spec)));
      assert.ok(e, spec.action);
      assert.equal(e.announcement.action.action, spec.action);
    }
    const upgrade = announced(
      decide(ready({ action: 'Upgrade', upgrade: { image: 'factory.talos.dev/installer/x:v1.13.1' } })),
    );
    assert.equal(upgrade?.announcement.action.targetImage, 'factory.talos.dev/installer/x:v1.13.1');
  });

  it('announces again when the node booted since (the announcement is of another boot, or another action)', () => {
    const stale = decide(ready({}, [prep], { announcement: announcement('boot-0'), prereadyTaint: true }));
    assert.equal(announced(stale)?.announcement.bootID, 'boot-1');
    const other = decide(
      ready({}, [prep], { announcement: announcement('boot-1', 'uid-other', 'other'), prereadyTaint: true }),
    );
    assert.ok(announced(other));
  });

  it('announces after bypassed pre-hooks too: the bypass is of pre-action hooks, not of boot hooks', () => {
    const bypassing = input({
      action: action(
        { bypass: { hooks: true, reason: 'decommissioning' } },
        admitted(T0, { phase: 'RunningPreHooks' }),
      ),
      hooks: [noout, prep],
    });
    const d = decide(bypassing);
    assert.equal(d.status.phase, 'RunningPreHooks');
    assert.equal(announced(d)?.taint, true);
    assert.deepEqual(
      d.status.hooks?.map((h) => [h.name, h.phase]),
      [['noout', 'Bypassed']],
    );
  });
});

describe('RunningPostHooks waits for the boot reconciler', () => {
  const post = (extra = {}) =>
    action(
      {},
      admitted(T0, {
        phase: 'RunningPostHooks',
        bootIDBefore: 'boot-1',
        bootIDAfter: 'boot-2',
        hooks: [
          {
            kind: 'PreRebootJob',
            namespace: 'rook-ceph',
            name: 'noout',
            uid: noout.metadata.uid,
            attempt: 1,
            phase: 'Succeeded',
          },
        ],
        ...extra,
      }),
    );

  it('runs no boot hook itself, and waits for the record of the boot', () => {
    const d = decide(input({ action: post(), hooks: [prep, unset], node: node('w1', { bootID: 'boot-2' }) }));
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.deepEqual(
      d.effects.filter((e) => e.type === 'createJob' || e.type === 'callWebhook'),
      [],
    );
    assert.match(d.status.message ?? '', /waiting for the boot hooks of boot boot-2 to start/);
    assert.equal(d.status.conditions?.find((c) => c.type === 'PostHooksSucceeded')?.reason, 'Waiting');
  });

  it("fails with the hook's message when the boot hooks failed, leaving the boot's runs alone", () => {
    const record = { bootID: 'boot-2', preready: stage([prep], 'Failed'), ready: stage([], 'Pending') };
    record.preready.message =
      'NodePrereadyJob rook-ceph/prep failed: Job rook-ceph/prep-job failed: BackoffLimitExceeded';
    const d = decide(
      input({ action: post(), hooks: [prep, unset], node: node('w1', { bootID: 'boot-2', boot: record }) }),
    );
    assert.equal(d.status.phase, 'Failed');
    assert.equal(
      d.status.message,
      'boot hook failed: NodePrereadyJobs: NodePrereadyJob rook-ceph/prep failed: Job rook-ceph/prep-job failed: BackoffLimitExceeded',
    );
    assert.deepEqual(
      d.status.hooks?.map((h) => [h.name, h.phase]),
      [
        ['noout', 'Succeeded'],
        ['prep', 'Failed'],
      ],
    );
    assert.ok(!d.effects.some((e) => e.type === 'deleteJob'));
  });

  it("does not stop the boot's runs or wait for their Jobs when it is cancelled", () => {
    const record = { bootID: 'boot-2', preready: stage([prep], 'Running'), ready: stage([], 'Pending') };
    const running = decide(
      input({ action: post(), hooks: [prep, unset], node: node('w1', { bootID: 'boot-2', boot: record }) }),
    );
    assert.equal(running.status.hooks?.find((h) => h.name === 'prep')?.phase, 'Running');
    const base = post();
    const deleted = {
      ...base,
      status: running.status,
      metadata: { ...base.metadata, deletionTimestamp: at(5).toISOString() },
    };
    const d = decide(
      input({
        action: deleted,
        now: at(5),
        hooks: [prep, unset],
        node: node('w1', { bootID: 'boot-2', boot: record }),
        jobs: new Map([[jobKey('rook-ceph', 'prep-job'), job('Running')]]),
      }),
    );
    assert.equal(d.status.phase, 'Cancelled');
    assert.equal(d.status.hooks?.find((h) => h.name === 'prep')?.phase, 'Running', 'the boot goes on');
    assert.ok(!d.effects.some((e) => e.type === 'deleteJob' || e.type === 'hookRun'));
    assert.equal(d.removeFinalizer, true, "the boot's Jobs are not the action's to wait for");
  });

  it('fails when the node booted again before the boot hooks of its boot were done', () => {
    const d = decide(
      input({
        action: post(),
        hooks: [prep],
        node: node('w1', { bootID: 'boot-3', boot: doneRecord('boot-3', [prep], []) }),
      }),
    );
    assert.equal(d.status.phase, 'Failed');
    assert.match(
      d.status.message ?? '',
      /booted again \(boot ID boot-3\) before the boot hooks of boot boot-2/,
    );
  });

  it('succeeds on a record of its boot that covers the hooks selecting the node now', () => {
    const late = hook('NodeReadyJob', 'late');
    const record = doneRecord('boot-2', [prep], [unset]);
    const waiting = decide(
      input({
        action: post(),
        hooks: [prep, unset, late],
        node: node('w1', { bootID: 'boot-2', boot: record }),
      }),
    );
    assert.equal(waiting.status.phase, 'RunningPostHooks', 'a NodeReadyJob created since has not run');
    const d = decide(
      input({ action: post(), hooks: [prep, unset], node: node('w1', { bootID: 'boot-2', boot: record }) }),
    );
    assert.equal(d.status.phase, 'Succeeded');
    assert.match(d.status.message ?? '', /back with boot ID boot-2; 2 boot hooks done/);
  });
});
