// The drain forecast of an action (status.drainForecast) as the dashboard shows it: its
// summary, each Pod it names with what is wrong in words, and what the simulation covers.
import { FORECAST_SCOPE, forecastPodWords } from '../actions/drain-forecast-record.ts';
import type { NodeActionStatus } from '../api/node-action.ts';

export interface DrainForecastRow {
  time: string;
  /** "3 Pods to evict: 1 held by a PodDisruptionBudget, 1 fitting nowhere, 1 unmanaged" */
  summary: string;
  /** Each Pod named; `holds`: a budget at its limit or nowhere to go (else: unmanaged only). */
  pods: { namespace: string; pod: string; holds: boolean; text: string }[];
  more: number;
  /** What is and is not simulated. */
  scope: string;
}

/** The forecast for the dashboard; null when the action has none. */
export function forecastRow(forecast: NodeActionStatus['drainForecast']): DrainForecastRow | null {
  if (!forecast) return null;
  const findings = [
    ...(forecast.blockedByPDB > 0 ? [`${String(forecast.blockedByPDB)} held by a PodDisruptionBudget`] : []),
    ...(forecast.fitsNowhere > 0 ? [`${String(forecast.fitsNowhere)} fitting nowhere`] : []),
    ...(forecast.unmanaged > 0 ? [`${String(forecast.unmanaged)} unmanaged`] : []),
    ...(forecast.notJudged ? [`${String(forecast.notJudged)} not judged`] : []),
  ];
  const evicted = `${String(forecast.evicted)} Pod${forecast.evicted === 1 ? '' : 's'} to evict`;
  const summary =
    forecast.evicted === 0 && !forecast.pods
      ? forecast.message.replace(` (${FORECAST_SCOPE})`, '')
      : `${evicted}${findings.length > 0 ? `: ${findings.join(', ')}` : ', each able to leave'}`;
  return {
    time: forecast.time,
    summary,
    pods: (forecast.pods ?? []).map((p) => ({
      namespace: p.namespace,
      pod: p.pod,
      holds: p.podDisruptionBudget !== undefined || p.fitsNowhere !== undefined,
      text: forecastPodWords(p),
    })),
    more: forecast.morePods ?? 0,
    scope: FORECAST_SCOPE,
  };
}
