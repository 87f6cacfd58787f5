// Property-based tests of the HTTP API for what a schema-driven fuzzer cannot send:
// arbitrary bytes in headers (over a raw socket, past any client's validation), bodies
// that are not JSON or not UTF-8, huge bodies declared or chunked, and JSON of every
// shape. Whatever fast-check sends: no 5xx, an answer within seconds, the process
// alive — and no refused request changes anything in the cluster.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { Controller } from '../../src/controller.ts';
import { silentLogger } from '../../src/log.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  rest,
  serviceAccountToken,
  testKubeConfig,
  uniqueName,
} from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('api-props');
const namespace = uniqueName('api-props');
const bindings: string[] = [];
const tokens = { requester: '', nobody: '' };
let controller: Controller;
let port = 0;

before(async () => {
  await installGatehouseAPI(kc);
  await client.request('/api/v1/namespaces', {
    method: 'POST',
    body: { metadata: { name: namespace, labels: { 'gatehouse.dev/test': 'true' } } },
  });
  tokens.requester = await serviceAccountToken(kc, namespace, 'requester');
  tokens.nobody = await serviceAccountToken(kc, namespace, 'nobody');
  bindings.push(
    await bindClusterRole(undefined, kc, 'gatehouse:requester', { namespace, name: 'requester' }),
  );
  controller = await Controller.start({
    kubeConfig: await controllerKubeConfig(kc),
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
    instance,
    checkSelector: `${INSTANCE_LABEL}=${instance}`,
    // Only the HTTP API is under test: no reconciler.
    actions: false,
    api: {
      limits: {
        requests: { perSecond: 1000, burst: 2000 },
        authenticationFailures: { perSecond: 1000, burst: 5000 },
      },
    },
  });
  await controller.waitForSync();
  port = Number(new URL(controller.url).port);
});

after(async () => {
  await stopAll(controller);
  for (const name of bindings) {
    await client
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
  }
  await client.request(`/api/v1/namespaces/${namespace}`, { method: 'DELETE' }).catch(() => undefined);
});

/** Every NodeAction of this instance, by name and version: what a refused request must leave alone. */
async function state(): Promise<string[]> {
  const list = await client.request<{ items: { metadata: { name: string; resourceVersion: string } }[] }>(
    '/apis/talos.dev/v1alpha1/nodeactions',
    { query: { labelSelector: `${INSTANCE_LABEL}=${instance}` } },
  );
  return list.items.map((a) => `${a.metadata.name}@${a.metadata.resourceVersion}`).sort();
}

interface RawAnswer {
  status: number;
  head: string;
  ms: number;
}

/** One request written byte for byte to a socket; the status line of the answer. */
function rawRequest(bytes: Buffer, timeoutMs = 10_000): Promise<RawAnswer> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let received = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(
        new Error(
          `no answer within ${String(timeoutMs)}ms to ${JSON.stringify(bytes.subarray(0, 200).toString('latin1'))}`,
        ),
      );
    }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      const head = received.toString('latin1').split('\r\n')[0] ?? '';
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      resolve({ status, head, ms: Date.now() - started });
      socket.destroy();
    };
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      // The status line is all we judge; a streamed answer would not end by itself.
      if (received.includes('\r\n\r\n')) finish();
    });
    socket.on('end', finish);
    socket.on('error', (error: NodeJS.ErrnoException) => {
      // The server may answer and close before a large body is all written.
      if (error.code === 'EPIPE' || error.code === 'ECONNRESET') {
        if (received.length > 0) finish();
        return;
      }
      clearTimeout(timer);
      reject(error);
    });
    socket.write(bytes);
  });
}

function httpBytes(method: string, path: string, headers: [string, string][], body: Buffer): Buffer {
  const lines = [
    `${method} ${path} HTTP/1.1`,
    'Host: 127.0.0.1',
    ...headers.map(([k, v]) => `${k}: ${v}`),
    `Content-Length: ${String(body.length)}`,
    'Connection: close',
    '',
    '',
  ];
  return Buffer.concat([Buffer.from(lines.join('\r\n'), 'latin1'), body]);
}

/** Latin-1 text without CR and LF (which would end the header and desynchronise the stream). */
const headerText = (maxLength: number) =>
  fc
    .array(
      fc.integer({ min: 0, max: 255 }).filter((c) => c !== 10 && c !== 13),
      { maxLength },
    )
    .map((codes) => String.fromCharCode(...codes));

const validSpec = fc.record({
  nodeName: fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/),
  action: fc.constantFrom('Reboot', 'Shutdown', 'Reset'),
});

const NUM_RUNS = Number(process.env.GATEHOUSE_PROPERTY_RUNS ?? '1');

