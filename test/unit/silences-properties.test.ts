// Properties of the silence core (src/silences/plan.ts) in a simulated world: a
// simulated Alertmanager that goes up and down, calls that fail while it is down, a
// restart that loses every fact, the clock, the action finishing or being deleted.
// Whatever fast-check chooses:
//   - the silence is asked for only while the action is approved and unfinished, and
//     never past approval + duration; the phase is never touched (a courtesy, not a gate);
//   - the finalizer goes only when nothing is held any more, or, for a deleted action,
//     when what is left ends by itself within a lease;
//   - once Alertmanager is reachable and the action over, the silence is expired and
//     every record settled.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { ActionDecision } from '../../src/actions/decide.ts';
import { holdSilences } from '../../src/actions/silences.ts';
import type { NodeActionStatus } from '../../src/api/node-action.ts';
import { APPROVED_PHASES, isTerminal } from '../../src/api/phases.ts';
import { silenceKey, type SilenceCallFacts, LEASE_MS } from '../../src/silences/plan.ts';
import { action, T0 } from './action-fixtures.ts';

const AM = 'http://am:9093';
const KEY = silenceKey({ url: AM, nodeLabel: 'node' });
const DURATION_MS = 30 * 60_000;
const POLICIES = [{ name: 'p', spec: { alertmanagerSilence: { url: AM, duration: '30m' } } }];

type Step =
  | { kind: 'advance'; ms: number }
  | { kind: 'alertmanager'; up: boolean }
  | { kind: 'restart' }
  | { kind: 'finish' }
  | { kind: 'delete' };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.integer({ min: 0, max: 400_000 }).map((ms) => ({ kind: 'advance' as const, ms })),
  },
  { weight: 3, arbitrary: fc.boolean().map((up) => ({ kind: 'alertmanager' as const, up })) },
  { weight: 1, arbitrary: fc.constant({ kind: 'restart' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'finish' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'delete' as const }) },
);

class World {
  now = T0;
  phase: NodeActionStatus['phase'] = 'Approved';
  deleted = false;
  deletedAt = '';
  gone = false;
  up = true;
  status: NodeActionStatus = {
    phase: 'Approved',
    approvalTime: T0.toISOString(),
    phaseTime: T0.toISOString(),
  };
  facts = new Map<string, SilenceCallFacts>();
  /** The silence as Alertmanager has it. */
  silence: { endsAt: number; expired: boolean } | undefined;
  readonly notAfter = T0.getTime() + DURATION_MS;

  isGone(): boolean {
    return this.gone;
  }

  live(): boolean {
    return this.silence !== undefined && !this.silence.expired && this.silence.endsAt > this.now.getTime();
  }

  pass(): ActionDecision {
    const observed = { ...this.status, phase: this.phase };
    const a = action({}, observed, this.deleted ? { deletionTimestamp: this.deletedAt } : {});
    const decision: ActionDecision = {
      status: structuredClone(observed),
      addFinalizer: false,
      removeFinalizer: isTerminal(this.phase),
      effects: [],
    };
    const d = holdSilences(decision, a, {
      now: this.now,
      policies: POLICIES,
      nodeLabels: {},
      facts: new Map(this.facts),
    });
    const running = APPROVED_PHASES.has(this.phase ?? 'Pending') && !this.deleted;
    assert.equal(d.status.phase, this.phase, 'the phase is decide()’s alone');
    for (const e of d.effects) {
      if (e.type !== 'silence') continue;
      if (e.op === 'hold') {
        assert.ok(running, 'held only while approved and unfinished');
        assert.ok(Date.parse(e.notAfter) <= this.notAfter, 'never past approval + duration');
      }
      this.call(e.op, e.op === 'hold' ? Date.parse(e.notAfter) : 0);
    }
    if (d.removeFinalizer) {
      for (const r of d.status.silences ?? [])
        assert.ok(
          r.state === 'Expired' || r.state === 'Lapsed',
          `finalizer removed with a ${r.state} silence`,
        );
      if (this.live()) {
        assert.ok(this.deleted, 'only a deletion lets go of a silence still in force');
        assert.ok((this.silence?.endsAt ?? 0) <= this.now.getTime() + LEASE_MS, 'and it ends within a lease');
      }
      if (this.deleted) this.gone = true;
    }
    this.status = d.status;
    return d;
  }

  /** A call, answered at once: it reaches Alertmanager only while it is up. */
  private call(op: 'hold' | 'release', notAfter: number): void {
    const previous = this.facts.get(KEY);
    const failures = previous?.state === 'failed' ? previous.failures : 0;
    if (!this.up) {
      this.facts.set(KEY, {
        op,
        state: 'failed',
        at: this.now,
        failures: failures + 1,
        message: 'down',
        unreachable: true,
      });
      return;
    }
    if (op === 'hold') {
      const endsAt = Math.min(this.now.getTime() + LEASE_MS, notAfter);
      assert.ok(endsAt <= this.notAfter);
      this.silence = this.live() && this.silence ? { ...this.silence, endsAt } : { endsAt, expired: false };
      this.facts.set(KEY, {
        op,
        state: 'succeeded',
        at: this.now,
        failures: 0,
        id: 'sil-1',
        endsAt: new Date(endsAt).toISOString(),
      });
    } else {
      if (this.silence) this.silence.expired = true;
      this.facts.set(KEY, { op, state: 'succeeded', at: this.now, failures: 0 });
    }
  }

  apply(s: Step): void {
    switch (s.kind) {
      case 'advance':
        this.now = new Date(this.now.getTime() + s.ms);
        break;
      case 'alertmanager':
        this.up = s.up;
        break;
      case 'restart':
        this.facts = new Map();
        break;
      case 'finish':
        if (!isTerminal(this.phase)) this.phase = 'Succeeded';
        break;
      case 'delete':
        if (!this.deleted) this.deletedAt = this.now.toISOString();
        this.deleted = true;
        if (!isTerminal(this.phase)) this.phase = 'Cancelled';
        break;
    }
  }
}

describe('silences in a simulated world', () => {
  it('hold only while the action runs, never past its duration, and are released once Alertmanager can be reached', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 40 }), (steps) => {
        const w = new World();
        w.pass();
        for (const s of steps) {
          if (w.gone) break;
          w.apply(s);
          w.pass();
        }
        if (w.gone) return;
        // Alertmanager back, the action over: the passes the requeues bring settle it.
        w.up = true;
        w.apply({ kind: 'finish' });
        for (let i = 0; i < 20; i++) {
          const d = w.pass();
          if (d.removeFinalizer) break;
          w.now = new Date(w.now.getTime() + (d.requeueAfterMs ?? 1000));
        }
        for (const r of w.status.silences ?? [])
          assert.ok(r.state === 'Expired' || r.state === 'Lapsed', `left ${r.state}`);
        // A deletion that outwaited Alertmanager leaves the rest to the lease (checked in pass()).
        if (!w.isGone()) assert.ok(!w.live(), 'no silence outlives the action');
      }),
      { numRuns: 500 },
    );
  });
});
