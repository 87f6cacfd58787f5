// The undo of pre-action hooks and the cordon of an action that ended before it touched
// its node (src/actions/phases/undo.ts, src/actions/disruption.ts), one case at a time.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Job } from '@kubernetes/client-node';
import {
  decide,
  type ActionDecision,
  type ActionEffect,
  type ActionInput,
} from '../../src/actions/decide.ts';
import { HOOK_JOB_LABELS } from '../../src/api/names.ts';
import type { NodeActionSpec, NodeActionStatus } from '../../src/api/node-action.ts';
import { jobKey } from '../../src/hooks/plan.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import { action, at, hook, input, job, node, T0, webhookHook } from './action-fixtures.ts';

const UNDO_TEMPLATE = {
  spec: {
    template: {
      spec: {
        restartPolicy: 'Never',
        containers: [{ name: 'ceph', image: 'rook/ceph', args: ['osd', 'unset-group', 'noout'] }],
      },
    },
  },
};

const noout = (): HookObject => hook('PreRebootJob', 'noout', { undo: { template: UNDO_TEMPLATE } });

function created(d: ActionDecision): V1Job[] {
  return d.effects.flatMap((e) => (e.type === 'createJob' ? [e.job] : []));
}

function eventReasons(d: ActionDecision): string[] {
  return d.effects.flatMap((e) => (e.type === 'event' ? [e.reason] : []));
}

function condition(status: NodeActionStatus, type: string) {
  return status.conditions?.find((c) => c.type === type);
}

/** An action in RunningPreHooks whose one hook's Job has succeeded (and then more). */
function afterHook(
  h: HookObject,
  spec: Partial<NodeActionSpec> = {},
  status: NodeActionStatus = {},
): ActionInput {
  const first = input({
    action: action(spec, {
      phase: 'RunningPreHooks',
      startTime: T0.toISOString(),
      phaseTime: T0.toISOString(),
    }),
    hooks: [h],
  });
  const started = decide(first);
  const record = started.status.hooks?.[0];
  assert.ok(record?.jobName, 'the hook started a Job');
  return {
    ...first,
    now: at(30),
    action: action(spec, { ...started.status, ...status }),
    jobs: new Map([[jobKey(record.namespace, record.jobName), job('Running')]]),
  };
}

function cancel(i: ActionInput): ActionInput {
  return {
    ...i,
    now: at(60),
    action: { ...i.action, metadata: { ...i.action.metadata, deletionTimestamp: at(60).toISOString() } },
  };
}

/** The next pass, on the decision's status as written, with `changes`. */
function next(i: ActionInput, d: ActionDecision, changes: Partial<ActionInput> = {}): ActionInput {
  return { ...i, action: { ...i.action, status: d.status }, ...changes };
}

