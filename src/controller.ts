// `gatehouse controller`: watches the talos.dev resources and the nodes, runs the
// checks, and serves the HTTP API.
import type { Server } from 'node:http';
import type { KubeConfig } from '@kubernetes/client-node';
import { CheckRunner, type ObservedCheck, type ProbeFunction } from './checks/runner.ts';
import { healthRoutes } from './http/health.ts';
import { Router, serverUrl, startServer } from './http/server.ts';
import { EventRecorder } from './kube/events.ts';
import { Informer, type KubeObject } from './kube/informer.ts';
import { LeaderElector } from './kube/leader.ts';
import { RestClient } from './kube/rest.ts';
import type { Logger } from './log.ts';
import { Metrics } from './metrics.ts';

export interface ControllerOptions {
  kubeConfig: KubeConfig;
  log: Logger;
  host?: string;
  port?: number;
  /** How Service references are reached; `endpoints` when running outside the cluster. */
  serviceResolution?: 'dns' | 'endpoints';
  probe?: ProbeFunction;
  metrics?: Metrics;
  /**
   * Lease-based leader election (default on): every replica watches, probes and serves,
   * only the leader writes. `false` for a lone controller in tests and benchmarks.
   */
  leaderElection?:
    | false
    | {
        namespace?: string;
        name?: string;
        identity?: string;
        leaseDurationMs?: number;
        renewDeadlineMs?: number;
        retryPeriodMs?: number;
      };
  /** For tests of silent or dropped watches. */
  informerOptions?: { watchTimeoutSeconds?: number; idleTimeoutMs?: number };
}

export const CHECKS_PATH = '/apis/talos.dev/v1alpha1/clusterhealthchecks';

export class Controller {
  readonly rest: RestClient;
  readonly checks: CheckRunner;
  readonly checkInformer: Informer<ObservedCheck>;
  readonly nodeInformer: Informer<KubeObject>;
  readonly metrics: Metrics;
  readonly leader: LeaderElector | undefined;
  private server: Server | undefined;
  private readonly log: Logger;

  private constructor(options: ControllerOptions, probe: ProbeFunction) {
    this.log = options.log;
    this.rest = new RestClient(options.kubeConfig);
    this.metrics = options.metrics ?? new Metrics();
    const election = options.leaderElection ?? {};
    this.leader =
      election === false
        ? undefined
        : new LeaderElector({
            rest: this.rest,
            log: options.log,
            namespace: election.namespace ?? process.env.POD_NAMESPACE ?? 'gatehouse-system',
            name: election.name ?? 'gatehouse-controller',
            identity:
              election.identity ??
              `${process.env.HOSTNAME ?? 'gatehouse'}-${process.pid.toString(36)}-${Math.random().toString(36).slice(2, 8)}`,
            ...(election.leaseDurationMs !== undefined ? { leaseDurationMs: election.leaseDurationMs } : {}),
            ...(election.renewDeadlineMs !== undefined ? { renewDeadlineMs: election.renewDeadlineMs } : {}),
            ...(election.retryPeriodMs !== undefined ? { retryPeriodMs: election.retryPeriodMs } : {}),
          });
    this.checks = new CheckRunner({
      rest: this.rest,
      probe,
      log: options.log,
      metrics: this.metrics,
      events: new EventRecorder(this.rest, options.log),
      serviceResolution:
        options.serviceResolution ?? (process.env.KUBERNETES_SERVICE_HOST ? 'dns' : 'endpoints'),
    });
    const common = { rest: this.rest, log: options.log, ...options.informerOptions };
    this.checkInformer = new Informer<ObservedCheck>({ ...common, path: CHECKS_PATH });
    this.nodeInformer = new Informer<KubeObject>({ ...common, path: '/api/v1/nodes' });
    this.checkInformer.on('add', (c) => this.checks.upsert(c));
    this.checkInformer.on('update', (_, c) => this.checks.upsert(c));
    this.checkInformer.on('delete', (c) => this.checks.remove(c.metadata.name));
  }

  static async start(options: ControllerOptions): Promise<Controller> {
    const probe: ProbeFunction = options.probe ?? (await import('./checks/probes/index.ts')).runProbe;
    const controller = new Controller(options, probe);
    controller.checkInformer.start();
    controller.nodeInformer.start();
    controller.leader?.start();
    const router = new Router();
    router.on('GET', '/healthz', () => ({ status: 200, body: { ok: true } }));
    router.on('GET', '/readyz', () => {
      const waiting = [
        ...(controller.checkInformer.synced ? [] : ['clusterhealthchecks']),
        ...(controller.nodeInformer.synced ? [] : ['nodes']),
      ];
      return waiting.length
        ? { status: 503, body: { ready: false, message: `caches not synced yet: ${waiting.join(', ')}` } }
        : { status: 200, body: { ready: true } };
    });
    router.on('GET', '/metrics', async () => ({
      status: 200,
      body: await controller.metrics.registry.metrics(),
      contentType: controller.metrics.registry.contentType,
    }));
    healthRoutes(router, {
      checks: controller.checks,
      nodeLabels: (name) => {
        const node = controller.nodeInformer.get(name);
        return node ? (node.metadata.labels ?? {}) : undefined;
      },
    });
    controller.server = await startServer(router, {
      host: options.host ?? '0.0.0.0',
      port: options.port ?? 8080,
      log: options.log,
    });
    options.log.info({ url: controller.url }, 'controller serving');
    return controller;
  }

  /** Whether this replica may write (always, without leader election). */
  isLeader(): boolean {
    return this.leader ? this.leader.isLeader() : true;
  }

  get url(): string {
    if (!this.server) throw new Error('controller not started');
    return serverUrl(this.server);
  }

  async waitForSync(signal?: AbortSignal): Promise<void> {
    await Promise.all([this.checkInformer.waitForSync(signal), this.nodeInformer.waitForSync(signal)]);
  }

  async stop(): Promise<void> {
    await this.leader?.stop();
    this.checks.stop();
    await Promise.all([this.checkInformer.stop(), this.nodeInformer.stop()]);
    await new Promise<void>((resolve) => {
      if (!this.server) {
        resolve();
        return;
      }
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
    this.log.info('controller stopped');
  }
}
