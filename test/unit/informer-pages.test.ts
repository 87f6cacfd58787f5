// An informer's list asks for the next page as soon as the page being read names it (its
// metadata comes before its items), never holds more than two pages open, keeps the items
// in the server's order, and fails whole — then lists again — when any page fails.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { it } from 'node:test';
import { Informer, type KubeObject } from '../../src/kube/informer.ts';
import { silentLogger } from '../../src/log.ts';
import { waitFor } from '../../src/wait.ts';
import { localRest } from '../support/local-rest.ts';

const node = (name: string) => ({ metadata: { name, resourceVersion: '7' } });

/**
 * Pages of two Nodes: p0 (first), p1, p2 (last). Each page sends its metadata and first
 * item, then holds its second item until the next page is asked for (the last: at once),
 * or for `holdMs` at most — an informer that waits for a page's end before asking for the
 * next is served all the same, late. `fail` names pages answered 500 once.
 */
function pagedServer(fail: Set<string> = new Set(), holdMs = 2000) {
  const pages: Record<string, { names: [string, string]; next?: string }> = {
    p0: { names: ['a', 'b'], next: 'p1' },
    p1: { names: ['c', 'd'], next: 'p2' },
    p2: { names: ['e', 'f'] },
  };
  const asked: string[] = [];
  const waiting = new Map<string, () => void>();
  let open = 0;
  let mostOpen = 0;
  /** Pages asked for while the page before them was still being sent. */
  const readAhead: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.searchParams.get('watch') === 'true') {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      return; // a watch that stays open and quiet
    }
    const id = url.searchParams.get('continue') ?? 'p0';
    asked.push(id);
    // The page before this one, still held open: let it end, once this one is open too.
    const release = waiting.get(id);
    if (release) readAhead.push(id);
    if (fail.delete(id)) {
      release?.();
      res.writeHead(500, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', code: 500, message: `page ${id} failed` }));
      return;
    }
    const page = pages[id];
    if (!page) {
      res.writeHead(410).end();
      return;
    }
    open++;
    mostOpen = Math.max(mostOpen, open);
    release?.();
    res.writeHead(200, { 'Content-Type': 'application/json' });
    const metadata = { resourceVersion: '7', ...(page.next ? { continue: page.next } : {}) };
    res.write(`{"kind":"NodeList","apiVersion":"v1","metadata":${JSON.stringify(metadata)},"items":[`);
    res.write(JSON.stringify(node(page.names[0])));
    const finish = () => {
      waiting.delete(page.next ?? '');
      clearTimeout(timer);
      res.end(`,${JSON.stringify(node(page.names[1]))}]}`);
      open--;
    };
    const timer = setTimeout(finish, page.next ? holdMs : 0);
    if (page.next) waiting.set(page.next, finish);
  });
  return { server, asked, readAhead, mostOpen: () => mostOpen };
}

async function listed(fail?: Set<string>) {
  const paged = pagedServer(fail);
  await new Promise<void>((resolve) => paged.server.listen(0, '127.0.0.1', resolve));
  const informer = new Informer<KubeObject>({
    rest: localRest(paged.server),
    path: '/api/v1/nodes',
    log: silentLogger(),
    pageSize: 2,
    minBackoffMs: 1,
  });
  const added: string[] = [];
  informer.on('add', (o) => added.push(o.metadata.name));
  informer.start();
  try {
    await waitFor('the list to sync', () => (informer.synced ? true : undefined), { timeoutMs: 10_000 });
  } finally {
    await informer.stop();
    paged.server.closeAllConnections();
    await new Promise((resolve) => paged.server.close(resolve));
  }
  return { ...paged, added, listed: informer.list().map((o) => o.metadata.name) };
}

it('asks for the next page while the one before it is still read, two at most, in order', async () => {
  const { asked, readAhead, mostOpen, added } = await listed();
  assert.deepEqual(asked, ['p0', 'p1', 'p2']);
  assert.deepEqual(readAhead, ['p1', 'p2'], 'each next page asked for before the one before it ended');
  assert.equal(mostOpen(), 2);
  assert.deepEqual(added, ['a', 'b', 'c', 'd', 'e', 'f']);
});

it('fails the whole list when a page read ahead fails, and lists again from the start', async () => {
  const { asked, added, listed: names } = await listed(new Set(['p1']));
  assert.deepEqual(asked.slice(0, 2), ['p0', 'p1']);
  assert.deepEqual(asked.slice(2), ['p0', 'p1', 'p2'], 'the list started over');
  assert.deepEqual(added, ['a', 'b', 'c', 'd', 'e', 'f'], 'nothing of the failed list was cached');
  assert.deepEqual(names, ['a', 'b', 'c', 'd', 'e', 'f']);
});
