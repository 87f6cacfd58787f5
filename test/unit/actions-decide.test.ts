import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import { NODE_ACTION_FINALIZER as FINALIZER } from '../../src/api/names.ts';
import type { NodeActionStatus } from '../../src/api/node-action.ts';
import { jobKey, type HookRunRecord } from '../../src/hooks/plan.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import {
  action,
  admitted,
  at,
  check,
  hook,
  input,
  job,
  node,
  state,
  T0,
  webhookHook,
} from './action-fixtures.ts';

function events(d: ActionDecision): string[] {
  return d.effects.flatMap((e) => (e.type === 'event' ? [`${e.eventType}:${e.reason}`] : []));
}

function effectTypes(d: ActionDecision): string[] {
  return d.effects.map((e) => e.type);
}

function condition(status: NodeActionStatus, type: string) {
  return status.conditions?.find((c) => c.type === type);
}

/** Decides, then feeds the decided status back as the next observation (a written and re-read status). */
function run(i: ActionInput): ActionDecision {
  return decide(i);
}

function next(i: ActionInput, d: ActionDecision, changes: Partial<ActionInput> = {}): ActionInput {
  return { ...i, action: { ...i.action, status: d.status }, ...changes };
}

function recordFor(h: HookObject, d: ActionDecision): HookRunRecord {
  const r = d.status.hooks?.find((x) => x.uid === h.metadata.uid);
  assert.ok(r, `no record for ${h.metadata.name}`);
  return r;
}

describe('decide: starting', () => {
  it('first adds its finalizer and nothing else', () => {
    const d = run(input({ action: action({}, undefined, { finalizers: [] }) }));
    assert.equal(d.addFinalizer, true);
    assert.deepEqual(d.status, {});
    assert.deepEqual(d.effects, []);
  });

  it('then becomes Pending, records its start, asks for admission and says so in Events', () => {
    const d = run(input());
    assert.equal(d.status.phase, 'Pending');
    assert.equal(d.status.startTime, T0.toISOString());
    assert.equal(d.status.phaseTime, T0.toISOString());
    assert.deepEqual(events(d), ['Normal:Requested', 'Normal:Pending']);
    assert.ok(effectTypes(d).includes('admission'));
    assert.equal(d.requeueAfterMs, 24 * 3600_000, 'woken at the pending deadline');
  });

  it('records a bypass in status and in a Warning Event naming who and why', () => {
    const d = run(
      input({
        action: action({ bypass: { healthChecks: true, hooks: true, reason: 'Ceph is gone for good' } }),
      }),
    );
    const bypassed = condition(d.status, 'Bypassed');
    assert.equal(bypassed?.status, 'True');
    assert.match(
      bypassed.message,
      /alice bypasses the health checks and pre-action hooks .*: Ceph is gone for good/,
    );
    const event = d.effects.find((e) => e.type === 'event' && e.reason === 'Bypassed');
    assert.ok(event && event.type === 'event');
    assert.equal(event.eventType, 'Warning');
    assert.match(event.message, /alice .* Ceph is gone for good/);
  });

  it('stays Pending for the admission pass: it never admits itself', () => {
    const pending = action(
      {},
      { phase: 'Pending', startTime: T0.toISOString(), phaseTime: T0.toISOString() },
    );
    const d = run(input({ action: pending, now: at(30) }));
    assert.equal(d.status.phase, 'Pending');
    assert.deepEqual(d.effects, [], 'nothing to do: the admission pass runs on its own triggers');
  });

  it('is Denied when its node does not exist', () => {
    const d = run(input({ node: undefined }));
    assert.equal(d.status.phase, 'Denied');
    assert.match(d.status.message ?? '', /node w1 does not exist/);
    assert.ok(d.status.completionTime);
    assert.ok(events(d).includes('Warning:Denied'));
  });

  it('fails at the pending deadline, naming it', () => {
    const pending = action(
      { deadlines: { pending: '10m' } },
      {
        phase: 'Pending',
        startTime: T0.toISOString(),
        phaseTime: T0.toISOString(),
        message: 'waiting for its policies: full',
      },
    );
    assert.equal(run(input({ action: pending, now: at(599) })).status.phase, 'Pending');
    const d = run(input({ action: pending, now: at(600) }));
    assert.equal(d.status.phase, 'Failed');
    assert.match(
      d.status.message ?? '',
      /for longer than deadlines\.pending \(10m\): waiting for its policies: full/,
    );
  });
});

