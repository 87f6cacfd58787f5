// Decodes a list response (`{"kind":…,"metadata":{…},"items":[…]}`) as its bytes arrive,
// handing each item over as soon as it is complete. A page of 500 busy Nodes is ~7 MB of
// JSON: read whole, it sits in memory as the bytes, as one string of them and as 500 Nodes
// parsed in full before the first can be trimmed, and V8 grows its heap to hold that and
// keeps the size (docs/decisions.md, "What the controller caches"). Here one item at a time
// is held undecoded, and each is garbage as soon as the caller has kept what it needs.
//
// The scan is over bytes, not characters: every byte of a multi-byte UTF-8 sequence is
// ≥ 0x80, so none is mistaken for a quote, a bracket or a comma, and a chunk may end
// anywhere — inside a string, an escape or a character. The scan only finds where each
// piece ends; each item and each other field is then read by JSON.parse, so malformed
// input is refused, never guessed at.
//
// Members the caller would throw away (`omit`: a Node's status.images, most of its bytes)
// are cut out of an item's bytes before JSON.parse, so that they are never decoded: the
// scan already walks every structural byte, and parsing is what costs. Only an omitted
// member's brackets and strings are checked; what it holds is never read.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

const isSpace = (byte: number) => byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
const blank = (bytes: Buffer) => bytes.every(isSpace);

/** The response is not the JSON list it should be. */
export class ListDecodeError extends Error {
  override readonly name = 'ListDecodeError';
}

/**
 * What the current segment (the bytes since the last delimiter that matters) is: a key of
 * the list object, a value of it, an element of `items`, or what follows `items`' `]`.
 */
type Segment = 'key' | 'value' | 'item' | 'after-items';

/** A member of an item, by its keys from the item down: `['status', 'images']`. */
export type MemberPath = readonly string[];

/** Keys longer than this are never one to omit: their bytes are not collected. */
const MAX_OMITTED_KEY = 64;

/**
 * Follows the members of one item down to the depth of the longest omitted path, and
 * notes the byte ranges of those to omit. Depths are the item's own: 1 is the item.
 * Offsets are into the item's bytes. Keys are compared as their raw bytes: a key written
 * with escapes is simply not omitted (the caller's own trimming still applies).
 */
class MemberCutter {
  private readonly paths: ReadonlySet<string>;
  readonly maxDepth: number;
  private readonly isObject: boolean[] = [];
  private readonly expectKey: boolean[] = [];
  /** The key of the member being read at each depth, once its colon is past. */
  private readonly memberKey: (string | undefined)[] = [];
  /** The path of the container at each depth (each key after a NUL), undefined if it has none. */
  private readonly prefix: (string | undefined)[] = [];
  /** The offset of the last comma at each depth that is still in the output, or -1. */
  private readonly lastComma: number[] = [];
  private keyParts: Buffer[] | undefined;
  private keyLength = 0;
  private keyStart = 0;
  private key: string | undefined;
  /** The member being cut: its depth (0 for none), where it starts, the comma before it. */
  private cutDepth = 0;
  private cutStart = 0;
  private cutCommaBefore = -1;
  /** [start, end) pairs, in the order found. */
  private cuts: number[] = [];

  constructor(paths: readonly MemberPath[]) {
    this.paths = new Set(paths.map((path) => path.map((key) => `\0${key}`).join('')));
    this.maxDepth = Math.max(0, ...paths.map((path) => path.length));
  }

  get capturing(): boolean {
    return this.keyParts !== undefined;
  }

  open(depth: number, object: boolean): void {
    if (depth > this.maxDepth) return;
    this.isObject[depth] = object;
    this.expectKey[depth] = object;
    this.memberKey[depth] = undefined;
    this.lastComma[depth] = -1;
    const up = depth - 1;
    const parentKey = this.memberKey[up];
    const parentPrefix = this.prefix[up];
    this.prefix[depth] =
      depth === 1
        ? ''
        : parentKey !== undefined && parentPrefix !== undefined
          ? `${parentPrefix}\0${parentKey}`
          : undefined;
  }

  stringStarts(depth: number, offset: number): void {
    if (depth > this.maxDepth || !this.expectKey[depth]) return;
    this.expectKey[depth] = false;
    if (this.prefix[depth] === undefined || this.cutDepth !== 0) return;
    this.keyParts = [];
    this.keyLength = 0;
    this.keyStart = offset;
  }

  /** Bytes of the key being collected, up to its closing quote (`closed`). */
  keyBytes(bytes: Buffer, closed: boolean): void {
    const parts = this.keyParts as Buffer[];
    this.keyLength += bytes.length;
    if (this.keyLength <= MAX_OMITTED_KEY) parts.push(bytes);
    if (!closed) return;
    this.key = this.keyLength <= MAX_OMITTED_KEY ? Buffer.concat(parts).toString('latin1') : undefined;
    this.keyParts = undefined;
  }

