// Lists of built-in objects in Kubernetes' protobuf encoding, read into exactly the plain
// objects that JSON.parse of the same list served as JSON gives: the rest of gatehouse never
// knows which encoding a list came in.
//
// Why by hand: the kept protobuf library (@bufbuild/protobuf) decodes into generated
// message classes, and Kubernetes ships no descriptors to generate them from on npm; nor
// would messages be the JSON shape, which is what the cache holds. Here a message is a
// table of its fields (number → JSON name, type, and when JSON leaves it out), written from
// the API's generated.proto and the Go JSON tags beside it, and one interpreter reads any
// message by its table. A field the table lacks (a newer Kubernetes) is never dropped:
// ProtobufUnknownFieldError names it, and the caller lists in JSON instead.
//
// The JSON rules a table encodes, as Go's encoding/json applies them to the API types:
// - `omitempty` scalars ('', 0, false) are left out; the Go marshaller writes every
//   non-pointer scalar on the wire, empty or not, so emptiness is decided here.
// - fields without `omitempty`, and struct (non-pointer) members, are always in the JSON:
//   absent from the wire they take their zero value (a struct its own zero JSON).
// - pointers (`*bool`, `*int64`, `*Struct`) are in the JSON exactly when on the wire.
// - metav1.Time is RFC 3339 in whole seconds, `null` when zero; a zero Time is an empty
//   message on the wire.
//
// Streaming: a page is fed in chunks cut anywhere; each item is decoded as soon as its
// bytes are in (read in place when one chunk holds it, else gathered into one buffer of
// its known length), so no more than one item is held undecoded.

import type { MemberPath } from './list-decoder.ts';

/** The body is not the protobuf list it should be: truncated, malformed, or not a list. */
export class ProtobufDecodeError extends Error {
  override readonly name: string = 'ProtobufDecodeError';
}

/**
 * The body has a field this decoder's tables lack, most likely from a newer Kubernetes.
 * Nothing is dropped silently: the caller lists in JSON instead.
 */
export class ProtobufUnknownFieldError extends ProtobufDecodeError {
  override readonly name = 'ProtobufUnknownFieldError';
  /** The protobuf message that has the field, e.g. `NodeStatus`. */
  readonly messageType: string;
  readonly fieldNumber: number;

  constructor(messageType: string, fieldNumber: number) {
    super(
      `${messageType} has field ${String(fieldNumber)}, which this protobuf decoder does not know ` +
        '(a newer Kubernetes?): list in JSON instead',
    );
    this.messageType = messageType;
    this.fieldNumber = fieldNumber;
  }
}

// Field types: what a field's bytes are and how its JSON value is made of them.
const STRING = 0;
const INT = 1;
const BOOL = 2;
const MESSAGE = 3;
const TIME = 4;
const STRINGS = 5;
const MESSAGES = 6;
const STRING_MAP = 7;
const QUANTITY_MAP = 8;
/** metav1.FieldsV1: JSON bytes, inlined in the JSON encoding. */
const FIELDS_V1 = 9;
/** Omitted by the caller: skipped by its length, never looked into. */
const SKIP = 10;
type FieldType =
  | typeof STRING
  | typeof INT
  | typeof BOOL
  | typeof MESSAGE
  | typeof TIME
  | typeof STRINGS
  | typeof MESSAGES
  | typeof STRING_MAP
  | typeof QUANTITY_MAP
  | typeof FIELDS_V1
  | typeof SKIP;

// When a field is in the JSON (see the rules above).
/** `omitempty`: left out when empty ('', 0, false, a zero Time) or absent. */
const OMIT_EMPTY = 0;
/** No `omitempty`, or a struct member: always there, its zero value when absent. */
const ALWAYS = 1;
/** A pointer: there exactly when on the wire. */
const POINTER = 2;
type Presence = typeof OMIT_EMPTY | typeof ALWAYS | typeof POINTER;

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;

interface Field {
  readonly number: number;
  /** Its JSON name. */
  readonly name: string;
  readonly type: FieldType;
  readonly presence: Presence;
  /** The wire type its bytes come in. */
  readonly wire: number;
  readonly message?: Message;
}

