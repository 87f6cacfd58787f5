// The streaming list decoder gives the same items and fields as JSON.parse of the whole
// body, however the body is cut into chunks — inside strings, escapes and multi-byte
// characters — and refuses what is not a list rather than guessing.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import { ListDecodeError, ListDecoder } from '../../src/kube/list-decoder.ts';

/** Decodes `body` fed in the chunks that `cuts` (byte offsets) make. */
function decode(body: Buffer, cuts: number[] = []): { items: unknown[]; fields: Record<string, unknown> } {
  const items: unknown[] = [];
  const decoder = new ListDecoder((item) => items.push(item));
  let from = 0;
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    decoder.write(body.subarray(from, cut));
    from = cut;
  }
  decoder.write(body.subarray(from));
  return { items, fields: decoder.end() };
}

/** What the decoder should give: the list parsed whole, items apart. */
function expected(body: Buffer): { items: unknown[]; fields: Record<string, unknown> } {
  const { items, ...fields } = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
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
