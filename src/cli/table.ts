// Aligned text tables, kubectl-style: upper-case headers, columns separated by three
// spaces, no borders. Cells may carry colour; alignment ignores the escape codes.
import { visibleLength } from './style.ts';

export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => visibleLength(r[i] ?? ''))));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) =>
        i === cells.length - 1 ? cell : cell + ' '.repeat((widths[i] ?? 0) - visibleLength(cell)),
      )
      .join('   ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

/** A duration in the largest unit that fits, kubectl's AGE way: 45s, 12m, 5h, 3d. */
export function age(fromIso: string | undefined | null, now: Date): string {
  if (!fromIso) return '-';
  const seconds = Math.max(0, Math.floor((now.getTime() - Date.parse(fromIso)) / 1000));
  if (!Number.isFinite(seconds)) return '-';
  if (seconds < 120) return `${String(seconds)}s`;
  if (seconds < 7200) return `${String(Math.floor(seconds / 60))}m`;
  if (seconds < 172_800) return `${String(Math.floor(seconds / 3600))}h`;
  return `${String(Math.floor(seconds / 86_400))}d`;
}

/** Elapsed time for progress: 7s, 1m05s, 1h02m. */
export function elapsed(ms: number): string {
  const seconds = Math.max(0, Math.floor(ms / 1000));
  if (seconds < 60) return `${String(seconds)}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${String(minutes)}m${String(seconds % 60).padStart(2, '0')}s`;
  return `${String(Math.floor(minutes / 60))}h${String(minutes % 60).padStart(2, '0')}m`;
}

/** One line of a free-text cell: newlines folded, long text cut with an ellipsis. */
export function oneLine(text: string | undefined, max = 80): string {
  const flat = (text ?? '').replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}
