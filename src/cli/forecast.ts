// The drain forecast of an action (status.drainForecast) for `gatehouse actions describe`:
// its counts, each Pod it names with what is wrong, and what it simulates.
import type { DrainForecast } from '../api/node-action.ts';
import { FORECAST_SCOPE, forecastPodWords } from '../actions/drain-forecast-record.ts';
import type { Style } from './style.ts';
import { age, oneLine } from './table.ts';

/** The forecast's lines, a heading first; none when the action has no forecast. */
export function forecastLines(forecast: DrainForecast | undefined, now: Date, style: Style): string[] {
  if (!forecast) return [];
  const heading = `Drain forecast (made ${forecast.time}, ${age(forecast.time, now)} ago):`;
  if (forecast.evicted === 0 && !forecast.pods)
    return [heading, `  ${oneLine(forecast.message.replace(` (${FORECAST_SCOPE})`, ''), 200)}`];
  const counts = [
    `${String(forecast.evicted)} Pod${forecast.evicted === 1 ? '' : 's'} to evict`,
    `${String(forecast.blockedByPDB)} held by a PodDisruptionBudget`,
    `${String(forecast.fitsNowhere)} fitting nowhere`,
    `${String(forecast.unmanaged)} unmanaged`,
    ...(forecast.notJudged ? [`${String(forecast.notJudged)} not judged`] : []),
    ...(forecast.leftInPlace ? [`${String(forecast.leftInPlace)} left in place`] : []),
  ];
  const lines = [heading, `  ${counts.join(', ')}`];
  for (const p of forecast.pods ?? []) {
    const holds = p.podDisruptionBudget !== undefined || p.fitsNowhere !== undefined;
    lines.push(`  ${holds ? style.bad('✗') : style.warn('–')} ${oneLine(forecastPodWords(p), 200)}`);
  }
  if (forecast.morePods) lines.push(`    and ${String(forecast.morePods)} more`);
  lines.push(style.dim(`  ${FORECAST_SCOPE}`));
  return lines;
}
