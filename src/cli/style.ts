// Colour for people, plain text for everything else: styles apply only when the stream
// is a terminal, and never with NO_COLOR set or TERM=dumb (FORCE_COLOR forces them).
import { styleText } from 'node:util';

type Format = Parameters<typeof styleText>[0];

export interface Style {
  readonly enabled: boolean;
  good: (text: string) => string;
  bad: (text: string) => string;
  warn: (text: string) => string;
  busy: (text: string) => string;
  dim: (text: string) => string;
  bold: (text: string) => string;
}

export function colourWanted(stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '0') return true;
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.TERM === 'dumb') return false;
  return stream.isTTY === true;
}

export function makeStyle(enabled: boolean): Style {
  const apply = (format: Format) => (text: string) =>
    enabled ? styleText(format, text, { validateStream: false }) : text;
  return {
    enabled,
    good: apply('green'),
    bad: apply('red'),
    warn: apply('yellow'),
    busy: apply('cyan'),
    dim: apply('dim'),
    bold: apply('bold'),
  };
}

export const PLAIN = makeStyle(false);

/** Visible width of a string: without escape sequences. */
export function visibleLength(text: string): number {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\x1b\[[0-9;]*m/g, '').length;
}