/** A protobuf message's table: its fields by number. */
export interface Message {
  /** The Go/protobuf type name, for errors. */
  readonly name: string;
  readonly fields: readonly (Field | undefined)[];
  /** Bits (1 << number) of the fields always in the JSON. */
  readonly required: number;
}

type FieldSpec = Omit<Field, 'number' | 'wire'>;

const wireOf = (type: FieldType): number => (type === INT || type === BOOL ? VARINT : LEN);

/** A message table from its fields by number (each below 31: the `required` mask is a bit set). */
export function message(name: string, specs: Record<number, FieldSpec>): Message {
  const fields: (Field | undefined)[] = [];
  let required = 0;
  for (const [key, spec] of Object.entries(specs)) {
    const number = Number(key);
    if (!Number.isInteger(number) || number < 1 || number > 30) throw new Error(`${name}: field ${key}`);
    fields[number] = { ...spec, number, wire: wireOf(spec.type) };
    if (spec.presence === ALWAYS) required |= 1 << number;
  }
  return { name, fields, required };
}

// Field constructors, named after what the Go type is.
export const string = (
  name: string,
  presence: typeof OMIT_EMPTY | typeof ALWAYS = OMIT_EMPTY,
): FieldSpec => ({
  name,
  type: STRING,
  presence,
});
/** int32 or int64: a JSON number (int64 beyond 2^53 rounds as JSON.parse rounds it). */
export const int = (name: string, presence: Presence = OMIT_EMPTY): FieldSpec => ({
  name,
  type: INT,
  presence,
});
export const bool = (name: string, presence: Presence = OMIT_EMPTY): FieldSpec => ({
  name,
  type: BOOL,
  presence,
});
/** A struct member (ALWAYS) or a pointer to one (POINTER). */
export const struct = (
  name: string,
  of: Message,
  presence: typeof ALWAYS | typeof POINTER = ALWAYS,
): FieldSpec => ({ name, type: MESSAGE, presence, message: of });
/** metav1.Time: OMIT_EMPTY for `omitzero`, ALWAYS for a struct member (null when zero), POINTER for *Time. */
export const time = (name: string, presence: Presence): FieldSpec => ({ name, type: TIME, presence });
export const strings = (name: string): FieldSpec => ({ name, type: STRINGS, presence: OMIT_EMPTY });
export const list = (name: string, of: Message): FieldSpec => ({
  name,
  type: MESSAGES,
  presence: OMIT_EMPTY,
  message: of,
});
export const stringMap = (name: string): FieldSpec => ({ name, type: STRING_MAP, presence: OMIT_EMPTY });
/** map[string]resource.Quantity: each Quantity is its canonical string on the wire and in JSON. */
export const quantityMap = (name: string): FieldSpec => ({ name, type: QUANTITY_MAP, presence: OMIT_EMPTY });
const fieldsV1 = (name: string): FieldSpec => ({ name, type: FIELDS_V1, presence: POINTER });

export { ALWAYS, POINTER };

// The messages of apimachinery's meta/v1 that every object and list has.

const OWNER_REFERENCE = message('OwnerReference', {
  1: string('kind', ALWAYS),
  3: string('name', ALWAYS),
  4: string('uid', ALWAYS),
  5: string('apiVersion', ALWAYS),
  6: bool('controller', POINTER),
  7: bool('blockOwnerDeletion', POINTER),
});

const MANAGED_FIELDS_ENTRY = message('ManagedFieldsEntry', {
  1: string('manager'),
  2: string('operation'),
  3: string('apiVersion'),
  4: time('time', POINTER),
  6: string('fieldsType'),
  7: fieldsV1('fieldsV1'),
  8: string('subresource'),
});

export const OBJECT_META = message('ObjectMeta', {
  1: string('name'),
  2: string('generateName'),
  3: string('namespace'),
  4: string('selfLink'),
  5: string('uid'),
  6: string('resourceVersion'),
  7: int('generation'),
  // `omitempty,omitzero`: a zero creationTimestamp is left out, not null.
  8: time('creationTimestamp', OMIT_EMPTY),
  9: time('deletionTimestamp', POINTER),
  10: int('deletionGracePeriodSeconds', POINTER),
  11: stringMap('labels'),
  12: stringMap('annotations'),
  13: list('ownerReferences', OWNER_REFERENCE),
  14: strings('finalizers'),
  17: list('managedFields', MANAGED_FIELDS_ENTRY),
});

