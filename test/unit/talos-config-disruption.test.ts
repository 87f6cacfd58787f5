// The disruption class of a configuration change (src/talos/config-disruption.ts), per
// Talos version and mode, from the facts table; and its agreement with the simulator,
// which plays the same Talos facts (sandbox/talos-machine-config.ts).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decideApply, parseMachineConfig, type ApplyModeName } from '../../sandbox/talos-machine-config.ts';
import type { DisruptionClass } from '../../src/api/node-action.ts';
import {
  classifyByMode,
  classifyConfigChange,
  classifyStated,
  modeBounds,
  type ConfigChangeMode,
} from '../../src/talos/config-disruption.ts';
import { parseTalosVersion, type TalosVersionNumber } from '../../src/talos/version.ts';
import { classifyCall } from '../../src/talos-gate/classify.ts';
import { create, toBinary } from '@bufbuild/protobuf';
import {
  ApplyConfigurationRequest_Mode as ApplyMode,
  ApplyConfigurationRequestSchema,
} from '../../src/talos/gen/gatehouse/talos/machine_pb.ts';

const v = (text: string) => parseTalosVersion(text) as TalosVersionNumber;
const config = (machine = '', extra = '') =>
  `version: v1alpha1\nmachine:\n  type: worker\n${machine}cluster:\n  clusterName: sandbox\n${extra}`;
const BASE = config();

/** Changes, each as the machine section's extra lines (and documents after). */
const CHANGES = {
  nodeLabels: config('  nodeLabels:\n    zone: a\n'),
  sysctls: config('  sysctls:\n    net.core.somaxconn: "65535"\n'),
  kubelet: config('  kubelet:\n    extraArgs:\n      max-pods: "200"\n'),
  network: config('  network:\n    hostname: one\n'),
  env: config('  env:\n    HTTPS_PROXY: http://proxy:3128\n'),
  baseRuntimeSpec: config('  baseRuntimeSpecOverrides:\n    process:\n      rlimits: []\n'),
  criFile: config(
    '  files:\n    - path: /etc/cri/conf.d/20-customization.part\n      op: create\n      content: "[plugins]"\n',
  ),
  otherFile: config('  files:\n    - path: /var/etc/motd\n      op: create\n      content: hi\n'),
  registryAuth: config(
    '  registries:\n    config:\n      ghcr.io:\n        auth:\n          username: u\n          password: p\n',
  ),
  registryMirror: config(
    '  registries:\n    mirrors:\n      docker.io:\n        endpoints: [http://m:5000]\n',
  ),
  criDocument: config('', '---\napiVersion: v1alpha1\nkind: CRICustomizationConfig\n'),
  unknownDocument: config('', '---\napiVersion: v1alpha1\nkind: SomethingNewConfig\nname: x\n'),
  disks: config('  disks:\n    - device: /dev/sdb\n'),
  etcd: config('', '').replace(
    'clusterName: sandbox\n',
    'clusterName: sandbox\n  etcd:\n    extraArgs:\n      election-timeout: "5000"\n',
  ),
  same: BASE,
} as const;
type Change = keyof typeof CHANGES;

const V113 = 'v1.13.9';
const V114 = 'v1.14.0';
const V114_ALPHA2 = 'v1.14.0-alpha.2';

