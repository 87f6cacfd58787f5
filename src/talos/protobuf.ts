// A small proto3 wire-format codec, driven by message descriptions written in
// TypeScript (see messages.ts). gatehouse speaks a handful of Talos messages; a table
// of field numbers and types per message is all the wire format needs, and the
// TypeScript types of the decoded messages are derived from the same table.
//
// Wire format: every field is a key (field number << 3 | wire type) followed by a
// varint (0), 64-bit (1), length-delimited (2) or 32-bit (5) value. proto3 omits
// fields holding their zero value unless they have explicit presence (`optional` or a
// oneof member), packs repeated numbers, and a decoder skips fields it does not know.

export type ScalarKind = 'string' | 'bytes' | 'bool' | 'int32' | 'uint32' | 'int64' | 'uint64' | 'enum';

interface FieldBase {
  /** The field number on the wire. */
  readonly no: number;
  readonly repeated?: boolean;
  /** Explicit presence (a oneof member or `optional`): sent even when zero, absent when unset. */
  readonly explicit?: boolean;
}

export interface ScalarField<K extends ScalarKind = ScalarKind> extends FieldBase {
  readonly kind: K;
}

export interface MessageField<F extends Fields = Fields> extends FieldBase {
  readonly kind: 'message';
  readonly type: MessageType<F>;
}

export type Field = ScalarField | MessageField;

export interface Fields {
  readonly [name: string]: Field;
}

export interface MessageType<F extends Fields = Fields> {
  /** The fully qualified protobuf name, e.g. `machine.RebootRequest`. */
  readonly name: string;
  readonly fields: F;
}

interface ScalarValues {
  string: string;
  bytes: Uint8Array;
  bool: boolean;
  int32: number;
  uint32: number;
  // 64-bit integers are read as numbers: exact up to 2^53, which byte counts and
  // durations never reach.
  int64: number;
  uint64: number;
  enum: number;
}

type Single<F> =
  F extends MessageField<infer M> ? Message<M> : F extends ScalarField<infer K> ? ScalarValues[K] : never;

type Value<F> = F extends { readonly repeated: true }
  ? Single<F>[]
  : F extends { readonly kind: 'message' }
    ? Single<F> | undefined
    : F extends { readonly explicit: true }
      ? Single<F> | undefined
      : Single<F>;

/** A decoded message: every field present, zero values filled in as proto3 does. */
export type Message<F extends Fields> = { -readonly [K in keyof F]: Value<F[K]> };

type InitValue<F> =
  F extends MessageField<infer M>
    ? F extends { readonly repeated: true }
      ? MessageInit<M>[]
      : MessageInit<M>
    : Value<F>;

/** What to encode: any field may be left out (it is then its zero value). */
export type MessageInit<F extends Fields> = { [K in keyof F]?: InitValue<F[K]> };

/** Declares a message; `const` keeps the field table's literal types for Message<>. */
export function message<const F extends Fields>(name: string, fields: F): MessageType<F> {
  const numbers = new Set<number>();
  for (const [fieldName, field] of Object.entries(fields)) {
    if (!Number.isInteger(field.no) || field.no < 1 || field.no > 536_870_911)
      throw new Error(`${name}.${fieldName}: ${String(field.no)} is not a valid field number`);
    if (numbers.has(field.no))
      throw new Error(`${name}.${fieldName}: field number ${String(field.no)} twice`);
    numbers.add(field.no);
  }
  return { name, fields };
}

const WireType = { Varint: 0, Fixed64: 1, LengthDelimited: 2, Fixed32: 5 } as const;
type WireType = (typeof WireType)[keyof typeof WireType];

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

class Writer {
  private chunks: number[] = [];

