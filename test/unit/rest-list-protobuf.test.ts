// Lists asked for in protobuf: RestClient.listPage reads the page by the encoding the server
// answered in (protobuf, or JSON all the same), and a refusal's Status in either; the
// informer, on a field its tables lack, warns once and lists in JSON from then on.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, it } from 'node:test';
import { Informer, type KubeObject } from '../../src/kube/informer.ts';
import { NODE_LIST } from '../../src/kube/node-protobuf.ts';
import { ProtobufUnknownFieldError } from '../../src/kube/protobuf.ts';
import { KubeApiError, type RestClient, type ListPageOptions, type WatchEvent } from '../../src/kube/rest.ts';
import { localRest } from '../support/local-rest.ts';
import { silentLogger, type Logger } from '../../src/log.ts';
import { Writer, encodeNodeList } from './node-protobuf-fixtures.ts';

const PROTOBUF = 'application/vnd.kubernetes.protobuf';
const node = (name: string) => ({
  metadata: { name, resourceVersion: '3' },
  spec: {},
  status: {
    daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
    nodeInfo: Object.fromEntries(
      ['machineID', 'systemUUID', 'bootID', 'kernelVersion', 'osImage', 'containerRuntimeVersion']
        .concat(['kubeletVersion', 'kubeProxyVersion', 'operatingSystem', 'architecture'])
        .map((k) => [k, '']),
    ),
  },
});

let server: Server;
let rest: RestClient;
const accepted: string[] = [];

before(async () => {
  server = createServer((req, res) => {
    accepted.push(req.headers.accept ?? '');
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (path === '/protobuf') {
      const body = encodeNodeList([node('a'), node('b')], { resourceVersion: '9' });
      res.setHeader('Content-Type', PROTOBUF);
      // In small pieces, as a real API server's arrive.
      for (let i = 0; i < body.length; i += 7) res.write(body.subarray(i, i + 7));
      res.end();
    } else if (path === '/json') {
      res.setHeader('Content-Type', 'application/json');
      res.end(
        JSON.stringify({
          kind: 'NodeList',
          apiVersion: 'v1',
          metadata: { resourceVersion: '9' },
          items: [node('a')],
        }),
      );
    } else if (path === '/gone') {
      const status = new Writer()
        .message(1, () => undefined)
        .string(2, 'Failure')
        .string(3, 'too old')
        .string(4, 'Expired')
        .int(6, 410);
      res.writeHead(410, { 'Content-Type': PROTOBUF });
      res.end(
        Buffer.concat([
          Buffer.from('k8s\0', 'latin1'),
          new Writer()
            .message(1, (t) => t.string(1, 'v1').string(2, 'Status'))
            .raw(2, status.bytes)
            .buffer(),
        ]),
      );
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  rest = localRest(server);
});

after(() => server.close());

async function list(path: string, options: ListPageOptions) {
  const items: unknown[] = [];
  const encodings: string[] = [];
  const fields = await rest.listPage(path, {}, (item) => items.push(item), {
    ...options,
    onEncoding: (e) => encodings.push(e),
  });
  return { items, fields, encodings, accept: accepted.at(-1) };
}

it('asks for protobuf and reads a protobuf answer into the JSON objects', async () => {
  const got = await list('/protobuf', { protobuf: NODE_LIST });
  assert.equal(got.accept, `${PROTOBUF}, application/json`);
  assert.deepEqual(got.encodings, ['protobuf']);
  assert.deepEqual(got.items, [node('a'), node('b')]);
  assert.deepEqual(got.fields, { kind: 'NodeList', apiVersion: 'v1', metadata: { resourceVersion: '9' } });
});

it('reads a JSON answer to a request for protobuf as JSON', async () => {
  const got = await list('/json', { protobuf: NODE_LIST });
  assert.deepEqual(got.encodings, ['json']);
  assert.deepEqual(got.items, [node('a')]);
});

it('asks for JSON alone without `protobuf`', async () => {
  const got = await list('/json', {});
  assert.equal(got.accept, 'application/json');
});

it('rejects with the Status of a refusal sent in protobuf', async () => {
  await assert.rejects(list('/gone', { protobuf: NODE_LIST }), (error: unknown) => {
    assert.ok(error instanceof KubeApiError);
    assert.equal(error.code, 410);
    assert.equal(error.reason, 'Expired');
    assert.equal(error.serverMessage, 'too old');
    return true;
  });
});

it('lists in JSON from the first unknown field on, warning once', async () => {
  const asked: boolean[] = [];
  const warnings: unknown[] = [];
  let lists = 0;
  const fake = {
    listPage: (
      _path: string,
      _req: unknown,
      onItem: (o: unknown) => void,
      options: ListPageOptions,
    ): Promise<unknown> => {
      asked.push(options.protobuf !== undefined);
      lists++;
      if (options.protobuf) {
        options.onEncoding?.('protobuf');
        onItem(node('half-read'));
        return Promise.reject(new ProtobufUnknownFieldError('NodeStatus', 15));
      }
      onItem(node('a'));
      return Promise.resolve({ metadata: { resourceVersion: String(lists) } });
    },
    watch: (
      _p: string,
      _q: unknown,
      onEvent: (e: WatchEvent) => void,
      signal?: AbortSignal,
    ): Promise<void> => {
      // The first watch expires (410 Gone): the informer relists, still in JSON.
      if (asked.length < 3) onEvent({ type: 'ERROR', object: { code: 410, message: 'Gone' } });
      return new Promise((_, reject) =>
        signal?.addEventListener('abort', () => reject(signal.reason as Error)),
      );
    },
  } as unknown as RestClient;
  const log = { ...silentLogger(), warn: (...args: unknown[]) => warnings.push(args) } as unknown as Logger;
  const informer = new Informer<KubeObject>({
    rest: fake,
    path: '/api/v1/nodes',
    log,
    protobuf: NODE_LIST,
    minBackoffMs: 1,
  });
  informer.start();
  const deadline = Date.now() + 5000;
  while (asked.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  await informer.stop();
  assert.deepEqual(asked, [true, false, false]);
  assert.deepEqual(
    informer.list().map((n) => n.metadata.name),
    ['a'],
    'the half-read protobuf list is dropped',
  );
  assert.equal(warnings.length, 1);
  assert.deepEqual((warnings[0] as [Record<string, unknown>])[0], {
    path: '/api/v1/nodes',
    messageType: 'NodeStatus',
    field: 15,
  });
  assert.equal(informer.stats.protobufPages, 1);
});
