// The etcd guard in the decision core (src/actions/etcd-guard.ts): asked for at the
// health gate and again at approval, judged from the reconciler's read, fail closed.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import { drainsBeforeCall } from '../../src/actions/kinds/index.ts';
import { ETCD_CHECK_NAME, etcdAway, etcdGuardApplies } from '../../src/actions/etcd-guard.ts';
import { CONTROL_PLANE_LABEL } from '../../src/api/names.ts';
import type { DisruptionClass, NodeActionSpec, NodeActionStatus } from '../../src/api/node-action.ts';
import type { EtcdCheckState } from '../../src/talos/etcd-health.ts';
import { T0, action, admitted, at, check, hook, input, node } from './action-fixtures.ts';

const cp = node('cp-1', {
  labels: { 'kubernetes.io/hostname': 'cp-1', [CONTROL_PLANE_LABEL]: '' },
  osImage: 'Talos (v1.13.0)',
});
const etcd = (healthy: boolean, extra: Partial<EtcdCheckState> = {}): EtcdCheckState => ({
  at: T0,
  checked: true,
  healthy,
  spareable: true,
  message: healthy ? 'etcd can spare cp-1' : 'etcd member cp-2 is unhealthy: NOSPACE',
  ...extra,
});
const waiting = (spec: Partial<NodeActionSpec> = {}) =>
  input({ action: action({ nodeName: 'cp-1', ...spec }, admitted()), node: cp });
const etcdResult = (d: ActionDecision) => d.status.checks?.find((c) => c.name === ETCD_CHECK_NAME);