  varint(value: bigint): void {
    // Negative numbers are sent as their 64-bit two's complement: ten bytes.
    let v = BigInt.asUintN(64, value);
    while (v > 0x7fn) {
      this.chunks.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    this.chunks.push(Number(v));
  }

  key(no: number, wireType: WireType): void {
    this.varint(BigInt(no * 8 + wireType));
  }

  bytes(data: Uint8Array): void {
    this.varint(BigInt(data.length));
    for (const b of data) this.chunks.push(b);
  }

  finish(): Uint8Array {
    return Uint8Array.from(this.chunks);
  }
}

function isZero(kind: ScalarKind, value: unknown): boolean {
  switch (kind) {
    case 'string':
      return value === '';
    case 'bytes':
      return (value as Uint8Array).length === 0;
    case 'bool':
      return value === false;
    default:
      return value === 0;
  }
}

function integer(kind: ScalarKind, value: unknown, where: string): bigint {
  if (typeof value !== 'number' || !Number.isInteger(value))
    throw new TypeError(`${where}: expected an integer, got ${JSON.stringify(value)}`);
  const limits: Partial<Record<ScalarKind, [number, number]>> = {
    int32: [-(2 ** 31), 2 ** 31 - 1],
    enum: [-(2 ** 31), 2 ** 31 - 1],
    uint32: [0, 2 ** 32 - 1],
    uint64: [0, Number.MAX_SAFE_INTEGER],
    int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  };
  const [min, max] = limits[kind] ?? [0, 0];
  if (value < min || value > max)
    throw new RangeError(`${where}: ${String(value)} is out of range for ${kind}`);
  return BigInt(value);
}

function writeScalar(w: Writer, kind: ScalarKind, value: unknown, where: string): void {
  switch (kind) {
    case 'string':
      if (typeof value !== 'string') throw new TypeError(`${where}: expected a string`);
      w.bytes(utf8Encoder.encode(value));
      return;
    case 'bytes':
      if (!(value instanceof Uint8Array)) throw new TypeError(`${where}: expected bytes (Uint8Array)`);
      w.bytes(value);
      return;
    case 'bool':
      if (typeof value !== 'boolean') throw new TypeError(`${where}: expected a boolean`);
      w.varint(value ? 1n : 0n);
      return;
    default:
      w.varint(integer(kind, value, where));
  }
}

const lengthDelimited = (kind: ScalarKind) => kind === 'string' || kind === 'bytes';

function writeMessage(w: Writer, type: MessageType, init: Record<string, unknown>): void {
  for (const [name, field] of Object.entries(type.fields)) {
    const value = init[name];
    if (value === undefined) continue;
    const where = `${type.name}.${name}`;
    if (field.repeated) {
      if (!Array.isArray(value)) throw new TypeError(`${where}: expected an array`);
      if (field.kind !== 'message' && !lengthDelimited(field.kind)) {
        if (value.length === 0) continue;
        const packed = new Writer();
        for (const item of value) writeScalar(packed, field.kind, item, where);
        w.key(field.no, WireType.LengthDelimited);
        w.bytes(packed.finish());
        continue;
      }
      for (const item of value) writeField(w, field, item, where);
      continue;
    }
    if (field.kind !== 'message' && !field.explicit && isZero(field.kind, value)) continue;
    writeField(w, field, value, where);
  }
}

function writeField(w: Writer, field: Field, value: unknown, where: string): void {
  if (field.kind === 'message') {
    if (typeof value !== 'object' || value === null) throw new TypeError(`${where}: expected a message`);
    const inner = new Writer();
    writeMessage(inner, field.type, value as Record<string, unknown>);
    w.key(field.no, WireType.LengthDelimited);
    w.bytes(inner.finish());
    return;
  }
  w.key(field.no, lengthDelimited(field.kind) ? WireType.LengthDelimited : WireType.Varint);
  writeScalar(w, field.kind, value, where);
}

/** The wire bytes of a message. Unknown keys in `init` are ignored; wrong types throw. */
export function encode<F extends Fields>(type: MessageType<F>, init: MessageInit<F>): Uint8Array {
  const w = new Writer();
  writeMessage(w, type, init);
  return w.finish();
}

export class DecodeError extends Error {
  override readonly name = 'DecodeError';
}

class Reader {
  private pos = 0;
  private readonly buf: Uint8Array;
  private readonly what: string;

  constructor(buf: Uint8Array, what: string) {
    this.buf = buf;
    this.what = what;
  }

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  varint(): bigint {
    let result = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const byte = this.buf[this.pos++];
      if (byte === undefined) throw new DecodeError(`${this.what}: truncated varint`);
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return BigInt.asUintN(64, result);
    }
    throw new DecodeError(`${this.what}: varint longer than ten bytes`);
  }

