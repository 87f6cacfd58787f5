// RestClient.listPage decodes a list page as it arrives and surfaces every way a page can
// fail: a refusal (with the server's Status), a body that is not a list, a connection cut
// mid-page, and an exception from the item handler. A local server writes the pages in
// small pieces, so items cross chunk boundaries as they do from a real API server.
import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { after, before, it } from 'node:test';
import { ListDecodeError } from '../../src/kube/list-decoder.ts';
import { KubeApiError, type RestClient } from '../../src/kube/rest.ts';
import { localRest } from '../support/local-rest.ts';

let server: Server;
let rest: RestClient;
const requests: string[] = [];

const page = {
  kind: 'ConfigMapList',
  apiVersion: 'v1',
  metadata: { resourceVersion: '77', continue: 'next' },
  items: Array.from({ length: 40 }, (_, i) => ({
    metadata: { name: `cm-${String(i)}` },
    data: { text: `"${'é日😀\\'.repeat(50)}"]},` },
  })),
};

/** Writes `body` in 100-byte pieces, each in its own turn of the event loop. */
async function dribble(res: ServerResponse, body: Buffer, upTo = body.length): Promise<void> {
  for (let i = 0; i < upTo; i += 100) {
    res.write(body.subarray(i, Math.min(i + 100, upTo)));
    await new Promise((r) => setImmediate(r));
  }
}

before(async () => {
  server = createServer((req, res) => {
    requests.push(req.url ?? '');
    const body = Buffer.from(JSON.stringify(page));
    res.setHeader('Content-Type', 'application/json');
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (path === '/page') void dribble(res, body).then(() => res.end());
    else if (path === '/cut') void dribble(res, body, body.length / 2).then(() => res.destroy());
    else if (path === '/malformed') res.end('{"metadata":{},"items":[{"a":1},{"a":}]}');
    else if (path === '/gone')
      res.writeHead(410).end(
        JSON.stringify({
          kind: 'Status',
          status: 'Failure',
          reason: 'Expired',
          code: 410,
          message: 'too old',
        }),
      );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  rest = localRest(server);
});

after(() => server.close());

it('gives every item in order, and the list metadata', async () => {
  const items: unknown[] = [];
  const fields = await rest.listPage('/page', { query: { limit: 40 } }, (item) => items.push(item));
  assert.deepEqual(items, page.items);
  assert.deepEqual(fields, { kind: page.kind, apiVersion: page.apiVersion, metadata: page.metadata });
  assert.ok(requests.includes('/page?limit=40'));
});

it('rejects a page whose connection is cut, once, without sending it again', async () => {
  const before = requests.length;
  const items: unknown[] = [];
  await assert.rejects(rest.listPage('/cut', {}, (item) => items.push(item)));
  assert.ok(
    items.length > 0 && items.length < page.items.length,
    `${String(items.length)} items before the cut`,
  );
  assert.equal(requests.length - before, 1);
});

it('rejects a body that is not a list', async () => {
  await assert.rejects(
    rest.listPage('/malformed', {}, () => undefined),
    (e) => e instanceof ListDecodeError && /an item/.test(e.message),
  );
});

it('rejects a refusal with the server Status, as request() does', async () => {
  await assert.rejects(
    rest.listPage('/gone', {}, () => undefined),
    (e) =>
      e instanceof KubeApiError && e.code === 410 && e.reason === 'Expired' && e.serverMessage === 'too old',
  );
});

it('rejects with what the item handler threw, and stops reading the page', async () => {
  let calls = 0;
  await assert.rejects(
    rest.listPage('/page', {}, () => {
      calls++;
      throw new RangeError('cache full');
    }),
    RangeError,
  );
  assert.equal(calls, 1);
});