  colon(depth: number): void {
    if (depth > this.maxDepth || !this.isObject[depth]) return;
    const key = this.key;
    this.key = undefined;
    this.memberKey[depth] = key;
    const prefix = this.prefix[depth];
    if (key === undefined || prefix === undefined || this.cutDepth !== 0) return;
    if (this.paths.has(`${prefix}\0${key}`)) {
      this.cutDepth = depth;
      this.cutStart = this.keyStart;
      this.cutCommaBefore = this.lastComma[depth] as number;
    }
  }

  comma(depth: number, offset: number): void {
    if (depth > this.maxDepth || !this.isObject[depth]) return;
    this.expectKey[depth] = true;
    this.memberKey[depth] = undefined;
    if (this.cutDepth === depth) {
      // The member and the comma after it go; the comma before it stays, and is the one a
      // later omitted last member takes with it.
      this.cuts.push(this.cutStart, offset + 1);
      this.cutDepth = 0;
    } else this.lastComma[depth] = offset;
  }

  /** The container at `depth` closes at `offset`. */
  close(depth: number, offset: number): void {
    if (this.cutDepth !== depth) return;
    // The last member: it goes with the comma before it, if it had one.
    this.cuts.push(this.cutCommaBefore >= 0 ? this.cutCommaBefore : this.cutStart, offset);
    this.cutDepth = 0;
  }

  /** The item's bytes without the members cut; ready for the next item. */
  trim(bytes: Buffer): Buffer {
    const cuts = this.cuts;
    this.cuts = [];
    this.cutDepth = 0;
    this.keyParts = undefined;
    this.key = undefined;
    if (cuts.length === 0) return bytes;
    const ranges: [number, number][] = [];
    for (let i = 0; i < cuts.length; i += 2) ranges.push([cuts[i] as number, cuts[i + 1] as number]);
    ranges.sort((a, b) => a[0] - b[0]);
    const kept: Buffer[] = [];
    let from = 0;
    for (const [start, end] of ranges) {
      if (start > from) kept.push(bytes.subarray(from, start));
      from = Math.max(from, end);
    }
    kept.push(bytes.subarray(from));
    return Buffer.concat(kept);
  }
}

export interface ListDecoderOptions {
  /** Members of every item to leave out, never decoded (see above). */
  omit?: readonly MemberPath[];
}

export class ListDecoder {
  /** Containers open around the current byte: 1 inside the list object, 2 inside `items`. */
  private depth = 0;
  private inString = false;
  private escaped = false;
  private segment: Segment = 'key';
  /** The current segment's bytes from earlier chunks. */
  private pieces: Buffer[] = [];
  private piecesLength = 0;
  private readonly cutter: MemberCutter | undefined;
  private key = '';
  private done = false;
  private itemsSeen = false;
  private readonly fields: Record<string, unknown> = {};
  private readonly onItem: (item: unknown) => void;

  /** `onItem` is called for every element of `items`, in order, from within write(). */
  constructor(onItem: (item: unknown) => void, options: ListDecoderOptions = {}) {
    this.onItem = onItem;
    if (options.omit?.length) this.cutter = new MemberCutter(options.omit);
  }