const SHARD_INFO = message('ShardInfo', { 1: string('selector', ALWAYS) });

const LIST_META = message('ListMeta', {
  1: string('selfLink'),
  2: string('resourceVersion'),
  3: string('continue'),
  4: int('remainingItemCount', POINTER),
  5: struct('shardInfo', SHARD_INFO, POINTER),
});

/** runtime.TypeMeta, in the envelope: apiVersion first, unlike metav1.TypeMeta. */
const TYPE_META = message('runtime.TypeMeta', { 1: string('apiVersion'), 2: string('kind') });

const STATUS_CAUSE = message('StatusCause', {
  1: string('reason'),
  2: string('message'),
  3: string('field'),
});
const STATUS_DETAILS = message('StatusDetails', {
  1: string('name'),
  2: string('group'),
  3: string('kind'),
  4: list('causes', STATUS_CAUSE),
  5: int('retryAfterSeconds'),
  6: string('uid'),
});
const STATUS = message('Status', {
  1: struct('metadata', LIST_META),
  2: string('status'),
  3: string('message'),
  4: string('reason'),
  5: struct('details', STATUS_DETAILS, POINTER),
  6: int('code'),
});

/** A kind of list: its kind, as the envelope names it, and its items' table. */
export interface ProtobufList {
  /** e.g. NodeList. */
  readonly kind: string;
  readonly item: Message;
}

/**
 * The item's table with the members `omit` names skipped undecoded. Each path must name a
 * field through struct members: anything else is a mistake of the caller's, refused.
 */
function omitting(table: Message, omit: readonly MemberPath[]): Message {
  let result = table;
  for (const path of omit) result = omitOne(result, path, path);
  return result;
}

function omitOne(table: Message, path: MemberPath, whole: MemberPath): Message {
  const [key, ...rest] = path;
  const field = table.fields.find((f) => f?.name === key);
  if (!field || (rest.length > 0 && (field.type !== MESSAGE || !field.message)))
    throw new Error(`cannot omit ${whole.join('.')} from ${table.name}: no such member`);
  const replaced: Field =
    rest.length === 0
      ? { ...field, type: SKIP, presence: OMIT_EMPTY }
      : { ...field, message: omitOne(field.message as Message, rest, whole) };
  const fields = [...table.fields];
  fields[field.number] = replaced;
  return {
    name: table.name,
    fields,
    required: rest.length === 0 ? table.required & ~(1 << field.number) : table.required,
  };
}

/** Where the interpreter is: the bytes of one complete element and the position in them. */
class Reader {
  buf: Buffer = Buffer.alloc(0);
  pos = 0;
  /** The element's end: nothing is read past it. */
  end = 0;

  reset(buf: Buffer, start: number, end: number): void {
    this.buf = buf;
    this.pos = start;
    this.end = end;
  }
}

const truncated = (what: string) => new ProtobufDecodeError(`${what} is cut short or malformed`);

/** A varint known to fit 32 bits (a tag or a length). */
function uint32(r: Reader, what: string): number {
  const buf = r.buf;
  let pos = r.pos;
  let result = 0;
  for (let shift = 0; shift < 35; shift += 7) {
    if (pos >= r.end) throw truncated(what);
    const byte = buf[pos++] as number;
    result += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) {
      r.pos = pos;
      if (result > 0xffffffff) break;
      return result;
    }
  }
  throw new ProtobufDecodeError(`${what}: a varint too long for 32 bits`);
}

