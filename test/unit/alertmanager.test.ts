// The silence lease against a small server speaking Alertmanager's v2 API (the subset
// gatehouse uses: list with a matcher filter, create/update, expire).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { AlertmanagerClient, AlertmanagerError } from '../../src/silences/client.ts';
import { LEASE_MS } from '../../src/silences/plan.ts';
import { FakeAlertmanager } from '../support/alertmanager.ts';

describe('Alertmanager silences', () => {
  const am = new FakeAlertmanager();
  before(() => am.start());
  after(() => am.stop());
  const action = { name: 'reboot-worker-1', uid: randomUUID() };
  const request = { node: 'worker-1', nodeLabel: 'node', action };

  it('creates a silence for the node, leased for ten minutes and never past the policy duration', async () => {
    const client = new AlertmanagerClient(am.url);
    const now = new Date('2026-11-30T03:00:00Z');
    const held = await client.hold({ ...request, now, notAfter: new Date(now.getTime() + 3_600_000) });
    assert.equal(held.created, true);
    assert.equal(held.endsAt.getTime(), now.getTime() + LEASE_MS);
    const silence = am.silences.get(held.id);
    assert.deepEqual(silence?.matchers, [{ name: 'node', value: 'worker-1', isRegex: false, isEqual: true }]);
    assert.equal(silence.createdBy, 'gatehouse');
    assert.match(
      silence.comment,
      new RegExp(`reboot-worker-1 on worker-1 \\[gatehouse action ${action.uid}\\]`),
    );
    const capped = await client.hold({ ...request, now, notAfter: new Date(now.getTime() + 60_000) });
    assert.equal(capped.endsAt.getTime(), now.getTime() + 60_000);
  });

  it('renews the same silence instead of creating another (a restarted controller finds it by the action)', async () => {
    const client = new AlertmanagerClient(am.url);
    const later = new Date(Date.now() + 5 * 60_000);
    const renewed = await client.hold({
      ...request,
      now: later,
      notAfter: new Date(later.getTime() + 3_600_000),
    });
    assert.equal(renewed.created, false);
    assert.equal([...am.silences.values()].filter((s) => s.status.state === 'active').length, 1);
    assert.equal(am.silences.get(renewed.id)?.endsAt, new Date(later.getTime() + LEASE_MS).toISOString());
  });

  it('expires the silence when the action ends, and only that one', async () => {
    const client = new AlertmanagerClient(am.url);
    const other = { ...request, action: { name: 'other', uid: randomUUID() } };
    await client.hold({ ...other, notAfter: new Date(Date.now() + 3_600_000) });
    assert.equal(await client.release(request), true);
    assert.equal(await client.release(request), false, 'nothing left to expire');
    const states = [...am.silences.values()].map((s) => [s.comment.includes(action.uid), s.status.state]);
    assert.deepEqual(
      states.filter(([mine]) => mine).map(([, state]) => state),
      ['expired'],
    );
    assert.deepEqual(
      states.filter(([mine]) => !mine).map(([, state]) => state),
      ['active'],
    );
  });

  it('says clearly when Alertmanager cannot be reached or refuses', async () => {
    const gone = new FakeAlertmanager();
    await gone.start();
    await gone.stop();
    await assert.rejects(
      new AlertmanagerClient(gone.url).find(request),
      (e: unknown) =>
        e instanceof AlertmanagerError && e.unreachable && /unreachable: .*ECONNREFUSED/.test(e.message),
    );
    await assert.rejects(
      new AlertmanagerClient(`${am.url}/nothing-here`).find(request),
      (e: unknown) => e instanceof AlertmanagerError && !e.unreachable && /answered 404/.test(e.message),
    );
  });
});