describe('decide: health gate', () => {
  const gated = action({}, admitted());

  it('passes straight on with no gating check, and with no pre-hooks is approved in the same pass', () => {
    const d = run(input({ action: gated, checks: [check('other-action', false, { actions: ['Upgrade'] })] }));
    assert.equal(d.status.phase, 'Approved');
    assert.equal(condition(d.status, 'HealthChecksPassed')?.reason, 'NoChecks');
    assert.deepEqual(d.status.checks, []);
    assert.equal(d.status.bootIDBefore, 'boot-1');
    assert.equal(d.status.approvalTime, T0.toISOString());
    assert.deepEqual(events(d), ['Normal:RunningPreHooks', 'Normal:Approved']);
  });

  it('asks for a fresh evaluation of exactly the checks that gate it', () => {
    const d = run(
      input({
        action: gated,
        checks: [
          check('ceph', true),
          check('upgrades-only', true, { actions: ['Upgrade'] }),
          check('other-nodes', true, { nodeSelector: { matchLabels: { pool: 'storage' } } }),
          check('workers', true, {
            nodeSelector: { matchLabels: { 'kubernetes.io/hostname': 'w1' } },
            actions: ['Reboot'],
          }),
        ],
      }),
    );
    assert.deepEqual(d.evaluateChecks, ['ceph', 'workers']);
    assert.equal(d.status.phase, 'WaitingForHealth');
    assert.deepEqual(d.effects, []);
  });

  it('waiting on a checker Job says which, and looks again soon without asking for another evaluation', () => {
    const d = run(
      input({
        action: gated,
        now: at(10),
        checks: [check('ok-to-stop', true)],
        evaluating: [{ check: 'ok-to-stop', job: 'rook-ceph/ok-to-stop-0123456789' }],
      }),
    );
    assert.equal(d.status.phase, 'WaitingForHealth');
    assert.equal(d.evaluateChecks, undefined);
    const c = d.status.conditions?.find((x) => x.type === 'HealthChecksPassed');
    assert.deepEqual(
      [c?.status, c?.reason, c?.message],
      ['Unknown', 'Evaluating', 'running checker Job rook-ceph/ok-to-stop-0123456789 (check ok-to-stop)'],
    );
    assert.ok(d.requeueAfterMs !== undefined && d.requeueAfterMs <= 1000);
  });

  it('holds on an unhealthy or unknown fresh result, listing every check, and asks again', () => {
    const i = input({
      action: gated,
      now: at(10),
      checks: [check('a', true), check('b', true), check('c', true)],
      fresh: {
        at: at(10),
        states: new Map([
          ['a', state(true)],
          ['b', state(false, 'HEALTH_WARN')],
          ['c', state(undefined, 'not probed yet')],
        ]),
      },
    });
    const d = run(i);
    assert.equal(d.status.phase, 'WaitingForHealth');
    assert.deepEqual(
      d.status.checks?.map((c) => [c.name, c.healthy]),
      [
        ['a', true],
        ['b', false],
        ['c', false],
      ],
    );
    assert.match(d.status.message ?? '', /b \(HEALTH_WARN\); c \(unknown: not probed yet\)/);
    assert.equal(condition(d.status, 'HealthChecksPassed')?.status, 'False');
    assert.equal(d.requeueAfterMs, 5000);
    assert.deepEqual(events(d), []);
  });

  it('treats a gating check missing from the fresh evaluation as unknown (fail closed)', () => {
    const d = run(input({ action: gated, checks: [check('a', true)], fresh: { at: T0, states: new Map() } }));
    assert.equal(d.status.phase, 'WaitingForHealth');
    assert.match(d.status.checks?.[0]?.message ?? '', /unknown/);
  });

  it('goes on when every fresh result is healthy, and starts the pre-hooks', () => {
    const noout = hook('PreRebootJob', 'noout');
    const d = run(
      input({
        action: gated,
        checks: [check('ceph', false)],
        fresh: { at: T0, states: new Map([['ceph', state(true, 'HEALTH_OK')]]) },
        hooks: [noout],
      }),
    );
    assert.equal(d.status.phase, 'RunningPreHooks');
    assert.deepEqual(
      d.status.checks?.map((c) => [c.name, c.healthy, c.message]),
      [['ceph', true, 'HEALTH_OK']],
    );
    assert.equal(recordFor(noout, d).phase, 'Pending');
    assert.ok(effectTypes(d).includes('createJob'));
  });

  it('with bypass.healthChecks records the checks as bypassed without evaluating them', () => {
    const bypassing = action({ bypass: { healthChecks: true, reason: 'storm' } }, admitted());
    const d = run(input({ action: bypassing, checks: [check('ceph', false)] }));
    assert.equal(d.evaluateChecks, undefined);
    assert.equal(d.status.phase, 'Approved');
    assert.deepEqual(
      d.status.checks?.map((c) => [c.name, c.healthy, c.bypassed]),
      [['ceph', false, true]],
    );
    assert.equal(condition(d.status, 'HealthChecksPassed')?.reason, 'Bypassed');
  });

  it('fails when its node disappears before approval', () => {
    const d = run(input({ action: gated, node: undefined }));
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /no longer exists/);
  });

  it('fails at the waitingForHealth deadline naming the deadline', () => {
    const d = run(input({ action: gated, now: at(30 * 60), checks: [check('ceph', false)] }));
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /deadlines\.waitingForHealth \(30m\)/);
  });
});

