// The pieces of the /v1 HTTP API that need no cluster: rate limits, bearer parsing and
// the caches of TokenReview and SubjectAccessReview answers, request validation and its
// messages, action names, and the OpenAPI document's consistency with the schemas.
import assert from 'node:assert/strict';
import { ACTIONS } from '../../src/api/common.ts';
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { NodeActionSpec } from '../../src/api/node-action.ts';
import { ApiError } from '../../src/http/api-error.ts';
import { readJson } from '../../src/http/body.ts';
import { executedRefusal, performanceObserved } from '../../src/http/actions/executed.ts';
import { actionNamePrefix, isActionName } from '../../src/http/actions/names.ts';
import { canonicalJson } from '../../src/canonical-json.ts';
import { Authenticator, Authorizer, bearerToken } from '../../src/http/auth.ts';
import { openApiDocument } from '../../src/http/openapi.ts';
import { ConcurrencyLimiter, RateLimiter } from '../../src/http/rate-limit.ts';
import { actionRequestSchema } from '../../src/http/schemas.ts';
import { fieldPath, validator } from '../../src/http/validation.ts';
import { KubeApiError, type RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';

describe('RateLimiter', () => {
  it('allows a burst, then one request per refill, and says when to come back', () => {
    let now = 0;
    const limiter = new RateLimiter({ perSecond: 2, burst: 3 }, { now: () => now });
    assert.deepEqual(
      [1, 2, 3].map(() => limiter.take('a').ok),
      [true, true, true],
    );
    assert.deepEqual(limiter.take('a'), { ok: false, retryAfterSeconds: 1 });
    assert.equal(limiter.take('b').ok, true, 'callers have buckets of their own');
    now += 500;
    assert.equal(limiter.take('a').ok, true);
    assert.equal(limiter.take('a').ok, false);
  });

  it('rounds Retry-After up to whole seconds for slow refills', () => {
    let now = 0;
    const limiter = new RateLimiter({ perSecond: 0.25, burst: 1 }, { now: () => now });
    assert.equal(limiter.take('a').ok, true);
    assert.deepEqual(limiter.take('a'), { ok: false, retryAfterSeconds: 4 });
    now += 3000;
    assert.deepEqual(limiter.peek('a'), { ok: false, retryAfterSeconds: 1 });
    now += 1000;
    assert.deepEqual(limiter.peek('a'), { ok: true });
  });

  it('keeps at most maxKeys buckets, forgetting the least recently seen', () => {
    const limiter = new RateLimiter({ perSecond: 1, burst: 1 }, { maxKeys: 3, now: () => 0 });
    for (const key of ['a', 'b', 'c']) limiter.take(key);
    limiter.take('a');
    limiter.take('d');
    assert.equal(limiter.size, 3);
    assert.equal(limiter.take('b').ok, true, 'b was forgotten, so it starts full');
    assert.equal(limiter.take('a').ok, false, 'a was kept (seen recently), still empty');
  });

  it('refuses nonsense limits', () => {
    assert.throws(() => new RateLimiter({ perSecond: 0, burst: 1 }));
    assert.throws(() => new RateLimiter({ perSecond: 1, burst: 0 }));
  });
});

describe('ConcurrencyLimiter', () => {
  it('holds at most max per key, and a release is counted once', () => {
    const limiter = new ConcurrencyLimiter(2);
    const one = limiter.acquire('a');
    const two = limiter.acquire('a');
    assert.ok(one && two);
    assert.equal(limiter.acquire('a'), undefined);
    assert.ok(limiter.acquire('b'));
    one();
    one();
    assert.equal(limiter.count('a'), 1);
    assert.ok(limiter.acquire('a'));
  });
});

describe('bearer tokens', () => {
  it('takes the token of "Bearer <token>", any case of the scheme', () => {
    assert.equal(bearerToken('Bearer abc.DEF-_~+/='), 'abc.DEF-_~+/=');
    assert.equal(bearerToken('bearer  xyz '), 'xyz');
  });

  it('refuses with 401 and a challenge what is not one', () => {
    for (const header of [undefined, '', 'Basic dXNlcjpwYXNz', 'Bearer', 'Bearer a b', 'Bearer tok\u00e9n']) {
      assert.throws(
        () => bearerToken(header),
        (e: unknown) =>
          e instanceof ApiError &&
          e.status === 401 &&
          (e.headers['WWW-Authenticate'] ?? '').startsWith('Bearer'),
        String(header),
      );
    }
    assert.throws(() => bearerToken(`Bearer ${'a'.repeat(9000)}`), /longer than/);
  });
});

/** A RestClient that answers TokenReviews and SubjectAccessReviews from scripts, counting them. */
function fakeApi(answer: (path: string, body: Record<string, unknown>) => unknown) {
  const calls: string[] = [];
  const rest = {
    request: (path: string, req: { body?: unknown } = {}) => {
      calls.push(path);
      try {
        return Promise.resolve(answer(path, req.body as Record<string, unknown>));
      } catch (error) {
        return Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
    },
  } as unknown as RestClient;
  return { rest, calls };
}

describe('Authenticator', () => {
  it('asks the API server once per token while the answer is fresh, and never keeps the token', async () => {
    let now = 0;
    const { rest, calls } = fakeApi((_, body) => {
      const token = (body.spec as { token: string }).token;
      return token === 'good'
        ? { status: { authenticated: true, user: { username: 'alice', groups: ['devs'], uid: 'u' } } }
        : { status: { authenticated: false, error: 'token expired' } };
    });
    const auth = new Authenticator({ rest, log: silentLogger(), now: () => now });
    const [a, b] = await Promise.all([auth.authenticate('Bearer good'), auth.authenticate('Bearer good')]);
    assert.deepEqual(a, { username: 'alice', groups: ['devs'], uid: 'u' });
    assert.deepEqual(b, a);
    assert.equal(calls.length, 1, 'concurrent requests share one review');
    now += 9_000;
    await auth.authenticate('Bearer good');
    assert.equal(calls.length, 1);
    now += 2_000;
    await auth.authenticate('Bearer good');
    assert.equal(calls.length, 2, 'an accepted token is reviewed again after 10s');

    await assert.rejects(auth.authenticate('Bearer bad'), (e: unknown) => {
      assert.ok(e instanceof ApiError);
      assert.equal(e.status, 401);
      assert.match(e.message, /did not accept the bearer token: token expired/);
      return true;
    });
    await assert.rejects(auth.authenticate('Bearer bad'));
    assert.equal(calls.length, 3, 'a refusal is remembered briefly');
    now += 2_500;
    await assert.rejects(auth.authenticate('Bearer bad'));
    assert.equal(calls.length, 4);
  });

  it('answers 503, not 401, when the API server cannot be asked', async () => {
    const { rest } = fakeApi(() => {
      throw new KubeApiError('POST', '/x', 500, { message: 'etcd down' });
    });
    const auth = new Authenticator({ rest, log: silentLogger() });
    await assert.rejects(
      auth.authenticate('Bearer x'),
      (e: unknown) => e instanceof ApiError && e.status === 503,
    );
  });
});

describe('Authorizer', () => {
  it('asks as the caller, caches allowed for 10s and denied for 2s, and names the role in a 403', async () => {
    let now = 0;
    let allowed = false;
    const specs: unknown[] = [];
    const { rest, calls } = fakeApi((_, body) => {
      specs.push(body.spec);
      return { status: { allowed, reason: allowed ? 'RBAC: allowed' : '' } };
    });
    const authz = new Authorizer({ rest, log: silentLogger(), now: () => now });
    const caller = { username: 'alice', groups: ['devs'], extra: { scopes: ['x'] } };
    await assert.rejects(
      authz.require(caller, { verb: 'bypass', resource: 'nodeactions' }, 'gatehouse:bypass'),
      (e: unknown) =>
        e instanceof ApiError &&
        e.status === 403 &&
        e.message ===
          'alice may not bypass nodeactions.talos.dev; ask an administrator for the ClusterRole gatehouse:bypass',
    );
    assert.deepEqual(specs[0], {
      user: 'alice',
      groups: ['devs'],
      extra: { scopes: ['x'] },
      resourceAttributes: { group: 'talos.dev', verb: 'bypass', resource: 'nodeactions' },
    });
    allowed = true;
    await assert.rejects(authz.require(caller, { verb: 'bypass', resource: 'nodeactions' }, 'r'));
    now += 2_001;
    await authz.require(caller, { verb: 'bypass', resource: 'nodeactions' }, 'r');
    allowed = false;
    now += 9_000;
    await authz.require(caller, { verb: 'bypass', resource: 'nodeactions' }, 'r');
    assert.equal(calls.length, 2);
    await authz
      .require(caller, { verb: 'get', resource: 'nodeactions', name: 'x' }, 'r')
      .catch(() => undefined);
    assert.equal(calls.length, 3, 'another verb or object is another question');
  });
});

describe('reading a JSON body', () => {
  function body(text: string): IncomingMessage {
    return Object.assign(Readable.from([Buffer.from(text)]), {
      headers: { 'content-type': 'application/json' },
    }) as unknown as IncomingMessage;
  }

  async function refusal(text: string): Promise<string> {
    try {
      await readJson(body(text));
    } catch (error) {
      assert.ok(error instanceof ApiError);
      assert.equal(error.status, 400);
      return error.message;
    }
    return 'accepted';
  }

  it('reads escaped surrogate pairs as the one character they encode', async () => {
    assert.deepEqual(await readJson(body('{"spec":{"reason":"\\ud83d\\ude00 ok"}}')), {
      spec: { reason: '\u{1F600} ok' },
    });
  });

  it('refuses an unpaired surrogate escape, naming where it is', async () => {
    assert.match(
      await refusal('{"spec":{"reason":"a\\ud800b"}}'),
      /unpaired UTF-16 surrogate escape in spec\.reason;/,
    );
    assert.match(await refusal('{"spec":{"x":["ok","\\udc00"]}}'), /in spec\.x\[1\];/);
    assert.match(await refusal('{"spec":{"\\ud800":1}}'), /in a field name in spec;/);
    assert.match(await refusal('"\\ude00\\ud83d"'), /in a string;/);
  });

  it('walks nesting as deep as JSON.parse takes, without running out of stack', async () => {
    const depth = 30_000; // within the 64 KiB limit, far past a recursive walk's stack
    assert.equal(await refusal(`${'['.repeat(depth)}${']'.repeat(depth)}`), 'accepted');
    assert.match(await refusal(`${'['.repeat(depth)}"\\ud800"${']'.repeat(depth)}`), /in \[0\]\[0\]/);
  });
});

describe('request validation', () => {
  const validate = validator(actionRequestSchema(), 'the request body');

  function problems(body: unknown): { status: number; message: string; fields: string[] } {
    try {
      validate(body);
    } catch (error) {
      assert.ok(error instanceof ApiError);
      return { status: error.status, message: error.message, fields: error.details.map((d) => d.field) };
    }
    return { status: 0, message: 'accepted', fields: [] };
  }

  it('accepts a spec without requestedBy', () => {
    assert.equal(problems({ spec: { nodeName: 'worker-1', action: 'Reboot' } }).status, 0);
    assert.equal(
      problems({
        spec: {
          nodeName: 'worker-1',
          action: 'Upgrade',
          upgrade: { image: 'ghcr.io/siderolabs/installer:v1.11.5' },
          bypass: { healthChecks: true, reason: 'why' },
          deadlines: { pending: '1h' },
        },
      }).status,
      0,
    );
  });

  it('names each field at fault and what is allowed, with 422', () => {
    const result = problems({
      spec: {
        nodeName: 'Worker_1',
        action: 'Explode',
        requestedBy: 'mallory',
        color: 'red',
        drain: { timeout: 5 },
      },
    });
    assert.equal(result.status, 422);
    assert.deepEqual(result.fields, [
      'spec.action',
      'spec.color',
      'spec.drain.timeout',
      'spec.nodeName',
      'spec.requestedBy',
    ]);
    assert.match(
      result.message,
      new RegExp(
        `^spec\\.action must be one of ${ACTIONS.join(', ')}, not "Explode" \\(and 4 more problems, see details\\)$`,
      ),
    );
    const details = (() => {
      try {
        validate({
          spec: {
            nodeName: 'Worker_1',
            action: 'Reboot',
            requestedBy: 'm',
            color: 'red',
            drain: { timeout: 5 },
          },
        });
      } catch (error) {
        return (error as ApiError).details.map((d) => d.message);
      }
      return [];
    })();
    assert.deepEqual(details, [
      'spec.color is not a field here; spec accepts nodeName, action, upgrade, reboot, reset, configChange, maintenance, execution, drain, postChecks, onPostCheckFailure, bypass, deadlines',
      'spec.drain.timeout must be a string, not number 5 (How long evictions may take before the action fails. A duration such as 30s, 5m or 1h30m, from 1s to 24h. Defaults to 10m.)',
      'spec.nodeName must match ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$, not "Worker_1" (Name of the Node to act on.)',
      'spec.requestedBy is set by gatehouse to the user the bearer token belongs to; leave it out',
    ]);
  });

  it('refuses what is not an object, or lacks the spec', () => {
    assert.deepEqual(problems([]), {
      status: 422,
      message: 'the request body must be a JSON object, not an array',
      fields: [''],
    });
    assert.match(problems(null).message, /not null/);
    assert.equal(
      problems({}).message,
      'spec is required: What to do: the NodeAction spec (see the NodeAction schema), without requestedBy, which the server sets to the authenticated user.',
    );
    assert.match(
      problems({ spec: {}, metadata: {} }).message,
      /metadata is not a field here; the request body accepts spec/,
    );
    assert.match(
      problems({ spec: { nodeName: 'n', action: 'Reboot', bypass: { reason: 'x'.repeat(2000) } } }).message,
      /spec\.bypass\.reason must be at most 1024 characters long, not 2000/,
    );
  });

  it('turns JSON pointers into field paths', () => {
    assert.equal(
      fieldPath('/spec/drain/podSelector/matchExpressions/0/key'),
      'spec.drain.podSelector.matchExpressions[0].key',
    );
    assert.equal(
      fieldPath('/spec/drain/podSelector/matchLabels/app.kubernetes.io~1name'),
      'spec.drain.podSelector.matchLabels["app.kubernetes.io/name"]',
    );
    assert.equal(fieldPath(''), '');
  });
});

describe('marking an action executed', () => {
  const action = (phase: string, execution = 'External') =>
    ({
      metadata: { name: 'worker-1-reboot-x' },
      spec: { nodeName: 'worker-1', action: 'Reboot', execution, requestedBy: 'alice' },
      status: { phase },
    }) as unknown as Parameters<typeof executedRefusal>[0];

  it('is a no-op success once the controller has seen the action performed', () => {
    for (const phase of ['WaitingForNode', 'RunningPostHooks', 'Succeeded'])
      assert.equal(performanceObserved(action(phase)), true, phase);
    for (const phase of ['Pending', 'WaitingForHealth', 'RunningPreHooks', 'Approved', 'Failed', 'Cancelled'])
      assert.equal(performanceObserved(action(phase)), false, phase);
    assert.equal(performanceObserved(action('WaitingForNode', 'Managed')), false);
  });

  it('is allowed when Approved, refused before and after, and for Managed actions', () => {
    assert.equal(executedRefusal(action('Approved')), undefined);
    assert.match(
      executedRefusal(action('WaitingForHealth')) ?? '',
      /not approved yet \(phase WaitingForHealth\)/,
    );
    assert.match(executedRefusal(action('Failed')) ?? '', /has already ended \(Failed\)/);
    assert.match(executedRefusal(action('Approved', 'Managed')) ?? '', /Managed execution/);
  });
});

describe('action names and fingerprints', () => {
  it('names actions after node and action, within 253 characters', () => {
    assert.equal(actionNamePrefix('worker-1', 'Reboot', 5), 'worker-1-reboot-');
    const long = `${'a'.repeat(240)}.b-c`;
    const prefix = actionNamePrefix(long, 'ConfigChange', 10);
    assert.ok(prefix.length + 10 <= 253);
    assert.ok(isActionName(`${prefix}0123456789`));
    assert.ok(!isActionName('Upper'));
    assert.ok(!isActionName('a/b'));
  });

  it('fingerprints requests independent of key order', () => {
    assert.equal(
      canonicalJson({ b: 1, a: { d: [2, { f: 1, e: 0 }], c: null } }),
      '{"a":{"c":null,"d":[2,{"e":0,"f":1}]},"b":1}',
    );
  });
});

describe('the OpenAPI document', () => {
  const doc = openApiDocument({ maxWaitMs: 60_000, bodyBytes: 65_536 }) as {
    openapi: string;
    paths: Record<string, Record<string, { security?: unknown[]; responses: Record<string, unknown> }>>;
    components: { schemas: Record<string, Record<string, unknown>> };
  };

  it('resolves every reference', () => {
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"#\/components\/schemas\/([A-Za-z]+)"/g)].map(
      (m) => m[1] ?? '',
    );
    assert.ok(refs.length > 20);
    for (const ref of refs) assert.ok(doc.components.schemas[ref], `unresolved $ref ${ref}`);
  });

  it('documents the refusals of every authenticated operation', () => {
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        if (operation.security?.length === 0) continue;
        for (const code of ['401', '403', '429'])
          assert.ok(operation.responses[code], `${method} ${path} ${code}`);
      }
    }
  });

  it('takes the request from the NodeAction spec: every field but requestedBy, closed to others', () => {
    const spec =
      (doc.components.schemas.ActionRequest?.properties as Record<string, Record<string, unknown>>).spec ??
      {};
    const fields = Object.keys(spec.properties as object);
    assert.deepEqual(
      fields,
      Object.keys(NodeActionSpec.properties).filter((f) => f !== 'requestedBy'),
    );
    assert.equal(spec.additionalProperties, false);
    assert.ok(!JSON.stringify(doc).includes('x-kubernetes-validations'), 'CRD-only extensions are left out');
  });

  it('is OpenAPI 3.1, with nothing of the CRD dialect left', () => {
    assert.equal(doc.openapi, '3.1.0');
    const text = JSON.stringify(doc.components);
    for (const keyword of ['"nullable"', '"x-kubernetes-', '"$id"', '"examples"']) {
      assert.ok(!text.includes(keyword), keyword);
    }
  });
});
