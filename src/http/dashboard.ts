// The dashboard: a read-only page of the checks, policies, actions and nodes, served by
// the controller next to /v1/health, with its data as JSON and as server-sent events.
//
//   GET /, /dashboard                  the page (HTML; its script and style below)
//   GET /dashboard/app.js, /dashboard/dashboard.css, /dashboard/icon.svg
//   GET /v1/dashboard                  the snapshot (the view model of dashboard-view.ts)
//   GET /v1/dashboard/events           a snapshot now and a new one whenever it changes
//
// The health part (checks, policies, nodes) is unauthenticated, like /v1/health
// (docs/decisions.md says why and how to expose it). Actions, with their requesters and
// bypass reasons, are what GET /v1/actions needs list on nodeactions for: a reader gets
// them only with a bearer token allowed that, or when the operator opted in to anonymous
// readers (chart value dashboard.anonymousActions). It shows no Secret or token, never
// writes, never triggers a probe, and every open page of one audience shares one
// snapshot, rebuilt at most every coalesceMs, so viewers cannot load the cluster.
import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import type { ActionObject } from '../api/node-action.ts';
import type { CheckView } from '../checks/runner.ts';
import type { Logger } from '../log.ts';
import { dashboardView, type NodeInput, type PolicyObject } from './dashboard-view.ts';
import type { RolloutObject } from './rollout-view.ts';
import type { Reply, Request, Router } from './router.ts';

/** What the dashboard reads from an informer: its cache, and that something changed. */
export interface WatchedCache<T> {
  list(): T[];
  on(event: 'add' | 'update' | 'delete', listener: () => void): unknown;
}

export interface DashboardSources {
  checks: { views(): CheckView[]; onChange(listener: (name: string) => void): unknown };
  /** Check objects: a check that comes, goes or changes its spec. */
  checkInformer: WatchedCache<unknown>;
  nodes: WatchedCache<NodeInput>;
  actions: WatchedCache<ActionObject>;
  /** Undefined when the controller does not watch ActionPolicies (actions and boots off). */
  policies?: WatchedCache<PolicyObject>;
  /** Undefined when the controller runs no rollouts (actions off). */
  rollouts?: WatchedCache<RolloutObject>;
  instance?: string;
  log: Logger;
  /**
   * Whether the reader of a request may see actions (a token allowed to list
   * nodeactions). Absent: everyone may (the operator opted in to anonymous readers).
   */
  mayReadActions?: (req: Request) => Promise<boolean>;
}

/** Who a snapshot is for: readers who may see actions, and the others. */
type Audience = 'full' | 'health';

export interface DashboardOptions {
  /** Shortest time between two snapshots pushed to the pages (default 250ms). */
  coalesceMs?: number;
  /** Rebuild at least this often, for what changes with time alone: a window opening (default 10s). */
  refreshMs?: number;
  /** Comment lines that keep an idle stream open through proxies (default 15s). */
  heartbeatMs?: number;
  /** Open event streams at most; more get 503 (default 64). */
  maxStreams?: number;
}

// The page may load only what this server serves, and only as what it is: no inline
// script or style, no string-to-DOM sinks (Trusted Types), no framing, no referrer.
export const DASHBOARD_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'",
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'Cross-Origin-Resource-Policy': 'same-origin',
};

function asset(file: string): string {
  return readFileSync(new URL(`./dashboard/${file}`, import.meta.url), 'utf8');
}

// Read once at start: the image's filesystem is read-only and the files never change.
const ASSETS: Record<string, { body: string; contentType: string }> = {
  page: { body: asset('index.html'), contentType: 'text/html; charset=utf-8' },
  'app.js': { body: asset('app.js'), contentType: 'text/javascript; charset=utf-8' },
  'dashboard.css': { body: asset('dashboard.css'), contentType: 'text/css; charset=utf-8' },
  'icon.svg': { body: asset('icon.svg'), contentType: 'image/svg+xml' },
};

interface Stream {
  res: ServerResponse;
  audience: Audience;
  /** The version last written to it. */
  sent: number;
}