describe('decide: pre-action hooks', () => {
  const hooking = action({}, admitted(T0, { phase: 'RunningPreHooks' }));

  it('runs hooks in ascending order, equal orders together, and approves when all succeeded', () => {
    const a = hook('PreRebootJob', 'a', { order: 0 });
    const b = hook('PreRebootJob', 'b', { order: 0 });
    const c = hook('PreRebootJob', 'c', { order: 10 });
    const notMine = hook('PreUpgradeJob', 'upgrade-only');
    const elsewhere = hook('PreRebootJob', 'elsewhere', { nodeSelector: { matchLabels: { pool: 'other' } } });
    let i = input({ action: hooking, hooks: [c, b, a, notMine, elsewhere] });
    let d = run(i);
    assert.deepEqual(
      d.status.hooks?.map((r) => r.name),
      ['a', 'b'],
      'the first order group starts together, nothing else',
    );
    const jobA = recordFor(a, d).jobName ?? '';
    const jobB = recordFor(b, d).jobName ?? '';
    i = next(i, d, {
      jobs: new Map([
        [jobKey('rook-ceph', jobA), job('Succeeded')],
        [jobKey('rook-ceph', jobB), job('Running')],
      ]),
    });
    d = run(i);
    assert.deepEqual(
      d.status.hooks?.map((r) => [r.name, r.phase]),
      [
        ['a', 'Succeeded'],
        ['b', 'Running'],
      ],
    );
    assert.equal(d.status.phase, 'RunningPreHooks');
    i = next(i, d, {
      jobs: new Map([
        [jobKey('rook-ceph', jobA), job('Succeeded')],
        [jobKey('rook-ceph', jobB), job('Succeeded')],
      ]),
    });
    d = run(i);
    assert.deepEqual(
      d.status.hooks?.map((r) => [r.name, r.phase]),
      [
        ['a', 'Succeeded'],
        ['b', 'Succeeded'],
        ['c', 'Pending'],
      ],
    );
    const jobC = recordFor(c, d).jobName ?? '';
    i = next(i, d, {
      now: at(5),
      jobs: new Map([
        [jobKey('rook-ceph', jobA), job('Succeeded')],
        [jobKey('rook-ceph', jobB), job('Succeeded')],
        [jobKey('rook-ceph', jobC), job('Succeeded', { completionTime: at(4).toISOString() })],
      ]),
    });
    d = run(i);
    assert.equal(d.status.phase, 'Approved');
    assert.equal(condition(d.status, 'PreHooksSucceeded')?.status, 'True');
    assert.equal(d.status.approvalTime, at(5).toISOString());
  });

  it('fails and is never approved when a Fail hook fails, stopping the hooks still running', () => {
    const a = hook('PreRebootJob', 'a');
    const b = hook('PreRebootJob', 'b');
    let i = input({ action: hooking, hooks: [a, b] });
    let d = run(i);
    const jobA = recordFor(a, d).jobName ?? '';
    const jobB = recordFor(b, d).jobName ?? '';
    i = next(i, d, {
      jobs: new Map([
        [
          jobKey('rook-ceph', jobA),
          job('Failed', { message: 'Job rook-ceph/a failed: BackoffLimitExceeded' }),
        ],
        [jobKey('rook-ceph', jobB), job('Running')],
      ]),
    });
    d = run(i);
    assert.equal(d.status.phase, 'Failed');
    assert.equal(d.status.approvalTime, undefined);
    assert.match(
      d.status.message ?? '',
      /pre-action hook failed: PreRebootJob rook-ceph\/a failed: .*BackoffLimitExceeded/,
    );
    assert.deepEqual(
      d.status.hooks?.map((r) => r.phase),
      ['Failed', 'Failed'],
    );
    const deletes = d.effects.flatMap((e) => (e.type === 'deleteJob' ? [e.name] : []));
    assert.deepEqual(deletes, [jobB]);
  });

  it('goes on past a failed Ignore hook, saying so', () => {
    const a = hook('PreRebootJob', 'a', { failurePolicy: 'Ignore' });
    let i = input({ action: hooking, hooks: [a] });
    let d = run(i);
    i = next(i, d, { jobs: new Map([[jobKey('rook-ceph', recordFor(a, d).jobName ?? ''), job('Failed')]]) });
    d = run(i);
    assert.equal(d.status.phase, 'Approved');
    assert.match(
      condition(d.status, 'PreHooksSucceeded')?.message ?? '',
      /failures ignored: PreRebootJob rook-ceph\/a/,
    );
  });

  it('uses the hook kind of the action: PreUpgradeJob for Upgrade, PreRebootJob for ConfigChange', () => {
    const up = hook('PreUpgradeJob', 'up');
    const reboot = hook('PreRebootJob', 'rb');
    const upgrade = action(
      { action: 'Upgrade', upgrade: { image: 'factory.talos.dev/installer/x:v1.13.1' } },
      admitted(T0, { phase: 'RunningPreHooks' }),
    );
    assert.deepEqual(
      run(input({ action: upgrade, hooks: [up, reboot] })).status.hooks?.map((r) => r.name),
      ['up'],
    );
    const config = action(
      { action: 'ConfigChange', configChange: { mode: 'NoReboot' } },
      admitted(T0, { phase: 'RunningPreHooks' }),
    );
    assert.deepEqual(
      run(input({ action: config, hooks: [up, reboot] })).status.hooks?.map((r) => r.name),
      ['rb'],
    );
  });

  it('with bypass.hooks records the hooks as Bypassed and runs none', () => {
    const a = hook('PreRebootJob', 'a');
    const bypassing = action(
      { bypass: { hooks: true, reason: 'hook broken' } },
      admitted(T0, { phase: 'RunningPreHooks' }),
    );
    const d = run(input({ action: bypassing, hooks: [a] }));
    assert.equal(d.status.phase, 'Approved');
    assert.deepEqual(
      d.status.hooks?.map((r) => [r.name, r.phase]),
      [['a', 'Bypassed']],
    );
    assert.ok(!effectTypes(d).includes('createJob'));
  });

  it('fails at the hook timeout and deletes the Job', () => {
    const a = hook('PreRebootJob', 'a', { timeout: '1m' });
    let i = input({ action: hooking, hooks: [a] });
    let d = run(i);
    const name = recordFor(a, d).jobName ?? '';
    i = next(i, d, { now: at(60), jobs: new Map([[jobKey('rook-ceph', name), job('Running')]]) });
    d = run(i);
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /timed out after 1m/);
    assert.ok(d.effects.some((e) => e.type === 'deleteJob' && e.name === name));
  });

  it('starts a new attempt, with a new Job name, when a Job it saw is deleted', () => {
    const a = hook('PreRebootJob', 'a');
    let i = input({ action: hooking, hooks: [a] });
    let d = run(i);
    const first = recordFor(a, d).jobName ?? '';
    i = next(i, d, { jobs: new Map([[jobKey('rook-ceph', first), job('Running')]]) });
    d = run(i);
    i = next(i, d, { jobs: new Map() });
    d = run(i);
    assert.deepEqual(
      d.status.hooks?.map((r) => [r.attempt, r.phase]),
      [
        [1, 'Failed'],
        [2, 'Pending'],
      ],
    );
    const second = d.status.hooks[1]?.jobName;
    assert.ok(second && second !== first && second.endsWith('-2'));
    assert.ok(d.effects.some((e) => e.type === 'createJob' && e.job.metadata?.name === second));
  });

  it('asks again for a Job whose record is pending and which is not seen (creation is idempotent)', () => {
    const a = hook('PreRebootJob', 'a');
    let i = input({ action: hooking, hooks: [a] });
    let d = run(i);
    i = next(i, d);
    d = run(i);
    assert.deepEqual(
      d.status.hooks?.map((r) => r.phase),
      ['Pending'],
    );
    assert.deepEqual(effectTypes(d), ['createJob']);
  });

  it('calls webhook hooks, waits as they ask, and goes on on Success', () => {
    const w = webhookHook('PreRebootJob', 'callback');
    let i = input({ action: hooking, hooks: [w] });
    let d = run(i);
    const call = d.effects.find((e) => e.type === 'callWebhook');
    assert.ok(call);
    assert.deepEqual(call.request.action, {
      name: 'reboot-w1',
      uid: 'uid-action-1',
      action: 'Reboot',
      node: 'w1',
      bootID: 'boot-1',
      parameters: {},
    });
    assert.deepEqual(call.request.hook, { kind: 'PreRebootJob', namespace: 'rook-ceph', name: 'callback' });
    i = next(i, d, {
      now: at(1),
      webhooks: new Map([
        [
          call.key,
          {
            inFlight: false,
            last: { outcome: 'NotYet', message: 'draining', retryAfterMs: 20_000, at: at(1) },
          },
        ],
      ]),
    });
    d = run(i);
    assert.equal(d.status.phase, 'RunningPreHooks');
    assert.match(d.status.message ?? '', /not done yet: draining/);
    assert.ok(!effectTypes(d).includes('callWebhook'), 'not before retryAfterSeconds');
    assert.equal(d.requeueAfterMs, 20_000);
    i = next(i, d, { now: at(21) });
    d = run(i);
    assert.ok(effectTypes(d).includes('callWebhook'), 'asked again after retryAfterSeconds');
    i = next(i, d, {
      now: at(22),
      webhooks: new Map([
        [
          call.key,
          { inFlight: false, last: { outcome: 'Success', message: 'done', retryAfterMs: 0, at: at(22) } },
        ],
      ]),
    });
    assert.equal(run(i).status.phase, 'Approved');
  });

  it('fails on a webhook Failure answer', () => {
    const w = webhookHook('PreRebootJob', 'callback');
    let i = input({ action: hooking, hooks: [w] });
    const d = run(i);
    const call = d.effects.find((e) => e.type === 'callWebhook');
    assert.ok(call);
    i = next(i, d, {
      webhooks: new Map([
        [
          call.key,
          {
            inFlight: false,
            last: { outcome: 'Failure', message: 'PGs not clean', retryAfterMs: 0, at: T0 },
          },
        ],
      ]),
    });
    const failed = run(i);
    assert.equal(failed.status.phase, 'Failed');
    assert.match(failed.status.message ?? '', /PGs not clean/);
  });
});