describe('Undo of pre-action hooks', () => {
  it('runs the undo once when an action is cancelled after its hook ran, and keeps the finalizer until it finished', () => {
    const h = noout();
    const i = cancel(afterHook(h));
    const d = decide(i);
    assert.equal(d.status.phase, 'Cancelled');
    assert.equal(d.status.undo?.nodeDisrupted, false);
    const [undoJob, ...more] = created(d);
    assert.ok(undoJob);
    assert.deepEqual(more, []);
    const hookJob = i.action.status?.hooks?.[0]?.jobName;
    assert.notEqual(undoJob.metadata?.name, hookJob, 'the undo Job has a name of its own');
    assert.equal(undoJob.metadata?.labels?.[HOOK_JOB_LABELS.purpose], 'undo');
    const env = (undoJob.spec?.template.spec?.containers[0]?.env ?? []).map(
      (e) => `${e.name}=${e.value ?? ''}`,
    );
    assert.ok(
      env.includes('GATEHOUSE_HOOK_PURPOSE=Undo') && env.includes('GATEHOUSE_NODE=w1'),
      env.join(' '),
    );
    assert.deepEqual(undoJob.spec?.template.spec?.containers[0]?.args, ['osd', 'unset-group', 'noout']);
    assert.equal(d.removeFinalizer, false, 'deleting waits for the undo');
    assert.ok(eventReasons(d).includes('Undoing'));
    assert.equal(condition(d.status, 'Undone')?.status, 'Unknown');
    assert.ok(!d.effects.some((e) => e.type === 'hookRun' && e.run.jobName === undoJob.metadata?.name));

    // Crashed before creating it: the next pass creates it again under the same name.
    const again = decide(next(i, d));
    assert.deepEqual(
      created(again).map((j) => j.metadata?.name),
      [undoJob.metadata.name],
    );
    assert.equal(again.removeFinalizer, false);
    // Running, then done: the finalizer goes, with an Event and the condition.
    const key = jobKey('rook-ceph', undoJob.metadata.name ?? '');
    const running = decide(next(i, again, { jobs: new Map([...i.jobs, [key, job('Running')]]) }));
    assert.deepEqual(created(running), []);
    assert.equal(running.removeFinalizer, false);
    const finished = decide(next(i, running, { now: at(90), jobs: new Map([[key, job('Succeeded')]]) }));
    assert.deepEqual(created(finished), []);
    assert.equal(finished.removeFinalizer, true);
    assert.ok(eventReasons(finished).includes('Undone'));
    assert.equal(condition(finished.status, 'Undone')?.status, 'True');
    assert.equal(finished.status.undo?.runs?.[0]?.phase, 'Succeeded');
    // And it is never run again.
    const after = decide(next(i, finished, { jobs: new Map() }));
    assert.deepEqual(created(after), []);
  });

  it('runs the undo when the action fails past a deadline before the node was touched', () => {
    const h = noout();
    const i = afterHook(h, { deadlines: { runningPreHooks: '1m' } });
    const d = decide({ ...i, now: at(120) });
    assert.equal(d.status.phase, 'Failed');
    assert.equal(created(d).length, 1);
    assert.equal(created(d)[0]?.metadata?.labels?.[HOOK_JOB_LABELS.purpose], 'undo');
  });

  it('says so, as a Warning and a False condition, when the undo fails; it is not retried', () => {
    const i = cancel(afterHook(noout()));
    const d = decide(i);
    const name = created(d)[0]?.metadata?.name ?? '';
    const failed = decide(next(i, d, { jobs: new Map([[jobKey('rook-ceph', name), job('Failed')]]) }));
    assert.equal(failed.removeFinalizer, true);
    const warning = failed.effects.find(
      (e): e is Extract<ActionEffect, { type: 'event' }> => e.type === 'event' && e.reason === 'UndoFailed',
    );
    assert.equal(warning?.eventType, 'Warning');
    assert.match(warning.message, /the undo of PreRebootJob rook-ceph\/noout failed/);
    assert.equal(condition(failed.status, 'Undone')?.status, 'False');
    assert.equal(condition(failed.status, 'Undone')?.reason, 'UndoFailed');
    assert.deepEqual(created(decide(next(i, failed, { jobs: new Map() }))), []);
  });

  it('fails a run whose Job someone deleted instead of creating a second one', () => {
    const i = cancel(afterHook(noout()));
    const d = decide(i);
    const name = created(d)[0]?.metadata?.name ?? '';
    const seen = decide(next(i, d, { jobs: new Map([[jobKey('rook-ceph', name), job('Running')]]) }));
    const gone = decide(next(i, seen, { jobs: new Map() }));
    assert.deepEqual(created(gone), []);
    assert.equal(gone.status.undo?.runs?.length, 1);
    assert.equal(gone.status.undo.runs[0]?.phase, 'Failed');
    assert.ok(eventReasons(gone).includes('UndoFailed'));
  });

  it('does not undo once the Talos call was made and its outcome is unknown', () => {
    const i = cancel(
      afterHook(
        noout(),
        { execution: 'Managed' },
        {
          execution: {
            drainTime: T0.toISOString(),
            call: 'MachineService.Reboot',
            callTime: T0.toISOString(),
            callResult: 'Unknown',
          },
        },
      ),
    );
    const d = decide({ ...i, node: node('w1', { cordonedBy: 'reboot-w1' }) });
    assert.equal(d.status.phase, 'Cancelled');
    assert.equal(d.status.undo?.nodeDisrupted, true);
    assert.match(d.status.undo.reason, /unknown \(the node may be rebooting\)/);
    assert.deepEqual(created(d), []);
    assert.ok(eventReasons(d).includes('NotUndone'));
    assert.ok(!d.effects.some((e) => e.type === 'uncordon'), 'a disrupted node stays cordoned');
    assert.match(d.status.message ?? '', /node w1 stays cordoned/);
  });

  it('does undo when Talos refused the call before it reached the node', () => {
    const i = cancel(
      afterHook(
        noout(),
        { execution: 'Managed' },
        {
          execution: {
            drainTime: T0.toISOString(),
            call: 'MachineService.Reboot',
            callTime: T0.toISOString(),
            callResult: 'Failed',
          },
        },
      ),
    );
    const d = decide(i);
    assert.equal(d.status.undo?.nodeDisrupted, false);
    assert.equal(created(d).length, 1);
  });

  it('does not undo after the executed mark or a new boot', () => {
    const marked = cancel(afterHook(noout()));
    marked.action.metadata.annotations = { 'talos.dev/executed': 'true' };
    assert.deepEqual(created(decide(marked)), []);
    const rebooted = cancel(afterHook(noout(), {}, { bootIDBefore: 'boot-1' }));
    const d = decide({ ...rebooted, node: node('w1', { bootID: 'boot-2' }) });
    assert.equal(d.status.undo?.nodeDisrupted, true);
    assert.deepEqual(created(d), []);
  });

  it('undoes nothing for hooks that never ran or were bypassed, or have no undo', () => {
    const early = decide(
      cancel(
        input({
          action: action(
            {},
            { phase: 'WaitingForHealth', startTime: T0.toISOString(), phaseTime: T0.toISOString() },
          ),
          hooks: [noout()],
        }),
      ),
    );
    assert.deepEqual(created(early), []);
    assert.equal(early.removeFinalizer, true);
    assert.equal(early.status.undo?.reason, 'no pre-action hook had run');
    const plain = decide(cancel(afterHook(hook('PreRebootJob', 'plain'))));
    assert.deepEqual(created(plain), []);
    assert.equal(plain.status.undo?.reason, 'no pre-action hook that ran has an undo');
  });

  it('calls an undo webhook with purpose Undo', () => {
    const h = webhookHook('PreRebootJob', 'noout-hook');
    h.spec.undo = { webhook: { service: { name: 'hooks', port: 8443 }, path: '/unset' } };
    const start = input({
      action: action(
        {},
        { phase: 'RunningPreHooks', startTime: T0.toISOString(), phaseTime: T0.toISOString() },
      ),
      hooks: [h],
    });
    const running = decide(start);
    const d = decide(cancel(next(start, running)));
    const call = d.effects.find((e) => e.type === 'callWebhook');
    assert.equal(call?.type === 'callWebhook' ? call.request.purpose : undefined, 'Undo');
    assert.equal(call?.type === 'callWebhook' ? call.hook.spec.webhook?.path : undefined, '/unset');
    assert.equal(d.removeFinalizer, false);
  });
});

describe('Cordons only where they protect', () => {
  it('lifts its own cordon of a node it never disrupted, and says so; again on a later pass if needed', () => {
    const i = cancel(afterHook(hook('PreRebootJob', 'plain')));
    const d = decide({ ...i, node: node('w1', { cordonedBy: 'reboot-w1' }) });
    assert.ok(d.effects.some((e) => e.type === 'uncordon'));
    assert.match(d.status.message ?? '', /uncordoning node w1, cordoned for this action/);
    // The uncordon lost to a crash: the terminal pass lifts it again.
    const later = decide(next(i, d, { node: node('w1', { cordonedBy: 'reboot-w1' }) }));
    assert.ok(later.effects.some((e) => e.type === 'uncordon'));
  });

  it('never lifts a cordon someone else made', () => {
    const i = cancel(afterHook(hook('PreRebootJob', 'plain')));
    const d = decide({ ...i, node: node('w1', { cordonedBy: undefined }) });
    assert.ok(!d.effects.some((e) => e.type === 'uncordon'));
    const other = decide({ ...i, node: node('w1', { cordonedBy: 'another-action' }) });
    assert.ok(!other.effects.some((e) => e.type === 'uncordon'));
  });
});
