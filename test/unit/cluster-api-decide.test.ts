// The Cluster API mode's core (src/cluster-api/decide.ts): which Machines get the hook,
// when a deleting one is held or let go, and — as properties over every input — that a
// Machine without gatehouse's own hook is never touched and that a held Machine is let
// go only when its action is approved or it has no Node to gate.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { MACHINE_HOOK_OWNER } from '../../src/api/names.ts';
import { NODE_ACTION_PHASES } from '../../src/api/node-action.ts';
import {
  decideMachine,
  heldUpToDate,
  machineActionName,
  type MachineActionFacts,
  type MachineFacts,
  type MachineInput,
} from '../../src/cluster-api/decide.ts';

const UID = '0b6c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d';

function machine(facts: Partial<MachineFacts> = {}): MachineFacts {
  return {
    namespace: 'default',
    name: 'worker-a',
    uid: UID,
    deleting: true,
    hook: MACHINE_HOOK_OWNER,
    nodeName: 'n1',
    ...facts,
  };
}

function action(facts: Partial<MachineActionFacts> = {}): MachineActionFacts {
  return { name: machineActionName(UID), ours: true, phase: 'WaitingForHealth', ...facts };
}

describe('decideMachine', () => {
  it('adds the hook to a Machine that is not being deleted and has none, and only then', () => {
    assert.deepEqual(decideMachine({ machine: machine({ deleting: false, hook: undefined }) }), {
      annotate: true,
    });
    assert.deepEqual(decideMachine({ machine: machine({ deleting: false }) }), {});
    assert.deepEqual(decideMachine({ machine: machine({ deleting: false, hook: 'someone-else' }) }), {});
  });

  it('leaves a deleting Machine alone unless the hook is gatehouse own', () => {
    assert.deepEqual(decideMachine({ machine: machine({ hook: undefined }), node: 'present' }), {});
    assert.deepEqual(decideMachine({ machine: machine({ hook: 'someone-else' }), node: 'present' }), {});
  });

  it('creates the Reset action named after the Machine UID, and holds', () => {
    const plan = decideMachine({ machine: machine(), node: 'present' });
    assert.deepEqual(plan.create, { name: `machine-${UID}`, node: 'n1' });
    assert.equal(plan.release, undefined);
    assert.equal(plan.event?.reason, 'MachineHeld');
  });

  it('holds while the action is not approved, naming its phase and message', () => {
    const plan = decideMachine({
      machine: machine(),
      node: 'present',
      action: action({ message: 'check ceph-health is unhealthy' }),
    });
    assert.equal(plan.release, undefined);
    assert.equal(plan.create, undefined);
    assert.equal(plan.held?.status, 'True');
    assert.equal(plan.held.reason, 'WaitingForApproval');
    assert.match(plan.held.message, /WaitingForHealth: check ceph-health is unhealthy/);
    assert.equal(plan.event?.type, 'Normal');
  });

  it('releases once the action is Approved (or later)', () => {
    for (const phase of [
      'Approved',
      'Executing',
      'WaitingForNode',
      'RunningPostHooks',
      'Succeeded',
    ] as const) {
      const plan = decideMachine({ machine: machine(), node: 'present', action: action({ phase }) });
      assert.equal(plan.release, true, phase);
      assert.deepEqual([plan.held?.status, plan.held?.reason], ['False', 'Approved']);
      assert.equal(plan.event?.reason, 'MachineReleased');
    }
  });

  it('keeps holding an action that failed, was denied or cancelled, and says what to do', () => {
    for (const [phase, reason] of [
      ['Failed', 'ActionFailed'],
      ['Denied', 'ActionDenied'],
      ['Cancelled', 'ActionCancelled'],
    ] as const) {
      const plan = decideMachine({
        machine: machine(),
        node: 'present',
        action: action({ phase, message: 'deadline' }),
      });
      assert.equal(plan.release, undefined, phase);
      assert.deepEqual([plan.held?.status, plan.held?.reason], ['True', reason]);
      assert.match(plan.held?.message ?? '', /delete the NodeAction to try again/);
      assert.equal(plan.event?.type, 'Warning');
    }
  });

  it('lets go a Machine without a Node, or whose Node is gone', () => {
    const nodeless = decideMachine({ machine: machine({ nodeName: undefined }) });
    assert.equal(nodeless.release, true);
    assert.equal(nodeless.held, undefined);
    assert.match(nodeless.event?.message ?? '', /no Node/);
    const gone = decideMachine({ machine: machine(), node: 'gone', action: action() });
    assert.equal(gone.release, true);
    assert.equal(gone.held?.reason, 'NodeGone');
  });

  it('holds, without writing on it, when an action of that name is not gatehouse own', () => {
    const plan = decideMachine({
      machine: machine(),
      node: 'present',
      action: action({ ours: false, phase: 'Approved' }),
    });
    assert.equal(plan.release, undefined);
    assert.equal(plan.held, undefined);
    assert.equal(plan.create, undefined);
    assert.equal(plan.event?.type, 'Warning');
  });

  it('compares a stored condition with the wanted one', () => {
    const wanted = { status: 'True' as const, reason: 'WaitingForApproval', message: 'm' };
    assert.equal(heldUpToDate(undefined, wanted), false);
    assert.equal(heldUpToDate({ ...wanted }, wanted), true);
    assert.equal(heldUpToDate({ ...wanted, message: 'other' }, wanted), false);
  });
});