describe('decide: following the node (External)', () => {
  const approved = (spec = {}) =>
    action(spec, admitted(T0, { phase: 'Approved', approvalTime: T0.toISOString(), bootIDBefore: 'boot-1' }));
  const marked = { annotations: { 'talos.dev/executed': 'true' } };

  it('waits for the executed mark or a change of the node', () => {
    const d = run(input({ action: approved(), now: at(60) }));
    assert.equal(d.status.phase, 'Approved');
    assert.deepEqual(d.effects, []);
    assert.equal(d.requeueAfterMs, 3540_000, 'woken at the approved deadline');
    assert.equal(
      run(input({ action: approved(), node: node('w1', { ready: false }) })).status.phase,
      'Approved',
      'NotReady alone is no reboot',
    );
  });

  it("follows a reboot: mark, new boot ID, Ready, then the boot reconciler's record of the boot hooks, Succeeded", () => {
    const prep = hook('NodePrereadyJob', 'prep');
    const unset = hook('NodeReadyJob', 'unset-noout');
    const base = approved();
    let i = input({
      action: { ...base, metadata: { ...base.metadata, ...marked } },
      hooks: [prep, unset],
      now: at(10),
    });
    let d = run(i);
    assert.equal(d.status.phase, 'WaitingForNode');
    assert.equal(d.status.executionTime, at(10).toISOString());
    assert.equal(condition(d.status, 'Executed')?.reason, 'MarkedExecuted');

    i = next(i, d, { now: at(20), node: node('w1', { bootID: 'boot-2', ready: false }) });
    d = run(i);
    assert.equal(d.status.phase, 'WaitingForNode');
    assert.match(d.status.message ?? '', /rebooted \(boot ID boot-2\); waiting for it to be Ready/);

    i = next(i, d, { now: at(30), node: node('w1', { bootID: 'boot-2' }) });
    d = run(i);
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.equal(d.status.bootIDAfter, 'boot-2');
    assert.deepEqual(
      d.effects.filter((e) => e.type === 'createJob'),
      [],
      "the boot hooks are the boot reconciler's to run",
    );
    assert.match(d.status.message ?? '', /waiting for the boot hooks of boot boot-2 to start/);

    // The boot reconciler's record on the node: NodePrereadyJobs done, NodeReadyJobs running.
    const runOf = (h: HookObject, phase: HookRunRecord['phase']): HookRunRecord => ({
      kind: h.kind,
      namespace: h.metadata.namespace,
      name: h.metadata.name,
      uid: h.metadata.uid,
      attempt: 1,
      phase,
      jobName: `${h.metadata.name}-job`,
    });
    const stage = (h: HookObject, phase: 'Running' | 'Succeeded') => ({
      phase,
      hooks: [h.metadata.uid],
      runs: [runOf(h, phase)],
      message: `${h.metadata.name} ${phase}`,
    });
    const boot = (readyPhase: 'Running' | 'Succeeded') => ({
      bootID: 'boot-2',
      preready: stage(prep, 'Succeeded'),
      ready: stage(unset, readyPhase),
    });
    i = next(i, d, { now: at(40), node: node('w1', { bootID: 'boot-2', boot: boot('Running') }) });
    d = run(i);
    assert.equal(d.status.phase, 'RunningPostHooks');
    assert.deepEqual(
      d.status.hooks?.map((r) => [r.name, r.phase]),
      [
        ['prep', 'Succeeded'],
        ['unset-noout', 'Running'],
      ],
      "the boot's runs are shown in the action",
    );
    assert.match(d.status.message ?? '', /NodeReadyJobs: unset-noout Running/);

    i = next(i, d, { now: at(50), node: node('w1', { bootID: 'boot-2', boot: boot('Succeeded') }) });
    d = run(i);
    assert.equal(d.status.phase, 'Succeeded');
    assert.equal(d.status.completionTime, at(50).toISOString());
    assert.equal(condition(d.status, 'PostHooksSucceeded')?.status, 'True');
    assert.equal(condition(d.status, 'PostHooksSucceeded')?.message, '2 boot hooks done');
    assert.ok(effectTypes(d).includes('admission'), 'the slot is given back');
  });

  it('takes a new boot ID without the mark as the execution', () => {
    const d = run(input({ action: approved(), node: node('w1', { bootID: 'boot-2' }) }));
    assert.equal(d.status.phase, 'Succeeded', 'no boot hooks: straight through');
    assert.equal(condition(d.status, 'Executed')?.reason, 'NodeChanged');
    assert.equal(d.status.bootIDAfter, 'boot-2');
  });

  it('waits in WaitingForNode while the boot ID is unchanged, and fails at its deadline', () => {
    const waiting = action({}, admitted(T0, { phase: 'WaitingForNode', bootIDBefore: 'boot-1' }), marked);
    const d = run(input({ action: waiting, now: at(60) }));
    assert.equal(d.status.phase, 'WaitingForNode');
    assert.match(d.status.message ?? '', /boot ID still boot-1/);
    const late = run(input({ action: waiting, now: at(30 * 60) }));
    assert.equal(late.status.phase, 'Failed');
    assert.match(late.status.message ?? '', /deadlines\.waitingForNode \(30m\)/);
  });

  it('finishes a Shutdown when the node goes NotReady', () => {
    const d = run(input({ action: approved({ action: 'Shutdown' }), node: node('w1', { ready: false }) }));
    assert.equal(d.status.phase, 'Succeeded');
    assert.match(d.status.message ?? '', /node w1 is down/);
  });

  it('finishes a Reset when the node goes down or comes back, never waiting for the Node to be deleted', () => {
    // A Talos reset never deletes the Node object: the node going down is the reset.
    const reset = approved({ action: 'Reset' });
    const markedReset = { ...reset, metadata: { ...reset.metadata, ...marked } };
    assert.equal(run(input({ action: markedReset })).status.phase, 'WaitingForNode');
    const down = run(input({ action: markedReset, node: node('w1', { ready: false }) }));
    assert.equal(down.status.phase, 'Succeeded');
    assert.match(down.status.message ?? '', /node w1 is down/);
    // Reset with `reboot` (External: talosctl reset --reboot): back with a new boot ID.
    const back = run(input({ action: reset, node: node('w1', { bootID: 'boot-2' }) }));
    assert.equal(back.status.phase, 'Succeeded');
    assert.equal(back.status.bootIDAfter, 'boot-2');
    assert.equal(run(input({ action: reset, node: undefined })).status.phase, 'Succeeded');
  });

  it('finishes a ConfigChange that does not reboot on the mark alone, without boot hooks', () => {
    const change = approved({ action: 'ConfigChange', configChange: { mode: 'NoReboot' } });
    const unset = hook('NodeReadyJob', 'unset');
    assert.equal(run(input({ action: change, hooks: [unset] })).status.phase, 'Approved');
    const d = run(
      input({ action: { ...change, metadata: { ...change.metadata, ...marked } }, hooks: [unset] }),
    );
    assert.equal(d.status.phase, 'Succeeded');
    assert.deepEqual(d.status.hooks ?? [], []);
  });

  it('follows a ConfigChange with mode Reboot like a reboot', () => {
    const change = approved({ action: 'ConfigChange', configChange: { mode: 'Reboot' } });
    const d = run(input({ action: { ...change, metadata: { ...change.metadata, ...marked } } }));
    assert.equal(d.status.phase, 'WaitingForNode');
  });

  it('says that Managed execution has no executor yet, and follows the node as for External', () => {
    const managed = action({ execution: 'Managed' }, admitted(T0, { phase: 'RunningPreHooks' }));
    const d = run(input({ action: managed }));
    assert.equal(d.status.phase, 'Approved');
    const executed = condition(d.status, 'Executed');
    assert.equal(executed?.status, 'False');
    assert.equal(executed.reason, 'ExecutorNotInstalled');
    assert.match(d.status.message ?? '', /talos\.dev\/executed/);
  });
});

