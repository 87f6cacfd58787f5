// Running checker Jobs (the `job` probe): create one, wait for it, read its verdict,
// delete it when the check's timeout cuts it; one at a time per (check, node).
//
// The Job of the last run stays (kubectl logs, describe) until the next run for the same
// check and node replaces it, or its ttlSecondsAfterFinished; Jobs of a check's earlier
// generations go when the new generation first runs, and every Job goes with its check
// (owner reference).
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { CHECKER_JOB_LABELS, JOB_CONTROLLER_UID_LABEL } from '../api/names.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { sleep } from '../wait.ts';
import { buildCheckerJob, checkerVerdict, foreignJob, type JobProbeSpec } from './checker-job.ts';
import type { CheckerJobRun, CheckerJobRunner, CheckIdentity, ProbeResult } from './probe.ts';

/** How often a running checker Job is looked at. */
const POLL_MS = 500;
/** How many times a name held by an earlier Job of ours is cleared before giving up. */
const MAX_REPLACE = 20;

const jobsPath = (namespace: string) => `/apis/batch/v1/namespaces/${namespace}/jobs`;

function notFound(error: unknown): boolean {
  return error instanceof KubeApiError && error.code === 404;
}

export class CheckerJobs implements CheckerJobRunner {
  private readonly rest: RestClient;
  /** The run under way (or queued last) per check and node: runs never overlap. */
  private readonly chains = new Map<string, Promise<unknown>>();
  /** The Job a run is waiting on, per check and node: what a gate says it waits for. */
  private readonly current = new Map<string, string>();
  /** Check UID and generation whose earlier generations' Jobs were cleared. */
  private readonly cleared = new Set<string>();
  private readonly pollMs: number;

  constructor(rest: RestClient, pollMs = POLL_MS) {
    this.rest = rest;
    this.pollMs = pollMs;
  }

  /** "NS/NAME" of the checker Job running for this check (by UID) and node, if any. */
  running(checkUID: string, node: string | undefined): string | undefined {
    return this.current.get(keyOf(checkUID, node));
  }

  /** Runs the check's Job once, after any run still going for the same check and node. */
  run(spec: JobProbeSpec, run: CheckerJobRun): Promise<ProbeResult> {
    const key = keyOf(run.check.uid, run.node?.name);
    const before = this.chains.get(key) ?? Promise.resolve();
    const mine = before.then(
      () => this.once(spec, run, key),
      () => this.once(spec, run, key),
    );
    this.chains.set(key, mine);
    const forget = () => {
      if (this.chains.get(key) === mine) this.chains.delete(key);
    };
    mine.then(forget, forget);
    return mine;
  }

  private async once(spec: JobProbeSpec, run: CheckerJobRun, key: string): Promise<ProbeResult> {
    run.signal.throwIfAborted();
    const job = buildCheckerJob(spec, run.check, run.node, run.timeoutMs);
    const name = job.metadata?.name ?? '';
    const where = `${spec.namespace}/${name}`;
    await this.clearEarlierGenerations(spec.namespace, run.check);
    const uid = await this.create(job, run.check, run.signal);
    this.current.set(key, where);
    try {
      for (;;) {
        await sleep(this.pollMs, run.signal);
        const observed = await this.rest
          .request<V1Job>(`${jobsPath(spec.namespace)}/${name}`, { signal: run.signal })
          .catch((error: unknown) => {
            if (notFound(error)) throw new Error(`checker Job ${where} was deleted before it finished`);
            throw error;
          });
        if (observed.metadata?.uid !== uid)
          throw new Error(`checker Job ${where} was replaced by another Job before it finished`);
        const pods = await this.podsOf(spec.namespace, uid, run.signal);
        const verdict = checkerVerdict(observed, uid, pods);
        if (verdict) return verdict;
      }
    } catch (error) {
      // Cut by the check's timeout (or gone wrong): the Job must not run on unobserved.
      if (run.signal.aborted) this.remove(spec.namespace, name, uid).catch(() => undefined);
      throw error;
    } finally {
      if (this.current.get(key) === where) this.current.delete(key);
    }
  }

  /** The pods of the Job with this UID, as the Job controller labels them. */
  private async podsOf(namespace: string, uid: string, signal: AbortSignal): Promise<V1Pod[]> {
    const list = await this.rest.request<{ items: V1Pod[] }>(`/api/v1/namespaces/${namespace}/pods`, {
      query: { labelSelector: `${JOB_CONTROLLER_UID_LABEL}=${uid}` },
      signal,
    });
    return list.items;
  }

  /**
   * Creates the Job and returns its UID. A name held by an earlier Job of this check (a
   * finished run kept as the last result, or one a previous controller left running) is
   * cleared first; a Job under the name that does not claim to be this check's is
   * someone else's, left alone, and fails the run.
   */
  private async create(job: V1Job, check: CheckIdentity, signal: AbortSignal): Promise<string> {
    const namespace = job.metadata?.namespace ?? '';
    const name = job.metadata?.name ?? '';
    for (let attempt = 0; ; attempt++) {
      try {
        const created = await this.rest.request<V1Job>(jobsPath(namespace), {
          method: 'POST',
          body: job,
          signal,
        });
        return created.metadata?.uid ?? '';
      } catch (error) {
        if (!(error instanceof KubeApiError && error.code === 409) || attempt >= MAX_REPLACE) throw error;
      }
      const existing = await this.rest
        .request<V1Job>(`${jobsPath(namespace)}/${name}`, { signal })
        .catch((error: unknown) => {
          if (notFound(error)) return undefined;
          throw error;
        });
      if (existing) {
        const foreign = foreignJob(existing, check);
        if (foreign)
          throw new Error(
            `a Job ${namespace}/${name} that gatehouse did not create for check ${check.name} holds the checker Job's name (${foreign}); delete it`,
          );
        if (!existing.metadata?.deletionTimestamp)
          await this.remove(namespace, name, existing.metadata?.uid ?? '');
      }
      await sleep(this.pollMs / 2, signal);
    }
  }

  /** Deletes the Job with this UID (and, in the background, its pods); gone already is fine. */
  private async remove(namespace: string, name: string, uid: string): Promise<void> {
    try {
      await this.rest.request(`${jobsPath(namespace)}/${name}`, {
        method: 'DELETE',
        body: { propagationPolicy: 'Background', preconditions: { uid } },
      });
    } catch (error) {
      // 404: gone; 409: the name holds another Job by now, not ours to delete.
      if (!(error instanceof KubeApiError && (error.code === 404 || error.code === 409))) throw error;
    }
  }

  /** Once per check generation: the Jobs its earlier generations left in the namespace go. */
  private async clearEarlierGenerations(namespace: string, check: CheckIdentity): Promise<void> {
    const key = `${check.uid}/${String(check.generation)}`;
    if (this.cleared.has(key)) return;
    const L = CHECKER_JOB_LABELS;
    try {
      const list = await this.rest.request<{ items: V1Job[] }>(jobsPath(namespace), {
        query: {
          labelSelector: `${L.checkUID}=${check.uid},${L.checkGeneration}!=${String(check.generation)}`,
        },
      });
      for (const job of list.items)
        await this.remove(namespace, job.metadata?.name ?? '', job.metadata?.uid ?? '');
      this.cleared.add(key);
    } catch {
      // Tried again on the next run; the run itself does not depend on it.
    }
  }
}

function keyOf(checkUID: string, node: string | undefined): string {
  return `${checkUID}/${node ?? ''}`;
}
