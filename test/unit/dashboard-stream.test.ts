// The dashboard's HTTP side (src/http/dashboard.ts) over a real socket, with stand-in
// caches: the page and its headers, and the event stream — a snapshot at once, one per
// burst of changes, none for a change nobody can see, heartbeats, and clean-up when the
// page goes away.
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import type { ActionObject } from '../../src/api/node-action.ts';
import type { CheckView } from '../../src/checks/runner.ts';
import type { KubeObject } from '../../src/kube/informer.ts';
import { silentLogger } from '../../src/log.ts';
import { Dashboard, dashboardRoutes, type WatchedCache } from '../../src/http/dashboard.ts';
import type { DashboardView, NodeInput } from '../../src/http/dashboard-view.ts';
import type { RolloutObject } from '../../src/http/rollout-view.ts';
import { Router } from '../../src/http/router.ts';
import { serverUrl, startServer } from '../../src/http/server.ts';
import { waitFor } from '../../src/wait.ts';
import { action, state } from './action-fixtures.ts';

class FakeCache<T extends KubeObject> extends EventEmitter implements WatchedCache<T> {
  items: T[] = [];
  list(): T[] {
    return [...this.items];
  }
  set(items: T[]): void {
    this.items = items;
    this.emit('update');
  }
}

interface SseEvent {
  event: string;
  id?: string;
  data: string;
}

/** Reads a server-sent event stream as it arrives. */
class EventReader {
  readonly events: SseEvent[] = [];
  comments = 0;
  readonly response: Promise<Response>;
  private readonly abort = new AbortController();

  constructor(url: string) {
    this.response = fetch(url, { signal: this.abort.signal });
    void this.read();
  }

  private async read(): Promise<void> {
    try {
      const body = (await this.response).body;
      if (!body) return;
      const decoder = new TextDecoder();
      let buffer = '';
      for await (const chunk of body) {
        buffer += decoder.decode(chunk as Uint8Array, { stream: true });
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = block.split('\n');
          if (fields.every((f) => f.startsWith(':'))) this.comments++;
          const value = (name: string) =>
            fields.find((f) => f.startsWith(`${name}: `))?.slice(name.length + 2);
          const data = value('data');
          if (data !== undefined) {
            this.events.push({ event: value('event') ?? 'message', id: value('id'), data });
          }
        }
      }
    } catch {
      // Closed by the test.
    }
  }

  snapshots(): DashboardView[] {
    return this.events.filter((e) => e.event === 'snapshot').map((e) => JSON.parse(e.data) as DashboardView);
  }

  close(): void {
    this.abort.abort();
  }
}

const checks: CheckView[] = [];
const checkListeners = new Set<(name: string) => void>();
const runner = {
  views: () => [...checks],
  onChange: (listener: (name: string) => void) => checkListeners.add(listener),
};
const checkInformer = new FakeCache<KubeObject>();
const nodes = new FakeCache<NodeInput>();
const actions = new FakeCache<ActionObject>();
let server: Server;
let url = '';
let dashboard: Dashboard;

