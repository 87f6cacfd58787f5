// The imperative half of silences (src/silences/leases.ts): calls in the background, one
// at a time per silence, and their outcomes kept as the facts the core decides on;
// against a real Alertmanager (sandbox/monitoring.ts).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../src/log.ts';
import { SilenceLeases, type SilenceCall } from '../../src/silences/leases.ts';
import { silenceKey } from '../../src/silences/plan.ts';
import type { Monitoring } from '../../sandbox/monitoring.ts';
import { freePorts } from '../../sandbox/processes.ts';
import { silencesForAction, startTestMonitoring } from '../support/monitoring.ts';

function changes(): { wait: () => Promise<void>; onChange: () => void; count: () => number } {
  let n = 0;
  let waiting: (() => void) | undefined;
  return {
    onChange: () => {
      n++;
      waiting?.();
    },
    wait: () => new Promise<void>((resolve) => (waiting = resolve)),
    count: () => n,
  };
}

describe('SilenceLeases', () => {
  let monitoring: Monitoring | undefined;
  const am = { url: '' };
  before(async () => {
    monitoring = await startTestMonitoring();
    am.url = monitoring.alertmanagerUrl ?? '';
  });
  after(() => monitoring?.stop());
  const leases = new SilenceLeases({ log: silentLogger() });
  after(() => leases.stop());

  function call(op: SilenceCall['op'], uid: string, url = am.url): SilenceCall {
    return {
      op,
      url,
      nodeLabel: 'node',
      node: 'w1',
      action: { name: `reboot-w1-${uid}`, uid },
      notAfter: new Date(Date.now() + 3_600_000),
    };
  }

  it('holds in the background, one call at a time per silence, and reports what came of it', async () => {
    const c = changes();
    const done = c.wait();
    leases.start(call('hold', 'a1'), c.onChange);
    leases.start(call('hold', 'a1'), c.onChange);
    const key = silenceKey({ url: am.url, nodeLabel: 'node' });
    assert.equal(leases.facts('a1').get(key)?.state, 'running');
    await done;
    const facts = leases.facts('a1').get(key);
    assert.equal(facts?.state, 'succeeded');
    const held = await silencesForAction(am.url, 'a1');
    // Two holds at once would both find no silence and create one each.
    assert.equal(held.length, 1, 'the second start waited for the first');
    assert.equal(facts.id, held[0]?.id);

    const released = c.wait();
    leases.start(call('release', 'a1'), c.onChange);
    await released;
    assert.equal(leases.facts('a1').get(key)?.state, 'succeeded');
    assert.equal((await silencesForAction(am.url, 'a1'))[0]?.status.state, 'expired');
  });

  it('counts consecutive failures, and a retry carries the failure it retries', async () => {
    // A port nothing listens on: connections are refused.
    const gone = { url: `http://127.0.0.1:${String((await freePorts(['gone'])).gone)}` };
    const key = silenceKey({ url: gone.url, nodeLabel: 'node' });
    const c = changes();
    let next = c.wait();
    leases.start(call('hold', 'a2', gone.url), c.onChange);
    await next;
    const first = leases.facts('a2').get(key);
    assert.equal(first?.state, 'failed');
    assert.equal(first.failures, 1);
    assert.equal(first.unreachable, true);
    assert.match(first.message ?? '', /ECONNREFUSED/);
    next = c.wait();
    leases.start(call('hold', 'a2', gone.url), c.onChange);
    const retrying = leases.facts('a2').get(key);
    assert.deepEqual([retrying?.state, retrying?.failures, retrying?.message], ['running', 1, first.message]);
    await next;
    assert.equal(leases.facts('a2').get(key)?.failures, 2);
  });

  it('says nothing of an action it was told to forget', async () => {
    const c = changes();
    leases.start(call('hold', 'a3'), c.onChange);
    leases.forget('a3');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(c.count(), 0);
    assert.equal(leases.facts('a3').size, 0);
  });
});