describe('etcd guard', () => {
  it('applies to actions that take a control-plane node down, not to workers or live changes', () => {
    const spec = (s: Partial<NodeActionSpec>): NodeActionSpec => ({
      nodeName: 'cp-1',
      action: 'Reboot',
      requestedBy: 'alice',
      ...s,
    });
    for (const a of ['Reboot', 'Upgrade', 'Shutdown', 'Reset'] as const)
      assert.equal(etcdGuardApplies(spec({ action: a }), cp.labels), true, a);
    assert.equal(etcdGuardApplies(spec({}), node().labels), false, 'a worker');
    const change = (mode: 'Auto' | 'Reboot' | 'NoReboot') =>
      spec({ action: 'ConfigChange', configChange: { mode } });
    assert.equal(etcdGuardApplies(change('Reboot'), cp.labels, 'Talos (v1.14.0)'), true);
    assert.equal(
      etcdGuardApplies(change('Auto'), cp.labels, 'Talos (v1.13.9)'),
      true,
      'AUTO may reboot on 1.13',
    );
    // A live change: as its disruption class says (issue 30); until it is classified,
    // the most the mode allows — a CRI restart on 1.14, a service restart before.
    const classified = (c: DisruptionClass): NodeActionStatus => ({
      configDisruption: { class: c, basis: 'Compared', message: c, time: '2026-01-01T00:00:00Z' },
    });
    assert.equal(etcdGuardApplies(change('NoReboot'), cp.labels, 'Talos (v1.13.9)'), false);
    assert.equal(etcdGuardApplies(change('Auto'), cp.labels, 'Talos (v1.14.0)'), true);
    assert.equal(drainsBeforeCall(change('Auto'), 'Talos (v1.14.0)'), true);
    for (const c of ['None', 'ServiceRestart'] as const) {
      assert.equal(etcdGuardApplies(change('Auto'), cp.labels, 'Talos (v1.14.0)', classified(c)), false, c);
      assert.equal(drainsBeforeCall(change('Auto'), 'Talos (v1.14.0)', classified(c)), false, c);
    }
    for (const c of ['CRIRestart', 'Reboot'] as const) {
      assert.equal(
        etcdGuardApplies(change('NoReboot'), cp.labels, 'Talos (v1.14.0)', classified(c)),
        true,
        c,
      );
      assert.equal(drainsBeforeCall(change('NoReboot'), 'Talos (v1.14.0)', classified(c)), true, c);
    }
    // Talos 1.13 AUTO of a change it applies live: classified, not drained.
    assert.equal(drainsBeforeCall(change('Auto'), 'Talos (v1.13.9)', classified('None')), false);
    assert.equal(drainsBeforeCall(change('Auto'), 'Talos (v1.13.9)'), true);
  });

  it('asks for a read at the health gate, holds naming the unhealthy member, goes on once healthy', () => {
    const first = decide(waiting());
    assert.equal(first.readEtcd, true);
    assert.equal(first.status.phase, 'WaitingForHealth');
    const held = decide({ ...waiting(), etcd: etcd(false) });
    assert.equal(held.status.phase, 'WaitingForHealth');
    assert.match(held.status.message ?? '', /builtin:etcd \(etcd member cp-2 is unhealthy: NOSPACE\)/);
    assert.equal(etcdResult(held)?.healthy, false);
    // Held on that read: no new one for a few seconds, then one.
    const heldInput: ActionInput = { ...waiting(), action: { ...waiting().action, status: held.status } };
    assert.equal(decide({ ...heldInput, now: at(1) }).readEtcd, undefined);
    assert.equal(decide({ ...heldInput, now: at(6) }).readEtcd, true);
    const passed = decide({ ...waiting(), etcd: etcd(true) });
    assert.equal(passed.status.phase, 'Approved', 'no hooks: the same read serves the approval');
    assert.equal(etcdResult(passed)?.healthy, true);
  });

  it('reads again at approval, after pre-hooks, and holds there while etcd cannot spare the node', () => {
    const pre = hook('PreRebootJob', 'noout');
    const running = input({
      action: action({ nodeName: 'cp-1' }, admitted(T0, { phase: 'RunningPreHooks' })),
      node: cp,
      hooks: [pre],
    });
    const succeeded = {
      kind: 'PreRebootJob' as const,
      namespace: pre.metadata.namespace,
      name: pre.metadata.name,
      uid: pre.metadata.uid,
      attempt: 1,
      phase: 'Succeeded' as const,
    };
    const done: ActionInput = {
      ...running,
      action: { ...running.action, status: { ...running.action.status, hooks: [succeeded] } },
    };
    assert.equal(decide(done).readEtcd, true);
    const held = decide({ ...done, etcd: etcd(false) });
    assert.equal(held.status.phase, 'RunningPreHooks');
    assert.match(
      held.status.message ?? '',
      /waiting for etcd before approval: etcd member cp-2 is unhealthy/,
    );
    assert.equal(decide({ ...done, etcd: etcd(true) }).status.phase, 'Approved');
  });

  it('refuses a Reset of a member etcd can never spare, saying that a graceful reset leaves etcd', () => {
    const d = decide({
      ...waiting({ action: 'Reset' }),
      etcd: etcd(false, { spareable: false, message: 'etcd would lose quorum without cp-1: 1 of 2' }),
    });
    assert.equal(d.status.phase, 'Denied');
    assert.match(d.status.message ?? '', /a graceful reset leaves etcd/);
    assert.match(d.status.message ?? '', /would lose quorum without cp-1/);
    // A Reboot is held instead: the member comes back.
    const reboot = decide({ ...waiting(), etcd: etcd(false, { spareable: false }) });
    assert.equal(reboot.status.phase, 'WaitingForHealth');
  });

  it('without a talosconfig: Managed holds, External goes on, both saying etcd was not checked', () => {
    const unread = etcd(false, { checked: false, message: 'etcd was not checked: no talosconfig' });
    const managed = decide({ ...waiting({ execution: 'Managed' }), etcd: unread });
    assert.equal(managed.status.phase, 'WaitingForHealth');
    assert.equal(etcdResult(managed)?.notChecked, true);
    assert.match(
      etcdResult(managed)?.message ?? '',
      /not checked.*Managed Reboot of control-plane node cp-1 waits/,
    );
    const external = decide({ ...waiting(), etcd: unread });
    assert.equal(external.status.phase, 'Approved');
    assert.equal(etcdResult(external)?.notChecked, true);
    assert.match(etcdResult(external)?.message ?? '', /not checked.*must check etcd first/);
  });

  it('is bypassed with bypass.healthChecks, recorded, and without a read', () => {
    const d = decide(
      waiting({ bypass: { healthChecks: true, reason: 'etcd member being replaced' }, requestedBy: 'admin' }),
    );
    assert.equal(d.readEtcd, undefined);
    assert.equal(d.status.phase, 'Approved');
    assert.equal(etcdResult(d)?.bypassed, true);
    assert.match(etcdResult(d)?.message ?? '', /bypassed by admin: etcd member being replaced/);
  });

  it('judges with the ClusterHealthChecks: both fresh, both healthy', () => {
    const withCheck = { ...waiting(), checks: [check('ceph', true)] };
    const ask = decide(withCheck);
    assert.deepEqual(ask.evaluateChecks, ['ceph']);
    assert.equal(ask.readEtcd, true);
    const fresh = { at: T0, states: new Map([['ceph', check('ceph', true).state]]) };
    const d = decide({ ...withCheck, fresh, etcd: etcd(true) });
    assert.deepEqual(
      d.status.checks?.map((c) => [c.name, c.healthy]),
      [
        ['ceph', true],
        [ETCD_CHECK_NAME, true],
      ],
    );
  });

  it('counts the nodes of other approved, disruptive actions as away', () => {
    const other = (name: string, phase: 'Approved' | 'RunningPreHooks' | 'Succeeded', spec = {}) =>
      action({ nodeName: name, ...spec }, { phase }, { name: `a-${name}`, uid: `uid-${name}` });
    const self = action({ nodeName: 'cp-1' });
    const away = etcdAway(
      [
        self,
        other('cp-2', 'Approved'),
        other('cp-3', 'RunningPreHooks'),
        other('cp-4', 'Succeeded'),
        other('cp-5', 'Approved', { action: 'ConfigChange', configChange: { mode: 'NoReboot' } }),
      ],
      self,
    );
    assert.deepEqual([...away.keys()], ['cp-2']);
    assert.match(away.get('cp-2') ?? '', /Reboot \(NodeAction a-cp-2\) is Approved/);
  });
});
