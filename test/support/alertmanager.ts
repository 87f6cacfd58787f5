// A small server speaking the part of Alertmanager's v2 API that gatehouse uses: list
// silences with a matcher filter, create or update one, expire one. It can be stopped
// and started again on the same port, to play an Alertmanager that goes away.
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { marker, type Silence } from '../../src/silences/client.ts';

export interface AlertmanagerRequest {
  method: string;
  path: string;
  /** The ID a POST updates (absent: it creates one). */
  id?: string;
}

export class FakeAlertmanager {
  readonly silences = new Map<string, Silence>();
  readonly requests: AlertmanagerRequest[] = [];
  private server: Server | undefined;
  private port = 0;

  get url(): string {
    return `http://127.0.0.1:${String(this.port)}`;
  }

  /** Listens on a free port, or on the one it had before it was stopped. */
  async start(): Promise<void> {
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => this.handle(req.method ?? 'GET', req.url ?? '/', body, res));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  /** Stops answering: connections are refused until it starts again. */
  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await closed;
  }

  /** The silences gatehouse holds for an action, found as gatehouse finds them: by the UID in the comment. */
  forAction(uid: string): Silence[] {
    return [...this.silences.values()].filter((s) => s.comment.includes(marker(uid)));
  }

  private handle(
    method: string,
    path: string,
    body: string,
    res: {
      writeHead: (status: number, headers: Record<string, string>) => unknown;
      end: (text: string) => unknown;
    },
  ): void {
    const url = new URL(path, 'http://x');
    const send = (status: number, value: unknown) => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    const request: AlertmanagerRequest = { method, path: url.pathname };
    this.requests.push(request);
    if (method === 'GET' && url.pathname === '/api/v2/silences') {
      const filter = /^(\w+)="(.*)"$/.exec(url.searchParams.get('filter') ?? '');
      const list = [...this.silences.values()].filter(
        (s) => !filter || s.matchers.some((m) => m.name === filter[1] && m.value === filter[2] && m.isEqual),
      );
      send(200, list);
    } else if (method === 'POST' && url.pathname === '/api/v2/silences') {
      let s: Omit<Silence, 'id' | 'status'> & { id?: string };
      try {
        s = JSON.parse(body) as typeof s;
      } catch {
        send(400, 'body is not JSON');
        return;
      }
      if (s.id) request.id = s.id;
      if (!s.matchers.length || !s.createdBy || !s.comment) {
        send(400, 'missing matchers, createdBy or comment');
        return;
      }
      if (s.id && !this.silences.has(s.id)) {
        send(404, `silence ${s.id} not found`);
        return;
      }
      const id = s.id ?? randomUUID();
      this.silences.set(id, { ...s, id, status: { state: 'active' } });
      send(200, { silenceID: id });
    } else if (method === 'DELETE' && url.pathname.startsWith('/api/v2/silence/')) {
      const s = this.silences.get(decodeURIComponent(url.pathname.slice('/api/v2/silence/'.length)));
      if (!s) {
        send(404, 'not found');
        return;
      }
      s.status = { state: 'expired' };
      s.endsAt = new Date().toISOString();
      send(200, {});
    } else send(404, 'no such route');
  }
}
