// What holds a Managed drain, in the decision core: status.drain (bounded, longest refused
// first) and the condition DrainBlocked, written when what holds the drain changes and
// not on every retry, cleared when the drain proceeds, kept when it fails.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type ActionDecision, type ActionInput } from '../../src/actions/decide.ts';
import { blockerWords, drainHoldWords, drainRecord } from '../../src/actions/drain-hold.ts';
import {
  DRAIN_BLOCKERS_LISTED,
  type DrainBlocker,
  type NodeActionStatus,
} from '../../src/api/node-action.ts';
import type { ExecutionFacts } from '../../src/talos/facts.ts';
import { action, admitted, at, input, node, T0 } from './action-fixtures.ts';

const V13 = 'Talos (v1.13.0)';

function approvedReboot(): ActionInput {
  return input({
    action: action(
      { execution: 'Managed', action: 'Reboot' },
      admitted(T0, { phase: 'Approved', approvalTime: T0.toISOString(), bootIDBefore: 'boot-1' }),
    ),
    node: node('w1', { osImage: V13 }),
    execution: {},
  });
}

function condition(status: NodeActionStatus, type: string) {
  return status.conditions?.find((c) => c.type === type);
}

const osd = (n: number, since: Date, allowed = 0): DrainBlocker => ({
  namespace: 'rook-ceph',
  pod: `rook-ceph-osd-${String(n)}`,
  podDisruptionBudget: `rook-ceph-osd-host-w${String(n)}`,
  disruptionsAllowed: allowed,
  since: since.toISOString(),
});

const draining = (message: string, blockers?: DrainBlocker[]): ExecutionFacts => ({
  drain: { state: 'running', message, ...(blockers ? { blockers } : {}) },
});

/**
 * Passes of decide() as the reconciler makes them: a status written only when it differs
 * from the one read (its sameJSON), and read back for the next pass, a second later.
 */
class Passes {
  i: ActionInput;
  d: ActionDecision;
  writes = 0;

  constructor(i: ActionInput) {
    this.i = i;
    this.d = decide(i);
    this.writes = 1;
  }

  pass(execution: ExecutionFacts): ActionDecision {
    this.i = {
      ...this.i,
      now: new Date(this.i.now.getTime() + 1000),
      action: { ...this.i.action, status: this.d.status },
      execution,
    };
    const before = JSON.stringify(this.d.status);
    this.d = decide(this.i);
    if (JSON.stringify(this.d.status) !== before) this.writes += 1;
    return this.d;
  }
}

describe('drain blockers: the record', () => {
  it('lists at most DRAIN_BLOCKERS_LISTED, longest refused first, and counts the rest', () => {
    const blockers = Array.from({ length: DRAIN_BLOCKERS_LISTED + 3 }, (_, n) => osd(n, at(100 - n)));
    const record = drainRecord(undefined, blockers);
    assert.equal(record?.blockers?.length, DRAIN_BLOCKERS_LISTED);
    assert.equal(record.moreBlockers, 3);
    assert.equal(record.blockers[0]?.pod, `rook-ceph-osd-${String(DRAIN_BLOCKERS_LISTED + 2)}`);
    assert.match(drainHoldWords(record), /; and 10 more pods$/);
    assert.equal(drainRecord(record, []), undefined, 'nothing refused: no record');
  });

  it('keeps the first-refused time an earlier record had for the same pod', () => {
    const earlier = drainRecord(undefined, [osd(2, at(10))]);
    const again = drainRecord(earlier, [osd(2, at(50)), osd(3, at(50))]);
    assert.deepEqual(
      again?.blockers?.map((b) => [b.pod, b.since]),
      [
        ['rook-ceph-osd-2', at(10).toISOString()],
        ['rook-ceph-osd-3', at(50).toISOString()],
      ],
    );
  });

  it('words a blocker as the issue asks, and a refusal no budget explains with its message', () => {
    assert.equal(
      blockerWords(osd(2, T0)),
      'rook-ceph-osd-2 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd-host-w2 (0 disruptions allowed)',
    );
    assert.equal(
      blockerWords({
        namespace: 'db',
        pod: 'pg-0',
        since: T0.toISOString(),
        message: 'admission webhook says no',
      }),
      'db/pg-0 refused: admission webhook says no',
    );
  });
});