/** An int64 (or int32, sign-extended to 64 bits) varint, as JSON.parse would give its decimal. */
function int64(r: Reader, what: string): number {
  const buf = r.buf;
  const start = r.pos;
  let pos = start;
  let result = 0;
  // Seven bytes hold 49 bits: exact in a double. Longer (negative, or beyond 2^49) goes by BigInt.
  for (let shift = 0; shift < 49; shift += 7) {
    if (pos >= r.end) throw truncated(what);
    const byte = buf[pos++] as number;
    result += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) {
      r.pos = pos;
      return result;
    }
  }
  let big = 0n;
  pos = start;
  for (let shift = 0n; shift < 70n; shift += 7n) {
    if (pos >= r.end) throw truncated(what);
    const byte = buf[pos++] as number;
    big |= BigInt(byte & 0x7f) << shift;
    if (byte < 0x80) {
      r.pos = pos;
      return Number(BigInt.asIntN(64, big));
    }
  }
  throw new ProtobufDecodeError(`${what}: a varint longer than 10 bytes`);
}

/** The end of the length-delimited value at the reader, checked against the element. */
function lengthEnd(r: Reader, end: number, what: string): number {
  const length = uint32(r, what);
  const valueEnd = r.pos + length;
  if (valueEnd > end) throw truncated(what);
  return valueEnd;
}

const decoder = new TextDecoder();

/** Strings up to this long are looked up among those read before (see text). */
const INTERN_MAX = 64;
const INTERN_SLOTS = 4096;
const interned: string[] = Array.from({ length: INTERN_SLOTS }, () => '');

/**
 * UTF-8 bytes as a string. Most strings of an API object are short, ASCII, and the same on
 * every Node (label and annotation keys, condition reasons and messages, quantities): each
 * is looked up by a hash of its bytes among those read before and shared, not made again —
 * less garbage while decoding, and one copy in the cache instead of one per Node.
 */
function text(buf: Buffer, start: number, end: number): string {
  const length = end - start;
  if (length === 0) return '';
  if (length > INTERN_MAX) return buf.toString('utf8', start, end);
  let hash = 0x811c9dc5;
  for (let i = start; i < end; i++) {
    const byte = buf[i] as number;
    if (byte >= 0x80) return decoder.decode(buf.subarray(start, end));
    hash = Math.imul(hash ^ byte, 0x01000193);
  }
  const slot = (hash ^ (hash >>> 15)) & (INTERN_SLOTS - 1);
  const known = interned[slot] as string;
  if (known.length === length) {
    let i = 0;
    while (i < length && known.charCodeAt(i) === buf[start + i]) i++;
    if (i === length) return known;
  }
  const made = buf.toString('latin1', start, end);
  interned[slot] = made;
  return made;
}

/** A Time's seconds in RFC 3339 (the last one formatted is kept: many Times in a row repeat). */
let lastSeconds = Number.NaN;
let lastTime = '';
function rfc3339(seconds: number): string {
  if (seconds === lastSeconds) return lastTime;
  const date = new Date(seconds * 1000);
  if (Number.isNaN(date.getTime()))
    throw new ProtobufDecodeError(`a Time out of range: ${String(seconds)} s`);
  // toISOString has milliseconds (always .000 here: Kubernetes keeps whole seconds in JSON).
  const iso = date.toISOString();
  lastTime = `${iso.slice(0, -5)}Z`;
  lastSeconds = seconds;
  return lastTime;
}

/** A metav1.Time from its message bytes: null when zero (empty). */
function readTime(r: Reader, end: number): string | null {
  if (r.pos === end) return null;
  let seconds = 0;
  while (r.pos < end) {
    const tag = uint32(r, 'Time');
    if (tag === 0x08) seconds = int64(r, 'Time.seconds');
    // Nanos: dropped, as the API server drops them for JSON.
    else if (tag === 0x10) int64(r, 'Time.nanos');
    else throw new ProtobufUnknownFieldError('Time', tag >>> 3);
  }
  if (r.pos !== end) throw truncated('Time');
  return rfc3339(seconds);
}

/** Sets a map entry as JSON.parse does: `__proto__` too is an own key. */
function setEntry(map: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__')
    Object.defineProperty(map, key, { value, enumerable: true, writable: true, configurable: true });
  else map[key] = value;
}

