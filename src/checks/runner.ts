// Runs every ClusterHealthCheck on its interval and on demand, keeps each one's state,
// and writes status only when something a reader acts on has changed.
//
// Each check is independent: its own timer, its own timeout. A probe that hangs is cut
// at the check's timeout (its eventual answer is discarded) and delays nothing else.
import { performance } from 'node:perf_hooks';
import type { ClusterHealthCheck, ClusterHealthCheckSpec } from '../api/cluster-health-check.ts';
import { parseDuration } from '../duration.ts';
import { rfc3339, type EventRecorder } from '../kube/events.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { redactURLs } from '../redact.ts';
import { errorMessage, formatDuration } from '../wait.ts';
import { probeTypeOf, type ProbeContext, type ProbeResult } from './probe.ts';
import {
  applyOutcome,
  significantlyChanged,
  unknownState,
  type CheckState,
  type Outcome,
  type Thresholds,
} from './state.ts';

/** A check as read from the API server: it always has a name. */
export type ObservedCheck = ClusterHealthCheck & KubeObject;

export type ProbeFunction = (spec: ClusterHealthCheckSpec, context: ProbeContext) => Promise<ProbeResult>;

export interface CheckRunnerOptions {
  rest: RestClient;
  probe: ProbeFunction;
  log: Logger;
  metrics?: Metrics;
  events?: EventRecorder;
  serviceResolution: ProbeContext['serviceResolution'];
  /** The controller's namespace (default $POD_NAMESPACE, else gatehouse-system). */
  namespace?: string;
  /** Only the leader writes status and events; every replica probes and serves. */
  mayWrite?: () => boolean;
  /** Rewrite an unchanged status this often, so readers see the check is alive. */
  statusRefreshMs?: number;
  /** Spread of each interval (0.1: up to 10% later), so checks do not march in step. */
  jitter?: number;
}

export interface CheckView {
  name: string;
  generation: number;
  state: CheckState;
  spec: ClusterHealthCheckSpec;
}

interface Entry {
  check: ObservedCheck;
  generation: number;
  state: CheckState;
  thresholds: Thresholds;
  intervalMs: number;
  timeoutMs: number;
  probeType: string;
  timer?: NodeJS.Timeout;
  /** When the next periodic probe should start (performance.now() clock), for lag figures. */
  dueAt?: number;
  inflight?: Promise<CheckState>;
  inflightStartedAt?: number;
  /** Gate requests waiting for a probe that starts after they asked. */
  freshWaiters?: Promise<CheckState>;
  written?: CheckState;
  writtenAt?: number;
  writing?: Promise<void>;
  removed?: boolean;
}

export class CheckRunner {
  private readonly entries = new Map<string, Entry>();
  private readonly options: CheckRunnerOptions & { statusRefreshMs: number; jitter: number };
  private stopped = false;
  /** Names in order, rebuilt only when checks come or go. */
  private sortedNames: string[] | undefined;
  /** Told the name of a check whose state was replaced, or that came or went. */
  private readonly listeners = new Set<(name: string) => void>();
  /** Scheduling lag of periodic probes (ms), kept for the benchmark. */
  readonly lagSamples: number[] = [];
  recordLag = false;

  constructor(options: CheckRunnerOptions) {
    this.options = { statusRefreshMs: 300_000, jitter: 0.1, ...options };
  }

