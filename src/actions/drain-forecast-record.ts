// The drain forecast as the action's status records it (status.drainForecast): counts, the
// Pods named (a bounded list, what holds a drain first) and a message that says what the
// simulation covers and what it does not. Pure, so that the gate, the CLI and the
// dashboard word it alike.
import { DRAIN_FORECAST_PODS_LISTED, type DrainForecast, type DrainForecastPod } from '../api/node-action.ts';
import { blocks, type DrainForecastRead, type PodVerdict } from './drain-forecast.ts';

/** What the forecast simulates, and what it does not: said in every message. */
export const FORECAST_SCOPE =
  'simulated: requests of cpu, memory and Pods, nodeSelector, required node affinity, taints and tolerations, cordoned and NotReady nodes; not simulated: pod affinity and anti-affinity, topology spread, preferred affinity, volumes (zones, attach limits), extended resources and ephemeral storage, host ports, priority and preemption';

const plural = (n: number, one: string, many = `${one}s`) => `${String(n)} ${n === 1 ? one : many}`;

/** One named Pod in words: "ns/web-0: PodDisruptionBudget web allows no disruption, unmanaged: nothing recreates it". */
export function forecastPodWords(p: DrainForecastPod): string {
  const what = [
    ...(p.podDisruptionBudget !== undefined
      ? [`PodDisruptionBudget ${p.podDisruptionBudget} allows no disruption`]
      : []),
    ...(p.fitsNowhere !== undefined ? [`fits on no other node (${p.fitsNowhere})`] : []),
    ...(p.unmanaged ? ['unmanaged: nothing recreates it'] : []),
  ];
  return `${p.namespace}/${p.pod}: ${what.join(', ')}`;
}

function recorded(v: PodVerdict): DrainForecastPod {
  return {
    namespace: v.namespace,
    pod: v.pod,
    ...(v.podDisruptionBudget !== undefined ? { podDisruptionBudget: v.podDisruptionBudget } : {}),
    ...(v.unmanaged ? { unmanaged: true } : {}),
    ...(v.fitsNowhere !== undefined ? { fitsNowhere: v.fitsNowhere.slice(0, 1024) } : {}),
  };
}

/** The forecast for status.drainForecast. */
export function forecastRecord(read: DrainForecastRead): DrainForecast {
  const time = read.at.toISOString();
  const r = read.result;
  if (!r) {
    const message = `the drain forecast could not be made: ${read.error ?? 'no answer'}`;
    return {
      time,
      evicted: 0,
      blockedByPDB: 0,
      unmanaged: 0,
      fitsNowhere: 0,
      message: message.slice(0, 4096),
    };
  }
  const named = r.verdicts.filter((v) => !v.notJudged || blocks(v) || v.unmanaged);
  const count = (test: (v: PodVerdict) => boolean) => r.verdicts.filter(test).length;
  const counts = {
    blockedByPDB: count((v) => v.podDisruptionBudget !== undefined),
    unmanaged: count((v) => v.unmanaged === true),
    fitsNowhere: count((v) => v.fitsNowhere !== undefined),
  };
  const notJudged = count((v) => v.notJudged === true);
  const pods = named.slice(0, DRAIN_FORECAST_PODS_LISTED).map(recorded);
  const more = named.length - pods.length;
  const findings = [
    ...(counts.blockedByPDB > 0
      ? [`${String(counts.blockedByPDB)} held by a PodDisruptionBudget at its limit`]
      : []),
    ...(counts.fitsNowhere > 0
      ? [`${String(counts.fitsNowhere)} fit${counts.fitsNowhere === 1 ? 's' : ''} on no other node`]
      : []),
    ...(counts.unmanaged > 0
      ? [
          `${String(counts.unmanaged)} unmanaged (nothing recreates ${counts.unmanaged === 1 ? 'it' : 'them'})`,
        ]
      : []),
  ];
  const shown = pods.slice(0, 3).map(forecastPodWords);
  const rest = named.length - shown.length;
  const head =
    findings.length === 0
      ? `the ${plural(r.evicted, 'Pod')} a drain would evict can leave: none held by a PodDisruptionBudget, none unmanaged, each fits on another node`
      : `of the ${plural(r.evicted, 'Pod')} a drain would evict, ${findings.join(', ')}: ${shown.join('; ')}${rest > 0 ? `; and ${String(rest)} more` : ''}`;
  const unjudged =
    notJudged > 0
      ? `; ${plural(notJudged, 'Pod')} fit${notJudged === 1 ? 's' : ''} on none of the ${plural(r.nodesRead, 'node')} read and ${notJudged === 1 ? 'was' : 'were'} not judged`
      : '';
  const over = `${plural(r.otherNodes, 'other node')}, ${String(r.nodesRead)} of them read for their room`;
  return {
    time,
    evicted: r.evicted,
    leftInPlace: r.leftInPlace,
    ...counts,
    ...(notJudged > 0 ? { notJudged } : {}),
    ...(pods.length > 0 ? { pods } : {}),
    ...(more > 0 ? { morePods: more } : {}),
    message: `${head}${unjudged} (${over}; ${FORECAST_SCOPE})`.slice(0, 4096),
  };
}

/** The Pods of a record that hold a drain (a budget at its limit, nowhere to go), in words. */
export function blockingWords(record: DrainForecast): string[] {
  return (record.pods ?? [])
    .filter((p) => p.podDisruptionBudget !== undefined || p.fitsNowhere !== undefined)
    .map(forecastPodWords);
}

/** Whether the record says something would hold the drain (or the forecast could not be made). */
export function forecastBlocks(record: DrainForecast): boolean {
  return record.blockedByPDB > 0 || record.fitsNowhere > 0;
}