describe('decide: cancellation, the end, and finalizers', () => {
  it('cancels an unfinished action that is deleted, stops its Jobs, and keeps the finalizer until they stop', () => {
    const a = hook('PreRebootJob', 'a');
    let i = input({ action: action({}, admitted(T0, { phase: 'RunningPreHooks' })), hooks: [a] });
    const started = run(i);
    const name = recordFor(a, started).jobName ?? '';
    const deleted = {
      ...i.action,
      status: started.status,
      metadata: { ...i.action.metadata, deletionTimestamp: at(5).toISOString() },
    };
    i = { ...i, action: deleted, now: at(5), jobs: new Map([[jobKey('rook-ceph', name), job('Running')]]) };
    const d = run(i);
    assert.equal(d.status.phase, 'Cancelled');
    assert.ok(events(d).includes('Warning:Cancelled'));
    assert.ok(d.effects.some((e) => e.type === 'deleteJob' && e.name === name));
    assert.equal(d.removeFinalizer, false, 'its Job still runs');
    const gone = run({
      ...i,
      action: { ...deleted, status: d.status },
      jobs: new Map([[jobKey('rook-ceph', name), job('Running', { deleting: true })]]),
    });
    assert.equal(gone.removeFinalizer, true);
    assert.deepEqual(events(gone), []);
  });

  it('lets a finished action go: no changes, the finalizer removed', () => {
    const done = action({}, { phase: 'Succeeded', completionTime: T0.toISOString() });
    const d = run(input({ action: done }));
    assert.equal(d.removeFinalizer, true);
    assert.deepEqual(d.status, done.status);
    assert.deepEqual(d.effects, []);
    const without = run(input({ action: action({}, done.status, { finalizers: [] }) }));
    assert.equal(without.removeFinalizer, false);
    assert.equal(without.addFinalizer, false);
  });

  it('records the generation it acted on', () => {
    const d = run(input({ action: action({}, undefined, { generation: 3 }) }));
    assert.equal(d.status.observedGeneration, 3);
  });

  it('keeps the finalizer constant', () => {
    assert.equal(FINALIZER, 'talos.dev/node-action');
  });
});

