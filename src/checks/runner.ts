// Runs every ClusterHealthCheck on its interval and on demand, keeps each one's state,
// and writes status only when something a reader acts on has changed.
//
// Each check is independent: its own timer, its own timeout. A probe that hangs is cut
// at the check's timeout (its eventual answer is discarded) and delays nothing else.
import { performance } from 'node:perf_hooks';
import type { CheckScope, ClusterHealthCheck, ClusterHealthCheckSpec } from '../api/cluster-health-check.ts';
import { ACTIONS } from '../api/common.ts';
import { checkStatusPath } from '../api/paths.ts';
import { formatDuration, parseDuration } from '../duration.ts';
import { rfc3339, type EventRecorder } from '../kube/events.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { redactURLs } from '../redact.ts';
import { errorMessage } from '../wait.ts';
import { nodeSummaryState, summarizeNodes, type NodeResults } from './node-results.ts';
import { CheckerJobs } from './checker-jobs.ts';
import { nodeTarget, type NodeTarget } from './node-target.ts';
import { probeTypeOf, type CachedReads, type ProbeContext, type ProbeResult } from './probe.ts';
import { matchesSelector, type LabelSelector } from '../kube/labels.ts';
import {
  applyOutcome,
  significantlyChanged,
  unknownState,
  writtenState,
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
  /** The Nodes Node-scoped checks are evaluated for; without it they have no node to ask about. */
  nodes?: NodeSource;
}

/** What the runner needs to know of the cluster's Nodes (the controller's Node cache). */
export interface NodeSource {
  get(name: string): KubeObject | undefined;
  /** The nodes a label selector selects (Informer.select: by an index of their labels). */
  select(selector: LabelSelector | undefined): KubeObject[];
  /** The nodes with an unfinished action: evaluated every interval, not only every nodeInterval. */
  busy(): ReadonlySet<string>;
  /** Whether the cache is kept current by a live watch (Informer.live): periodic `nodes` probes then read it. */
  live?(): boolean;
  /** Resolves once the caches behind get, list and busy have synced: the first probes wait for it (bounded). */
  synced?(): Promise<void>;
}

/** How long first probes wait for the Node cache to sync before they go without it. */
export const FIRST_PROBE_SYNC_WAIT_MS = 30_000;

/** The default nodeInterval: how often every selected node is evaluated. */
export const DEFAULT_NODE_INTERVAL = '5m';
/** Per check, how many nodes are probed at the same time in a periodic round. */
const NODE_ROUND_CONCURRENCY = 8;

export interface CheckView {
  name: string;
  generation: number;
  /** A Node-scoped check's summary has no verdict (healthy undefined): see `nodes`. */
  state: CheckState;
  spec: ClusterHealthCheckSpec;
  /** Absent: Cluster. */
  scope?: CheckScope;
  /** Node-scoped: the per-node results, summarised. */
  nodes?: NodeResults;
  /** Node-scoped: the latest state for one node (undefined: not evaluated for it yet). */
  nodeState?: (node: string) => CheckState | undefined;
}

/** Where one line of results is kept: the check's own (Cluster) or one node's (Node). */
interface Slot {
  state: CheckState;
  node?: string;
  inflight?: Promise<CheckState>;
  inflightStartedAt?: number;
  /** Gate requests waiting for a probe that starts after they asked. */
  freshWaiters?: Promise<CheckState>;
  /** When the last of them asked (performance.now()): what the probe's reads must not precede. */
  freshAskedAt?: number;
}

