// A ConfigChange classified at the door of the health gate (src/actions/phases/
// config-disruption.ts): the decision core asks for the configurations, records the
// class once, and the class decides the drain and the etcd guard.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide } from '../../src/actions/decide.ts';
import { CONTROL_PLANE_LABEL } from '../../src/api/names.ts';
import type { NodeActionSpec, NodeActionStatus } from '../../src/api/node-action.ts';
import { T0, action, admitted, input, node } from './action-fixtures.ts';

const BASE = 'version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  clusterName: sandbox\n';
const CRI = BASE.replace(
  '  type: controlplane\n',
  '  type: controlplane\n  baseRuntimeSpecOverrides:\n    process: {}\n',
);
const LABEL = BASE.replace('  type: controlplane\n', '  type: controlplane\n  nodeLabels:\n    zone: a\n');

const managed = (mode: 'NoReboot' | 'Auto' | 'Reboot' = 'NoReboot'): Partial<NodeActionSpec> => ({
  action: 'ConfigChange',
  execution: 'Managed',
  configChange: { mode, configSecretRef: { name: 'cfg' } },
});
const cp = node('w1', { osImage: 'Talos (v1.14.0)', labels: { [CONTROL_PLANE_LABEL]: '' } });

function pass(
  spec: Partial<NodeActionSpec>,
  extra: Parameters<typeof input>[0] = {},
  status?: NodeActionStatus,
) {
  return decide(input({ action: action(spec, status ?? admitted(T0)), node: cp, execution: {}, ...extra }));
}

describe('ConfigChange: classified before the health gate', () => {
  it('asks for the configurations first, and judges nothing else meanwhile', () => {
    const d = pass(managed());
    assert.equal(d.readConfigs, true);
    assert.equal(d.readEtcd, undefined, 'the etcd guard waits for the class');
    assert.equal(d.status.configDisruption, undefined);
    assert.equal(d.status.phase, 'WaitingForHealth');
  });

  it('records the class compared, with an Event, and lets it decide the etcd guard', () => {
    const cri = pass(managed(), { configs: { at: T0, current: BASE, next: CRI } });
    assert.equal(cri.status.configDisruption?.class, 'CRIRestart');
    assert.equal(cri.status.configDisruption.basis, 'Compared');
    assert.deepEqual(cri.status.configDisruption.paths, ['machine.baseRuntimeSpecOverrides']);
    assert.ok(cri.effects.some((e) => e.type === 'event' && e.reason === 'Classified'));
    assert.equal(cri.readEtcd, true, 'a CRI restart of a control-plane node: the etcd guard reads etcd');

    const none = pass(managed(), { configs: { at: T0, current: BASE, next: LABEL } });
    assert.equal(none.status.configDisruption?.class, 'None');
    assert.equal(none.readEtcd, undefined, 'nothing restarts: no etcd guard');
    assert.notEqual(none.status.phase, 'WaitingForHealth');
  });

  it('is never decided again once recorded', () => {
    const recorded = admitted(T0, {
      configDisruption: { class: 'None', basis: 'Compared', message: 'None', time: T0.toISOString() },
    });
    const d = pass(managed(), { configs: { at: T0, current: BASE, next: CRI } }, recorded);
    assert.equal(d.readConfigs, undefined);
    assert.equal(d.status.configDisruption?.class, 'None');
  });

  it('falls back on the most the mode allows when the read failed, or nothing can read', () => {
    const failed = pass(managed(), { configs: { at: T0, error: 'node unreachable' } });
    assert.equal(failed.status.configDisruption?.class, 'CRIRestart');
    assert.equal(failed.status.configDisruption.basis, 'Mode');
    assert.match(failed.status.configDisruption.message, /node unreachable/);
    const noTalos = pass(managed('Auto'), { noTalos: true });
    assert.equal(noTalos.readConfigs, undefined);
    assert.equal(noTalos.status.configDisruption?.class, 'CRIRestart');
  });

  it('needs no read when the mode decides, nor for an External change', () => {
    const reboot = pass(managed('Reboot'));
    assert.equal(reboot.readConfigs, undefined);
    assert.equal(reboot.status.configDisruption?.class, 'Reboot');
    const stated = pass({
      action: 'ConfigChange',
      execution: 'External',
      configChange: { mode: 'NoReboot', disruptionClass: 'ServiceRestart' },
    });
    assert.equal(stated.readConfigs, undefined);
    assert.deepEqual(
      [stated.status.configDisruption?.class, stated.status.configDisruption?.basis],
      ['ServiceRestart', 'Stated'],
    );
  });
});