describe('decide: a held health gate does not probe in a loop', () => {
  const held = (probeTime: Date, healthy = false) =>
    action(
      {},
      admitted(T0, {
        checks: [{ name: 'ceph', healthy, probeTime: probeTime.toISOString(), message: 'HEALTH_WARN' }],
      }),
    );

  it('waits out the retry interval after an evaluation that held it', () => {
    const d = decide(input({ action: held(at(10)), now: at(12), checks: [check('ceph', false)] }));
    assert.equal(d.evaluateChecks, undefined);
    assert.deepEqual(d.effects, []);
    assert.equal(d.requeueAfterMs, 3000);
  });

  it('evaluates again once the interval passed', () => {
    const d = decide(input({ action: held(at(10)), now: at(15), checks: [check('ceph', false)] }));
    assert.deepEqual(d.evaluateChecks, ['ceph']);
  });

  it('evaluates again at once when a check changed since, or a new check gates it', () => {
    const healed = decide(input({ action: held(at(10)), now: at(11), checks: [check('ceph', true)] }));
    assert.deepEqual(healed.evaluateChecks, ['ceph']);
    const added = decide(
      input({ action: held(at(10)), now: at(11), checks: [check('ceph', false), check('etcd', true)] }),
    );
    assert.deepEqual(added.evaluateChecks, ['ceph', 'etcd']);
  });
});