/** A map entry's key (1) and value (2): strings, or a Quantity holding its string (`quantity`). */
function readEntry(r: Reader, end: number, into: Record<string, unknown>, quantity: boolean): void {
  let key = '';
  let value = quantity ? '0' : '';
  while (r.pos < end) {
    const tag = uint32(r, 'map entry');
    const valueEnd = (tag & 7) === LEN ? lengthEnd(r, end, 'map entry') : -1;
    if (tag === 0x0a) key = text(r.buf, r.pos, valueEnd);
    else if (tag === 0x12 && !quantity) value = text(r.buf, r.pos, valueEnd);
    else if (tag === 0x12) {
      value = '';
      while (r.pos < valueEnd) {
        if (uint32(r, 'Quantity') !== 0x0a) throw new ProtobufUnknownFieldError('Quantity', 0);
        const stringEnd = lengthEnd(r, valueEnd, 'Quantity');
        value = text(r.buf, r.pos, stringEnd);
        r.pos = stringEnd;
      }
    } else
      throw new ProtobufUnknownFieldError(
        quantity ? 'map<string, Quantity> entry' : 'map<string, string> entry',
        tag >>> 3,
      );
    r.pos = valueEnd;
  }
  setEntry(into, key, value);
}

function skip(r: Reader, wire: number, end: number, what: string): void {
  switch (wire) {
    case VARINT:
      int64(r, what);
      return;
    case LEN:
      r.pos = lengthEnd(r, end, what);
      return;
    case I64:
      r.pos += 8;
      break;
    case I32:
      r.pos += 4;
      break;
    default:
      throw new ProtobufDecodeError(`${what}: wire type ${String(wire)}`);
  }
  if (r.pos > end) throw truncated(what);
}

/** An object's zero JSON: what a struct member absent from the wire is. */
function zero(table: Message): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  fillRequired(out, table, 0);
  return out;
}

function fillRequired(out: Record<string, unknown>, table: Message, seen: number): void {
  for (const field of table.fields) {
    if (field?.presence !== ALWAYS || (seen & (1 << field.number)) !== 0) continue;
    switch (field.type) {
      case STRING:
        out[field.name] = '';
        break;
      case INT:
        out[field.name] = 0;
        break;
      case BOOL:
        out[field.name] = false;
        break;
      case TIME:
        out[field.name] = null;
        break;
      case MESSAGE:
        out[field.name] = zero(field.message as Message);
        break;
      default:
        throw new Error(`${table.name}.${field.name}: no zero value`);
    }
  }
}

function append(out: Record<string, unknown>, name: string, value: unknown): void {
  const items = out[name] as unknown[] | undefined;
  if (items) items.push(value);
  else out[name] = [value];
}

/** A message's bytes, from the reader to `end`, as the JSON object of its table. */
function readMessage(r: Reader, end: number, table: Message): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const fields = table.fields;
  let seen = 0;
  while (r.pos < end) {
    const tag = uint32(r, table.name);
    const number = tag >>> 3;
    const field = fields[number];
    if (field === undefined) throw new ProtobufUnknownFieldError(table.name, number);
    const wire = tag & 7;
    if (field.type === SKIP) {
      skip(r, wire, end, `${table.name}.${field.name}`);
      continue;
    }
    if (wire !== field.wire)
      throw new ProtobufDecodeError(
        `${table.name}.${field.name}: wire type ${String(wire)}, not ${String(field.wire)}`,
      );
    seen |= 1 << number;
    if (wire === VARINT) {
      const value = int64(r, table.name);
      if (field.type === BOOL) {
        if (value !== 0 || field.presence !== OMIT_EMPTY) out[field.name] = value !== 0;
      } else if (value !== 0 || field.presence !== OMIT_EMPTY) out[field.name] = value;
      continue;
    }
    const valueEnd = lengthEnd(r, end, table.name);
    switch (field.type) {
      case STRING:
        if (valueEnd > r.pos || field.presence !== OMIT_EMPTY) out[field.name] = text(r.buf, r.pos, valueEnd);
        break;
      case MESSAGE:
        out[field.name] = readMessage(r, valueEnd, field.message as Message);
        break;
      case TIME: {
        const value = readTime(r, valueEnd);
        if (value !== null || field.presence !== OMIT_EMPTY) out[field.name] = value;
        break;
      }
      case STRINGS:
        append(out, field.name, text(r.buf, r.pos, valueEnd));
        break;
      case MESSAGES:
        append(out, field.name, readMessage(r, valueEnd, field.message as Message));
        break;
      case STRING_MAP:
      case QUANTITY_MAP: {
        let map = out[field.name] as Record<string, unknown> | undefined;
        if (!map) out[field.name] = map = {};
        readEntry(r, valueEnd, map, field.type === QUANTITY_MAP);
        break;
      }
      case FIELDS_V1:
        out[field.name] = readFieldsV1(r, valueEnd);
        break;
    }
    r.pos = valueEnd;
  }
  if (r.pos !== end) throw truncated(table.name);
  if ((seen & table.required) !== table.required) fillRequired(out, table, seen);
  return out;
}

