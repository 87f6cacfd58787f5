// The Talos simulator's fault annotations: what tests write on a Node to make it misbehave.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_FAULT_MESSAGE, faultFor, parseFaults } from '../../sandbox/talos-faults.ts';

describe('Talos simulator faults', () => {
  it('reads a comma-separated list, with an optional method and a shared message', () => {
    assert.deepEqual(parseFaults('upgrade-error, hang:Version ,never-return', 'disk full'), [
      { kind: 'upgrade-error', message: 'disk full' },
      { kind: 'hang', method: 'Version' },
      { kind: 'never-return' },
    ]);
    assert.deepEqual(parseFaults('error:Reboot', undefined), [
      { kind: 'error', method: 'Reboot', message: DEFAULT_FAULT_MESSAGE },
    ]);
    assert.deepEqual(parseFaults(undefined, 'x'), []);
    assert.deepEqual(parseFaults('  ', 'x'), []);
  });

  it('rejects unknown faults and methods, naming the known ones', () => {
    assert.throws(
      () => parseFaults('explode', undefined),
      /unknown fault "explode" \(known: upgrade-error, pull-error/,
    );
    assert.throws(
      () => parseFaults('hang:Dance', undefined),
      /"hang:Dance" names no method the simulator has \(Version, Reboot/,
    );
    assert.throws(() => parseFaults('hang:Reboot:x', undefined), /names no method/);
  });

  it('applies a fault to every method unless it names one', () => {
    const faults = parseFaults('hang:Reboot,error', 'boom');
    assert.deepEqual(faultFor(faults, 'hang', 'Reboot'), { kind: 'hang', method: 'Reboot' });
    assert.equal(faultFor(faults, 'hang', 'Version'), undefined);
    assert.deepEqual(faultFor(faults, 'error', 'Shutdown'), { kind: 'error', message: 'boom' });
    assert.equal(faultFor(faults, 'never-return', 'Reboot'), undefined);
  });

  it('reads a lost reply: the call is carried out, its answer never comes', () => {
    const faults = parseFaults('lost-reply:Reboot', undefined);
    assert.deepEqual(faults, [{ kind: 'lost-reply', method: 'Reboot' }]);
    assert.deepEqual(faultFor(faults, 'lost-reply', 'Reboot'), { kind: 'lost-reply', method: 'Reboot' });
    assert.equal(faultFor(faults, 'lost-reply', 'Shutdown'), undefined);
  });
});
