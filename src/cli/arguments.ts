// Parsers for command-line values, shared by the commands: each refuses a bad value
// with a sentence commander prints after the option's name.
import { InvalidArgumentError } from 'commander';
import { parseDuration } from '../duration.ts';
import { errorMessage } from '../wait.ts';

/** A parser of whole numbers of at least `min`. */
export function wholeNumber(min: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`must be a whole number, ${String(min)} or more`);
    return n;
  };
}

/** A duration such as 90s or 10m, kept as written once it parses. */
export function duration(value: string): string {
  try {
    parseDuration(value);
  } catch (error) {
    throw new InvalidArgumentError(errorMessage(error));
  }
  return value;
}
