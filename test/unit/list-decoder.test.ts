// The streaming list decoder gives the same items and fields as JSON.parse of the whole
// body, however the body is cut into chunks — inside strings, escapes and multi-byte
// characters — and refuses what is not a list rather than guessing.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import { ListDecodeError, ListDecoder, type MemberPath } from '../../src/kube/list-decoder.ts';
import { writeInCuts } from '../support/cuts.ts';

/** Decodes `body` fed in the chunks that `cuts` (byte offsets) make. */
function decode(
  body: Buffer,
  cuts: number[] = [],
  omit: MemberPath[] = [],
): { items: unknown[]; fields: Record<string, unknown> } {
  const items: unknown[] = [];
  const decoder = new ListDecoder((item) => items.push(item), { omit });
  writeInCuts(decoder, body, cuts);
  return { items, fields: decoder.end() };
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** What the decoder should give: the list parsed whole, items apart, the omitted members deleted. */
function expected(
  body: Buffer,
  omit: MemberPath[] = [],
): { items: unknown[]; fields: Record<string, unknown> } {
  const { items, ...fields } = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
  for (const item of (items as unknown[] | undefined) ?? [])
    for (const path of omit) {
      let parent: unknown = item;
      for (const key of path.slice(0, -1)) parent = isObject(parent) ? parent[key] : undefined;
      if (isObject(parent)) Reflect.deleteProperty(parent, path.at(-1) as string);
    }
  return { items: (items as unknown[] | undefined) ?? [], fields };
}

// Strings with quotes, backslashes, brackets, commas and characters of 1 to 4 UTF-8 bytes.
const tricky = fc.string({
  unit: fc.oneof(
    fc.constantFrom('"', '\\', '[', ']', '{', '}', ',', ':', ' ', '\n', 'é', '日', '😀', '\u0000', '\u2028'),
    fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
  ),
});
const value: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    tricky,
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(tricky, tie('value'), { maxKeys: 4 }),
  ),
})).value;
const list = fc.record(
  {
    kind: tricky,
    metadata: fc.record({ resourceVersion: fc.string(), continue: tricky }, { requiredKeys: [] }),
    items: fc.array(value, { maxLength: 8 }),
    extra: value,
  },
  { requiredKeys: [] },
);

it('decodes any list the same as JSON.parse, cut into chunks anywhere', () => {
  fc.assert(
    fc.property(
      list,
      fc.constantFrom(undefined, 1, '\t'),
      fc.array(fc.nat(), { maxLength: 12 }),
      (object, indent, offsets) => {
        const body = Buffer.from(JSON.stringify(object, null, indent));
        const cuts = offsets.map((o) => o % (body.length + 1));
        assert.deepEqual(decode(body, cuts), expected(body));
      },
    ),
    { numRuns: 500 },
  );
});

// Items whose keys are often the omitted ones, at every depth, in every position.
const keys = fc.oneof(fc.constantFrom('status', 'images', 'metadata', 'managedFields', 'x'), tricky);
const member: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    tricky,
    fc.integer(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 3 }),
    fc.dictionary(keys, tie('value'), { maxKeys: 5 }),
  ),
})).value;
const omitted: MemberPath[] = [
  ['metadata', 'managedFields'],
  ['status', 'images'],
  ['status', 'x'],
  ['images'],
];

it('leaves out the omitted members, and only those, cut into chunks anywhere', () => {
  fc.assert(
    fc.property(
      fc.array(fc.oneof(fc.dictionary(keys, member, { maxKeys: 5 }), member), { maxLength: 6 }),
      fc.constantFrom(undefined, 1, '\t'),
      fc.array(fc.nat(), { maxLength: 12 }),
      (items, indent, offsets) => {
        const body = Buffer.from(JSON.stringify({ metadata: { resourceVersion: '7' }, items }, null, indent));
        const cuts = offsets.map((o) => o % (body.length + 1));
        assert.deepEqual(decode(body, cuts, omitted), expected(body, omitted));
      },
    ),
    { numRuns: 1000 },
  );
});