/** metav1.FieldsV1: its raw JSON (field 1), inlined; null when empty. */
function readFieldsV1(r: Reader, end: number): unknown {
  let raw: string | undefined;
  while (r.pos < end) {
    if (uint32(r, 'FieldsV1') !== 0x0a) throw new ProtobufUnknownFieldError('FieldsV1', 0);
    const rawEnd = lengthEnd(r, end, 'FieldsV1');
    raw = r.buf.toString('utf8', r.pos, rawEnd);
    r.pos = rawEnd;
  }
  if (!raw) return null;
  try {
    return JSON.parse(raw);
  } catch {
    throw new ProtobufDecodeError('FieldsV1 is not JSON');
  }
}

/** The envelope's magic number: `k8s` and a zero byte. */
const MAGIC = Buffer.from('k8s\0', 'latin1');

/** The content type of Kubernetes' protobuf encoding. */
export const PROTOBUF_CONTENT_TYPE = 'application/vnd.kubernetes.protobuf';

/** Above this an element's length is taken for garbage rather than allocated. */
const MAX_ELEMENT = 256 * 1024 * 1024;

// What a complete element of the stream is: a field of the envelope (runtime.Unknown) or of the list.
const TYPE_META_ELEMENT = 0;
const CONTENT_ENCODING_ELEMENT = 1;
const CONTENT_TYPE_ELEMENT = 2;
const LIST_META_ELEMENT = 3;
const ITEM_ELEMENT = 4;
type Element =
  | typeof TYPE_META_ELEMENT
  | typeof CONTENT_ENCODING_ELEMENT
  | typeof CONTENT_TYPE_ELEMENT
  | typeof LIST_META_ELEMENT
  | typeof ITEM_ELEMENT;

/** Elements longer than this are gathered in a buffer of their own, not kept for the next. */
const MAX_SCRATCH = 1024 * 1024;

/** Longest header read: a tag and a length, each at most five bytes. */
const MAX_HEADER = 10;

/** A list's fields besides its items, as its JSON has them. */
export interface ProtobufListFields {
  kind?: string;
  apiVersion?: string;
  metadata: Record<string, unknown>;
}

/**
 * Reads one list page in Kubernetes' protobuf encoding, fed in chunks cut anywhere: the
 * magic number, then a runtime.Unknown (typeMeta=1, raw=2, contentEncoding=3,
 * contentType=4) whose raw bytes are the list (metadata=1, items=2).
 *
 * @example
 * const decoder = new ProtobufListDecoder(NODE_LIST, (node) => nodes.push(node), { omit: NODE_UNREAD });
 * for await (const chunk of response) decoder.write(chunk);
 * const { metadata } = decoder.end();
 */
export class ProtobufListDecoder {
  private readonly list: ProtobufList;
  private readonly item: Message;
  private readonly onItem: (item: unknown) => void;
  private readonly reader = new Reader();
  /** Bytes of the magic number matched so far. */
  private magic = 0;
  /** Bytes consumed since the start of the body. */
  private offset = 0;
  /** Where the list (the envelope's raw) ends, while inside it; -1 outside. */
  private rawEnd = -1;
  private rawSeen = false;
  /** The start of a header cut by the end of a chunk. */
  private head: Buffer = Buffer.alloc(0);
  /** An element cut by the end of a chunk, gathered until its length is in. */
  private pending: Buffer | undefined;
  private pendingFilled = 0;
  private pendingLength = 0;
  private scratch: Buffer = Buffer.alloc(0);
  private pendingElement: Element = ITEM_ELEMENT;
  private typeMeta: Record<string, unknown> = {};
  private metadata: Record<string, unknown> | undefined;

