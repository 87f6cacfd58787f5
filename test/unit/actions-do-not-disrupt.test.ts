// Workload owners' "not now" (src/actions/do-not-disrupt.ts): a Pod or the Node carrying
// talos.dev/do-not-disrupt holds, at the health gate, an action that takes its node away,
// for at most its duration and at most the policies' doNotDisruptMax, counted from when
// the action first met it; a bypass passes it, recorded with what it passed.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import {
  DO_NOT_DISRUPT_CHECK,
  doNotDisruptCap,
  type DoNotDisruptHolder,
} from '../../src/actions/do-not-disrupt.ts';
import type { NodeActionSpec, NodeActionStatus } from '../../src/api/node-action.ts';
import { T0, action, admitted, at, input, node } from './action-fixtures.ts';

const HOUR = 3_600_000;
const batch = (value: string): DoNotDisruptHolder => ({ what: 'Pod batch/train-0', value });

/** The gate of a Reboot, with a cap, the node's Pods as read (undefined: not read yet), at a time. */
function gate(
  options: {
    pods?: DoNotDisruptHolder[];
    capMs?: number;
    now?: Date;
    status?: NodeActionStatus;
    spec?: Partial<NodeActionSpec>;
    extra?: Partial<ActionInput>;
  } = {},
): ActionDecision {
  const now = options.now ?? T0;
  const i = input({
    now,
    action: action(options.spec ?? {}, { ...admitted(T0), ...options.status }),
    doNotDisruptCap: { ms: options.capMs ?? 24 * HOUR, by: 'ActionPolicy workers' },
    ...(options.pods ? { neighbours: { at: now, pods: options.pods } } : {}),
    ...options.extra,
  });
  // Without Pods given, the gate has not read the node's neighbours yet.
  if (!options.pods) delete i.neighbours;
  return decide(i);
}

const record = (d: ActionDecision) => d.status.checks?.find((c) => c.name === DO_NOT_DISRUPT_CHECK);
const events = (d: ActionDecision, reason: string) =>
  d.effects.flatMap((e) => (e.type === 'event' && e.reason === reason ? [e.message] : []));

