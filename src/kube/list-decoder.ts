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

export class ListDecoder {
  /** Containers open around the current byte: 1 inside the list object, 2 inside `items`. */
  private depth = 0;
  private inString = false;
  private escaped = false;
  private segment: Segment = 'key';
  /** The current segment's bytes from earlier chunks. */
  private pieces: Buffer[] = [];
  private key = '';
  private done = false;
  private itemsSeen = false;
  private readonly fields: Record<string, unknown> = {};
  private readonly onItem: (item: unknown) => void;

  /** `onItem` is called for every element of `items`, in order, from within write(). */
  constructor(onItem: (item: unknown) => void) {
    this.onItem = onItem;
  }

  write(chunk: Buffer): void {
    // Where the current segment starts in this chunk; -1 outside the list object.
    let start = this.depth > 0 ? 0 : -1;
    for (let i = 0; i < chunk.length; i++) {
      if (this.inString) {
        i = this.skipString(chunk, i);
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
          break;
        case OPEN_OBJECT:
        case OPEN_ARRAY:
          this.depth++;
          if (this.depth === 2 && this.segment === 'value' && this.key === 'items' && byte === OPEN_ARRAY) {
            // The items array: its elements are read one by one, the array never whole.
            if (!blank(this.take(chunk, start, i))) throw new ListDecodeError('malformed items');
            this.segment = 'item';
            start = i + 1;
          }
          break;
        case CLOSE_OBJECT:
        case CLOSE_ARRAY:
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
          }
          break;
        case COMMA:
          if (this.depth === 1) {
            this.endField(this.take(chunk, start, i), false);
            this.segment = 'key';
            start = i + 1;
          } else if (this.depth === 2 && this.segment === 'item') {
            this.item(this.take(chunk, start, i), false);
            start = i + 1;
          }
          break;
      }
    }
    if (start >= 0 && start < chunk.length) this.pieces.push(chunk.subarray(start));
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
    this.onItem(this.parse(bytes, 'an item'));
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