describe('drain blockers: the status', () => {
  it('shows what holds the drain, rewrites it only when that changes, and clears it when the drain proceeds', () => {
    const p = new Passes(approvedReboot());
    assert.deepEqual(
      p.d.effects.filter((e) => e.type === 'drain'),
      [{ type: 'drain' }],
    );
    p.pass(draining('cordoned w1'));
    const writesBefore = p.writes;
    const first = at(2);
    const held = p.pass(draining('waiting 0.5s: ...', [osd(2, first), osd(5, first)]));
    assert.equal(p.writes, writesBefore + 1);
    assert.deepEqual(held.status.drain, { blockers: [osd(2, first), osd(5, first)] });
    const blocked = condition(held.status, 'DrainBlocked');
    assert.equal(blocked?.status, 'True');
    assert.equal(blocked.reason, 'EvictionsRefused');
    assert.equal(
      blocked.message,
      'rook-ceph-osd-2 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd-host-w2 (0 disruptions allowed); rook-ceph-osd-5 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd-host-w5 (0 disruptions allowed)',
    );
    assert.match(
      held.status.message ?? '',
      /^draining node w1: waiting for evictions: rook-ceph-osd-2 blocked/,
    );
    assert.equal(condition(held.status, 'Drained')?.status, 'Unknown');

    // Retries that change nothing but the elapsed time in the progress: no write at all.
    for (let n = 1; n <= 20; n++)
      p.pass(draining(`waiting ${String(n * 5)}s: ...`, [osd(2, first), osd(5, first)]));
    assert.equal(p.writes, writesBefore + 1, 'an unchanged hold is not written again');

    // One pod let go: the list changes, once.
    const fewer = p.pass(draining('evicted rook-ceph/rook-ceph-osd-5', [osd(2, first)]));
    assert.equal(p.writes, writesBefore + 2);
    assert.deepEqual(
      fewer.status.drain?.blockers?.map((b) => b.pod),
      ['rook-ceph-osd-2'],
    );
    assert.equal(
      condition(fewer.status, 'DrainBlocked')?.lastTransitionTime,
      blocked.lastTransitionTime,
      'still blocked: the same transition',
    );

    // None refused: the record goes and DrainBlocked turns False; the drain goes on.
    const free = p.pass(draining('evicted rook-ceph/rook-ceph-osd-2', []));
    assert.equal(free.status.drain, undefined);
    const cleared = condition(free.status, 'DrainBlocked');
    assert.equal(cleared?.status, 'False');
    assert.equal(cleared.reason, 'EvictionsAllowed');
    assert.match(cleared.message, /the refused evictions went through after \d/);
    assert.match(free.status.message ?? '', /draining node w1: evicted rook-ceph\/rook-ceph-osd-2/);

    const call = p.pass({ drain: { state: 'succeeded', message: 'drained: 2 pod(s) evicted' } });
    assert.ok(call.effects.some((e) => e.type === 'talos' && e.step === 'call'));
    assert.equal(call.status.drain, undefined);
    assert.equal(condition(call.status, 'DrainBlocked')?.status, 'False');
  });

  it('clears the record when the drain succeeds before its last report was seen', () => {
    const p = new Passes(approvedReboot());
    p.pass(draining('waiting', [osd(2, at(1))]));
    const d = p.pass({ drain: { state: 'succeeded', message: 'drained: 1 pod(s) evicted' } });
    assert.equal(d.status.drain, undefined);
    assert.equal(condition(d.status, 'DrainBlocked')?.status, 'False');
    assert.equal(d.status.execution?.callTime !== undefined, true);
  });

  it('keeps the record of what held a drain that failed, and calls Talos never', () => {
    const p = new Passes(approvedReboot());
    p.pass(draining('waiting', [osd(2, at(1))]));
    const d = p.pass({
      drain: { state: 'failed', message: 'drain of w1 timed out after 5.0s with 1 pod(s) left' },
    });
    assert.equal(d.status.phase, 'Failed');
    assert.deepEqual(
      d.status.drain?.blockers?.map((b) => b.pod),
      ['rook-ceph-osd-2'],
    );
    assert.equal(condition(d.status, 'DrainBlocked')?.status, 'True');
    assert.equal(d.status.execution?.callTime, undefined);
    assert.ok(!d.effects.some((e) => e.type === 'talos'));
  });

  it('keeps the record while a drain begun again (after a restart) has not reported yet', () => {
    const p = new Passes(approvedReboot());
    const held = p.pass(draining('waiting', [osd(2, at(1))]));
    // A new process: it knows nothing of the drain, starts it again, and it runs unreported.
    const restarted = p.pass({});
    assert.ok(restarted.effects.some((e) => e.type === 'drain'));
    assert.deepEqual(restarted.status.drain, held.status.drain);
    const d = p.pass(draining('cordoned w1'));
    assert.deepEqual(d.status.drain, held.status.drain);
    assert.deepEqual(condition(d.status, 'DrainBlocked'), condition(held.status, 'DrainBlocked'));
    // Reported again, later: the first refusal's time is the one recorded.
    const again = p.pass(draining('waiting', [osd(2, at(9))]));
    assert.deepEqual(
      again.status.drain?.blockers?.map((b) => b.since),
      [at(1).toISOString()],
    );
  });
});