it('leaves out first, middle, last and only members, and neighbours both omitted', () => {
  const node = (status: Record<string, unknown>) => ({ metadata: { name: 'n' }, status });
  const items = [
    node({ images: [1], a: 1 }),
    node({ a: 1, images: [{ names: ['x'] }], b: 2 }),
    node({ a: 1, images: [] }),
    node({ images: { deep: { x: ',"]}' } } }),
    node({ a: 1, images: [], x: 'gone' }),
    node({ images: [], x: 'gone', a: 1 }),
    node({ x: 'gone', images: [] }),
    { images: 'top', status: 'not an object', metadata: [{ managedFields: 1 }] },
  ];
  const body = Buffer.from(JSON.stringify({ items }));
  for (const cuts of [[], Array.from({ length: body.length }, (_, i) => i)])
    assert.deepEqual(decode(body, cuts, omitted).items, expected(body, omitted).items);
});

it('refuses a body cut short anywhere with members to omit, as without', () => {
  const body = Buffer.from(JSON.stringify({ metadata: {}, items: [{ status: { images: ['"]}'], a: 1 } }] }));
  for (let cut = 0; cut < body.length; cut++)
    assert.throws(() => decode(body.subarray(0, cut), [], omitted), ListDecodeError, `cut at ${String(cut)}`);
});

it('decodes a list fed one byte at a time', () => {
  const object = {
    kind: 'NodeList',
    apiVersion: 'v1',
    metadata: { resourceVersion: '42', continue: 'eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDJ9' },
    items: [
      { metadata: { name: 'a', annotations: { note: 'a "quoted" \\ back]slash}, 日本 😀' } } },
      { metadata: { name: 'b' }, status: { images: [{ names: ['x', 'y'], sizeBytes: 1 }] } },
    ],
  };
  const body = Buffer.from(JSON.stringify(object));
  const everyByte = Array.from({ length: body.length }, (_, i) => i);
  assert.deepEqual(decode(body, everyByte), expected(body));
});

it('hands over each item as soon as its bytes are in, before the page ends', () => {
  const body = Buffer.from(JSON.stringify({ metadata: {}, items: [{ n: 1 }, { n: 2 }, { n: 3 }] }));
  const seen: unknown[] = [];
  const decoder = new ListDecoder((item) => seen.push(item));
  const second = body.indexOf('{"n":3}');
  decoder.write(body.subarray(0, second));
  assert.deepEqual(seen, [{ n: 1 }, { n: 2 }]);
  decoder.write(body.subarray(second));
  decoder.end();
  assert.deepEqual(seen, [{ n: 1 }, { n: 2 }, { n: 3 }]);
});

it('refuses a body cut short anywhere, and anything that is not a JSON list object', () => {
  const body = Buffer.from(JSON.stringify({ metadata: { resourceVersion: '1' }, items: [{ a: '"]}' }, 2] }));
  for (let cut = 0; cut < body.length; cut++) {
    assert.throws(() => decode(body.subarray(0, cut)), ListDecodeError, `cut at ${String(cut)}`);
  }
  const malformed = [
    '[1,2]',
    '"items"',
    '{"items":[1,]}',
    '{"items":[1}',
    '{"items":[{"a":1]}]}',
    '{"items":[1] x}',
    '{"a":1,}',
    '{"a":}',
    '{1:2}',
    '{"items":[1]}{}',
    '{"items":[tru]}',
    '{"metadata":{"continue":"x}}',
  ];
  for (const text of malformed) {
    assert.throws(() => decode(Buffer.from(text)), ListDecodeError, text);
  }
});

it('lets an exception from the item handler through, unchanged', () => {
  const decoder = new ListDecoder(() => {
    throw new RangeError('no room');
  });
  assert.throws(() => decoder.write(Buffer.from('{"items":[{}]}')), RangeError);
});
