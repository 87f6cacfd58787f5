// The upgrade-path preflight (src/talos/compatibility.ts), with Talos's own rules: a host
// below the target's minimum is too old, one at or above its downgrade bound too new, and
// Kubernetes must be in the target's range; a target the table does not know is not judged.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { upgradePathProblem } from '../../src/talos/compatibility.ts';
import { decide } from '../../src/rollouts/decide.ts';
import { parseTalosVersion } from '../../src/talos/version.ts';

const v = (text: string) => parseTalosVersion(text);

describe('upgrade paths (Talos compatibility tables)', () => {
  it('lets a host in range through, and names what is wrong otherwise', () => {
    assert.equal(upgradePathProblem('v1.13.1', v('v1.11.0'), 'v1.35.2'), undefined);
    assert.equal(upgradePathProblem('v1.14.0', v('v1.12.4'), 'v1.37.0'), undefined);
    assert.match(
      upgradePathProblem('v1.13.1', v('v1.10.7'), 'v1.33.0') ?? '',
      /^Talos v1\.10\.7 is too old to upgrade to v1\.13\.1: Talos 1\.13 needs a host of v1\.11\.0 or later/,
    );
    assert.match(upgradePathProblem('v1.12.0', v('v1.14.0'), undefined) ?? '', /too new to downgrade/);
    assert.match(
      upgradePathProblem('v1.14.0', v('v1.13.0'), 'v1.31.4') ?? '',
      /^Kubernetes v1\.31\.4 is not supported by Talos 1\.14 \(1\.32–1\.37\)/,
    );
    assert.equal(
      upgradePathProblem('v1.99.0', v('v1.2.0'), 'v1.0.0'),
      undefined,
      'unknown target: not judged',
    );
    assert.equal(upgradePathProblem('v1.13.1', undefined, undefined), undefined, 'nothing known of the node');
  });

  it('halts a rollout that cannot succeed before its first node, naming each node that cannot', () => {
    const plan = decide({
      rollout: {
        metadata: { name: 'r', uid: 'u', generation: 1 },
        spec: {
          action: 'Upgrade',
          upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
          nodeSelector: {},
          requestedBy: 'jane',
          maxParallel: 2,
        },
      },
      nodes: [
        { name: 'old', labels: {}, osImage: 'Talos (v1.10.7)', kubeletVersion: 'v1.33.0' },
        { name: 'fine', labels: {}, osImage: 'Talos (v1.12.2)', kubeletVersion: 'v1.34.1' },
      ],
      actions: [],
      policies: [],
      history: [],
      now: new Date('2026-12-04T00:00:00Z'),
    } as never);
    assert.deepEqual(plan.create, [], 'no node starts');
    const halted = plan.status.conditions?.find((c) => c.type === 'Halted');
    assert.ok(halted);
    assert.equal(halted.status, 'True');
    assert.equal(halted.reason, 'PreflightFailed');
    assert.match(
      halted.message,
      /^preflight: 1 node cannot upgrade to v1\.13\.1: old: Talos v1\.10\.7 is too old/,
    );
    assert.ok(plan.events.some((e) => e.reason === 'PreflightFailed'));
  });
});
