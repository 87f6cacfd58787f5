// A hook's own status: counts of its runs and the latest ones. Pure: the runner reads
// the hook, applies a run here, and writes the result back conditionally.
import type { HookRun, HookStatus } from '../api/hooks.ts';
import { setCondition } from '../kube/conditions.ts';

export const MAX_LAST_RUNS = 10;

function sameRun(a: HookRun, b: HookRun): boolean {
  return a.action === b.action && a.node === b.node && a.bootID === b.bootID && a.attempt === b.attempt;
}

function finished(run: HookRun | undefined): boolean {
  return run?.phase === 'Succeeded' || run?.phase === 'Failed';
}

/**
 * The hook's status with `run` recorded: newest first, at most ten. A run is counted as
 * succeeded or failed once, when it is first seen finished, so applying the same run
 * again (a retried write) changes nothing.
 */
export function withHookRun(
  status: HookStatus | undefined,
  run: HookRun,
  generation: number | undefined,
  now: Date,
): HookStatus {
  const lastRuns = status?.lastRuns ?? [];
  const previous = lastRuns.find((r) => sameRun(r, run));
  const counted = finished(previous);
  const runs = [run, ...lastRuns.filter((r) => !sameRun(r, run))].slice(0, MAX_LAST_RUNS);
  const succeeded = (status?.succeeded ?? 0) + (!counted && run.phase === 'Succeeded' ? 1 : 0);
  const failed = (status?.failed ?? 0) + (!counted && run.phase === 'Failed' ? 1 : 0);
  const where = run.action
    ? `action ${run.action} on ${run.node}`
    : `boot ${run.bootID ?? '?'} of ${run.node}`;
  const conditions = finished(run)
    ? setCondition(
        status?.conditions,
        {
          type: 'LastRunSucceeded',
          status: run.phase === 'Succeeded' ? 'True' : 'False',
          reason: run.phase,
          message: `${where}: ${run.message ?? run.phase}`,
          ...(generation !== undefined ? { observedGeneration: generation } : {}),
        },
        now,
      )
    : status?.conditions;
  return {
    ...status,
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    active: runs.filter((r) => !finished(r)).length,
    succeeded,
    failed,
    lastRuns: runs,
    ...(conditions ? { conditions } : {}),
  };
}