interface Snapshot {
  /** The view model (DashboardView) as JSON. */
  json: string;
  /** Increases whenever the content (not just generatedAt) changes. */
  version: number;
}

export class Dashboard {
  private readonly sources: DashboardSources;
  private readonly o: Required<DashboardOptions>;
  private readonly streams = new Set<Stream>();
  private readonly latest = new Map<Audience, Snapshot>();
  /** The latest snapshot's content without its time, to tell a change from a rebuild. */
  private readonly latestKey = new Map<Audience, string>();
  private readonly builtAt = new Map<Audience, number>();
  private lastFlushAt = 0;
  private flushTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;

  constructor(sources: DashboardSources, options: DashboardOptions = {}) {
    this.sources = sources;
    this.o = {
      coalesceMs: 250,
      refreshMs: 10_000,
      heartbeatMs: 15_000,
      maxStreams: 64,
      ...options,
    };
    const changed = () => this.changed();
    // Every probe replaces a check's state (its last-probe time at least): coalesced below.
    sources.checks.onChange(changed);
    const caches = [
      sources.checkInformer,
      sources.nodes,
      sources.actions,
      sources.policies,
      sources.rollouts,
    ];
    for (const cache of caches) {
      cache?.on('add', changed);
      cache?.on('update', changed);
      cache?.on('delete', changed);
    }
  }

  /** Event streams open now. */
  get streamCount(): number {
    return this.streams.size;
  }

  routes(router: Router): void {
    const page = (): Reply => this.asset('page');
    router.on('GET', '/', page);
    router.on('GET', '/dashboard', page);
    for (const file of ['app.js', 'dashboard.css', 'icon.svg']) {
      router.on('GET', `/dashboard/${file}`, () => this.asset(file));
    }
    router.on('GET', '/v1/dashboard', async (req) => {
      const audience = await this.audience(req);
      const snapshot = this.recent(audience);
      // A change this read found first is pushed to the open pages too.
      if ([...this.streams].some((s) => s.audience === audience && s.sent < snapshot.version)) this.changed();
      return {
        status: 200,
        contentType: 'application/json; charset=utf-8',
        body: `${snapshot.json}\n`,
        headers: { ...DASHBOARD_HEADERS },
      };
    });
    router.on('GET', '/v1/dashboard/events', (req, res) => this.open(req, res));
  }

  private asset(name: string): Reply {
    const file = ASSETS[name];
    if (!file) return { status: 404, body: { error: `no such dashboard file: ${name}` } };
    return { status: 200, body: file.body, contentType: file.contentType, headers: { ...DASHBOARD_HEADERS } };
  }

  /** Which snapshot a request gets. A token that is not accepted is answered 401 (thrown). */
  private async audience(req: Request): Promise<Audience> {
    const may = this.sources.mayReadActions;
    return !may || (await may(req)) ? 'full' : 'health';
  }

  /** A snapshot of now: rebuilt from the caches, with a new version only if its content changed. */
  snapshot(audience: Audience = 'full'): Snapshot {
    const views = this.sources.checks.views();
    const view = dashboardView({
      now: new Date(),
      checks: views,
      policies: this.sources.policies?.list(),
      nodes: this.sources.nodes.list(),
      actions: this.sources.actions.list(),
      ...(this.sources.instance ? { instance: this.sources.instance } : {}),
      hideActions: audience === 'health',
      ...(this.sources.rollouts ? { rollouts: this.sources.rollouts.list() } : {}),
    });
    this.builtAt.set(audience, Date.now());
    const key = JSON.stringify({ ...view, generatedAt: '' });
    const json = JSON.stringify(view);
    const latest = this.latest.get(audience);
    const next =
      !latest || key !== this.latestKey.get(audience)
        ? { json, version: (latest?.version ?? 0) + 1 }
        : { ...latest, json };
    this.latest.set(audience, next);
    this.latestKey.set(audience, key);
    return next;
  }

