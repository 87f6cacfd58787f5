// What a node's event history can tell about a call (src/talos/events.ts): Talos keeps
// its last 990 events, so "no such sequence" counts only when the history reaches back.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { xidAt } from '../../sandbox/talos-events.ts';
import { callReached, EVENT_HISTORY, xidTime, type NodeEventHistory } from '../../src/talos/events.ts';

const callTime = new Date('2026-05-01T10:00:00Z');
const at = (offsetMs: number) => new Date(callTime.getTime() + offsetMs);
const history = (h: Partial<NodeEventHistory>): NodeEventHistory => ({
  sequences: [],
  kept: 12,
  oldest: at(-3_600_000),
  ...h,
});

describe('node event history', () => {
  it('reads the time of an xid, as Talos names its events', () => {
    for (const t of ['2026-05-01T10:00:00Z', '2030-01-02T03:04:05Z'])
      assert.equal(xidTime(xidAt(new Date(t)))?.toISOString(), new Date(t).toISOString());
    assert.equal(xidTime('9m4e2mr0ui3e8a215n4g')?.toISOString(), '2011-03-22T17:50:19.000Z');
    assert.equal(xidTime('not-an-xid'), undefined);
  });

  it('says a call came when its sequence started, or could not start (NOOP with an error)', () => {
    const started = callReached(
      history({ sequences: [{ id: 'x', sequence: 'stageUpgrade', action: 'start' }] }),
      'stageUpgrade',
      callTime,
    );
    assert.equal(started.reached, true);
    const locked = callReached(
      history({
        sequences: [{ id: 'y', sequence: 'reboot', action: 'noop', error: 'sequence not started: locked' }],
      }),
      'reboot',
      callTime,
    );
    assert.equal(locked.reached, true);
    assert.match(locked.message, /could not run .* locked/);
    // An upgrade's sequence is not a staged upgrade's.
    const other = callReached(
      history({ sequences: [{ id: 'z', sequence: 'upgrade', action: 'start' }] }),
      'stageUpgrade',
      callTime,
    );
    assert.equal(other.reached, false);
  });

  it('says a call never came only when the history reaches back to it', () => {
    assert.equal(callReached(history({ kept: 40 }), 'reboot', callTime).reached, false);
    const full = { kept: EVENT_HISTORY };
    assert.equal(callReached(history({ ...full, oldest: at(-120_000) }), 'reboot', callTime).reached, false);
    const gone = callReached(history({ ...full, oldest: at(5_000) }), 'reboot', callTime);
    assert.equal(gone.reached, undefined, 'the window is gone: unknown, never "not received"');
    assert.match(gone.message, /keeps only its last 990 events, .* whether it came is unknown/);
    // Within the clock margin the history may not cover the call.
    assert.equal(
      callReached(history({ ...full, oldest: at(-10_000) }), 'reboot', callTime).reached,
      undefined,
    );
    assert.equal(callReached(history({ ...full, oldest: undefined }), 'reboot', callTime).reached, undefined);
  });
});
