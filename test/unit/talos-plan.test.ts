// Which Talos flow an action follows on each Talos version.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeActionSpec } from '../../src/api/node-action.ts';
import {
  callSequence,
  configChangeSteps,
  planConfigChange,
  planUpgrade,
  rebootMode,
  resetRequest,
  takesNodeDown,
} from '../../src/talos/plan.ts';

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

const spec = (s: Record<string, unknown>) => ({ nodeName: 'n', ...s }) as unknown as NodeActionSpec;

describe('what the node is asked', () => {
  it('names the sequence each call starts: a staged legacy upgrade is stageUpgrade (issue 30)', () => {
    const legacy = spec({ action: 'Upgrade', upgrade: { image: 'i:v1.12.1' } });
    const staged = spec({ action: 'Upgrade', upgrade: { image: 'i:v1.12.1', stage: true } });
    assert.equal(callSequence('MachineService.Upgrade', legacy), 'upgrade');
    assert.equal(callSequence('MachineService.Upgrade', staged), 'stageUpgrade');
    assert.equal(callSequence('MachineService.Reboot', staged), 'reboot');
    assert.equal(
      callSequence(
        'MachineService.ApplyConfiguration',
        spec({ action: 'ConfigChange', configChange: { mode: 'Reboot' } }),
      ),
      'reboot',
    );
    assert.equal(
      callSequence(
        'MachineService.ApplyConfiguration',
        spec({ action: 'ConfigChange', configChange: { mode: 'Auto' } }),
      ),
      undefined,
    );
  });

  it('hands etcd leadership over only before a call that takes the node down: never for a live 1.14 Auto change', () => {
    const apply = (mode: 'auto' | 'reboot' | 'try') =>
      ({ method: 'MachineService.ApplyConfiguration', mode, secret: undefined }) as const;
    assert.equal(takesNodeDown(apply('auto'), 'Talos (v1.14.0)'), false);
    assert.equal(takesNodeDown(apply('auto'), 'Talos (v1.13.9)'), true, 'AUTO may reboot before 1.14');
    assert.equal(takesNodeDown(apply('auto'), undefined), true, 'an unknown version may reboot');
    assert.equal(takesNodeDown(apply('reboot'), 'Talos (v1.13.9)'), true);
    assert.equal(takesNodeDown(apply('try'), 'Talos (v1.12.0)'), false);
    // 1.14's ConfigChange Reboot is NO_REBOOT then a Reboot call: that call takes it down.
    const steps = configChangeSteps(
      spec({ action: 'ConfigChange', configChange: { mode: 'Reboot', configSecretRef: { name: 'c' } } }),
      'Talos (v1.14.0)',
    );
    assert.equal(takesNodeDown(steps.call, 'Talos (v1.14.0)'), true);
  });

  it('sends the user disks of a reset, refuses UserDisks without any, and says what each mode wipes', () => {
    const reset = (r: Record<string, unknown>) => spec({ action: 'Reset', reset: r });
    const users = resetRequest(reset({ wipeMode: 'UserDisks', userDisks: ['/dev/sdb'] }), 'Talos (v1.13.0)');
    assert.deepEqual([users.wipeMode, users.userDisksToWipe], ['user-disks', ['/dev/sdb']]);
    assert.match(users.wipes, /user disk\(s\) \/dev\/sdb; Talos and its data stay/);
    assert.throws(
      () => resetRequest(reset({ wipeMode: 'UserDisks' }), 'Talos (v1.13.0)'),
      /would wipe nothing/,
    );
    const all = resetRequest(reset({}), 'Talos (v1.13.0)');
    assert.deepEqual([all.wipeMode, all.userDisksToWipe], ['all', []]);
    assert.match(all.wipes, /^the system disk \(no user disk: none was listed/);
    assert.match(
      resetRequest(reset({ userDisks: ['/dev/sdc'] }), undefined).wipes,
      /system disk and user disk\(s\) \/dev\/sdc/,
    );
  });

  it('names ETCD, CRI, KUBELET and LOG with STATE and EPHEMERAL for a SystemData reset from 1.14.0-beta.1', () => {
    const data = spec({ action: 'Reset', reset: { wipeMode: 'SystemData' } });
    const labels = (version: string) =>
      resetRequest(data, `Talos (${version})`).systemPartitionsToWipe.map(
        (p) => `${p.label}:${String(p.wipe)}`,
      );
    for (const version of ['v1.12.6', 'v1.13.9', 'v1.14.0-beta.0'])
      assert.deepEqual(labels(version), ['STATE:true', 'EPHEMERAL:true'], version);
    for (const version of ['v1.14.0-beta.1', 'v1.14.0', 'v1.14.3'])
      assert.deepEqual(
        labels(version),
        ['STATE:true', 'EPHEMERAL:true', 'ETCD:true', 'CRI:true', 'KUBELET:true', 'LOG:true'],
        version,
      );
    assert.equal(resetRequest(data, 'Talos (v1.14.0)').wipeMode, 'system-disk');
    assert.throws(() => resetRequest(data, 'Ubuntu'), /which system partitions .* depends on it/);
  });

  it('sends Reboot FORCE only when asked for by name, and only where Talos has it', () => {
    const reboot = (mode?: string) => spec({ action: 'Reboot', ...(mode ? { reboot: { mode } } : {}) });
    assert.equal(rebootMode(reboot(), 'Talos (v1.13.0)'), 'default');
    assert.equal(rebootMode(reboot('PowerCycle'), 'Talos (v1.13.0)'), 'powercycle');
    assert.equal(rebootMode(reboot('Force'), 'Talos (v1.12.0)'), 'force');
    assert.throws(() => rebootMode(reboot('Force'), 'Talos (v1.11.5)'), /Force exists from Talos 1\.12/);
    // A bypass never turns a reboot into FORCE.
    const bypassed = spec({
      action: 'Reboot',
      bypass: { healthChecks: true, hooks: true, reason: 'broken node' },
    });
    assert.equal(rebootMode(bypassed, 'Talos (v1.14.0)'), 'default');
  });
});