/** [change, version, mode, expected class, a path expected among the deciding ones]. */
const TABLE: [Change, string | undefined, ConfigChangeMode, DisruptionClass, string?][] = [
  ['same', V114, 'NoReboot', 'None'],
  ['nodeLabels', V113, 'Auto', 'None', 'machine.nodeLabels'],
  ['nodeLabels', V114, 'NoReboot', 'None', 'machine.nodeLabels'],
  ['sysctls', V114, 'Auto', 'None', 'machine.sysctls'],
  ['kubelet', V113, 'NoReboot', 'ServiceRestart', 'machine.kubelet'],
  ['kubelet', V114, 'Auto', 'ServiceRestart', 'machine.kubelet'],
  ['network', V113, 'Auto', 'ServiceRestart', 'machine.network'],
  // ≤ 1.13 reboots for what it cannot apply live; 1.14 applies it live.
  ['env', V113, 'Auto', 'Reboot', 'machine.env'],
  ['env', V114, 'Auto', 'None', 'machine.env'],
  // A live mode cannot reboot: Talos ≤ 1.13 refuses such a change (the class stays within the mode).
  ['env', V113, 'NoReboot', 'ServiceRestart', 'machine.env'],
  ['baseRuntimeSpec', V113, 'Auto', 'Reboot', 'machine.baseRuntimeSpecOverrides'],
  ['baseRuntimeSpec', V114, 'NoReboot', 'CRIRestart', 'machine.baseRuntimeSpecOverrides'],
  ['baseRuntimeSpec', V114, 'Auto', 'CRIRestart', 'machine.baseRuntimeSpecOverrides'],
  ['baseRuntimeSpec', V114, 'Try', 'CRIRestart'],
  // Before 1.14.0-beta.0, CRI reads it only when it starts.
  ['baseRuntimeSpec', V114_ALPHA2, 'NoReboot', 'None'],
  ['criFile', V114, 'NoReboot', 'CRIRestart', 'machine.files[/etc/cri/conf.d/]'],
  ['criFile', V113, 'Auto', 'Reboot'],
  ['registryAuth', V114, 'NoReboot', 'CRIRestart', 'machine.registries.config.*.auth'],
  ['registryAuth', V113, 'NoReboot', 'None'],
  ['registryMirror', V114, 'NoReboot', 'None', 'machine.registries'],
  ['criDocument', V114, 'NoReboot', 'CRIRestart', 'kind:CRICustomizationConfig'],
  ['criDocument', V113, 'NoReboot', 'None'],
  ['etcd', V114, 'NoReboot', 'None', 'cluster.etcd'],
  // Unknown differences: the most disruptive class the mode allows.
  ['unknownDocument', V114, 'NoReboot', 'CRIRestart', 'kind:SomethingNewConfig/x'],
  ['unknownDocument', V113, 'NoReboot', 'ServiceRestart'],
  ['disks', V114, 'Auto', 'CRIRestart', 'machine.disks'],
  ['disks', V113, 'Auto', 'Reboot', 'machine.disks'],
  ['otherFile', V114, 'NoReboot', 'CRIRestart'],
  // Modes that decide by themselves.
  ['nodeLabels', V114, 'Reboot', 'Reboot'],
  ['baseRuntimeSpec', V114, 'Staged', 'None'],
  ['env', V113, 'Staged', 'None'],
  // An unknown version: judged as any Talos would, the most disruptive answer kept.
  ['env', undefined, 'Auto', 'Reboot'],
  ['baseRuntimeSpec', undefined, 'NoReboot', 'CRIRestart'],
  ['nodeLabels', undefined, 'Auto', 'None'],
];

describe('config disruption: classify a change', () => {
  for (const [change, version, mode, expected, path] of TABLE) {
    it(`${change} on ${version ?? 'an unknown version'}, mode ${mode}: ${expected}`, () => {
      const got = classifyConfigChange({
        mode,
        version: version ? v(version) : undefined,
        current: BASE,
        next: CHANGES[change],
      });
      assert.equal(got.class, expected, got.message);
      if (path) assert.ok(got.paths.includes(path), `${path} in ${got.paths.join(', ')}`);
      // Paths only: never a value of the configuration.
      assert.doesNotMatch(got.message, /proxy:3128|password|65535|\[plugins\]/);
    });
  }

  it('names the paths of the highest class only', () => {
    const both = config(
      '  nodeLabels:\n    zone: a\n  kubelet:\n    extraArgs:\n      max-pods: "200"\n  baseRuntimeSpecOverrides:\n    process: {}\n',
    );
    const got = classifyConfigChange({ mode: 'NoReboot', version: v(V114), current: BASE, next: both });
    assert.equal(got.class, 'CRIRestart');
    assert.deepEqual(got.paths, ['machine.baseRuntimeSpecOverrides']);
  });

  it('a configuration it cannot parse is an error (the caller falls back on the mode)', () => {
    assert.throws(
      () => classifyConfigChange({ mode: 'Auto', version: v(V114), current: BASE, next: 'kind: x\n' }),
      /no v1alpha1 document/,
    );
  });

  it('the bounds of each mode, per version', () => {
    const b = (mode: ConfigChangeMode, version?: string) => {
      const x = modeBounds(mode, version ? v(version) : undefined);
      return `${x.floor}..${x.ceiling}`;
    };
    assert.equal(b('Reboot', V114), 'Reboot..Reboot');
    assert.equal(b('Staged', V113), 'None..None');
    assert.equal(b('Auto', V113), 'None..Reboot');
    assert.equal(b('NoReboot', V113), 'None..ServiceRestart');
    assert.equal(b('Auto', V114), 'None..CRIRestart');
    assert.equal(b('Try', V114_ALPHA2), 'None..ServiceRestart');
    assert.equal(b('Auto'), 'None..Reboot');
    assert.equal(b('NoReboot'), 'None..CRIRestart');
    assert.equal(classifyByMode('NoReboot', v(V114), 'External').class, 'CRIRestart');
  });

  it('a stated class is taken, raised to what the mode needs', () => {
    assert.equal(classifyStated('NoReboot', v(V114), 'None').class, 'None');
    assert.equal(classifyStated('NoReboot', v(V114), 'CRIRestart').class, 'CRIRestart');
    const raised = classifyStated('Reboot', v(V114), 'None');
    assert.equal(raised.class, 'Reboot');
    assert.match(raised.message, /raised/);
  });
});

