// The `job` probe: a checker Job's exit code is the verdict, its termination message the
// check's message (src/checks/checker-jobs.ts runs it).
import type { JobProbeSpec } from '../checker-job.ts';
import type { Probe } from '../probe.ts';

export const jobProbe: Probe<JobProbeSpec> = (spec, context) => {
  if (!context.check) throw new Error('a checker Job needs the check it runs for');
  if (!context.jobs)
    throw new Error(
      'checker Jobs are run by the leading controller replica only; this replica does not run them',
    );
  return context.jobs.run(spec, {
    check: context.check,
    node: context.node,
    timeoutMs: context.check.timeoutMs,
    signal: context.signal,
  });
};
