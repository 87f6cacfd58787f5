// The silence lease against a real Alertmanager (sandbox/monitoring.ts), through the
// part of its v2 API gatehouse uses: list with a matcher filter, create/update, expire.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { AlertmanagerClient, AlertmanagerError } from '../../src/silences/client.ts';
import { LEASE_MS } from '../../src/silences/plan.ts';
import type { Monitoring } from '../../sandbox/monitoring.ts';
import { listSilences, startTestMonitoring } from '../support/monitoring.ts';

describe('Alertmanager silences', () => {
  let monitoring: Monitoring | undefined;
  let url = '';
  before(async () => {
    monitoring = await startTestMonitoring();
    url = monitoring.alertmanagerUrl ?? '';
  });
  after(() => monitoring?.stop());
  const silence = async (id: string) => (await listSilences(url)).find((s) => s.id === id);
  const action = { name: 'reboot-worker-1', uid: randomUUID() };
  const request = { node: 'worker-1', nodeLabel: 'node', action };

  it('creates a silence for the node, leased for ten minutes and never past the policy duration', async () => {
    const client = new AlertmanagerClient(url);
    // Alertmanager refuses a silence that has ended already: the lease starts now.
    const now = new Date();
    const held = await client.hold({ ...request, now, notAfter: new Date(now.getTime() + 3_600_000) });
    assert.equal(held.created, true);
    assert.equal(held.endsAt.getTime(), now.getTime() + LEASE_MS);
    const created = await silence(held.id);
    assert.deepEqual(created?.matchers, [{ name: 'node', value: 'worker-1', isRegex: false, isEqual: true }]);
    assert.equal(created.createdBy, 'gatehouse');
    assert.equal(Date.parse(created.endsAt), held.endsAt.getTime());
    assert.match(
      created.comment,
      new RegExp(`reboot-worker-1 on worker-1 \\[gatehouse action ${action.uid}\\]`),
    );
    const capped = await client.hold({ ...request, now, notAfter: new Date(now.getTime() + 60_000) });
    assert.equal(capped.endsAt.getTime(), now.getTime() + 60_000);
  });

  it('renews the same silence instead of creating another (a restarted controller finds it by the action)', async () => {
    const client = new AlertmanagerClient(url);
    const later = new Date(Date.now() + 5 * 60_000);
    const renewed = await client.hold({
      ...request,
      now: later,
      notAfter: new Date(later.getTime() + 3_600_000),
    });
    assert.equal(renewed.created, false);
    assert.equal((await listSilences(url)).filter((s) => s.status.state === 'active').length, 1);
    assert.equal(Date.parse((await silence(renewed.id))?.endsAt ?? ''), later.getTime() + LEASE_MS);
  });

  it('expires the silence when the action ends, and only that one', async () => {
    const client = new AlertmanagerClient(url);
    const other = { ...request, action: { name: 'other', uid: randomUUID() } };
    await client.hold({ ...other, notAfter: new Date(Date.now() + 3_600_000) });
    assert.equal(await client.release(request), true);
    assert.equal(await client.release(request), false, 'nothing left to expire');
    const states = (await listSilences(url)).map((s) => [s.comment.includes(action.uid), s.status.state]);
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
    await monitoring?.stopAlertmanager();
    await assert.rejects(
      new AlertmanagerClient(url).find(request),
      (e: unknown) =>
        e instanceof AlertmanagerError && e.unreachable && /unreachable: .*ECONNREFUSED/.test(e.message),
    );
    await monitoring?.startAlertmanager();
    await assert.rejects(
      new AlertmanagerClient(`${url}/nothing-here`).find(request),
      (e: unknown) => e instanceof AlertmanagerError && !e.unreachable && /answered 404/.test(e.message),
    );
  });
});
