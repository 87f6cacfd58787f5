// Label selectors evaluated here as the API server evaluates them, and which selectors it
// would refuse (a cache must not answer those: the server's error is the answer).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { matchesSelector, selectorValid } from '../../src/kube/labels.ts';

describe('label selectors', () => {
  it('match as the API server does: matchLabels and every expression', () => {
    const labels = { app: 'db', 'topology.kubernetes.io/zone': 'a' };
    assert.equal(matchesSelector(undefined, labels), true);
    assert.equal(matchesSelector({}, labels), true);
    assert.equal(matchesSelector({ matchLabels: { app: 'db' } }, labels), true);
    assert.equal(matchesSelector({ matchLabels: { app: 'web' } }, labels), false);
    const expression = (
      operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist',
      key = 'app',
      values?: string[],
    ) => ({
      matchExpressions: [{ key, operator, ...(values ? { values } : {}) }],
    });
    assert.equal(matchesSelector(expression('In', 'app', ['db', 'x']), labels), true);
    assert.equal(matchesSelector(expression('In', 'missing', ['db']), labels), false);
    assert.equal(matchesSelector(expression('NotIn', 'app', ['db']), labels), false);
    assert.equal(matchesSelector(expression('NotIn', 'missing', ['db']), labels), true);
    assert.equal(matchesSelector(expression('Exists', 'topology.kubernetes.io/zone'), labels), true);
    assert.equal(matchesSelector(expression('DoesNotExist', 'app'), labels), false);
  });

  it('are valid only with keys and values the API server takes', () => {
    assert.equal(selectorValid(undefined), true);
    assert.equal(selectorValid({ matchLabels: { 'node-role.kubernetes.io/control-plane': '' } }), true);
    assert.equal(selectorValid({ matchLabels: { 'kubernetes.io/hostname': 'scale-00001' } }), true);
    for (const key of ['bad key', '-starts', 'ends-', 'UPPER.example.com/x', 'a/b/c', 'x'.repeat(64), ''])
      assert.equal(selectorValid({ matchLabels: { [key]: 'v' } }), false, key);
    for (const value of ['has space', '-starts', 'a,b', 'x'.repeat(64)])
      assert.equal(selectorValid({ matchLabels: { k: value } }), false, value);
    assert.equal(selectorValid({ matchExpressions: [{ key: 'k', operator: 'In', values: [] }] }), false);
    assert.equal(
      selectorValid({ matchExpressions: [{ key: 'k', operator: 'Exists', values: ['v'] }] }),
      false,
    );
    assert.equal(
      selectorValid({ matchExpressions: [{ key: 'k', operator: 'NotIn', values: ['v', 'w'] }] }),
      true,
    );
  });
});
