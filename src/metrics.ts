// Prometheus metrics, on a registry of our own (not prom-client's global one), served
// at /metrics.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export class Metrics {
  readonly registry = new Registry();
  readonly checkHealthy = new Gauge({
    name: 'gatehouse_check_healthy',
    help: 'Whether a ClusterHealthCheck holds: 1 healthy, 0 unhealthy, -1 unknown (never probed).',
    labelNames: ['check'],
    registers: [this.registry],
  });
  readonly consecutiveFailures = new Gauge({
    name: 'gatehouse_check_consecutive_failures',
    help: 'Failed probes in a row for a ClusterHealthCheck.',
    labelNames: ['check'],
    registers: [this.registry],
  });
  /** The actions each check gates, so an alert can tell "a check gating Reboot is unhealthy" (kured's gate). */
  readonly checkGates = new Gauge({
    name: 'gatehouse_check_gates',
    help: 'The actions a ClusterHealthCheck gates (spec.actions; all when it lists none): 1 for each, by check and action.',
    labelNames: ['check', 'action'],
    registers: [this.registry],
  });
  private readonly gated = new Map<string, readonly string[]>();
  readonly probeDuration = new Histogram({
    name: 'gatehouse_probe_duration_seconds',
    help: 'How long probes took, by check and probe type.',
    labelNames: ['check', 'probe'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly probes = new Counter({
    name: 'gatehouse_probes_total',
    help: 'Probes run, by check and result (success, failure, error, timeout).',
    labelNames: ['check', 'result'],
    registers: [this.registry],
  });
  readonly statusWrites = new Counter({
    name: 'gatehouse_status_writes_total',
    help: 'Status updates written to the API server.',
    registers: [this.registry],
  });
  readonly admissionReads = new Counter({
    name: 'gatehouse_admission_reads_total',
    help: 'Admission passes by where they counted slots from: quorum (a consistent list) or cache (the watch had shown every slot).',
    labelNames: ['source'],
    registers: [this.registry],
  });

  readonly actionTransitions = new Counter({
    name: 'gatehouse_action_transitions_total',
    help: 'NodeAction phase transitions, by the phase entered.',
    labelNames: ['phase'],
    registers: [this.registry],
  });
  readonly hookJobsCreated = new Counter({
    name: 'gatehouse_hook_jobs_created_total',
    help: 'Hook Jobs created, by hook kind.',
    labelNames: ['kind'],
    registers: [this.registry],
  });

  /**
   * Read from the controller at each scrape (see `watchController`), so they are as
   * level-triggered as the reconcilers: a replica that just started reports the actions
   * it sees, not the transitions it happened to witness. Every replica reports them (its
   * caches are as warm as the leader's); alert rules aggregate with max by (action).
   */
  private source: ControllerView | undefined;
  readonly leader = new Gauge({
    name: 'gatehouse_leader',
    help: 'Whether this replica leads (holds the leader Lease and may write): 1 or 0. Without leader election always 1.',
    registers: [this.registry],
    collect: () => {
      if (this.source) this.leader.set(this.source.isLeader() ? 1 : 0);
    },
  });
  readonly ready = new Gauge({
    name: 'gatehouse_ready',
    help: 'Whether this replica is ready (every cache synced, as /readyz answers): 1 or 0.',
    registers: [this.registry],
    collect: () => {
      if (this.source) this.ready.set(this.source.ready() ? 1 : 0);
    },
  });
  readonly actionPhaseStart = new Gauge({
    name: 'gatehouse_action_phase_start_timestamp_seconds',
    help: 'When each unfinished NodeAction entered its current phase (status.phaseTime), by action, node and phase.',
    labelNames: ['action', 'node', 'phase'],
    registers: [this.registry],
    collect: () => {
      this.actionPhaseStart.reset();
      for (const a of this.source?.actions() ?? []) {
        const { phase, phaseTime, completionTime } = a.status ?? {};
        const since = Date.parse(phaseTime ?? '');
        if (!phase || completionTime || Number.isNaN(since)) continue;
        this.actionPhaseStart.set({ action: a.metadata.name, node: a.spec.nodeName, phase }, since / 1000);
      }
    },
  });
  readonly actionHookFailures = new Gauge({
    name: 'gatehouse_action_hook_failures',
    help: 'Hook attempts that failed, recorded in each NodeAction (status.hooks), by action, node and the action phase.',
    labelNames: ['action', 'node', 'phase'],
    registers: [this.registry],
    collect: () => {
      this.actionHookFailures.reset();
      for (const a of this.source?.actions() ?? []) {
        const failed = (a.status?.hooks ?? []).filter((h) => h.phase === 'Failed').length;
        if (failed === 0) continue;
        const labels = { action: a.metadata.name, node: a.spec.nodeName, phase: a.status?.phase ?? '' };
        this.actionHookFailures.set(labels, failed);
      }
    },
  });

  constructor(options: { defaultMetrics?: boolean } = {}) {
    if (options.defaultMetrics ?? true)
      collectDefaultMetrics({ register: this.registry, prefix: 'gatehouse_' });
  }

  /**
   * One probe's outcome and the check's state after it (src/checks/state.ts), typed by
   * their shape: metrics sit below every folder of src/, so they import none.
   */
  observeProbe(
    check: string,
    probe: string,
    outcome: { reason: 'ProbeSucceeded' | 'ProbeFailed' | 'ProbeError' | 'ProbeTimeout' },
    state: { healthy: boolean | undefined; consecutiveFailures: number },
    seconds: number,
  ): void {
    const result = {
      ProbeSucceeded: 'success',
      ProbeFailed: 'failure',
      ProbeError: 'error',
      ProbeTimeout: 'timeout',
    }[outcome.reason];
    this.probes.inc({ check, result });
    this.probeDuration.observe({ check, probe }, seconds);
    this.checkHealthy.set({ check }, state.healthy === undefined ? -1 : state.healthy ? 1 : 0);
    this.consecutiveFailures.set({ check }, state.consecutiveFailures);
  }

  readonly rolloutNodes = new Gauge({
    name: 'gatehouse_rollout_nodes',
    help: 'Nodes of each NodeRollout by their phase in it (pending, running, succeeded, failed, skipped, vanished, quarantined), as the leader last decided.',
    labelNames: ['rollout', 'phase'],
    registers: [this.registry],
  });

  /** A rollout's counts (status.counts), one series per phase. */
  observeRollout(rollout: string, counts: Readonly<Record<string, number>> | undefined): void {
    // quarantined is in the counts only when some are: its series must fall back to 0.
    for (const [phase, n] of Object.entries({ quarantined: 0, ...counts }))
      this.rolloutNodes.set({ rollout, phase }, n);
  }

  forgetRollout(rollout: string): void {
    for (const phase of ['pending', 'running', 'succeeded', 'failed', 'skipped', 'vanished', 'quarantined'])
      this.rolloutNodes.remove({ rollout, phase });
  }

  /** The controller whose state the gauges above report at each scrape. */
  watchController(view: ControllerView): void {
    this.source = view;
  }

  /** What a check gates, from its spec: `actions` are the ones it lists, or every action. */
  setCheckGates(check: string, actions: readonly string[]): void {
    for (const action of this.gated.get(check) ?? []) this.checkGates.remove({ check, action });
    for (const action of actions) this.checkGates.set({ check, action }, 1);
    this.gated.set(check, actions);
  }

  forgetCheck(check: string): void {
    this.checkHealthy.remove({ check });
    this.consecutiveFailures.remove({ check });
    this.setCheckGates(check, []);
    this.gated.delete(check);
  }
}

/** What the controller-state gauges read, typed by its shape (metrics import nothing of src/). */
export interface ControllerView {
  isLeader(): boolean;
  ready(): boolean;
  actions(): readonly {
    metadata: { name: string };
    spec: { nodeName: string };
    status?: {
      phase?: string;
      phaseTime?: string;
      completionTime?: string;
      hooks?: readonly { phase: string }[];
    };
  }[];
}
