// The simulated node's ApplyConfiguration and Reset, per Talos version: no kinder than
// Talos's handlers (sandbox/talos-machine-config.ts, sandbox/talos-reset.ts).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  decideApply,
  defaultMachineConfig,
  goDuration,
  immediateBlockers,
  parseMachineConfig,
  type ApplyOutcome,
} from '../../sandbox/talos-machine-config.ts';
import { DEDICATED_VOLUMES_ANNOTATION, DISKS_ANNOTATION, planReset } from '../../sandbox/talos-reset.ts';
import { parseTalosVersion, type TalosVersionNumber } from '../../src/talos/version.ts';

const v = (text: string) => parseTalosVersion(text) as TalosVersionNumber;
const base = parseMachineConfig(defaultMachineConfig(false));
const config = (machine: string, extra = '') =>
  parseMachineConfig(
    `version: v1alpha1\nmachine:\n  type: worker\n${machine}cluster:\n  clusterName: sandbox\n${extra}`,
  );
const applied = (o: ApplyOutcome) => {
  if (o.refused) return assert.fail(`refused: ${o.message}`);
  return o;
};

describe('simulated ApplyConfiguration', () => {
  it('≤ 1.13: applies live only what CanApplyImmediate allows; NO_REBOOT and TRY of the rest refused, AUTO reboots', () => {
    const network = config('  network:\n    hostname: one\n');
    const env = config('  env:\n    HTTPS_PROXY: http://proxy:3128\n');
    // machine.install is applied live before 1.14 (used only at install and upgrade).
    const install = config('  install:\n    disk: /dev/sdb\n');
    assert.deepEqual(immediateBlockers(base, network), []);
    assert.deepEqual(immediateBlockers(base, install), []);
    assert.deepEqual(immediateBlockers(base, env), ['machine.env']);
    for (const version of ['v1.11.6', 'v1.12.11', 'v1.13.9', 'v1.14.0-alpha.1']) {
      assert.equal(applied(decideApply(v(version), 'AUTO', base, network)).mode, 'NO_REBOOT', version);
      const auto = applied(decideApply(v(version), 'AUTO', base, env));
      assert.deepEqual([auto.mode, auto.reboot, auto.live, auto.persist], ['REBOOT', true, false, true]);
      for (const mode of ['NO_REBOOT', 'TRY'] as const) {
        const refused = decideApply(v(version), mode, base, env);
        assert.ok(refused.refused, `${version} ${mode}`);
        assert.equal(refused.code, 'INVALID_ARGUMENT');
        assert.match(refused.message, /can't be applied in immediate mode\ndiff:\n {2}machine\.env differs/);
      }
      assert.equal(applied(decideApply(v(version), 'REBOOT', base, network)).reboot, true);
    }
  });

  it('1.14: AUTO is NO_REBOOT, applying live what it can; REBOOT refused; boot-only parts wait for a reboot', () => {
    const env = config('  env:\n    HTTPS_PROXY: http://proxy:3128\n');
    for (const version of ['v1.14.0-alpha.2', 'v1.14.0']) {
      const auto = applied(decideApply(v(version), 'AUTO', base, env));
      assert.deepEqual([auto.mode, auto.live, auto.persist, auto.reboot], ['NO_REBOOT', true, true, false]);
      assert.equal(auto.logged, 'auto(no_reboot)');
      assert.deepEqual(auto.atNextBoot, ['machine.env']);
      const reboot = decideApply(v(version), 'REBOOT', base, env);
      assert.deepEqual(reboot, {
        refused: true,
        code: 'UNIMPLEMENTED',
        message: 'the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead',
      });
      const tried = applied(decideApply(v(version), 'TRY', base, env));
      assert.deepEqual([tried.live, tried.persist], [true, false]);
    }
  });

  it('1.14 from beta.0: restarts CRI on a change of its configuration (customization, base spec, registry auth), live modes only', () => {
    const customization = config(
      '',
      '---\napiVersion: v1alpha1\nkind: CRICustomizationConfig\nname: nri\ncontent: |\n  [plugins]\n',
    );
    const legacyPart = config(
      '  files:\n    - path: /etc/cri/conf.d/20-customization.part\n      op: create\n      content: "[plugins]"\n',
    );
    const auth = config('  registries:\n    config:\n      ghcr.io:\n        auth:\n          username: u\n');
    const mirror = config('  registries:\n    mirrors:\n      docker.io:\n        endpoints: [https://m]\n');
    for (const next of [customization, legacyPart, auth])
      assert.equal(applied(decideApply(v('v1.14.0'), 'NO_REBOOT', base, next)).restartsCri, true);
    assert.equal(applied(decideApply(v('v1.14.0'), 'NO_REBOOT', base, mirror)).restartsCri, false);
    assert.equal(applied(decideApply(v('v1.14.0'), 'STAGED', base, customization)).restartsCri, false);
    assert.equal(
      applied(decideApply(v('v1.14.0-alpha.2'), 'NO_REBOOT', base, customization)).restartsCri,
      false,
    );
    // Before 1.14 the legacy part is a machine file, which needs a reboot.
    assert.equal(decideApply(v('v1.13.9'), 'NO_REBOOT', base, legacyPart).refused, true);
  });

  it('refuses a configuration without a v1alpha1 machine document, with Talos words', () => {
    assert.throws(() => parseMachineConfig('machine: ['), /failed to parse config/);
    assert.throws(
      () => parseMachineConfig('apiVersion: v1alpha1\nkind: SideroLinkConfig\n'),
      /doesn't contain v1alpha1 config/,
    );
    assert.equal(goDuration(60_000), '1m0s');
    assert.equal(goDuration(90_500), '1m30.5s');
    assert.equal(goDuration(2_000), '2s');
  });
});

describe('simulated Reset', () => {
  const plan = (
    version: string,
    asked: Parameters<typeof planReset>[2],
    annotations: Record<string, string> = {},
  ) => planReset(v(version), annotations, asked);

  it('wipes only the user disks it is given, never the system disk, and refuses what Talos refuses', () => {
    assert.deepEqual(plan('v1.13.0', { mode: 'USER_DISKS', userDisks: [], partitions: [] }).disks, []);
    assert.deepEqual(plan('v1.13.0', { mode: 'ALL', userDisks: [], partitions: [] }).disks, ['/dev/sda']);
    assert.deepEqual(plan('v1.13.0', { mode: 'ALL', userDisks: ['/dev/sdb'], partitions: [] }).disks, [
      '/dev/sda',
      '/dev/sdb',
    ]);
    assert.throws(
      () => plan('v1.13.0', { mode: 'SYSTEM_DISK', userDisks: ['/dev/sdb'], partitions: [] }),
      /wipe mode SYSTEM_DISK doesn't support UserDisksToWipe/,
    );
    assert.throws(
      () =>
        plan('v1.13.0', { mode: 'USER_DISKS', userDisks: [], partitions: [{ label: 'STATE', wipe: true }] }),
      /wipe mode USER_DISKS doesn't support SystemPartitionsToWipe/,
    );
    assert.throws(
      () => plan('v1.13.0', { mode: 'ALL', userDisks: ['/dev/sda'], partitions: [] }),
      /is the system disk/,
    );
    assert.throws(
      () => plan('v1.13.0', { mode: 'ALL', userDisks: ['/dev/sdz'], partitions: [] }),
      /wasn't found/,
    );
    const custom = { [DISKS_ANNOTATION]: '/dev/nvme0n1,/dev/nvme1n1' };
    assert.deepEqual(
      plan('v1.13.0', { mode: 'USER_DISKS', userDisks: ['/dev/nvme1n1'], partitions: [] }, custom).disks,
      ['/dev/nvme1n1'],
    );
  });

  it('knows ETCD, CRI, KUBELET and LOG from 1.14.0-beta.1, wiped with EPHEMERAL unless on partitions of their own', () => {
    const six = ['STATE', 'EPHEMERAL', 'ETCD', 'CRI', 'KUBELET', 'LOG'].map((label) => ({
      label,
      wipe: true,
    }));
    assert.throws(
      () => plan('v1.13.9', { mode: 'SYSTEM_DISK', userDisks: [], partitions: six }),
      /failed to get volume status with label "ETCD"/,
    );
    const wiped = plan('v1.14.0', { mode: 'SYSTEM_DISK', userDisks: [], partitions: six });
    assert.deepEqual(wiped.partitions, ['STATE', 'EPHEMERAL']);
    assert.equal(wiped.maintenance, true);
    assert.throws(
      () =>
        plan('v1.14.0', { mode: 'SYSTEM_DISK', userDisks: [], partitions: [{ label: 'ETCD', wipe: true }] }),
      /volume "ETCD" resides on volume "EPHEMERAL"/,
    );
    const dedicated = plan(
      'v1.14.0',
      { mode: 'SYSTEM_DISK', userDisks: [], partitions: six },
      {
        [DEDICATED_VOLUMES_ANNOTATION]: 'ETCD',
      },
    );
    assert.deepEqual(dedicated.partitions, ['STATE', 'EPHEMERAL', 'ETCD']);
    assert.equal(
      plan('v1.14.0', {
        mode: 'SYSTEM_DISK',
        userDisks: [],
        partitions: [{ label: 'EPHEMERAL', wipe: true }],
      }).maintenance,
      false,
    );
  });
});