interface Entry extends Slot {
  check: ObservedCheck;
  generation: number;
  scope: CheckScope;
  /** Node-scoped: every selected node is evaluated this often; undefined: only busy nodes. */
  nodeIntervalMs: number | undefined;
  /** Node-scoped: one slot per node evaluated. */
  perNode: Map<string, Slot>;
  nodeResults?: NodeResults;
  thresholds: Thresholds;
  intervalMs: number;
  timeoutMs: number;
  probeType: string;
  timer?: NodeJS.Timeout;
  /** When the next periodic probe should start (performance.now() clock), for lag figures. */
  dueAt?: number;
  /** Node-scoped: the periodic round under way. */
  round?: Promise<void>;
  written?: CheckState;
  writtenNodes?: NodeResults;
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
  /** The checker Jobs of `job` probes, run by the leader only. */
  private readonly jobs: CheckerJobs;
  /** What periodic probes may read from caches (ProbeContext.cached); gates never get it. */
  private readonly cached: CachedReads;
  /** The wait of first probes for the Node cache (nodesSynced), shared by every check. */
  private firstSync: Promise<void> | undefined;

  constructor(options: CheckRunnerOptions) {
    this.options = { statusRefreshMs: 300_000, jitter: 0.1, ...options };
    this.jobs = new CheckerJobs(options.rest);
    const nodes = options.nodes;
    this.cached = { nodes: (selector) => (nodes?.live?.() ? nodes.select(selector) : undefined) };
  }

  /**
   * "NS/NAME" of the checker Job a `job` check is running for this node (or, Cluster-
   * scoped, for itself), if any: what a gate waiting on its fresh result is waiting for.
   */
  runningJob(name: string, node?: string): string | undefined {
    const entry = this.entries.get(name);
    const uid = entry?.check.metadata.uid;
    if (!entry || entry.probeType !== 'job' || uid === undefined) return undefined;
    return this.jobs.running(uid, entry.scope === 'Node' ? node : undefined);
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
    const scope = spec.scope ?? 'Cluster';
    // A job probe runs a Job per node: every node only when asked for (nodeInterval).
    const nodeInterval = spec.nodeInterval ?? (spec.job ? undefined : DEFAULT_NODE_INTERVAL);
    const entry: Entry = {
      check,
      generation,
      scope,
      nodeIntervalMs: nodeInterval === undefined ? undefined : parseDuration(nodeInterval),
      perNode: new Map(),
      state: unknownState(new Date()),
      thresholds: {
        successThreshold: spec.successThreshold ?? 1,
        failureThreshold: spec.failureThreshold ?? 3,
      },
      intervalMs: parseDuration(spec.interval ?? '30s'),
      timeoutMs: parseDuration(spec.timeout ?? '5s'),
      probeType: probeTypeOf(spec),
    };
    // Carry over what was last written, so an unchanged result is not rewritten — by this
    // process, or (a restart, a new leader) what the status in the API server says.
    if (existing?.written) {
      entry.written = existing.written;
      entry.writtenAt = existing.writtenAt ?? 0;
      if (existing.writtenNodes) entry.writtenNodes = existing.writtenNodes;
    } else if (!existing) {
      const written = writtenState(check.status, generation);
      if (written) {
        entry.written = written;
        // Refreshed when it is statusRefreshMs old, however old it was when we started.
        const age = Date.now() - (written.lastProbeTime?.getTime() ?? -Infinity);
        entry.writtenAt = performance.now() - Math.max(0, age);
      }
    }
    if (!existing) this.sortedNames = undefined;
    this.entries.set(name, entry);
    this.options.metrics?.setCheckGates(name, spec.actions ?? ACTIONS);
    this.changed(name);
    // The first probe comes soon, spread over a fraction of the interval so that a
    // thousand checks appearing at once (a restart) do not probe in the same instant —
    // and, at a start, once the Node cache has synced: before it, every `nodes` probe would
    // be a LIST of the Nodes beside the cache's own (739 of them while 5,000 Nodes were
    // listed, in the scale benchmark), and a Node-scoped check would have no node to ask about.
    void this.nodesSynced().then(() => {
      if (this.entries.get(name) === entry)
        this.schedule(entry, Math.random() * Math.min(entry.intervalMs, 1000));
    });
  }

