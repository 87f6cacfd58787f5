// The imperative half of hooks: what the planner (plan.ts) needs to know about Jobs and
// webhook calls, and carrying out its effects — creating and deleting Jobs, calling
// webhooks, recording runs in the hooks' status.
//
// "Run these hooks for (node, bootID, action?) and tell me their state" is, for any
// caller (the NodeAction reconciler, and the boot reconciler for boot hooks):
//
//   const plan = await runner.plan({ now, subject, hooks, records });
//   ...persist plan.records where the caller keeps them (a status, a Node annotation)...
//   await runner.execute(plan.effects, { confirm, onChange });
//   plan.outcome: Running | Succeeded | Failed, plan.message
//
// `confirm` re-reads the persisted record of an attempt from the API server; a Job is
// created only while that record exists and is unfinished (see plan.ts for why).
import type { V1Job } from '@kubernetes/client-node';
import type { HookStatus } from '../api/hooks.ts';
import { HOOK_KIND_DEFINITIONS, objectPath } from '../api/paths.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { errorMessage } from '../wait.ts';
import { jobFacts, type JobFacts } from './job.ts';
import {
  MAX_RECORD_MESSAGE,
  clip,
  isFinished,
  jobKey,
  planHookStage,
  type HookEffect,
  type HookRunRecord,
  type StageInput,
  type StagePlan,
  type WebhookFacts,
} from './plan.ts';
import { withHookRun } from './status.ts';
import { callWebhook, type WebhookCallContext } from './webhook.ts';

export interface HookRunnerOptions {
  rest: RestClient;
  log: Logger;
  /** The informer of gatehouse's hook Jobs (label selector HOOK_JOB_SELECTOR). */
  jobs: Informer<KubeObject>;
  webhook: WebhookCallContext;
  /** Only the leader acts. */
  mayWrite: () => boolean;
  metrics?: Metrics;
}

export interface ExecuteOptions {
  /** Whether the attempt's record is persisted and unfinished, read afresh from the API server. */
  confirm: (record: HookRunRecord) => Promise<boolean>;
  /** A webhook call finished: plan again. */
  onChange: () => void;
  /**
   * Whether the node, read afresh from the API server, has booted past `bootID`: asked before
   * a sweep deletes an earlier boot's Job (a delete without it is not made).
   */
  confirmEarlierBoot?: (bootID: string) => Promise<boolean>;
}

/** Refusals that creating the same Job again would only repeat. */
function permanentRefusal(error: unknown): boolean {
  return error instanceof KubeApiError && [400, 403, 404, 422].includes(error.code);
}

export class HookRunner {
  private readonly o: HookRunnerOptions;
  private readonly webhooks = new Map<string, WebhookFacts & { touched: number }>();
  /** Jobs the API server refused to create, by jobKey: the run fails with the reason. */
  private readonly refused = new Map<string, { message: string; at: number }>();

  constructor(options: HookRunnerOptions) {
    this.o = options;
  }

  /**
   * What the Jobs named by these records show: the informer's cache, and for an
   * unfinished record whose Job the cache lacks, a direct read (a Job just created may
   * not have reached the cache; one that is really gone must be known to be gone).
   */
  async jobFacts(records: readonly HookRunRecord[]): Promise<Map<string, JobFacts>> {
    const facts = new Map<string, JobFacts>();
    await Promise.all(
      records.map(async (record) => {
        if (record.jobName === undefined) return;
        const key = jobKey(record.namespace, record.jobName);
        const cached = this.o.jobs.get(key);
        if (cached) {
          facts.set(key, jobFacts(cached));
          return;
        }
        const refused = this.refused.get(key);
        if (refused && !isFinished(record)) {
          facts.set(key, { phase: 'Failed', message: refused.message, deleting: false });
          return;
        }
        if (isFinished(record)) return;
        try {
          const job = await this.o.rest.request<V1Job & KubeObject>(
            `/apis/batch/v1/namespaces/${record.namespace}/jobs/${record.jobName}`,
          );
          facts.set(key, jobFacts(job));
        } catch (error) {
          if (!(error instanceof KubeApiError && error.code === 404)) throw error;
        }
      }),
    );
    return facts;
  }

  /** What is known of webhook calls, by webhookKey(). */
  webhookFacts(): ReadonlyMap<string, WebhookFacts> {
    return this.webhooks;
  }

  /** Plans a stage (plan.ts) on what the Jobs and webhook calls show now. */
  async plan(input: Omit<StageInput, 'jobs' | 'webhooks'>): Promise<StagePlan> {
    const jobs = await this.jobFacts(input.records);
    return planHookStage({ ...input, jobs, webhooks: this.webhooks });
  }

  /** Forgets webhook results of runs whose key starts with `prefix` (an action that is gone). */
  forget(prefix: string): void {
    for (const key of this.webhooks.keys()) if (key.startsWith(prefix)) this.webhooks.delete(key);
    // Results nobody asked for in an hour belong to runs long recorded.
    const stale = Date.now() - 3_600_000;
    for (const [key, w] of this.webhooks) if (!w.inFlight && w.touched < stale) this.webhooks.delete(key);
    for (const [key, r] of this.refused) if (r.at < stale) this.refused.delete(key);
  }

