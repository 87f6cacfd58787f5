// The turn's protocol (src/kube/turn.ts), step by step: what a replica does next with the
// Lease as it sees it, and when the turn is its own.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  DEFAULT_TURN_TIMING,
  holdsTurn,
  instanceOf,
  mayBegin,
  turnIdentity,
  turnStep,
  type TurnView,
} from '../../src/kube/turn.ts';

const ME = turnIdentity('canary', 'pod-1');
const OTHER = turnIdentity(undefined, 'pod-9');

function view(partial: Partial<TurnView>): TurnView {
  return {
    identity: ME,
    active: true,
    wanting: false,
    busy: false,
    lease: undefined,
    observedAt: 0,
    now: 1000,
    timing: DEFAULT_TURN_TIMING,
    ...partial,
  };
}
const held = (extra: Partial<TurnView> = {}) =>
  view({ lease: { holder: ME, durationMs: 15_000 }, renewedAt: 900, ...extra });

describe('the turn', () => {
  it('names replicas by instance, the unnamed one apart from any named one', () => {
    assert.equal(ME, 'canary/pod-1');
    assert.equal(OTHER, '(default)/pod-9');
    assert.equal(instanceOf(ME), 'canary');
    assert.equal(instanceOf(undefined), undefined);
  });

  it('is created held by the first replica, even one that needs nothing yet', () => {
    assert.deepEqual(turnStep(view({})), { type: 'create' });
  });

  it('is kept while nobody asks: renewed every retry period, nothing written between', () => {
    assert.deepEqual(turnStep(held()), { type: 'wait', inMs: 1900 });
    assert.deepEqual(turnStep(held({ now: 2900 })), { type: 'renew' });
    assert.equal(holdsTurn(held()), true);
    assert.equal(mayBegin(held()), true);
  });

  it('is ours only within the renew deadline of our last renewal, and only while we lead', () => {
    assert.equal(holdsTurn(held({ now: 900 + 9_999 })), true);
    assert.equal(holdsTurn(held({ now: 900 + 10_000 })), false);
    assert.equal(holdsTurn(held({ active: false })), false);
    // Handed to us but not confirmed by a renewal of ours yet.
    assert.equal(holdsTurn(view({ lease: { holder: ME, durationMs: 15_000 } })), false);
    assert.deepEqual(turnStep(view({ lease: { holder: ME, durationMs: 15_000 } })), { type: 'renew' });
  });

  it('is handed to whoever asks, once our steps in flight are done; none begins meanwhile', () => {
    const asked = held({ lease: { holder: ME, wanted: OTHER, durationMs: 15_000 } });
    assert.equal(mayBegin(asked), false, 'no new step once someone asked');
    assert.equal(holdsTurn(asked), true, 'a step in flight may still write');
    assert.deepEqual(turnStep({ ...asked, busy: true }), { type: 'wait', inMs: 1900 });
    assert.deepEqual(turnStep(asked), { type: 'handOver', to: OTHER });
  });

  it('is kept for a moment after it came, for the steps that waited for it, though another asks', () => {
    const asked = held({ lease: { holder: ME, wanted: OTHER, durationMs: 15_000 }, acquiredAt: 800 });
    assert.equal(mayBegin(asked), true, 'our waiting steps begin first');
    assert.deepEqual(turnStep(asked), { type: 'wait', inMs: 300 });
    assert.equal(mayBegin({ ...asked, now: 1300 }), false);
    assert.deepEqual(turnStep({ ...asked, now: 1300 }), { type: 'handOver', to: OTHER });
  });

  it('is asked for when another replica holds it and something of ours waits', () => {
    const theirs = view({ lease: { holder: OTHER, durationMs: 15_000 }, observedAt: 0, now: 5000 });
    assert.deepEqual(turnStep(theirs), { type: 'wait', inMs: 2000 });
    assert.deepEqual(turnStep({ ...theirs, wanting: true }), { type: 'ask' });
    const asked = { ...theirs, wanting: true, lease: { holder: OTHER, wanted: ME, durationMs: 15_000 } };
    assert.deepEqual(turnStep(asked), { type: 'wait', inMs: 2000 }, 'asked once');
    assert.equal(mayBegin(theirs), false);
  });

  it('is taken when free, or when its holder has not renewed for a whole lease duration as we watched', () => {
    assert.deepEqual(turnStep(view({ lease: { durationMs: 1000 } })), { type: 'take' });
    const stale = view({ lease: { holder: OTHER, durationMs: 15_000 }, observedAt: 0 });
    assert.equal(turnStep({ ...stale, now: 15_000 }).type, 'wait');
    assert.deepEqual(turnStep({ ...stale, now: 15_001 }), { type: 'take' });
  });

  it('is taken at once from another replica of our own instance (leader election lets one act)', () => {
    const predecessor = view({ lease: { holder: turnIdentity('canary', 'pod-0'), durationMs: 15_000 } });
    assert.deepEqual(turnStep(predecessor), { type: 'take' });
  });

  it('is given up when we stop leading: to whoever asked, else freed', () => {
    assert.deepEqual(turnStep(held({ active: false })), { type: 'handOver', to: '' });
    assert.deepEqual(
      turnStep(held({ active: false, lease: { holder: ME, wanted: OTHER, durationMs: 15_000 } })),
      { type: 'handOver', to: OTHER },
    );
    assert.deepEqual(turnStep(held({ active: false, busy: true })).type, 'wait');
    assert.deepEqual(turnStep(view({ active: false })).type, 'wait', 'never created by a follower');
  });
});