describe('do-not-disrupt', () => {
  it('asks for the node’s Pods at the gate, then holds naming them, from when it first met them', () => {
    assert.equal(gate().readNeighbours, true);
    const held = gate({ pods: [batch('6h')] });
    assert.equal(held.status.phase, 'WaitingForHealth');
    assert.equal(held.status.doNotDisruptSince, T0.toISOString());
    const r = record(held);
    assert.equal(r?.healthy, false);
    const until = new Date(T0.getTime() + 6 * HOUR).toISOString();
    assert.equal(
      r.message,
      `Pod batch/train-0 ("6h") until ${until} asks not to be disrupted; waited 0ms, at most 24h (doNotDisruptMax of ActionPolicy workers)`,
    );
    assert.equal(events(held, 'DoNotDisrupt').length, 1);
    assert.match(held.status.message ?? '', /train-0/);
    // Looked at again soon (the gate's cadence), not only when the duration ends.
    assert.ok((held.requeueAfterMs ?? Infinity) <= 5000);
  });

  it('goes on once the duration is over, counted from the first hold', () => {
    const since = { doNotDisruptSince: T0.toISOString() };
    const early = gate({ pods: [batch('6h')], now: at(5 * 3600), status: since });
    assert.equal(early.status.phase, 'WaitingForHealth');
    assert.equal(events(early, 'DoNotDisrupt').length, 0, 'the Event is for the first hold only');
    const over = gate({ pods: [batch('6h')], now: at(6 * 3600), status: since });
    assert.equal(over.status.phase, 'Approved');
    assert.equal(record(over)?.healthy, true);
    assert.equal(events(over, 'DoNotDisruptExpired').length, 0, 'its own duration, not the cap');
  });

  it('never holds past the cap, whatever the value, and says so once with a Warning', () => {
    const held = { ...admitted(T0), doNotDisruptSince: T0.toISOString() };
    const before = gate({ pods: [batch('true')], capMs: HOUR, now: at(3599), status: held });
    assert.equal(before.status.phase, 'WaitingForHealth');
    const heldStatus = { ...held, checks: before.status.checks ?? [] };
    const capped = gate({ pods: [batch('true')], capMs: HOUR, now: at(3600), status: heldStatus });
    assert.equal(capped.status.phase, 'Approved');
    assert.match(record(capped)?.message ?? '', /the most ActionPolicy workers allows/);
    assert.equal(events(capped, 'DoNotDisruptExpired').length, 1);
    // A duration beyond the cap is cut to it too.
    assert.equal(
      gate({ pods: [batch('48h')], capMs: HOUR, now: at(3600), status: held }).status.phase,
      'Approved',
    );
  });

  it('holds a value that is no duration as "true", saying so, and ignores "false"', () => {
    const typo = record(gate({ pods: [batch('six hours')] }));
    assert.match(typo?.message ?? '', /not a duration: held as "true"/);
    const no = gate({ pods: [batch('false')] });
    assert.equal(no.status.phase, 'Approved');
    assert.equal(record(no), undefined, 'nothing asked: no record');
  });

  it('holds for the Node’s own annotation too, and not for a policy that ignores it (0s)', () => {
    const own = gate({ pods: [], extra: { node: node('w1', { doNotDisrupt: '2h' }) } });
    assert.match(record(own)?.message ?? '', /Node w1 \("2h"\)/);
    const ignored = gate({ pods: [batch('true')], capMs: 0 });
    assert.equal(ignored.status.phase, 'Approved');
    assert.equal(record(ignored), undefined);
  });

  it('holds, saying why, when the node’s Pods could not be read (fail closed, this action only)', () => {
    const d = decide(
      input({
        action: action({}, admitted(T0)),
        doNotDisruptCap: { ms: HOUR, by: 'ActionPolicy workers' },
        neighbours: { at: T0, pods: [], error: 'KubeApiError: GET /api/v1/pods: 403 forbidden' },
      }),
    );
    assert.equal(d.status.phase, 'WaitingForHealth');
    assert.match(
      record(d)?.message ?? '',
      /could not be read for talos.dev\/do-not-disrupt: KubeApiError: GET \/api\/v1\/pods: 403/,
    );
  });

  it('does not hold a change that leaves the node and its Pods in place', () => {
    // A change that restarts nothing (its disruption class; unclassified, a live change
    // counts as restarting CRI, and with it every Pod).
    const live = gate({
      spec: {
        action: 'ConfigChange',
        execution: 'External',
        configChange: { mode: 'NoReboot', disruptionClass: 'None' },
      },
    });
    assert.equal(live.readNeighbours, undefined);
    assert.notEqual(live.status.phase, 'WaitingForHealth');
  });

  it('is passed by a bypass of the health checks, recorded with the Pods it passed', () => {
    const spec = { bypass: { healthChecks: true, reason: 'CVE fix now' } };
    assert.equal(gate({ spec }).readNeighbours, true, 'the Pods are read for the record');
    const passed = gate({ spec, pods: [batch('true')] });
    assert.equal(passed.status.phase, 'Approved');
    const r = record(passed);
    assert.equal(r?.bypassed, true);
    assert.match(
      r.message ?? '',
      /Pod batch\/train-0 asks not to be disrupted: passed, health checks bypassed by alice: CVE fix now/,
    );
    assert.equal(events(passed, 'DoNotDisruptBypassed').length, 1);
  });

  it('lengthens the health gate’s deadline by the cap once a hold began', () => {
    const since = { doNotDisruptSince: T0.toISOString() };
    const at40m = gate({ pods: [batch('true')], capMs: HOUR, now: at(40 * 60), status: since });
    assert.equal(at40m.status.phase, 'WaitingForHealth', 'not failed at deadlines.waitingForHealth (30m)');
    const unhealthy = { name: 'ceph', healthy: false, probeTime: T0.toISOString(), message: 'bad' };
    const late = gate({
      pods: [],
      capMs: HOUR,
      now: at(90 * 60),
      status: { ...since, checks: [unhealthy] },
    });
    assert.equal(late.status.phase, 'Failed');
    assert.match(late.status.message ?? '', /deadlines.waitingForHealth \(1h30m\)/);
  });
});

describe('doNotDisruptCap', () => {
  const spec = { action: 'Reboot' as const, nodeName: 'w1' };
  const labels = { pool: 'workers' };
  it('is the shortest of the governing policies, 24h by default, and ignores the others', () => {
    assert.deepEqual(doNotDisruptCap([], spec, labels), { ms: 24 * HOUR, by: 'the default' });
    const cap = doNotDisruptCap(
      [
        { name: 'all', spec: {} },
        {
          name: 'workers',
          spec: { nodeSelector: { matchLabels: { pool: 'workers' } }, doNotDisruptMax: '2h' },
        },
        {
          name: 'storage',
          spec: { nodeSelector: { matchLabels: { pool: 'storage' } }, doNotDisruptMax: '0s' },
        },
        { name: 'upgrades', spec: { actions: ['Upgrade'], doNotDisruptMax: '1m' } },
      ],
      spec,
      labels,
    );
    assert.deepEqual(cap, { ms: 2 * HOUR, by: 'ActionPolicy workers' });
  });
});