  /** Carries out a plan's effects, after the caller persisted its records. */
  async execute(
    effects: readonly HookEffect[],
    options: ExecuteOptions,
    log: Logger = this.o.log,
  ): Promise<void> {
    for (const effect of effects) {
      if (!this.o.mayWrite()) return;
      switch (effect.type) {
        case 'createJob':
          await this.createJob(effect.record, effect.job, options, log);
          break;
        case 'deleteJob':
          if (effect.earlierBoot !== undefined && !(await options.confirmEarlierBoot?.(effect.earlierBoot))) {
            log.debug(
              { job: jobKey(effect.namespace, effect.name), bootID: effect.earlierBoot },
              'not deleting the Job: the node read afresh is still at its boot (the cached node is older than the Job)',
            );
            break;
          }
          await this.deleteJob(effect.namespace, effect.name, effect.reason, log);
          break;
        case 'callWebhook':
          this.startCall(effect, options, log);
          break;
        case 'hookRun':
          await this.recordRun(effect, log);
          break;
      }
    }
  }

  private async createJob(
    record: HookRunRecord,
    job: V1Job,
    options: ExecuteOptions,
    log: Logger,
  ): Promise<void> {
    const namespace = record.namespace;
    const name = job.metadata?.name ?? '';
    const key = jobKey(namespace, name);
    if (this.o.jobs.get(key)) return;
    if (!(await options.confirm(record))) {
      log.info(
        { job: key, hook: record.name, attempt: record.attempt },
        'not creating hook Job: its run is no longer pending',
      );
      return;
    }
    try {
      await this.o.rest.request(`/apis/batch/v1/namespaces/${namespace}/jobs`, { method: 'POST', body: job });
      log.info(
        { job: key, hook: `${record.kind}/${namespace}/${record.name}`, attempt: record.attempt },
        'created hook Job',
      );
      this.o.metrics?.hookJobsCreated.inc({ kind: record.kind });
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409) {
        // Created before (by us, before a restart, or a moment ago): that is the attempt's Job.
        log.debug({ job: key }, 'hook Job exists already: adopting it');
        return;
      }
      if (permanentRefusal(error)) {
        const message = clip(
          `Job ${key} could not be created: ${error instanceof KubeApiError ? error.serverMessage || error.message : errorMessage(error)}`,
          MAX_RECORD_MESSAGE,
        );
        this.refused.set(key, { message, at: Date.now() });
        log.warn({ job: key, err: message }, 'hook Job refused by the API server');
        options.onChange();
        return;
      }
      throw error;
    }
  }

  private async deleteJob(namespace: string, name: string, reason: string, log: Logger): Promise<void> {
    try {
      await this.o.rest.request(`/apis/batch/v1/namespaces/${namespace}/jobs/${name}`, {
        method: 'DELETE',
        query: { propagationPolicy: 'Background' },
      });
      log.info({ job: `${namespace}/${name}`, reason }, 'deleted hook Job');
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 404)) throw error;
    }
  }

  private startCall(
    effect: Extract<HookEffect, { type: 'callWebhook' }>,
    options: ExecuteOptions,
    log: Logger,
  ): void {
    const existing = this.webhooks.get(effect.key);
    if (existing?.inFlight) return;
    const calls = (existing?.calls ?? 0) + 1;
    this.webhooks.set(effect.key, { ...existing, inFlight: true, calls, touched: Date.now() });
    const hook = `${effect.hook.kind}/${effect.hook.metadata.namespace}/${effect.hook.metadata.name}`;
    void callWebhook(effect.hook, effect.request, this.o.webhook).then((answer) => {
      this.webhooks.set(effect.key, {
        inFlight: false,
        calls,
        last: { ...answer, at: new Date() },
        touched: Date.now(),
      });
      log.info({ hook, outcome: answer.outcome, message: answer.message }, 'webhook hook answered');
      options.onChange();
    });
  }

  /** Records a run in the hook's status; best effort (the action's status is the record of truth). */
  private async recordRun(effect: Extract<HookEffect, { type: 'hookRun' }>, log: Logger): Promise<void> {
    const kind = HOOK_KIND_DEFINITIONS.get(effect.hook.kind);
    if (!kind) return;
    const path = objectPath(kind, effect.hook.name, effect.hook.namespace);
    for (let tries = 0; tries < 3; tries++) {
      try {
        const hook = await this.o.rest.request<KubeObject & { status?: HookStatus }>(path);
        const status = withHookRun(hook.status, effect.run, hook.metadata.generation, new Date());
        await this.o.rest.request(`${path}/status`, { method: 'PUT', body: { ...hook, status } });
        return;
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 409) continue;
        if (error instanceof KubeApiError && error.code === 404) return;
        log.warn(
          {
            hook: `${effect.hook.kind}/${effect.hook.namespace}/${effect.hook.name}`,
            err: errorMessage(error),
          },
          'could not record the run in the hook status',
        );
        return;
      }
    }
  }
}