describe('config disruption: the simulator plays the same facts', () => {
  const MODE: Record<ConfigChangeMode, ApplyModeName> = {
    Auto: 'AUTO',
    NoReboot: 'NO_REBOOT',
    Reboot: 'REBOOT',
    Staged: 'STAGED',
    Try: 'TRY',
  };
  // What the simulator does must never be more than the class says: a reboot only for
  // Reboot, a CRI restart only for CRIRestart and above.
  for (const [change, version, mode, expected] of TABLE) {
    if (
      !version ||
      mode === 'Reboot' ||
      change === 'unknownDocument' ||
      change === 'disks' ||
      change === 'otherFile'
    )
      continue;
    it(`${change} on ${version}, mode ${mode}: the simulator does no more than ${expected}`, () => {
      const outcome = decideApply(
        v(version),
        MODE[mode],
        parseMachineConfig(BASE),
        parseMachineConfig(CHANGES[change]),
      );
      if (outcome.refused) {
        // Talos ≤ 1.13 refuses a live apply of what needs a reboot: the class said the
        // change cannot be applied live.
        assert.equal(outcome.code, 'INVALID_ARGUMENT');
        return;
      }
      assert.equal(outcome.reboot, expected === 'Reboot', `reboot: ${JSON.stringify(outcome)}`);
      assert.equal(outcome.restartsCri, expected === 'CRIRestart', `CRI restart: ${JSON.stringify(outcome)}`);
    });
  }
});

describe('config disruption: the Talos API gate states the class of what passes it', () => {
  const APPLY = '/machine.MachineService/ApplyConfiguration';
  const request = (data: string, mode: ApplyMode) =>
    toBinary(
      ApplyConfigurationRequestSchema,
      create(ApplyConfigurationRequestSchema, { data: new TextEncoder().encode(data), mode }),
    );
  const stated = (data: string, mode: ApplyMode, current?: string) => {
    const c = classifyCall(APPLY, request(data, mode), v(V114), current);
    assert.ok(c.kind === 'gate', c.kind);
    return c.ask.configChange;
  };

  it('a live 1.14 apply is gated stating the class its bytes and the node configuration give', () => {
    assert.deepEqual(stated(CHANGES.baseRuntimeSpec, ApplyMode.NO_REBOOT, BASE), {
      mode: 'NoReboot',
      disruptionClass: 'CRIRestart',
    });
    assert.deepEqual(stated(CHANGES.nodeLabels, ApplyMode.AUTO, BASE), {
      mode: 'NoReboot',
      disruptionClass: 'None',
    });
    assert.deepEqual(stated(CHANGES.kubelet, ApplyMode.TRY, BASE), {
      mode: 'Try',
      disruptionClass: 'ServiceRestart',
    });
  });

  it('states none when the node configuration could not be read (the mode decides)', () => {
    assert.deepEqual(stated(CHANGES.nodeLabels, ApplyMode.NO_REBOOT), { mode: 'NoReboot' });
  });
});