function node(name: string, heartbeat = ''): NodeInput {
  return {
    metadata: { name, labels: {}, annotations: { heartbeat } },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

before(async () => {
  const router = new Router();
  dashboard = dashboardRoutes(
    router,
    { checks: runner, checkInformer, nodes, actions, log: silentLogger() },
    { coalesceMs: 200, heartbeatMs: 100, maxStreams: 2, refreshMs: 60_000 },
  );
  server = await startServer(router, { host: '127.0.0.1', port: 0, log: silentLogger() });
  url = serverUrl(server);
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('dashboard: the page', () => {
  it('is served at / and /dashboard with a strict Content-Security-Policy and nosniff', async () => {
    for (const path of ['/', '/dashboard']) {
      const res = await fetch(`${url}${path}`);
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
      const csp = res.headers.get('content-security-policy') ?? '';
      assert.match(csp, /default-src 'none'/);
      assert.match(csp, /script-src 'self'(;|$)/);
      assert.match(csp, /require-trusted-types-for 'script'/);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
      const html = await res.text();
      assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script');
      assert.doesNotMatch(html, /<style|\sstyle=/, 'no inline style');
    }
  });

  it('serves its script, style and icon as what they are', async () => {
    for (const [path, type] of [
      ['/dashboard/app.js', /^text\/javascript/],
      ['/dashboard/dashboard.css', /^text\/css/],
      ['/dashboard/icon.svg', /^image\/svg\+xml/],
    ] as const) {
      const res = await fetch(`${url}${path}`);
      assert.equal(res.status, 200, path);
      assert.match(res.headers.get('content-type') ?? '', type);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    }
    const script = await (await fetch(`${url}/dashboard/app.js`)).text();
    assert.doesNotMatch(script, /innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
  });

  it('answers the snapshot as JSON', async () => {
    nodes.items = [node('w1')];
    const res = await fetch(`${url}/v1/dashboard`);
    assert.equal(res.status, 200);
    const view = (await res.json()) as DashboardView;
    assert.deepEqual(
      view.nodes.map((n) => [n.name, n.ready]),
      [['w1', 'True']],
    );
    assert.equal(view.policies, null, 'no policy cache: not watched');
  });
});

describe('dashboard: the event stream', () => {
  it('sends a snapshot at once, then one per burst of changes, and none for an invisible change', async () => {
    nodes.items = [node('w1')];
    const reader = new EventReader(`${url}/v1/dashboard/events`);
    try {
      const res = await reader.response;
      assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
      await waitFor('the first snapshot', () => (reader.snapshots().length === 1 ? true : undefined), {
        timeoutMs: 2000,
        intervalMs: 10,
      });
      assert.equal(dashboard.streamCount, 1);

      // A burst: twenty actions appearing one by one within a few milliseconds.
      for (let i = 1; i <= 20; i++) {
        actions.set(
          Array.from({ length: i }, (_, j) => action({}, { phase: 'Pending' }, { name: `a${String(j)}` })),
        );
      }
      await waitFor(
        'the burst to arrive',
        () => (reader.snapshots().at(-1)?.actions.length === 20 ? true : undefined),
        { timeoutMs: 2000, intervalMs: 10 },
      );
      assert.ok(
        reader.snapshots().length <= 3,
        `${String(reader.snapshots().length)} snapshots for one burst`,
      );
      const ids = reader.events.map((e) => Number(e.id));
      assert.deepEqual(
        ids,
        [...ids].sort((a, b) => a - b),
        'versions only go up',
      );

      // A node heartbeat changes nothing the page shows: nothing is sent.
      const before = reader.snapshots().length;
      nodes.set([node('w1', 'beat')]);
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(reader.snapshots().length, before);

      // A probe changes a check's state without any informer event: the runner says so.
      checks.push({ name: 'ceph', generation: 1, state: state(false, 'HEALTH_WARN'), spec: { nodes: {} } });
      for (const listener of checkListeners) listener('ceph');
      await waitFor(
        'the check to appear',
        () => (reader.snapshots().at(-1)?.checks[0]?.state === 'Unhealthy' ? true : undefined),
        { timeoutMs: 2000, intervalMs: 10 },
      );
      await waitFor('a heartbeat', () => (reader.comments > 0 ? true : undefined), {
        timeoutMs: 2000,
        intervalMs: 10,
      });
    } finally {
      reader.close();
    }
    await waitFor('the stream to be let go', () => (dashboard.streamCount === 0 ? true : undefined), {
      timeoutMs: 2000,
      intervalMs: 10,
    });
  });

  it('refuses streams beyond its limit with 503, and takes new ones once some close', async () => {
    const first = new EventReader(`${url}/v1/dashboard/events`);
    const second = new EventReader(`${url}/v1/dashboard/events`);
    try {
      await Promise.all([first.response, second.response]);
      await waitFor('both streams', () => (dashboard.streamCount === 2 ? true : undefined), {
        timeoutMs: 2000,
        intervalMs: 10,
      });
      const third = await fetch(`${url}/v1/dashboard/events`);
      assert.equal(third.status, 503);
      assert.match(((await third.json()) as { error: string }).error, /already serves 2 live pages/);
      first.close();
      await waitFor('a free place', () => (dashboard.streamCount === 1 ? true : undefined), {
        timeoutMs: 2000,
        intervalMs: 10,
      });
      const fourth = new EventReader(`${url}/v1/dashboard/events`);
      assert.equal((await fourth.response).status, 200);
      fourth.close();
    } finally {
      first.close();
      second.close();
    }
  });
});

describe('dashboard: rollouts in the stream', () => {
  it('pushes a rollout as it changes, and nothing while a running rollout stays as it is', async () => {
    const rollouts = new FakeCache<RolloutObject>();
    const rolloutActions = new FakeCache<ActionObject>();
    const router = new Router();
    const own = dashboardRoutes(
      router,
      {
        checks: runner,
        checkInformer,
        nodes,
        actions: rolloutActions,
        rollouts,
        log: silentLogger(),
      },
      // Rebuilt every 50ms: what changes with time alone would be pushed at once.
      { coalesceMs: 20, refreshMs: 50, heartbeatMs: 60_000 },
    );
    const ownServer = await startServer(router, { host: '127.0.0.1', port: 0, log: silentLogger() });
    const reader = new EventReader(`${serverUrl(ownServer)}/v1/dashboard/events`);
    const rollout = (phase: 'Running' | 'Succeeded'): RolloutObject => ({
      metadata: {
        name: 'roll',
        uid: 'u-roll',
        creationTimestamp: new Date(Date.now() - 60_000).toISOString(),
      },
      spec: { action: 'Reboot', requestedBy: 'alice' },
      status: {
        startTime: new Date(Date.now() - 60_000).toISOString(),
        nodes: [
          { node: 'w1', phase, action: 'roll-w1', actionPhase: phase === 'Running' ? 'Executing' : phase },
        ],
      },
    });
    try {
      await waitFor('the first snapshot', () => (reader.snapshots().length === 1 ? true : undefined), {
        timeoutMs: 2000,
        intervalMs: 10,
      });
      assert.deepEqual(reader.snapshots()[0]?.rollouts, []);
      rolloutActions.set([
        action({}, { phase: 'Executing', phaseTime: new Date().toISOString() }, { name: 'roll-w1' }),
      ]);
      rollouts.set([rollout('Running')]);
      await waitFor(
        'the rollout to arrive',
        () =>
          reader.snapshots().at(-1)?.rollouts?.[0]?.groups[0]?.tiles[0]?.word === 'running: Executing'
            ? true
            : undefined,
        { timeoutMs: 2000, intervalMs: 10 },
      );
      // Running, drawn up to now: yet the snapshot's content does not change with the clock.
      const count = reader.snapshots().length;
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(reader.snapshots().length, count, 'no snapshot for time passing alone');
      rollouts.set([rollout('Succeeded')]);
      await waitFor(
        'the node done',
        () =>
          reader.snapshots().at(-1)?.rollouts?.[0]?.groups[0]?.tiles[0]?.state === 'done' ? true : undefined,
        { timeoutMs: 2000, intervalMs: 10 },
      );
    } finally {
      reader.close();
      ownServer.closeAllConnections();
      await new Promise((resolve) => ownServer.close(resolve));
    }
    await waitFor('the stream to be let go', () => (own.streamCount === 0 ? true : undefined), {
      timeoutMs: 2000,
      intervalMs: 10,
    });
  });
});