  /** `onItem` is called for every item, in order, from within write(). */
  constructor(
    list: ProtobufList,
    onItem: (item: unknown) => void,
    options: { omit?: readonly MemberPath[] } = {},
  ) {
    this.list = list;
    this.item = options.omit?.length ? omittingCached(list, options.omit) : list.item;
    this.onItem = onItem;
  }

  write(chunk: Buffer): void {
    let i = 0;
    const length = chunk.length;
    while (i < length) {
      if (this.magic < MAGIC.length) {
        if (chunk[i] !== MAGIC[this.magic])
          throw new ProtobufDecodeError('not a Kubernetes protobuf body (no k8s\\0)');
        this.magic++;
        i++;
        this.offset++;
        continue;
      }
      if (this.pending) {
        const pending = this.pending;
        const take = Math.min(this.pendingLength - this.pendingFilled, length - i);
        chunk.copy(pending, this.pendingFilled, i, i + take);
        this.pendingFilled += take;
        i += take;
        this.offset += take;
        if (this.pendingFilled === this.pendingLength) {
          this.pending = undefined;
          this.element(this.pendingElement, pending, 0, this.pendingLength);
        }
        continue;
      }
      if (this.offset === this.rawEnd) {
        this.rawEnd = -1;
        continue;
      }
      const next = this.header(chunk, i);
      if (next < 0) return;
      i = next;
    }
  }

  /** The list's fields besides its items, once the whole body is in. */
  end(): ProtobufListFields {
    if (this.offset === this.rawEnd) this.rawEnd = -1;
    if (
      this.magic < MAGIC.length ||
      this.pending ||
      this.head.length > 0 ||
      this.rawEnd >= 0 ||
      !this.rawSeen
    )
      throw new ProtobufDecodeError(`the ${this.list.kind} response ended early`);
    const { kind, apiVersion } = this.typeMeta as { kind?: string; apiVersion?: string };
    return {
      ...(kind !== undefined ? { kind } : {}),
      ...(apiVersion !== undefined ? { apiVersion } : {}),
      metadata: this.metadata ?? zero(LIST_META),
    };
  }

  /**
   * Reads the header (tag, length) of the next field at `i`, and then the field if this
   * chunk holds it: returns where reading goes on, or -1 when the chunk ended first.
   */
  private header(chunk: Buffer, i: number): number {
    const carried = this.head.length;
    const source = carried > 0 ? Buffer.concat([this.head, chunk.subarray(i, i + MAX_HEADER)]) : chunk;
    const start = carried > 0 ? 0 : i;
    const r = this.reader;
    r.reset(source, start, Math.min(source.length, start + MAX_HEADER));
    let tag: number;
    let size: number;
    try {
      tag = uint32(r, 'a field header');
      if ((tag & 7) !== LEN)
        throw new ProtobufUnknownFieldError(this.rawEnd >= 0 ? this.list.kind : 'runtime.Unknown', tag >>> 3);
      size = uint32(r, 'a field header');
    } catch (error) {
      // Cut by the end of the chunk: kept for the next one.
      if (
        !(error instanceof ProtobufUnknownFieldError) &&
        r.end - start < MAX_HEADER &&
        r.end === source.length
      ) {
        this.head = Buffer.from(source.subarray(start));
        this.offset += chunk.length - i;
        return -1;
      }
      throw error;
    }
    const used = r.pos - start - carried;
    this.head = Buffer.alloc(0);
    this.offset += used;
    i += used;
    const number = tag >>> 3;
    if (size > MAX_ELEMENT) throw new ProtobufDecodeError(`a field ${String(size)} bytes long`);
    let element: Element;
    if (this.rawEnd < 0) {
      switch (number) {
        case 1:
          element = TYPE_META_ELEMENT;
          break;
        case 2:
          // The list: its fields are read as the envelope's were, up to its end.
          if (this.rawSeen) throw new ProtobufDecodeError('two lists in one body');
          this.rawSeen = true;
          this.rawEnd = this.offset + size;
          return i;
        case 3:
          element = CONTENT_ENCODING_ELEMENT;
          break;
        case 4:
          element = CONTENT_TYPE_ELEMENT;
          break;
        default:
          throw new ProtobufUnknownFieldError('runtime.Unknown', number);
      }
    } else {
      if (this.offset + size > this.rawEnd) throw truncated(this.list.kind);
      if (number === 1) element = LIST_META_ELEMENT;
      else if (number === 2) element = ITEM_ELEMENT;
      else throw new ProtobufUnknownFieldError(this.list.kind, number);
    }
    if (chunk.length - i >= size) {
      this.offset += size;
      this.element(element, chunk, i, i + size);
      return i + size;
    }
    // One buffer for every cut element: the decoded objects keep none of its bytes.
    if (size > MAX_SCRATCH) this.pending = Buffer.allocUnsafe(size);
    else {
      if (this.scratch.length < size)
        this.scratch = Buffer.allocUnsafe(Math.min(MAX_SCRATCH, Math.max(size, 2 * this.scratch.length)));
      this.pending = this.scratch;
    }
    this.pendingLength = size;
    this.pendingFilled = 0;
    this.pendingElement = element;
    return i;
  }

