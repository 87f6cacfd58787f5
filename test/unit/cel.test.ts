import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CelEngine, CelExpressionError, formatFieldValue } from '../../src/checks/cel.ts';

/** The CelExpressionError a call throws (fails the test if it does not throw one). */
function celError(fn: () => unknown): CelExpressionError {
  try {
    fn();
  } catch (error) {
    if (error instanceof CelExpressionError) return error;
    throw error;
  }
  assert.fail('expected a CelExpressionError');
}

const ceph = (health: string) => ({ self: { status: { ceph: { health } } } });

describe('CEL engine', () => {
  it('evaluates an expression over JSON objects as CEL maps', () => {
    const engine = new CelEngine();
    const expression = "self.status.ceph.health == 'HEALTH_OK'";
    assert.equal(engine.evaluate(expression, ceph('HEALTH_OK')), true);
    assert.equal(engine.evaluate(expression, ceph('HEALTH_WARN')), false);
    assert.equal(
      engine.evaluate("self.metadata.labels['app.kubernetes.io/name'] == 'web'", {
        self: { metadata: { labels: { 'app.kubernetes.io/name': 'web' } } },
      }),
      true,
    );
    assert.equal(
      engine.evaluate("'web' in self.metadata.labels", { self: { metadata: { labels: {} } } }),
      false,
    );
    assert.equal(
      engine.evaluate('self.items.size() == 2 && self.items[1] == null', { self: { items: [1, null] } }),
      true,
    );
  });

  it('treats JSON whole numbers as ints, so Kubernetes-style arithmetic works', () => {
    const engine = new CelEngine();
    const deployment = { self: { spec: { replicas: 3 }, status: { availableReplicas: 2, ratio: 0.5 } } };
    assert.equal(
      engine.evaluate('self.status.availableReplicas >= self.spec.replicas - 1', deployment),
      true,
    );
    assert.equal(engine.evaluate('type(self.spec.replicas) == int', deployment), true);
    assert.equal(
      engine.evaluate('type(self.status.ratio) == double && self.status.ratio < 1', deployment),
      true,
    );
    // ints and doubles compare with each other
    assert.equal(engine.evaluate('self.status.availableReplicas < 2.5', deployment), true);
  });

  it('runs macros and the strings extension', () => {
    const engine = new CelEngine();
    const node = {
      self: {
        status: {
          conditions: [
            { type: 'MemoryPressure', status: 'False' },
            { type: 'Ready', status: 'True' },
          ],
        },
      },
    };
    assert.equal(
      engine.evaluate("self.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')", node),
      true,
    );
    assert.equal(engine.evaluate("self.status.conditions.all(c, c.status == 'True')", node), false);
    assert.equal(
      engine.evaluate(
        "self.status.conditions.map(c, c.type.lowerAscii()).join(',') == 'memorypressure,ready'",
        node,
      ),
      true,
    );
  });

  it('tests for missing fields with has(), as CEL does', () => {
    const engine = new CelEngine();
    const expression = "has(self.status.ceph) && self.status.ceph.health == 'HEALTH_OK'";
    assert.equal(engine.evaluate(expression, { self: { status: {} } }), false);
    assert.equal(engine.evaluate(expression, ceph('HEALTH_OK')), true);
    assert.equal(
      engine.evaluate('!has(self.spec.paused) || !self.spec.paused', { self: { spec: {} } }),
      true,
    );
  });

  it('names the missing field, where it is, and how to test for it', () => {
    const engine = new CelEngine();
    const error = celError(() =>
      engine.evaluate("self.status.ceph.health == 'HEALTH_OK'", { self: { status: { ceph: {} } } }),
    );
    assert.equal(error.phase, 'evaluate');
    assert.equal(
      error.message,
      "CEL error in `self.status.ceph.health == 'HEALTH_OK'` at column 17: no field 'health' in self.status.ceph (test for it with has(self.status.ceph.health))",
    );
    const key = celError(() =>
      engine.evaluate("self.metadata.labels['tier'] == 'db'", { self: { metadata: { labels: {} } } }),
    );
    assert.match(key.message, /at column 21: no key "tier" in self\.metadata\.labels/);
  });

  it('requires a boolean result', () => {
    const engine = new CelEngine();
    const error = celError(() => engine.evaluate('self.spec.replicas', { self: { spec: { replicas: 3 } } }));
    assert.equal(error.phase, 'evaluate');
    assert.match(
      error.message,
      /^CEL error in `self\.spec\.replicas`: the expression must give a boolean .* but it gave int 3$/,
    );
    const text = celError(() => engine.evaluate('self.name', { self: { name: 'x' } }));
    assert.match(text.message, /gave string 'x'$/);
  });

  it('gives a verdict that may say what it found: a bool, a message, or a list of messages', () => {
    const engine = new CelEngine();
    const items = [
      { v: 'a', ok: true },
      { v: 'b', ok: false },
      { v: 'c', ok: false },
    ];
    const verdict = (expression: string) => engine.compile(expression, ['items']).evaluateVerdict({ items });
    assert.equal(verdict('items.all(i, i.ok)'), false);
    assert.equal(verdict('items.size() == 3'), true);
    assert.equal(verdict("'2 bad'"), '2 bad');
    assert.deepEqual(verdict("items.filter(i, !i.ok).map(i, 'volume ' + i.v)"), ['volume b', 'volume c']);
    assert.deepEqual(verdict('items.filter(i, i.v == "z").map(i, i.v)'), []);
    const notText = celError(() => verdict('items.map(i, i.ok)'));
    assert.match(
      notText.message,
      /must give true \(healthy\), false or a message .* but it gave a list of 3 elements$/,
    );
    assert.match(celError(() => verdict('items.size()')).message, /but it gave int 3$/);
  });

  it('reports syntax errors with the expression and position', () => {
    const engine = new CelEngine();
    const error = celError(() => engine.compile("self.status.ceph.health == 'HEALTH_OK' &&", ['self']));
    assert.equal(error.phase, 'compile');
    assert.equal(error.expression, "self.status.ceph.health == 'HEALTH_OK' &&");
    assert.ok(error.position, 'a syntax error has a position');
    assert.match(
      error.message,
      /^CEL error in `self\.status\.ceph\.health == 'HEALTH_OK' &&` at column \d+: syntax error: /,
    );

    const multiline = celError(() => engine.compile('self.a == 1 &&\n  self.b ==', ['self']));
    assert.match(multiline.message, / at line 2, column \d+: syntax error/);
  });

  it('reports evaluation errors on later lines with line and column', () => {
    const engine = new CelEngine();
    const error = celError(() =>
      engine.evaluate("self.a == 'x' &&\n  self.b.c", { self: { a: 'x', b: {} } }),
    );
    assert.match(error.message, / at line 2, column 9: no field 'c' in self\.b/);
    assert.deepEqual(error.position, { line: 2, column: 9 });
  });

  it('refuses unknown variables and functions when compiling, with their position', () => {
    const engine = new CelEngine();
    const variable = celError(() => engine.compile("slef.status.phase == 'Running'", ['self']));
    assert.equal(variable.phase, 'compile');
    assert.equal(
      variable.message,
      "CEL error in `slef.status.phase == 'Running'` at column 1: unknown variable 'slef'; it can use self",
    );
    const fn = celError(() => engine.compile('self.ready && healthy(self)', ['self']));
    assert.match(fn.message, /at column 15: unknown function 'healthy'$/);
    // Comprehension variables are in scope inside their macro only.
    assert.doesNotThrow(() => engine.compile('self.items.all(i, i.ready)', ['self']));
    assert.throws(
      () => engine.compile('self.items.all(i, i.ready) && i.ok', ['self']),
      /unknown variable 'i'/,
    );
  });

  it('compiles each expression once and keeps a bounded cache of the most recently used', () => {
    const engine = new CelEngine({ cacheSize: 2 });
    const a = engine.compile('self.a == 1', ['self']);
    assert.equal(engine.compile('self.a == 1', ['self']), a, 'the same text reuses the compiled program');
    engine.compile('self.b == 1', ['self']);
    assert.equal(engine.size, 2);
    engine.compile('self.a == 1', ['self']); // a is now the most recently used
    engine.compile('self.c == 1', ['self']); // evicts b
    assert.equal(engine.size, 2);
    assert.equal(engine.compile('self.a == 1', ['self']), a);
    const b = engine.compile('self.b == 1', ['self']);
    assert.notEqual(b, undefined);
    assert.equal(engine.size, 2);
    // Failures are cached too, and keep failing the same way.
    const first = celError(() => engine.compile('self.a ==', ['self']));
    const second = celError(() => engine.compile('self.a ==', ['self']));
    assert.equal(second, first);
  });

  it('quotes the values of the fields an expression reads', () => {
    const engine = new CelEngine();
    const program = engine.compile(
      "has(self.status.phase) && self.status.ceph.health == 'HEALTH_OK' && self.metadata.labels['tier'] == 'db'",
      ['self'],
    );
    assert.deepEqual(
      program.references.map((r) => r.text),
      ['self.status.phase', 'self.status.ceph.health', "self.metadata.labels['tier']"],
    );
    const bindings = {
      self: { status: { phase: 'Ready', ceph: { health: 'HEALTH_WARN' } }, metadata: { labels: {} } },
    };
    assert.deepEqual(program.fieldValues(bindings).map(formatFieldValue), [
      "self.status.phase == 'Ready'",
      "self.status.ceph.health == 'HEALTH_WARN'",
      "no self.metadata.labels['tier']",
    ]);
  });

  it('explains a false conjunction by the fields of the parts that are not true', () => {
    const engine = new CelEngine();
    const program = engine.compile(
      "self.kind == 'CephCluster' && has(self.status.ceph) && self.status.ceph.health == 'HEALTH_OK'",
      ['self'],
    );
    const explain = (self: unknown) => program.explainFalse({ self }).map(formatFieldValue);
    assert.deepEqual(explain({ kind: 'CephCluster', status: { ceph: { health: 'HEALTH_ERR' } } }), [
      "self.status.ceph.health == 'HEALTH_ERR'",
    ]);
    // A part that fails to evaluate is not true either; has() says what is missing.
    assert.deepEqual(explain({ kind: 'CephCluster', status: {} }), [
      'no self.status.ceph',
      'no self.status.ceph.health',
    ]);
    // Not a conjunction: every field it reads.
    const other = engine.compile("self.a == 1 || self.b == 'x'", ['self']);
    assert.deepEqual(other.explainFalse({ self: { a: 2, b: 'y' } }).map(formatFieldValue), [
      'self.a == 2',
      "self.b == 'y'",
    ]);
  });
});