  /**
   * Calls `listener` with a check's name whenever its state is replaced (every probe, a
   * new spec) or it comes or goes, so readers need not poll. Returns the unsubscribe.
   */
  onChange(listener: (name: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(name: string): void {
    for (const listener of this.listeners) {
      try {
        listener(name);
      } catch (error) {
        this.options.log.error({ check: name, err: errorMessage(error) }, 'a check listener failed');
      }
    }
  }

  /** Adds or updates a check; a changed spec (generation) starts it over as unknown. */
  upsert(check: ObservedCheck): void {
    if (this.stopped) return;
    const name = check.metadata.name;
    const generation = check.metadata.generation ?? 0;
    const existing = this.entries.get(name);
    if (existing && existing.generation === generation) {
      existing.check = check;
      return;
    }
    if (existing) clearTimeout(existing.timer);
    const spec = check.spec;
    const entry: Entry = {
      check,
      generation,
      state: unknownState(new Date()),
      thresholds: {
        successThreshold: spec.successThreshold ?? 1,
        failureThreshold: spec.failureThreshold ?? 3,
      },
      intervalMs: parseDuration(spec.interval ?? '30s'),
      timeoutMs: parseDuration(spec.timeout ?? '5s'),
      probeType: probeTypeOf(spec),
    };
    // Carry over what was last written, so an unchanged result is not rewritten.
    if (existing?.written) {
      entry.written = existing.written;
      entry.writtenAt = existing.writtenAt ?? 0;
    }
    if (!existing) this.sortedNames = undefined;
    this.entries.set(name, entry);
    this.changed(name);
    // The first probe comes soon, spread over a fraction of the interval so that a
    // thousand checks appearing at once (a restart) do not probe in the same instant.
    this.schedule(entry, Math.random() * Math.min(entry.intervalMs, 1000));
  }

  remove(name: string): void {
    const entry = this.entries.get(name);
    if (!entry) return;
    entry.removed = true;
    clearTimeout(entry.timer);
    this.entries.delete(name);
    this.sortedNames = undefined;
    this.options.metrics?.forgetCheck(name);
    this.changed(name);
  }

  stop(): void {
    this.stopped = true;
    for (const entry of this.entries.values()) clearTimeout(entry.timer);
  }

  view(name: string): CheckView | undefined {
    const e = this.entries.get(name);
    return e && { name, generation: e.generation, state: e.state, spec: e.check.spec };
  }

  views(): CheckView[] {
    this.sortedNames ??= [...this.entries.keys()].sort();
    return this.sortedNames.map((name) => this.view(name) as CheckView);
  }

  /**
   * Fresh results for these checks: every one is probed by a probe that started after
   * this call. Concurrent callers share probes; the returned state has the new result
   * applied (thresholds included). Unknown names resolve to undefined.
   */
  async evaluateNow(names: readonly string[]): Promise<Map<string, CheckState | undefined>> {
    const results = await Promise.all(
      names.map(async (name) => {
        const entry = this.entries.get(name);
        return [name, entry ? await this.fresh(entry) : undefined] as const;
      }),
    );
    return new Map(results);
  }

  private fresh(entry: Entry): Promise<CheckState> {
    // Callers that arrive before the next probe starts all share it.
    entry.freshWaiters ??= Promise.resolve().then(() => {
      entry.freshWaiters = undefined;
      return this.probe(entry, 'gate');
    });
    return entry.freshWaiters;
  }

  private schedule(entry: Entry, delayMs: number): void {
    if (this.stopped || entry.removed) return;
    clearTimeout(entry.timer);
    entry.dueAt = performance.now() + delayMs;
    entry.timer = setTimeout(() => {
      if (this.recordLag && entry.dueAt !== undefined) this.lagSamples.push(performance.now() - entry.dueAt);
      // A probe still running (timeout longer than interval) is not stacked upon.
      const running = entry.inflight ?? this.probe(entry, 'periodic');
      void running.finally(() => {
        if (this.entries.get(entry.check.metadata.name) === entry) {
          this.schedule(entry, entry.intervalMs * (1 + Math.random() * this.options.jitter));
        }
      });
    }, delayMs);
    entry.timer.unref();
  }

  private probe(entry: Entry, cause: 'periodic' | 'gate'): Promise<CheckState> {
    const run = this.runProbe(entry, cause);
    entry.inflight = run;
    entry.inflightStartedAt = performance.now();
    void run.finally(() => {
      if (entry.inflight === run) entry.inflight = undefined;
    });
    return run;
  }

  private async runProbe(entry: Entry, cause: 'periodic' | 'gate'): Promise<CheckState> {
    const name = entry.check.metadata.name;
    const started = performance.now();
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<Outcome>((resolve) => {
      timer = setTimeout(() => {
        controller.abort(new Error('probe timed out'));
        resolve({
          healthy: false,
          reason: 'ProbeTimeout',
          message: `probe timed out after ${formatDuration(entry.timeoutMs)}`,
        });
      }, entry.timeoutMs);
    });
    const probed = this.options
      .probe(entry.check.spec, {
        rest: this.options.rest,
        signal: controller.signal,
        serviceResolution: this.options.serviceResolution,
        namespace: this.options.namespace ?? process.env.POD_NAMESPACE ?? 'gatehouse-system',
      })
      .then(
        (r): Outcome => ({ ...r, reason: r.healthy ? 'ProbeSucceeded' : 'ProbeFailed' }),
        (error: unknown): Outcome => ({
          healthy: false,
          reason: 'ProbeError',
          message: `probe error: ${errorMessage(error)}`,
        }),
      );
    const raced = await Promise.race([probed, timedOut]);
    // Whatever a probe or a library put in the message, no URL credential goes further.
    const outcome: Outcome = { ...raced, message: redactURLs(raced.message) };
    clearTimeout(timer);
    const seconds = (performance.now() - started) / 1000;
    // A spec change or removal while probing makes this result meaningless.
    if (this.entries.get(name) !== entry) return entry.state;
    const previous = entry.state;
    entry.state = applyOutcome(previous, outcome, entry.thresholds, new Date());
    this.options.metrics?.observeProbe(name, entry.probeType, outcome, entry.state, seconds);
    this.changed(name);
    if (previous.healthy !== entry.state.healthy) {
      this.options.log.info(
        {
          check: name,
          healthy: entry.state.healthy,
          reason: entry.state.reason,
          cause,
          message: entry.state.message,
        },
        'check changed',
      );
    }
    this.maybeWrite(entry, previous);
    return entry.state;
  }

  private maybeWrite(entry: Entry, previous: CheckState): void {
    if (this.options.mayWrite && !this.options.mayWrite()) return;
    const due =
      !entry.written ||
      significantlyChanged(entry.written, entry.state, entry.thresholds) ||
      performance.now() - (entry.writtenAt ?? 0) > this.options.statusRefreshMs;
    if (!due || entry.writing) return;
    const state = entry.state;
    const transition = previous.healthy !== state.healthy && state.healthy !== undefined;
    entry.writing = this.writeStatus(entry, state, transition).finally(() => {
      entry.writing = undefined;
    });
  }

  private async writeStatus(entry: Entry, state: CheckState, transition: boolean): Promise<void> {
    const name = entry.check.metadata.name;
    try {
      await this.options.rest.request(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${name}/status`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { status: statusOf(state, entry.generation) },
      });
      entry.written = state;
      entry.writtenAt = performance.now();
      this.options.metrics?.statusWrites.inc();
      if (transition) {
        await this.options.events?.record(entry.check, {
          type: state.healthy ? 'Normal' : 'Warning',
          reason: state.healthy ? 'CheckHealthy' : 'CheckUnhealthy',
          message: state.message,
        });
      }
    } catch (error) {
      // The next probe tries again; the check's state in memory is unaffected.
      this.options.log.warn({ check: name, err: errorMessage(error) }, 'could not write check status');
    }
  }
}

export function statusOf(state: CheckState, generation: number) {
  const conditionStatus = state.healthy === undefined ? 'Unknown' : state.healthy ? 'True' : 'False';
  return {
    observedGeneration: generation,
    ...(state.healthy !== undefined ? { healthy: state.healthy } : {}),
    consecutiveFailures: state.consecutiveFailures,
    consecutiveSuccesses: state.consecutiveSuccesses,
    ...(state.lastProbeTime ? { lastProbeTime: rfc3339(state.lastProbeTime) } : {}),
    ...(state.lastTransitionTime ? { lastTransitionTime: rfc3339(state.lastTransitionTime) } : {}),
    message: state.message,
    conditions: [
      {
        type: 'Healthy',
        status: conditionStatus,
        reason: state.reason,
        message: state.message,
        observedGeneration: generation,
        lastTransitionTime: rfc3339(state.lastTransitionTime ?? new Date()),
      },
    ],
  };
}