  private element(element: Element, buf: Buffer, start: number, end: number): void {
    const r = this.reader;
    r.reset(buf, start, end);
    switch (element) {
      case ITEM_ELEMENT:
        this.onItem(readMessage(r, end, this.item));
        return;
      case LIST_META_ELEMENT:
        this.metadata = readMessage(r, end, LIST_META);
        return;
      case TYPE_META_ELEMENT: {
        this.typeMeta = readMessage(r, end, TYPE_META);
        const kind = this.typeMeta.kind;
        if (kind !== this.list.kind)
          throw new ProtobufDecodeError(`expected a ${this.list.kind}, the server sent a ${String(kind)}`);
        return;
      }
      case CONTENT_ENCODING_ELEMENT: {
        const encoding = text(buf, start, end);
        if (encoding !== '')
          throw new ProtobufDecodeError(`the list is encoded as ${encoding}, which this decoder cannot read`);
        return;
      }
      case CONTENT_TYPE_ELEMENT:
        return;
    }
  }
}

/** Tables with members omitted, by list and omitted paths: built once, not per page. */
const omittedTables = new WeakMap<ProtobufList, Map<string, Message>>();
function omittingCached(list: ProtobufList, omit: readonly MemberPath[]): Message {
  let byPaths = omittedTables.get(list);
  if (!byPaths) omittedTables.set(list, (byPaths = new Map<string, Message>()));
  const key = JSON.stringify(omit);
  let table = byPaths.get(key);
  if (!table) byPaths.set(key, (table = omitting(list.item, omit)));
  return table;
}

/**
 * A Status (an API server's refusal) in the protobuf encoding, as its JSON would be; a
 * body that is not one gives a message saying so, for this reads only refusals.
 */
export function decodeStatus(body: Buffer): Record<string, unknown> {
  try {
    if (!body.subarray(0, MAGIC.length).equals(MAGIC)) throw new ProtobufDecodeError('no magic number');
    const r = new Reader();
    r.reset(body, MAGIC.length, body.length);
    const unknown = readEnvelope(r, body.length);
    const status = unknown.raw ? readMessage(r, unknown.raw[1], STATUS) : {};
    return { ...unknown.typeMeta, ...status };
  } catch (error) {
    return { message: `unreadable protobuf Status (${String(error)})` };
  }
}

/** A whole runtime.Unknown: its typeMeta, and where its raw bytes are. */
function readEnvelope(
  r: Reader,
  end: number,
): { typeMeta: Record<string, unknown>; raw: [number, number] | undefined } {
  let typeMeta: Record<string, unknown> = {};
  let raw: [number, number] | undefined;
  while (r.pos < end) {
    const tag = uint32(r, 'runtime.Unknown');
    const valueEnd = lengthEnd(r, end, 'runtime.Unknown');
    if (tag === 0x0a) typeMeta = readMessage(r, valueEnd, TYPE_META);
    else if (tag === 0x12) raw = [r.pos, valueEnd];
    r.pos = valueEnd;
  }
  if (raw) r.pos = raw[0];
  return { typeMeta, raw };
}
