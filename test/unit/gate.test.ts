// The pure parts of `gatehouse gate`: the name a key stands for, the request from the
// flags, when the gate is open, and what a reused key is told.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ActionObject } from '../../src/cli/backend.ts';
import { CliError, EXIT } from '../../src/cli/exit.ts';
import { gateCode, gateName, gateOpen, gateSpec, keyConflict } from '../../src/cli/gate.ts';

function action(phase: string | undefined, spec: Partial<ActionObject['spec']> = {}): ActionObject {
  return {
    metadata: { name: 'a1', uid: 'u' },
    spec: { nodeName: 'n1', action: 'Reboot', execution: 'External', requestedBy: 'me', ...spec },
    ...(phase ? { status: { phase } } : {}),
  } as ActionObject;
}

describe('gate', () => {
  it('names the action after the key, the same every time, and apart for keys that read alike', () => {
    assert.equal(gateName('plan-n1'), gateName('plan-n1'));
    assert.match(gateName('Plan/N1'), /^gate-plan-n1-[0-9a-f]{8}$/);
    assert.notEqual(gateName('Plan/N1'), gateName('plan-n1'));
    assert.match(gateName('///'), /^gate-[0-9a-f]{8}$/);
    assert.ok(gateName('x'.repeat(400)).length <= 253);
  });

  it('builds the External request from the flags and refuses flags of another action', () => {
    assert.deepEqual(gateSpec('n1', { action: 'Upgrade', image: 'i:v1' }), {
      nodeName: 'n1',
      action: 'Upgrade',
      execution: 'External',
      upgrade: { image: 'i:v1' },
    });
    assert.deepEqual(gateSpec('n1', { action: 'ConfigChange', mode: 'Try' }).configChange, { mode: 'Try' });
    assert.deepEqual(
      gateSpec('n1', { action: 'Reboot', skipChecks: true, reason: 'node is broken' }).bypass,
      {
        healthChecks: true,
        reason: 'node is broken',
      },
    );
    for (const [flags, pattern] of [
      [{}, /--action is required/],
      [{ action: 'Upgrade' }, /needs --image/],
      [{ action: 'Reboot', image: 'i' }, /--image goes with --action Upgrade/],
      [{ action: 'Shutdown', mode: 'Default' }, /--mode goes with/],
      [{ action: 'ConfigChange' }, /needs --mode/],
      [{ action: 'Reboot', mode: 'Sideways' }, /--mode for a Reboot/],
      [{ action: 'Reboot', skipHooks: true }, /need --reason/],
    ] as const) {
      assert.throws(
        () => gateSpec('n1', flags),
        (e: unknown) => e instanceof CliError && e.code === EXIT.usage && pattern.test(e.message),
      );
    }
  });

  it('is open from Approved on, unless the action failed; the exit code says how it stayed shut', () => {
    for (const phase of ['Approved', 'Executing', 'WaitingForNode', 'RunningPostHooks', 'Succeeded'])
      assert.equal(gateOpen(action(phase)), true, phase);
    for (const phase of [
      undefined,
      'Pending',
      'WaitingForHealth',
      'RunningPreHooks',
      'Failed',
      'Denied',
      'Cancelled',
    ])
      assert.equal(gateOpen(action(phase)), false, String(phase));
    assert.equal(gateCode({ action: action('Denied'), node: undefined }), EXIT.failed);
    assert.equal(gateCode({ action: action('Cancelled'), node: undefined }), EXIT.cancelled);
    assert.equal(gateCode({ action: undefined, node: undefined }), EXIT.cancelled);
    assert.equal(gateCode({ action: action('Succeeded'), node: undefined }), EXIT.ok);
  });

  it('tells a reused key what it already names', () => {
    const spec = { nodeName: 'n1', action: 'Reboot' as const, execution: 'External' as const };
    assert.equal(keyConflict(action('Approved'), spec, 'k'), undefined);
    assert.equal(
      keyConflict(action('Approved'), { ...spec, nodeName: 'n2' }, 'k'),
      '--key k already names NodeAction a1 (External Reboot of node n1), not this Reboot of node n2: use another --key',
    );
    assert.match(
      keyConflict(action('Approved', { execution: 'Managed' }), spec, 'k') ?? '',
      /\(Managed Reboot/,
    );
    assert.match(
      keyConflict(
        action('Approved', { action: 'Upgrade', upgrade: { image: 'a:1' } }),
        { ...spec, action: 'Upgrade', upgrade: { image: 'a:2' } },
        'k',
      ) ?? '',
      /Upgrade of node n1 to a:1\), not this Upgrade of node n1 to a:2/,
    );
  });
});
