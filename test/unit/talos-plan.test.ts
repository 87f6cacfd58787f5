// Which Talos flow an action follows on each Talos version.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeActionSpec } from '../../src/api/node-action.ts';
import { planConfigChange, planUpgrade } from '../../src/talos/plan.ts';

const upgrade = {
  nodeName: 'n',
  action: 'Upgrade',
  upgrade: { image: 'ghcr.io/siderolabs/installer:v1.14.0' },
};
const configChange = (mode: string) => ({
  nodeName: 'n',
  action: 'ConfigChange',
  configChange: { mode, configSecretRef: { name: 'cfg' } },
});
const plan = (spec: { action: string }, version: string) =>
  (spec.action === 'Upgrade' ? planUpgrade : planConfigChange)(spec as NodeActionSpec, `Talos (${version})`);

describe('Talos flow per version', () => {
  it('upgrades through the legacy Upgrade below 1.13, pull + install + Reboot from 1.13', () => {
    assert.deepEqual(plan(upgrade, 'v1.12.6'), {
      prepare: undefined,
      install: undefined,
      call: 'MachineService.Upgrade',
    });
    for (const version of ['v1.13.0', 'v1.13.9', 'v1.14.0']) {
      const p = plan(upgrade, version);
      assert.equal(p.call, 'MachineService.Reboot', version);
      assert.match(p.prepare ?? '', /^pull /);
      assert.match(p.install ?? '', /^install /);
    }
  });

  it('applies a ConfigChange that reboots NO_REBOOT and reboots separately from 1.14.0-alpha.2', () => {
    for (const version of ['v1.12.6', 'v1.13.9', 'v1.14.0-alpha.1'])
      assert.deepEqual(
        plan(configChange('Reboot'), version).call,
        'MachineService.ApplyConfiguration',
        version,
      );
    for (const version of ['v1.14.0-alpha.2', 'v1.14.0']) {
      const p = plan(configChange('Reboot'), version);
      assert.equal(p.call, 'MachineService.Reboot', version);
      assert.equal(p.install, 'apply the machine configuration without a reboot');
    }
    // AUTO stays one call: on 1.14 it never reboots, before it reboots when Talos says so.
    assert.equal(plan(configChange('Auto'), 'v1.14.0').call, 'MachineService.ApplyConfiguration');
    assert.equal(plan(configChange('NoReboot'), 'v1.14.0').install, undefined);
  });
});