describe('properties of the HTTP API', () => {
  it('answers any method, path and header bytes without a 5xx, in time', async () => {
    const before = await state();
    const paths = fc.oneof(
      fc.constantFrom(
        '/v1/actions',
        '/v1/policies',
        '/v1/health',
        '/openapi.json',
        '/healthz',
        '/readyz',
        '/metrics',
      ),
      fc
        .tuple(
          fc.constantFrom('/v1/actions/', '/v1/health/', '/v1/checks/'),
          fc.stringMatching(/^[A-Za-z0-9%._~!$&'()*+,;=:@-]{0,40}$/),
          fc.constantFrom(
            '',
            '/events',
            '/cancel',
            '/executed',
            '/evaluate',
            '/x/y',
            '?wait=1s',
            '?wait=%zz&phase=x',
          ),
        )
        .map(([a, b, c]) => `${a}${b}${c}`),
      fc.stringMatching(/^\/[\x21-\x7e]{0,60}$/),
    );
    const authorization = fc.oneof(
      fc.constant(undefined),
      fc.constant(`Bearer ${tokens.requester}`),
      fc.constant(`Bearer ${tokens.nobody}`),
      headerText(64).map((t) => `Bearer ${t}`),
      headerText(64),
      fc.integer({ min: 8000, max: 20_000 }).map((n) => `Bearer ${'a'.repeat(n)}`),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS', 'TRACE', 'BREW'),
        paths,
        authorization,
        fc.option(headerText(80)),
        fc.option(headerText(300)),
        fc.array(fc.tuple(fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,20}$/), headerText(100)), {
          maxLength: 6,
        }),
        fc.uint8Array({ maxLength: 512 }),
        async (method, path, auth, contentType, idempotencyKey, extra, body) => {
          const headers: [string, string][] = [
            ...(auth !== undefined ? [['Authorization', auth] as [string, string]] : []),
            ...(contentType !== null ? [['Content-Type', contentType] as [string, string]] : []),
            ...(idempotencyKey !== null ? [['Idempotency-Key', idempotencyKey] as [string, string]] : []),
            ...extra.filter(([k]) => !/^(content-length|transfer-encoding|host|connection)$/i.test(k)),
          ];
          const answer = await rawRequest(httpBytes(method, path, headers, Buffer.from(body)));
          assert.ok(answer.status >= 200 && answer.status < 500, `${method} ${path}: ${answer.head}`);
        },
      ),
      { numRuns: 1000 * NUM_RUNS },
    );
    assert.equal((await fetch(`${controller.url}/healthz`)).status, 200);
    assert.deepEqual(await state(), before);
  });

  it('refuses bodies that are not JSON, or not UTF-8, with 400 or 415, changing nothing', async () => {
    const before = await state();
    const notRequests = fc.oneof(
      fc.uint8Array({ minLength: 1, maxLength: 4096 }),
      fc.string({ maxLength: 2000 }).map((s) => new TextEncoder().encode(s)),
      fc
        .constantFrom('{', '{"spec":', 'null', '[]', '"x"', '{"spec": NaN}', '\u0000', '{"spec":{}}}')
        .map((s) => new TextEncoder().encode(s)),
    );
    await fc.assert(
      fc.asyncProperty(
        notRequests,
        fc.constantFrom(
          'application/json',
          'application/json; charset=latin1',
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/merge-patch+json',
        ),
        async (bytes, contentType) => {
          const answer = await rawRequest(
            httpBytes(
              'POST',
              '/v1/actions',
              [
                ['Authorization', `Bearer ${tokens.requester}`],
                ['Content-Type', contentType],
              ],
              Buffer.from(bytes),
            ),
          );
          assert.ok(
            [400, 415, 422].includes(answer.status),
            `${String(answer.status)} for ${JSON.stringify(Buffer.from(bytes).subarray(0, 80).toString('latin1'))}`,
          );
        },
      ),
      { numRuns: 500 * NUM_RUNS },
    );
    assert.deepEqual(await state(), before);
  });

  it('refuses huge bodies with 413 at once, declared or chunked, changing nothing', async () => {
    const before = await state();
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 64 * 1024 + 1, max: 8 * 1024 * 1024 }),
        fc.boolean(),
        fc.constantFrom(0x20, 0x7b, 0x61, 0xff),
        async (size, chunked, fill) => {
          const head = [
            'POST /v1/actions HTTP/1.1',
            'Host: 127.0.0.1',
            `Authorization: Bearer ${tokens.requester}`,
            'Content-Type: application/json',
            chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${String(size)}`,
            'Connection: close',
            '',
            '',
          ].join('\r\n');
          const body = Buffer.alloc(size, fill);
          const framed = chunked
            ? Buffer.concat(
                Array.from({ length: Math.ceil(size / 65_536) }, (_, i) => {
                  const part = body.subarray(i * 65_536, (i + 1) * 65_536);
                  return Buffer.concat([
                    Buffer.from(`${part.length.toString(16)}\r\n`),
                    part,
                    Buffer.from('\r\n'),
                  ]);
                }).concat([Buffer.from('0\r\n\r\n')]),
              )
            : body;
          const answer = await rawRequest(Buffer.concat([Buffer.from(head, 'latin1'), framed]));
          assert.equal(answer.status, 413, answer.head);
          assert.ok(answer.ms < 5000, `took ${String(answer.ms)}ms`);
        },
      ),
      { numRuns: 40 * NUM_RUNS },
    );
    assert.deepEqual(await state(), before);
  });

  it('refuses JSON that is not a valid request with 4xx, naming fields, and creates nothing', async () => {
    const before = await state();
    const invalid = fc.oneof(
      fc.jsonValue(),
      fc.record({ spec: fc.jsonValue() }),
      // A valid request with one thing wrong: an unknown field somewhere, requestedBy,
      // a wrong type, or a field removed.
      fc
        .tuple(validSpec, fc.string({ minLength: 1, maxLength: 20 }), fc.jsonValue())
        .map(([spec, key, value]) => ({ spec: { ...spec, [`unknown-${key}`]: value } })),
      fc.tuple(validSpec, fc.jsonValue()).map(([spec, value]) => ({ spec: { ...spec, requestedBy: value } })),
      fc
        .tuple(
          validSpec,
          fc.constantFrom('nodeName', 'action', 'execution', 'reboot', 'bypass', 'deadlines'),
          fc.jsonValue(),
        )
        .filter(
          ([, , value]) =>
            typeof value !== 'string' &&
            (typeof value !== 'object' || value === null || Array.isArray(value)),
        )
        .map(([spec, key, value]) => ({ spec: { ...spec, [key]: value } })),
      fc.tuple(validSpec, fc.constantFrom('nodeName', 'action')).map(([spec, drop]) => ({
        spec: Object.fromEntries(Object.entries(spec).filter(([k]) => k !== drop)),
      })),
    );
    // As JSON text: some of these nest deeper than any printer (fast-check's own, in a
    // report) would follow.
    const hostile = fc.oneof(
      invalid.map((value) => JSON.stringify(value)),
      fc
        .tuple(fc.integer({ min: 1, max: 30_000 }), fc.constantFrom('[', '{"spec":'))
        .map(([depth, open]) => `${open.repeat(depth)}${(open === '[' ? ']' : '}').repeat(depth)}`),
      fc.constant(
        '{"__proto__": {"polluted": true}, "spec": {"nodeName": "n", "action": "Reboot", "constructor": {}}}',
      ),
    );
    await fc.assert(
      fc.asyncProperty(hostile, async (text) => {
        const answer = await rawRequest(
          httpBytes(
            'POST',
            '/v1/actions',
            [
              ['Authorization', `Bearer ${tokens.requester}`],
              ['Content-Type', 'application/json'],
            ],
            Buffer.from(text),
          ),
        );
        assert.ok(
          [400, 413, 422].includes(answer.status),
          `${String(answer.status)} for ${text.slice(0, 200)}`,
        );
      }),
      { numRuns: 1000 * NUM_RUNS },
    );
    assert.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype pollution');
    assert.deepEqual(await state(), before);
  });

  it('refuses valid requests from callers who may not make them (401, 403), creating nothing', async () => {
    const before = await state();
    await fc.assert(
      fc.asyncProperty(
        validSpec,
        fc.oneof(
          fc.constant({ auth: undefined, status: 401 }),
          fc.stringMatching(/^[A-Za-z0-9._-]{1,300}$/).map((t) => ({ auth: `Bearer ${t}`, status: 401 })),
          fc.constant({ auth: `Bearer ${tokens.nobody}`, status: 403 }),
          // Allowed to request, not to bypass.
          fc.constant({ auth: `Bearer ${tokens.requester}`, status: 403, bypass: true }),
        ),
        async (spec, who) => {
          const body =
            'bypass' in who ? { spec: { ...spec, bypass: { hooks: true, reason: 'fuzz' } } } : { spec };
          const answer = await rawRequest(
            httpBytes(
              'POST',
              '/v1/actions',
              [
                ...(who.auth ? [['Authorization', who.auth] as [string, string]] : []),
                ['Content-Type', 'application/json'],
              ],
              Buffer.from(JSON.stringify(body)),
            ),
          );
          assert.equal(answer.status, who.status, answer.head);
        },
      ),
      { numRuns: 300 * NUM_RUNS },
    );
    assert.deepEqual(await state(), before);
    const metrics = await (await fetch(`${controller.url}/metrics`)).text();
    assert.doesNotMatch(metrics, /gatehouse_http_api_requests_total\{[^}]*code="5\d\d"\}/);
  });
});