  /**
   * The latest snapshot if it is younger than coalesceMs, else a new one: however many
   * requests arrive, the caches are walked at most that often for them.
   */
  private recent(audience: Audience): Snapshot {
    const latest = this.latest.get(audience);
    if (latest && Date.now() - (this.builtAt.get(audience) ?? 0) < this.o.coalesceMs) return latest;
    return this.snapshot(audience);
  }

  private async open(req: Request, res: ServerResponse): Promise<Reply | undefined> {
    const headers = {
      ...DASHBOARD_HEADERS,
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
      'X-Accel-Buffering': 'no',
    };
    if (req.method === 'HEAD') return { status: 200, contentType: 'text/event-stream', headers };
    if (this.streams.size >= this.o.maxStreams) {
      return {
        status: 503,
        body: {
          error: `the dashboard already serves ${String(this.o.maxStreams)} live pages; close some, or read GET /v1/dashboard`,
        },
        headers: { ...DASHBOARD_HEADERS, 'Retry-After': '10' },
      };
    }
    const audience = await this.audience(req);
    res.writeHead(200, { ...headers, Connection: 'keep-alive' });
    res.write('retry: 2000\n\n');
    const stream: Stream = { res, audience, sent: 0 };
    this.streams.add(stream);
    this.startTimers();
    // A slow reader gets the latest snapshot once it has caught up, not every one between.
    res.on('drain', () => {
      const latest = this.latest.get(audience);
      if (latest && stream.sent < latest.version) this.send(stream, latest);
    });
    res.once('close', () => {
      this.streams.delete(stream);
      if (this.streams.size === 0) this.stopTimers();
    });
    this.send(stream, this.recent(audience));
    // That one may predate a change seen while no page was open: look again shortly.
    this.changed();
    return undefined;
  }

  private send(stream: Stream, snapshot: Snapshot): void {
    const { res } = stream;
    if (res.writableEnded || res.destroyed || res.writableNeedDrain) return;
    stream.sent = snapshot.version;
    res.write(`event: snapshot\nid: ${String(snapshot.version)}\ndata: ${snapshot.json}\n\n`);
  }

  /** Something a snapshot shows may have changed: push one soon, if anyone is watching. */
  private changed(): void {
    if (this.streams.size === 0 || this.flushTimer) return;
    const wait = Math.max(0, this.lastFlushAt + this.o.coalesceMs - Date.now());
    this.flushTimer = setTimeout(() => this.flush(), wait);
    this.flushTimer.unref();
  }

  private flush(): void {
    this.flushTimer = undefined;
    this.lastFlushAt = Date.now();
    if (this.streams.size === 0) return;
    for (const audience of new Set([...this.streams].map((s) => s.audience))) {
      let snapshot: Snapshot;
      try {
        snapshot = this.snapshot(audience);
      } catch (error) {
        // A bug of ours must not take the controller down; the next change tries again.
        this.sources.log.error({ err: String(error) }, 'could not build the dashboard snapshot');
        return;
      }
      for (const stream of this.streams)
        if (stream.audience === audience && stream.sent < snapshot.version) this.send(stream, snapshot);
    }
  }

  private startTimers(): void {
    if (this.pollTimer) return;
    // What changes with time alone (a window opening) shows without any object changing.
    this.pollTimer = setInterval(() => this.changed(), this.o.refreshMs);
    this.pollTimer.unref();
    this.heartbeatTimer = setInterval(() => {
      for (const { res } of this.streams) if (!res.writableNeedDrain) res.write(': keep-alive\n\n');
    }, this.o.heartbeatMs);
    this.heartbeatTimer.unref();
  }

  private stopTimers(): void {
    clearInterval(this.pollTimer);
    clearInterval(this.heartbeatTimer);
    clearTimeout(this.flushTimer);
    this.pollTimer = undefined;
    this.heartbeatTimer = undefined;
    this.flushTimer = undefined;
  }
}

/** Registers the dashboard's routes on the controller's router. */
export function dashboardRoutes(
  router: Router,
  sources: DashboardSources,
  options: DashboardOptions = {},
): Dashboard {
  const dashboard = new Dashboard(sources, options);
  dashboard.routes(router);
  return dashboard;
}
