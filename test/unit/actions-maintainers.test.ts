// Other maintainers (src/actions/maintainers.ts): a node under someone else's medik8s
// NodeMaintenance, or cordoned by someone else for an action gatehouse would drain itself,
// holds the action at its health gate naming the holder; a policy may let a foreign cordon
// be; a bypass passes both on the record.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import { MAINTAINERS_CHECK, foreignCordonAllowed } from '../../src/actions/maintainers.ts';
import type { NodeMaintenanceFacts } from '../../src/actions/neighbours.ts';
import type { NodeActionSpec } from '../../src/api/node-action.ts';
import { T0, action, admitted, input, node } from './action-fixtures.ts';

function gate(
  maintenances: NodeMaintenanceFacts[],
  extra: Partial<ActionInput> = {},
  spec: Partial<NodeActionSpec> = {},
): ActionDecision {
  return decide(
    input({
      action: action(spec, admitted(T0)),
      neighbours: { at: T0, pods: [], maintenances },
      ...extra,
    }),
  );
}

const record = (d: ActionDecision) => d.status.checks?.find((c) => c.name === MAINTAINERS_CHECK);
const nm: NodeMaintenanceFacts = {
  name: 'nm-w1',
  note: 'replace a DIMM',
  phase: 'Succeeded',
  deleting: false,
};

describe('other maintainers', () => {
  it('a NodeMaintenance of the node holds the action, named with its reason; one being deleted does not', () => {
    const held = gate([nm]);
    assert.equal(held.status.phase, 'WaitingForHealth');
    assert.equal(
      record(held)?.message,
      'NodeMaintenance nm-w1 ("replace a DIMM") (Succeeded) holds node w1: gatehouse waits until it is deleted',
    );
    assert.match(held.status.message ?? '', /NodeMaintenance nm-w1/);
    assert.equal(gate([{ ...nm, deleting: true }]).status.phase, 'Approved');
  });

  it('the node’s medik8s Lease, held by another operator and not expired, holds the action', () => {
    const lease = (expires: string) =>
      decide(
        input({
          action: action({}, admitted(T0)),
          neighbours: {
            at: T0,
            pods: [],
            maintenances: [],
            lease: { lease: 'medik8s-leases/node-w1', holder: 'node-maintenance', expires },
          },
        }),
      );
    const later = new Date(T0.getTime() + 3_600_000).toISOString();
    const held = lease(later);
    assert.equal(held.status.phase, 'WaitingForHealth');
    assert.equal(
      record(held)?.message,
      `Lease medik8s-leases/node-w1 is held by node-maintenance until ${later}: a medik8s operator maintains node w1`,
    );
    assert.equal(lease(T0.toISOString()).status.phase, 'Approved', 'an expired Lease holds nothing');
  });

  it('holds when the node’s neighbours could not be read, even where do-not-disrupt is off (fail closed)', () => {
    const d = decide(
      input({
        action: action({}, admitted(T0)),
        doNotDisruptCap: { ms: 0, by: 'ActionPolicy fixture' },
        neighbours: { at: T0, pods: [], error: 'KubeApiError: GET /apis/nodemaintenance.medik8s.io: 500' },
      }),
    );
    assert.equal(d.status.phase, 'WaitingForHealth');
    assert.match(record(d)?.message ?? '', /who else maintains node w1 could not be read: KubeApiError/);
  });

  it('says when the holder is gone, once it held the action', () => {
    const before = gate([nm]);
    const after = decide(
      input({
        action: action({}, { ...admitted(T0), checks: before.status.checks ?? [] }),
        now: new Date(T0.getTime() + 10_000),
        neighbours: { at: T0, pods: [], maintenances: [] },
      }),
    );
    assert.equal(after.status.phase, 'Approved');
    assert.equal(record(after)?.healthy, true);
    assert.match(record(after)?.message ?? '', /no other maintainer holds node w1 any more/);
  });

  it('a node cordoned by someone else holds a Managed action, unless policies allow it; not an External one', () => {
    const cordoned = { node: node('w1', { unschedulable: true }) };
    const managed = { execution: 'Managed' as const };
    const held = gate([], cordoned, managed);
    assert.equal(held.status.phase, 'WaitingForHealth');
    assert.match(record(held)?.message ?? '', /node w1 is cordoned, not by gatehouse/);
    assert.notEqual(
      gate([], { ...cordoned, allowForeignCordon: true }, managed).status.phase,
      'WaitingForHealth',
    );
    assert.equal(gate([], cordoned).status.phase, 'Approved', 'External: the requester drains');
    // Its own cordon (a pass before) is no one else's.
    const own = { node: node('w1', { unschedulable: true, cordonedBy: 'reboot-w1' }) };
    assert.equal(record(gate([], own, managed)), undefined);
  });

  it('is passed by a bypass of the health checks, on the record', () => {
    const passed = gate([nm], {}, { bypass: { healthChecks: true, reason: 'the DIMM is in' } });
    assert.equal(passed.status.phase, 'Approved');
    assert.equal(record(passed)?.bypassed, true);
    assert.match(
      record(passed)?.message ?? '',
      /NodeMaintenance nm-w1 .*: passed, health checks bypassed by alice: the DIMM is in/,
    );
  });
});

