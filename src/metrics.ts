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

  forgetCheck(check: string): void {
    this.checkHealthy.remove({ check });
    this.consecutiveFailures.remove({ check });
  }
}