  take(length: number): Uint8Array {
    if (this.pos + length > this.buf.length)
      throw new DecodeError(`${this.what}: field of ${String(length)} bytes runs past the end`);
    const slice = this.buf.subarray(this.pos, this.pos + length);
    this.pos += length;
    return slice;
  }

  lengthDelimited(): Uint8Array {
    return this.take(Number(this.varint()));
  }

  skip(wireType: number, no: number): void {
    switch (wireType) {
      case WireType.Varint:
        this.varint();
        return;
      case WireType.Fixed64:
        this.take(8);
        return;
      case WireType.LengthDelimited:
        this.lengthDelimited();
        return;
      case WireType.Fixed32:
        this.take(4);
        return;
      default:
        throw new DecodeError(
          `${this.what}: field ${String(no)} has unsupported wire type ${String(wireType)}`,
        );
    }
  }
}

function scalarFromVarint(kind: ScalarKind, raw: bigint): unknown {
  switch (kind) {
    case 'bool':
      return raw !== 0n;
    case 'int32':
    case 'enum':
      return Number(BigInt.asIntN(32, raw));
    case 'uint32':
      return Number(BigInt.asUintN(32, raw));
    case 'int64':
      return Number(BigInt.asIntN(64, raw));
    default:
      return Number(raw);
  }
}

function zeroOf(field: Field): unknown {
  if (field.repeated) return [];
  if (field.kind === 'message' || field.explicit) return undefined;
  switch (field.kind) {
    case 'string':
      return '';
    case 'bytes':
      return new Uint8Array(0);
    case 'bool':
      return false;
    default:
      return 0;
  }
}

function readMessage(type: MessageType, buf: Uint8Array): Record<string, unknown> {
  const byNumber = new Map<number, [string, Field]>();
  const out: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(type.fields)) {
    byNumber.set(field.no, [name, field]);
    out[name] = zeroOf(field);
  }
  const r = new Reader(buf, type.name);
  while (!r.done) {
    const key = r.varint();
    const no = Number(key >> 3n);
    const wireType = Number(key & 7n);
    const known = byNumber.get(no);
    if (!known) {
      r.skip(wireType, no);
      continue;
    }
    const [name, field] = known;
    const where = `${type.name}.${name}`;
    const values: unknown[] = [];
    if (field.kind === 'message') {
      if (wireType !== WireType.LengthDelimited)
        throw new DecodeError(`${where}: expected a message, got wire type ${String(wireType)}`);
      values.push(readMessage(field.type, r.lengthDelimited()));
    } else if (lengthDelimited(field.kind)) {
      if (wireType !== WireType.LengthDelimited)
        throw new DecodeError(`${where}: expected ${field.kind}, got wire type ${String(wireType)}`);
      const data = r.lengthDelimited();
      if (field.kind === 'bytes') values.push(Uint8Array.from(data));
      else {
        try {
          values.push(utf8Decoder.decode(data));
        } catch {
          throw new DecodeError(`${where}: not valid UTF-8`);
        }
      }
    } else if (wireType === WireType.Varint) {
      values.push(scalarFromVarint(field.kind, r.varint()));
    } else if (wireType === WireType.LengthDelimited && field.repeated) {
      // A packed run of varints.
      const packed = new Reader(r.lengthDelimited(), where);
      while (!packed.done) values.push(scalarFromVarint(field.kind, packed.varint()));
    } else {
      throw new DecodeError(`${where}: expected a varint, got wire type ${String(wireType)}`);
    }
    // A field sent twice keeps the last value (messages are not merged: Talos never
    // splits one).
    if (field.repeated) (out[name] as unknown[]).push(...values);
    else out[name] = values[values.length - 1];
  }
  return out;
}

/** Decodes wire bytes; fields this side does not know are skipped, as proto3 requires. */
export function decode<F extends Fields>(type: MessageType<F>, bytes: Uint8Array): Message<F> {
  return readMessage(type, bytes) as Message<F>;
}
