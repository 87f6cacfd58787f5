// The silence lease against a small server speaking Alertmanager's v2 API (the subset
// gatehouse uses: list with a matcher filter, create/update, expire).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import {
  AlertmanagerClient,
  AlertmanagerError,
  LEASE_MS,
  type Silence,
} from '../../src/silences/alertmanager.ts';

class FakeAlertmanager {
  readonly silences = new Map<string, Silence>();
  server!: Server;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const url = new URL(req.url ?? '/', 'http://x');
        const send = (status: number, value: unknown) => {
          res.writeHead(status, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify(value));
        };
        if (req.method === 'GET' && url.pathname === '/api/v2/silences') {
          const filter = /^(\w+)="(.*)"$/.exec(url.searchParams.get('filter') ?? '');
          const list = [...this.silences.values()].filter(
            (s) => !filter || s.matchers.some((m) => m.name === filter[1] && m.value === filter[2]),
          );
          send(200, list);
        } else if (req.method === 'POST' && url.pathname === '/api/v2/silences') {
          const s = JSON.parse(body) as Omit<Silence, 'id'> & { id?: string };
          if (!s.matchers.length || !s.createdBy || !s.comment)
            return send(400, 'missing matchers, createdBy or comment');
          const id = s.id ?? randomUUID();
          if (s.id && !this.silences.has(s.id)) return send(404, `silence ${s.id} not found`);
          this.silences.set(id, { ...s, id, status: { state: 'active' } });
          send(200, { silenceID: id });
        } else if (req.method === 'DELETE' && url.pathname.startsWith('/api/v2/silence/')) {
          const s = this.silences.get(decodeURIComponent(url.pathname.slice('/api/v2/silence/'.length)));
          if (!s) return send(404, 'not found');
          s.status = { state: 'expired' };
          send(200, {});
        } else send(404, 'no such route');
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${String((this.server.address() as AddressInfo).port)}`;
  }
}

describe('Alertmanager silences', () => {
  const am = new FakeAlertmanager();
  before(() => am.start());
  after(() => new Promise<void>((resolve) => am.server.close(() => resolve())));
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
    await assert.rejects(
      new AlertmanagerClient('http://127.0.0.1:1').find(request),
      (e: unknown) => e instanceof AlertmanagerError && /unreachable/.test(e.message),
    );
    await assert.rejects(new AlertmanagerClient(`${am.url}/nothing-here`).find(request), /answered 404/);
  });
});
