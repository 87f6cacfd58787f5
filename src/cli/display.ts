// Where progress goes. On a terminal: a live block per action in flight, redrawn in
// place as things change and every second (durations tick); finished actions leave
// one line above it. Anywhere else (a pipe, a CI log): one appended, timestamped line
// per change, never a control character.
import type { Progress } from './backend.ts';
import { progressEvents, progressLines } from './progress.ts';
import { type Style } from './style.ts';

export interface DisplayStream {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** Cuts a line to `width` visible characters, keeping escape sequences whole. */
export function truncateVisible(text: string, width: number): string {
  let out = '';
  let visible = 0;
  let styled = false;
  for (let i = 0; i < text.length;) {
    if (text[i] === '\x1b') {
      const end = text.indexOf('m', i);
      if (end < 0) break;
      out += text.slice(i, end + 1);
      styled = true;
      i = end + 1;
      continue;
    }
    const char = String.fromCodePoint(text.codePointAt(i) ?? 0x3f);
    if (visible >= width) return styled ? `${out}\x1b[0m` : out;
    out += char;
    visible++;
    i += char.length;
  }
  return out;
}

function clock(date: Date): string {
  return date.toTimeString().slice(0, 8);
}

export class LiveDisplay {
  private readonly stream: DisplayStream;
  private readonly live: boolean;
  private readonly style: Style;
  private readonly now: () => Date;
  private readonly entries = new Map<string, Progress>();
  private drawn = 0;
  private timer: NodeJS.Timeout | undefined;
  private pending: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(stream: DisplayStream, options: { live: boolean; style: Style; now?: () => Date }) {
    this.stream = stream;
    this.live = options.live;
    this.style = options.style;
    this.now = options.now ?? (() => new Date());
    if (this.live) {
      this.timer = setInterval(() => this.draw(), 1000);
      this.timer.unref();
    }
  }

  /** A new observation of an action in flight. */
  update(name: string, progress: Progress): void {
    if (this.closed) return;
    const previous = this.entries.get(name);
    this.entries.set(name, progress);
    if (this.live) this.schedule();
    else for (const line of progressEvents(previous, progress)) this.plain(line);
  }

  /** The action is over (for this command): its block goes, `line` stays. */
  finish(name: string, line: string): void {
    this.entries.delete(name);
    this.note(line);
  }

  /** A line that stays, above the live block. */
  note(line: string): void {
    if (this.closed) return;
    if (!this.live) {
      this.plain(line);
      return;
    }
    this.erase();
    this.stream.write(`${line}\n`);
    this.draw();
  }

  close(): void {
    if (this.closed) return;
    if (this.live) this.draw();
    this.closed = true;
    clearInterval(this.timer);
    clearTimeout(this.pending);
  }

  private plain(line: string): void {
    this.stream.write(`${clock(this.now())} ${line}\n`);
  }

  private schedule(): void {
    // At most ten redraws a second however fast observations come.
    this.pending ??= setTimeout(() => {
      this.pending = undefined;
      this.draw();
    }, 100);
  }

  private erase(): void {
    if (this.drawn > 0) this.stream.write(`\r\x1b[${String(this.drawn)}A\x1b[J`);
    this.drawn = 0;
  }

  private draw(): void {
    if (this.closed) return;
    // A terminal that does not know its size says 0 columns.
    const width = Math.max(20, (this.stream.columns || 100) - 1);
    const now = this.now();
    const lines = [...this.entries].flatMap(([name, progress]) =>
      progressLines(name, progress, now, this.style),
    );
    this.erase();
    if (lines.length === 0) return;
    this.stream.write(lines.map((l) => `${truncateVisible(l, width)}\n`).join(''));
    this.drawn = lines.length;
  }
}
