// The headline figures of a `npm run bench` run, gathered as the benchmarks report them
// and printed together at the end, each beside its target where it has one.
import { report } from './stats.ts';

const figures: [string, string][] = [];

export function record(name: string, value: string, target?: string): void {
  figures.push([name, target ? `${value}  (target ${target})` : value]);
}

export function printSummary(): void {
  if (figures.length > 0) report('summary', figures);
}