describe('foreignCordonAllowed', () => {
  const spec = { action: 'Reboot' as const, nodeName: 'w1' };
  it('needs a governing policy, and every governing one to say so', () => {
    const allow = { name: 'a', spec: { allowForeignCordon: true } };
    const deny = { name: 'd', spec: { nodeSelector: { matchLabels: { pool: 'db' } } } };
    assert.equal(foreignCordonAllowed([], spec, {}), false);
    assert.equal(foreignCordonAllowed([allow], spec, {}), true);
    assert.equal(foreignCordonAllowed([allow, deny], spec, { pool: 'db' }), false);
    assert.equal(foreignCordonAllowed([allow, deny], spec, { pool: 'web' }), true);
  });
});

describe('the medik8s Lease gatehouse holds', () => {
  const approving = (neighbours: ActionInput['neighbours'], extra: Partial<ActionInput> = {}) =>
    decide(
      input({
        action: action({}, { ...admitted(T0), phase: 'RunningPreHooks', hooks: [] }),
        ...(neighbours ? { neighbours } : {}),
        ...extra,
      }),
    );
  const ops = (d: ActionDecision) => d.effects.flatMap((e) => (e.type === 'medik8sLease' ? [e.op] : []));

  it('is taken with the approval where medik8s is installed, recorded first; not where it is not', () => {
    const taken = approving({ at: T0, pods: [], maintenances: [], medik8s: true });
    assert.equal(taken.status.phase, 'Approved');
    assert.deepEqual(ops(taken), ['take']);
    assert.deepEqual(taken.status.medik8sLease, { renewTime: T0.toISOString() });
    const none = approving({ at: T0, pods: [], maintenances: [], medik8s: false });
    assert.equal(none.status.phase, 'Approved');
    assert.deepEqual(ops(none), []);
  });

  it('holds the approval when another maintainer came during the pre-action hooks', () => {
    const held = approving({ at: T0, pods: [], maintenances: [nm], medik8s: true });
    assert.equal(held.status.phase, 'RunningPreHooks');
    assert.match(
      held.status.message ?? '',
      /waiting for another maintainer before approval: NodeMaintenance nm-w1/,
    );
    assert.deepEqual(ops(held), []);
  });

  it('is renewed every 20 minutes while the action runs, and given back at any end', () => {
    const running = (at: number, phase: 'Approved' | 'Succeeded' | 'Failed') =>
      decide(
        input({
          now: new Date(T0.getTime() + at * 1000),
          action: action({}, { ...admitted(T0), phase, medik8sLease: { renewTime: T0.toISOString() } }),
        }),
      );
    assert.deepEqual(ops(running(60, 'Approved')), []);
    const renewed = running(20 * 60, 'Approved');
    assert.deepEqual(ops(renewed), ['renew']);
    assert.notEqual(renewed.status.medik8sLease?.renewTime, T0.toISOString());
    for (const end of ['Succeeded', 'Failed'] as const) {
      const ended = running(60, end);
      assert.deepEqual(ops(ended), ['release'], end);
      assert.equal(ended.removeFinalizer, true);
    }
  });
});
