// An informer's label index selects what matching every object selects, whatever the
// objects did before (added, relabelled, deleted) and whenever a label key was first asked for.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { LabelIndex, MAX_INDEXED_LABELS } from '../../src/kube/label-index.ts';
import { matchesSelector, type LabelSelector } from '../../src/kube/labels.ts';

interface Item {
  metadata: { name: string; labels?: Record<string, string> };
}

const keys = ['a', 'b', 'zone', 'constructor'];
const values = ['x', 'y', 'z', ''];
const labels = fc.option(
  fc.dictionary(fc.constantFrom(...keys), fc.constantFrom(...values), { maxKeys: keys.length }),
  { nil: undefined },
);
const selector: fc.Arbitrary<LabelSelector | undefined> = fc.option(
  fc.record(
    {
      matchLabels: fc.dictionary(fc.constantFrom(...keys), fc.constantFrom(...values), { maxKeys: 2 }),
      matchExpressions: fc.array(
        fc.oneof(
          fc.record({
            key: fc.constantFrom(...keys),
            operator: fc.constantFrom('In' as const, 'NotIn' as const),
            values: fc.array(fc.constantFrom(...values), { minLength: 1, maxLength: 3 }),
          }),
          fc.record({
            key: fc.constantFrom(...keys),
            operator: fc.constantFrom('Exists' as const, 'DoesNotExist' as const),
          }),
        ),
        { maxLength: 2 },
      ),
    },
    { requiredKeys: [] },
  ),
  { nil: undefined },
);
const step = fc.oneof(
  fc.record({ op: fc.constant('put' as const), name: fc.integer({ min: 0, max: 7 }), labels }),
  fc.record({ op: fc.constant('delete' as const), name: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ op: fc.constant('select' as const), selector }),
);

const names = (items: Item[]) => items.map((i) => i.metadata.name).sort();

describe('the label index', () => {
  it('selects what matching every object selects, through puts, relabels and deletes, and keeps nothing stale', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 40 }), selector, (steps, last) => {
        const store = new Map<string, Item>();
        const index = new LabelIndex<Item>(store);
        const check = (s: LabelSelector | undefined) => {
          const expected = [...store.values()].filter((i) => matchesSelector(s, i.metadata.labels));
          assert.deepEqual(names(index.select(s)), names(expected), JSON.stringify(s));
        };
        for (const s of steps) {
          if (s.op === 'select') {
            check(s.selector);
            continue;
          }
          const key = `n${String(s.name)}`;
          const old = store.get(key);
          if (s.op === 'put') {
            const item = { metadata: { name: key, ...(s.labels ? { labels: s.labels } : {}) } };
            store.set(key, item);
            index.put(key, old, item);
          } else if (old) {
            store.delete(key);
            index.remove(key, old);
          }
        }
        check(last);
        // Nothing stale is kept: with every object gone, so is every entry.
        for (const [key, old] of [...store]) {
          store.delete(key);
          index.remove(key, old);
        }
        assert.equal(index.size, 0);
      }),
      { numRuns: 500 },
    );
  });

  it('indexes at most MAX_INDEXED_LABELS keys, and selects by the others all the same', () => {
    const store = new Map<string, Item>();
    const index = new LabelIndex<Item>(store);
    const labels = Object.fromEntries(
      Array.from({ length: MAX_INDEXED_LABELS + 8 }, (_, i) => [`k${String(i)}`, 'v']),
    );
    for (const name of ['a', 'b']) {
      const item = { metadata: { name, labels: name === 'a' ? labels : {} } };
      store.set(name, item);
      index.put(name, undefined, item);
    }
    for (const key of Object.keys(labels))
      assert.deepEqual(names(index.select({ matchLabels: { [key]: 'v' } })), ['a'], key);
    assert.equal(index.labels.length, MAX_INDEXED_LABELS);
    assert.equal(index.size, MAX_INDEXED_LABELS);
  });

  it('indexes own labels only, not what every object inherits (constructor)', () => {
    const store = new Map<string, Item>([['n', { metadata: { name: 'n', labels: {} } }]]);
    const index = new LabelIndex<Item>(store);
    assert.deepEqual(index.select({ matchLabels: { constructor: 'x' } }), []);
    assert.equal(index.size, 0);
  });

  it('selects each object once, when an In names a value twice', () => {
    const store = new Map<string, Item>([['n', { metadata: { name: 'n', labels: { a: 'x' } } }]]);
    const index = new LabelIndex<Item>(store);
    const twice: LabelSelector = { matchExpressions: [{ key: 'a', operator: 'In', values: ['x', 'x'] }] };
    assert.equal(index.select(twice).length, 1);
  });
});