const inputs: fc.Arbitrary<MachineInput> = fc
  .record(
    {
      machine: fc.record({
        namespace: fc.constant('default'),
        name: fc.constant('m'),
        uid: fc.constant(UID),
        deleting: fc.boolean(),
        hook: fc.option(fc.constantFrom(MACHINE_HOOK_OWNER, 'someone-else', ''), { nil: undefined }),
        nodeName: fc.option(fc.constant('n1'), { nil: undefined }),
        skipRemediation: fc.option(fc.constant(true as const), { nil: undefined }),
        pausedBy: fc.option(fc.constantFrom('reboot-a', 'reboot-b'), { nil: undefined }),
      }),
      pausing: fc.option(fc.constantFrom('reboot-a', 'reboot-b'), { nil: undefined }),
      node: fc.option(fc.constantFrom('present' as const, 'gone' as const), { nil: undefined }),
      action: fc.option(
        fc.record({
          name: fc.constant(machineActionName(UID)),
          ours: fc.boolean(),
          phase: fc.option(fc.constantFrom(...NODE_ACTION_PHASES), { nil: undefined }),
          message: fc.option(fc.string(), { nil: undefined }),
        }),
        { nil: undefined },
      ),
    },
    { requiredKeys: ['machine'] },
  )
  .map((input) => {
    // Written by decideMachine's caller as the Machine shows them: a mark without the
    // annotation happens (someone took it off), the annotation alone is someone else's.
    const { pausedBy, skipRemediation, ...rest } = input.machine;
    return {
      ...input,
      machine: {
        ...rest,
        ...(pausedBy !== undefined ? { pausedBy } : {}),
        ...(skipRemediation ? { skipRemediation } : {}),
      },
    };
  });

describe('decideMachine properties', () => {
  it('never touches a deleting Machine without gatehouse own hook', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        if (!input.machine.deleting || input.machine.hook === MACHINE_HOOK_OWNER) return;
        const { remediation: _, ...gate } = decideMachine(input);
        assert.deepEqual(gate, {});
      }),
    );
  });

  it('releases only an approved action, a Machine without a Node, or one whose Node is gone', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        const plan = decideMachine(input);
        if (!plan.release) return;
        const approved =
          input.action?.ours === true &&
          ['Approved', 'Executing', 'WaitingForNode', 'Held', 'RunningPostHooks', 'Succeeded'].includes(
            input.action.phase ?? 'Pending',
          );
        assert.ok(input.machine.deleting && input.machine.hook === MACHINE_HOOK_OWNER);
        assert.ok(
          approved || input.machine.nodeName === undefined || input.node === 'gone',
          JSON.stringify(input),
        );
      }),
    );
  });

  it('adds the hook only to a Machine that is not being deleted, and creates an action only for a deleting one', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        const plan = decideMachine(input);
        if (plan.annotate) assert.ok(!input.machine.deleting && input.machine.hook === undefined);
        if (plan.create)
          assert.ok(input.machine.deleting && input.action === undefined && input.node === 'present');
      }),
    );
  });

  it('touches only its own skip-remediation: never over someone else’s, off whenever its mark names no pausing action', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        const { machine, pausing } = input;
        const r = decideMachine(input).remediation;
        if (r?.op === 'pause') {
          assert.ok(machine.skipRemediation === undefined && machine.pausedBy === undefined);
          assert.equal(r.by, pausing);
        }
        if (r?.op === 'resume') assert.equal(r.by, machine.pausedBy, 'only the mark it finds');
        if (machine.pausedBy !== undefined && machine.pausedBy !== pausing)
          assert.equal(r?.op, 'resume', JSON.stringify(input));
        if (pausing !== undefined && machine.skipRemediation === undefined && machine.pausedBy === undefined)
          assert.equal(r?.op, 'pause', JSON.stringify(input));
      }),
    );
  });
});
