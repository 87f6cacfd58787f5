// A ConfigChange's disruption class as people see it: `gatehouse actions list`,
// `gatehouse actions describe` / `gatehouse explain`, and the dashboard's action row.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ActionObject } from '../../src/api/node-action.ts';
import { describeText, listText } from '../../src/cli/actions.ts';
import { PLAIN } from '../../src/cli/style.ts';
import { actionRow } from '../../src/http/dashboard-view.ts';

const now = new Date('2026-12-04T12:00:00Z');
const change = (classified: boolean): ActionObject => ({
  metadata: { name: 'cfg-1', uid: 'u1', creationTimestamp: '2026-12-04T11:59:00Z' },
  spec: {
    nodeName: 'worker-1',
    action: 'ConfigChange',
    requestedBy: 'alice',
    configChange: { mode: 'NoReboot', configSecretRef: { name: 'cfg' } },
  },
  status: {
    phase: 'WaitingForHealth',
    ...(classified
      ? {
          configDisruption: {
            class: 'CRIRestart',
            basis: 'Compared',
            talosVersion: 'v1.14.0',
            paths: ['machine.baseRuntimeSpecOverrides'],
            message: 'CRIRestart on Talos v1.14.0, mode NoReboot: machine.baseRuntimeSpecOverrides',
            time: '2026-12-04T11:59:30Z',
          },
        }
      : {}),
  },
});

describe('the disruption class, shown', () => {
  it('the CLI lists it beside the action and describes (explains) how it was decided', () => {
    assert.match(listText([change(true)], now, PLAIN), /ConfigChange \(CRIRestart\)/);
    assert.doesNotMatch(listText([change(false)], now, PLAIN), /\(CRIRestart\)/);
    const text = describeText(change(true), undefined, now, PLAIN);
    assert.match(
      text,
      /^Disruption: +CRIRestart \(Compared\): CRIRestart on Talos v1\.14\.0, mode NoReboot: machine\.baseRuntimeSpecOverrides$/m,
    );
    assert.doesNotMatch(describeText(change(false), undefined, now, PLAIN), /Disruption:/);
  });

  it('the dashboard row carries it, null until decided', () => {
    assert.deepEqual(actionRow(change(true)).configDisruption, {
      class: 'CRIRestart',
      basis: 'Compared',
      paths: ['machine.baseRuntimeSpecOverrides'],
      message: 'CRIRestart on Talos v1.14.0, mode NoReboot: machine.baseRuntimeSpecOverrides',
    });
    assert.equal(actionRow(change(false)).configDisruption, null);
  });
});