  write(chunk: Buffer): void {
    // Where the current segment starts in this chunk; -1 outside the list object.
    let start = this.depth > 0 ? 0 : -1;
    const cutter = this.cutter;
    // The depths at which the cutter follows members: an item is at 3 (the list, then
    // `items`, then the item). Deeper bytes — most of them — cost no call.
    const deepest = cutter ? cutter.maxDepth + 2 : 0;
    for (let i = 0; i < chunk.length; i++) {
      if (this.inString) {
        const from = i;
        i = this.skipString(chunk, i);
        // skipString ends the string when it finds the closing quote (a wider type than the
        // `true` this branch narrowed it to).
        const goesOn = this.inString as boolean;
        if (cutter?.capturing) cutter.keyBytes(chunk.subarray(from, goesOn ? chunk.length : i), !goesOn);
        continue;
      }
      const byte = chunk[i] as number;
      if (this.depth === 0) {
        if (this.done || byte !== OPEN_OBJECT) {
          if (isSpace(byte)) continue;
          throw new ListDecodeError(this.done ? 'data after the list' : 'a list response is a JSON object');
        }
        this.depth = 1;
        start = i + 1;
        continue;
      }
      switch (byte) {
        case QUOTE:
          this.inString = true;
          if (this.depth <= deepest && this.depth > 2 && this.segment === 'item')
            cutter?.stringStarts(this.depth - 2, this.piecesLength + i - start);
          break;
        case OPEN_OBJECT:
        case OPEN_ARRAY:
          this.depth++;
          if (this.depth <= deepest && this.depth > 2 && this.segment === 'item')
            cutter?.open(this.depth - 2, byte === OPEN_OBJECT);
          if (this.depth === 2 && this.segment === 'value' && this.key === 'items' && byte === OPEN_ARRAY) {
            // The items array: its elements are read one by one, the array never whole.
            if (!blank(this.take(chunk, start, i))) throw new ListDecodeError('malformed items');
            this.segment = 'item';
            start = i + 1;
          }
          break;
        case CLOSE_OBJECT:
        case CLOSE_ARRAY:
          if (this.depth <= deepest && this.depth > 2 && this.segment === 'item')
            cutter?.close(this.depth - 2, this.piecesLength + i - start);
          if (this.depth === 2 && this.segment === 'item') {
            if (byte !== CLOSE_ARRAY) throw new ListDecodeError('unbalanced brackets in items');
            this.item(this.take(chunk, start, i), true);
            this.segment = 'after-items';
            start = i + 1;
          } else if (this.depth === 1) {
            if (byte !== CLOSE_OBJECT) throw new ListDecodeError('unbalanced brackets');
            this.endField(this.take(chunk, start, i), true);
            this.done = true;
            start = -1;
          }
          this.depth--;
          break;
        case COLON:
          if (this.depth === 1 && this.segment === 'key') {
            const key = this.parse(this.take(chunk, start, i), 'a key');
            if (typeof key !== 'string') throw new ListDecodeError('a key of the list is not a string');
            this.key = key;
            this.segment = 'value';
            start = i + 1;
          } else if (this.depth <= deepest && this.depth > 2 && this.segment === 'item')
            cutter?.colon(this.depth - 2);
          break;
        case COMMA:
          if (this.depth === 1) {
            this.endField(this.take(chunk, start, i), false);
            this.segment = 'key';
            start = i + 1;
          } else if (this.depth === 2 && this.segment === 'item') {
            this.item(this.take(chunk, start, i), false);
            start = i + 1;
          } else if (this.depth <= deepest && this.depth > 2 && this.segment === 'item')
            cutter?.comma(this.depth - 2, this.piecesLength + i - start);
          break;
      }
    }
    if (start >= 0 && start < chunk.length) {
      this.pieces.push(chunk.subarray(start));
      this.piecesLength += chunk.length - start;
    }
  }

  /**
   * Inside a string from `i`: returns the index of its closing quote, or the chunk's last
   * index when it goes on into the next chunk. Most of a Node's bytes are in strings, so
   * they are skipped by indexOf (native) rather than byte by byte.
   */
  private skipString(chunk: Buffer, i: number): number {
    let from = i;
    if (this.escaped) {
      this.escaped = false;
      from++;
    }
    for (;;) {
      const quote = chunk.indexOf(QUOTE, from);
      const end = quote < 0 ? chunk.length : quote;
      let backslashes = 0;
      while (end - backslashes - 1 >= from && chunk[end - backslashes - 1] === BACKSLASH) backslashes++;
      if (quote < 0) {
        // A backslash ending the chunk escapes the first byte of the next.
        this.escaped = backslashes % 2 === 1;
        return chunk.length - 1;
      }
      if (backslashes % 2 === 0) {
        this.inString = false;
        return quote;
      }
      from = quote + 1;
    }
  }

  /** The list's fields other than its items (kind, apiVersion, metadata), once it is complete. */
  end(): Record<string, unknown> {
    if (!this.done || this.inString) throw new ListDecodeError('the list response ended early');
    return this.fields;
  }

  /** The current segment: the pieces from earlier chunks, and this chunk from start to end. */
  private take(chunk: Buffer, start: number, end: number): Buffer {
    const tail = chunk.subarray(start, end);
    const pieces = this.pieces;
    this.pieces = [];
    this.piecesLength = 0;
    if (pieces.length === 0) return tail;
    pieces.push(tail);
    return Buffer.concat(pieces);
  }

  private parse(bytes: Buffer, what: string): unknown {
    try {
      return JSON.parse(bytes.toString('utf8'));
    } catch (error) {
      throw new ListDecodeError(`${what} of the list is not JSON: ${(error as Error).message}`);
    }
  }

  private item(bytes: Buffer, last: boolean): void {
    // `[]` (or `[ ]`): no element. A blank element anywhere else is refused by JSON.parse.
    if (last && !this.itemsSeen && blank(bytes)) return;
    this.itemsSeen = true;
    this.onItem(this.parse(this.cutter ? this.cutter.trim(bytes) : bytes, 'an item'));
  }

  /** A field of the list object ends at a comma, or at the closing brace (`last`). */
  private endField(bytes: Buffer, last: boolean): void {
    switch (this.segment) {
      case 'key':
        // Only `{}` has no field where one should be.
        if (last && Object.keys(this.fields).length === 0 && blank(bytes)) return;
        throw new ListDecodeError('a field of the list has no value');
      case 'after-items':
        if (!blank(bytes)) throw new ListDecodeError('data after the items');
        return;
      case 'value':
        this.fields[this.key] = this.parse(bytes, `field ${JSON.stringify(this.key)}`);
        return;
      case 'item':
        throw new ListDecodeError('unbalanced brackets in items');
    }
  }
}