  /**
   * Resolves once the Node cache has synced, or after FIRST_PROBE_SYNC_WAIT_MS (a cache that
   * cannot list must not keep every check from probing); at once without a cache to wait for.
   */
  private nodesSynced(): Promise<void> {
    const nodes = this.options.nodes;
    if (!nodes?.synced) return Promise.resolve();
    return (this.firstSync ??= new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, FIRST_PROBE_SYNC_WAIT_MS);
      timer.unref();
      void nodes.synced?.().then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        () => resolve(),
      );
    }));
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
    if (!e) return undefined;
    const view: CheckView = {
      name,
      generation: e.generation,
      state: e.state,
      spec: e.check.spec,
      scope: e.scope,
    };
    if (e.scope === 'Node') {
      view.nodes = e.nodeResults ?? summarizeNodes(new Map());
      view.nodeState = (node) => e.perNode.get(node)?.state;
    }
    return view;
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
  async evaluateNow(names: readonly string[], node?: string): Promise<Map<string, CheckState | undefined>> {
    const results = await Promise.all(
      names.map(async (name) => {
        const entry = this.entries.get(name);
        return [name, entry ? await this.freshFor(entry, node) : undefined] as const;
      }),
    );
    return new Map(results);
  }

  /**
   * A Cluster-scoped check's fresh state; a Node-scoped one's for `node` — or, without a
   * node (an operator's "evaluate now"), a fresh round over every selected node, whose
   * summary is the result.
   */
  private async freshFor(entry: Entry, node: string | undefined): Promise<CheckState> {
    if (entry.scope === 'Cluster') return this.fresh(entry, entry);
    if (node !== undefined) {
      // A node the check does not select (or the cache does not have) is probed in a slot
      // of its own that is not kept: the summary covers the selected nodes only.
      const cached = this.options.nodes?.get(node);
      const selected = cached && matchesSelector(entry.check.spec.nodeSelector, cached.metadata.labels ?? {});
      const slot = selected ? this.slotFor(entry, node) : { node, state: unknownState(new Date()) };
      return this.fresh(entry, slot);
    }
    await this.nodeRound(entry, 'gate', () => true);
    return entry.state;
  }

  private slotFor(entry: Entry, node: string): Slot {
    let slot = entry.perNode.get(node);
    if (!slot) {
      slot = { node, state: unknownState(new Date()) };
      entry.perNode.set(node, slot);
    }
    return slot;
  }

  private fresh(entry: Entry, slot: Slot): Promise<CheckState> {
    // Callers that arrive before the next probe starts all share it. A checker Job still
    // running is not doubled: the fresh one starts (and its timeout runs) after it.
    const before = entry.probeType === 'job' ? slot.inflight : undefined;
    slot.freshAskedAt = performance.now();
    slot.freshWaiters ??= (before ?? Promise.resolve()).then(
      () => this.startFresh(entry, slot),
      () => this.startFresh(entry, slot),
    );
    return slot.freshWaiters;
  }

  private startFresh(entry: Entry, slot: Slot): Promise<CheckState> {
    const since = slot.freshAskedAt;
    slot.freshWaiters = undefined;
    slot.freshAskedAt = undefined;
    return this.probe(entry, slot, 'gate', since);
  }

  /** The cached Nodes a Node-scoped check selects (its nodeSelector). */
  private selectedNodes(entry: Entry): KubeObject[] {
    return this.options.nodes?.select(entry.check.spec.nodeSelector) ?? [];
  }

  /**
   * One periodic (or operator-asked) round of a Node-scoped check: the selected nodes
   * `due` says, a few at a time; slots of nodes gone or no longer selected are dropped.
   */
  private async nodeRound(
    entry: Entry,
    cause: 'periodic' | 'gate',
    due: (slot: Slot) => boolean,
  ): Promise<void> {
    const selected = this.selectedNodes(entry);
    const names = new Set(selected.map((n) => n.metadata.name));
    for (const name of entry.perNode.keys()) if (!names.has(name)) entry.perNode.delete(name);
    const queue = selected.map((n) => this.slotFor(entry, n.metadata.name)).filter(due);
    const worker = async () => {
      for (let slot = queue.shift(); slot; slot = queue.shift()) {
        if (this.entries.get(entry.check.metadata.name) !== entry) return;
        // Asked for (an operator's evaluation): a probe that starts now, with consistent
        // reads. Periodic: a probe still running for this node (a gate's) is not doubled.
        await (cause === 'gate'
          ? this.fresh(entry, slot)
          : (slot.inflight ?? this.probe(entry, slot, cause)));
      }
    };
    await Promise.all(Array.from({ length: Math.min(NODE_ROUND_CONCURRENCY, queue.length) }, worker));
    this.summarize(entry);
  }

  /** Whether a node is due in a periodic round: it has an unfinished action, or its result is nodeInterval old. */
  private periodicDue(entry: Entry): (slot: Slot) => boolean {
    const busy = this.options.nodes?.busy() ?? new Set<string>();
    const now = Date.now();
    return (slot) => {
      if (slot.node !== undefined && busy.has(slot.node)) return true;
      if (entry.nodeIntervalMs === undefined) return false;
      const last = slot.state.lastProbeTime?.getTime();
      // Probed a little early rather than a whole interval late.
      return last === undefined || now - last >= entry.nodeIntervalMs - entry.intervalMs / 2;
    };
  }

  private summarize(entry: Entry): void {
    if (this.entries.get(entry.check.metadata.name) !== entry) return;
    const states = new Map([...entry.perNode].map(([node, slot]) => [node, slot.state]));
    const results = summarizeNodes(states);
    const previous = entry.state;
    entry.nodeResults = results;
    entry.state = nodeSummaryState(results, previous, new Date());
    this.changed(entry.check.metadata.name);
    this.maybeWrite(entry, previous);
  }

  private schedule(entry: Entry, delayMs: number): void {
    if (this.stopped || entry.removed) return;
    clearTimeout(entry.timer);
    entry.dueAt = performance.now() + delayMs;
    entry.timer = setTimeout(() => {
      if (this.recordLag && entry.dueAt !== undefined) this.lagSamples.push(performance.now() - entry.dueAt);
      // A probe (or round) still running (timeout longer than interval) is not stacked upon.
      const running: Promise<unknown> =
        entry.scope === 'Node'
          ? (entry.round ??= this.nodeRound(entry, 'periodic', this.periodicDue(entry)).finally(() => {
              entry.round = undefined;
            }))
          : (entry.inflight ?? this.probe(entry, entry, 'periodic'));
      void running.finally(() => {
        if (this.entries.get(entry.check.metadata.name) === entry) {
          this.schedule(entry, entry.intervalMs * (1 + Math.random() * this.options.jitter));
        }
      });
    }, delayMs);
    entry.timer.unref();
  }

  private probe(
    entry: Entry,
    slot: Slot,
    cause: 'periodic' | 'gate',
    since = performance.now(),
  ): Promise<CheckState> {
    const run = this.runProbe(entry, slot, cause, since);
    slot.inflight = run;
    slot.inflightStartedAt = performance.now();
    void run.finally(() => {
      if (slot.inflight === run) slot.inflight = undefined;
    });
    return run;
  }

  /** The target of a node slot: undefined when the node is not in the cache (the probe then fails). */
  private targetOf(slot: Slot): NodeTarget | undefined {
    const node = slot.node === undefined ? undefined : this.options.nodes?.get(slot.node);
    return node && nodeTarget(node);
  }

  private async runProbe(
    entry: Entry,
    slot: Slot,
    cause: 'periodic' | 'gate',
    since: number,
  ): Promise<CheckState> {
    const name = entry.check.metadata.name;
    const node = slot.node === undefined ? undefined : this.targetOf(slot);
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
    const probed = (
      slot.node !== undefined && !node
        ? Promise.reject(new Error(`node ${slot.node} is not among the Nodes the controller watches`))
        : this.options.probe(entry.check.spec, {
            rest: this.options.rest,
            signal: controller.signal,
            readsSince: since,
            // Periodic probes may read caches; a gate's fresh evaluation reads consistently.
            ...(cause === 'periodic' ? { cached: this.cached } : {}),
            serviceResolution: this.options.serviceResolution,
            namespace: this.options.namespace ?? process.env.POD_NAMESPACE ?? 'gatehouse-system',
            ...(node ? { node } : {}),
            ...(entry.check.metadata.uid !== undefined
              ? {
                  check: {
                    name,
                    uid: entry.check.metadata.uid,
                    generation: entry.generation,
                    timeoutMs: entry.timeoutMs,
                  },
                }
              : {}),
            // Only the leader creates checker Jobs (every replica probes the other kinds).
            ...(!this.options.mayWrite || this.options.mayWrite() ? { jobs: this.jobs } : {}),
          })
    ).then(
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
    if (this.entries.get(name) !== entry) return slot.state;
    const previous = slot.state;
    slot.state = applyOutcome(previous, outcome, entry.thresholds, new Date());
    if (slot === entry)
      this.options.metrics?.observeProbe(name, entry.probeType, outcome, slot.state, seconds);
    this.changed(name);
    if (previous.healthy !== slot.state.healthy) {
      this.options.log.info(
        {
          check: name,
          ...(slot.node !== undefined ? { node: slot.node } : {}),
          healthy: slot.state.healthy,
          reason: slot.state.reason,
          cause,
          message: slot.state.message,
        },
        'check changed',
      );
    }
    if (slot === entry) this.maybeWrite(entry, previous);
    // A gate's result for one node shows in the summary at once (a round summarises at its end).
    else if (cause === 'gate' && !entry.round) this.summarize(entry);
    return slot.state;
  }

  private maybeWrite(entry: Entry, previous: CheckState): void {
    if (this.options.mayWrite && !this.options.mayWrite()) return;
    const due =
      !entry.written ||
      significantlyChanged(entry.written, entry.state, entry.thresholds) ||
      nodesChanged(entry.writtenNodes, entry.nodeResults) ||
      performance.now() - (entry.writtenAt ?? 0) > this.options.statusRefreshMs;
    if (!due || entry.writing) return;
    const state = entry.state;
    // A transition readers saw: from what the status last said (so the first result after a
    // restart that finds what the status says is none).
    const before = entry.written ? entry.written.healthy : previous.healthy;
    const transition = before !== state.healthy && state.healthy !== undefined;
    const nodes = entry.nodeResults;
    entry.writing = this.writeStatus(entry, state, transition, nodes).finally(() => {
      entry.writing = undefined;
    });
  }

  private async writeStatus(
    entry: Entry,
    state: CheckState,
    transition: boolean,
    nodes: NodeResults | undefined,
  ): Promise<void> {
    const name = entry.check.metadata.name;
    try {
      await this.options.rest.request(checkStatusPath(name), {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { status: statusOf(state, entry.generation, nodes) },
      });
      entry.written = state;
      if (nodes) entry.writtenNodes = nodes;
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

/** Whether the per-node results differ in what a reader acts on (not only probe times). */
function nodesChanged(a: NodeResults | undefined, b: NodeResults | undefined): boolean {
  if (!a || !b) return a !== b;
  if (a.evaluated !== b.evaluated || a.safe !== b.safe || a.unsafe !== b.unsafe) return true;
  return a.unsafeNodes.some((n, i) => {
    const other = b.unsafeNodes[i];
    return !other || n.name !== other.name || n.message !== other.message;
  });
}

export function statusOf(state: CheckState, generation: number, nodes?: NodeResults) {
  const conditionStatus = state.healthy === undefined ? 'Unknown' : state.healthy ? 'True' : 'False';
  return {
    observedGeneration: generation,
    // A merge patch: null removes what a Cluster-scoped spec wrote before.
    healthy: state.healthy ?? null,
    nodes: nodes
      ? {
          evaluated: nodes.evaluated,
          safe: nodes.safe,
          unsafe: nodes.unsafe,
          unsafeNodes: nodes.unsafeNodes.map((n) => ({
            name: n.name,
            message: n.message,
            ...(n.lastProbeTime ? { lastProbeTime: rfc3339(n.lastProbeTime) } : {}),
          })),
        }
      : null,
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
