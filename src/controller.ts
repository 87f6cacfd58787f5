// `gatehouse controller`: watches the talos.dev resources and the nodes, runs the
// checks, and serves the HTTP API.
import type { Server } from 'node:http';
import type { KubeCredentials } from './kube/kubeconfig.ts';
import { isTerminal } from './api/phases.ts';
import { slimForeignAction } from './actions/admission-pass.ts';
import { ActionReconciler } from './actions/reconciler.ts';
import { DEFAULT_RETENTION, type RetentionPolicy } from './actions/retention.ts';
import { HOOK_JOB_SELECTOR, foreignInstanceSelector, instanceSelector } from './api/names.ts';
import type { ActionObject } from './api/node-action.ts';
import {
  ACTION_POLICIES_PATH,
  CHECKS_PATH,
  collectionPath,
  NODE_ACTIONS_PATH,
  NODE_ROLLOUTS_PATH,
  NOTIFICATION_POLICIES_PATH,
} from './api/paths.ts';
import { AuditReconciler } from './boots/audit-reconciler.ts';
import { BootReconciler } from './boots/reconciler.ts';
import { MachineReconciler, type ClusterApiOptions } from './cluster-api/reconciler.ts';
import type { ActionPolicy } from './api/action-policy.ts';
import { hookKinds, type HookKindName, type HookSpec } from './api/hooks.ts';
import { CheckRunner, type ObservedCheck, type ProbeFunction } from './checks/runner.ts';
import { HookRunner } from './hooks/runner.ts';
import { loadClusterCA } from './hooks/webhook.ts';
import type { Dashboard } from './http/dashboard.ts';
import { Router } from './http/router.ts';
import { apiRoutes, serverUrl, startServer, type ApiOptions } from './http/server.ts';
import { talosCertificateRoutes } from './talos-gate/certificate-routes.ts';
import { EventRecorder } from './kube/events.ts';
import { Informer, type KubeObject } from './kube/informer.ts';
import { LeaderElector } from './kube/leader.ts';
import { TurnLease } from './kube/turn-lease.ts';
import { turnIdentity, type TurnTiming } from './kube/turn.ts';
import { NODE_UNREAD, slimNode } from './kube/nodes.ts';
import { NODE_LIST } from './kube/node-protobuf.ts';
import { RestClient } from './kube/rest.ts';
import { RolloutReconciler, type RolloutObject } from './rollouts/reconciler.ts';
import type { Logger } from './log.ts';
import { Metrics } from './metrics.ts';
import { Notifier, type NotifierOptions } from './notifications/notifier.ts';
import type { NotificationPolicyObject } from './notifications/status.ts';
import type { TalosClientOptions } from './talos/client.ts';
import type { TalosContext } from './talos/config.ts';
import { TalosConfigReloader } from './talos/config-reload.ts';
import { EtcdCheck } from './talos/etcd-check.ts';
import { TalosExecutor } from './talos/execution.ts';

export interface ControllerOptions {
  kubeConfig: KubeCredentials;
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
  /**
   * The turn every controller instance of the cluster takes to admit actions and to
   * approve control-plane ones (src/kube/turn.ts): a Lease, by default `gatehouse-turn`
   * in the controller's namespace. Every instance must name the same one.
   */
  turn?: { namespace?: string; name?: string } & Partial<TurnTiming>;
  /**
   * The other instances whose control-plane actions keep this instance's off every other
   * control-plane node (default: all of them — a cluster has one etcd). For test beds
   * only, whose test files share one API server and each simulate an etcd of their own.
   */
  controlPlaneAcrossInstances?: readonly string[];
  /** For tests of silent or dropped watches. */
  informerOptions?: { watchTimeoutSeconds?: number; idleTimeoutMs?: number };
  /**
   * Reconcile NodeActions (default true): the gate itself. `false` leaves them alone,
   * for a controller that only runs checks (a test of checks next to other controllers).
   */
  actions?: boolean;
  /**
   * Run the boot hooks (default: as `actions`): the preready taint, NodePrereadyJobs and
   * NodeReadyJobs of every boot of the nodes this instance handles (see `instance`).
   */
  boots?: boolean;
  /**
   * The unplanned-disruption audit of this instance's nodes (default: as `boots`): a
   * boot, a version change or a long NotReady with no gatehouse action in flight is an
   * UnplannedDisruption Event and counted. `notReadyAfterMs` defaults to 2 minutes.
   */
  audit?: boolean | { notReadyAfterMs: number };
  /**
   * Reconcile only NodeActions labelled talos.dev/controller-instance=<instance>; without
   * it, only NodeActions without that label. Lets several controllers share a cluster
   * (tests, a canary) without ever acting on the same action.
   */
  instance?: string;
  /**
   * Run only the ClusterHealthChecks matching this label selector (default: all). Two
   * controllers that run one check write its status in turns; tests that share a
   * cluster give each controller checks of its own.
   */
  checkSelector?: string;
  /** How long finished actions are kept, and how many per node always (default 7 days, 3). */
  retention?: Partial<RetentionPolicy>;
  /**
   * Serve the read-only dashboard at / and /v1/dashboard (default true): checks,
   * policies and nodes unauthenticated like /v1/health, actions to readers allowed to
   * list nodeactions (docs/dashboard.md).
   */
  dashboard?: boolean;
  /** Show the dashboard's actions (requesters, bypass reasons) to anonymous readers too (default false). */
  dashboardAnonymousActions?: boolean;
  /** Limits and auth caching of the /v1/actions HTTP API (see src/http/access.ts for the defaults). */
  api?: Pick<ApiOptions, 'limits' | 'auth' | 'pollIntervalMs' | 'heartbeatMs'>;
  /**
   * The Talos executor: Managed actions are performed through the Talos API with this
   * talosconfig context, or with the one a followed file gives, switched when the file
   * changes (src/talos/config-reload.ts). `false` (the default), or a file with no usable
   * context yet: Managed actions are approved and then wait for someone to perform them,
   * like External ones (condition Executed, reason ExecutorNotInstalled).
   */
  talos?:
    | false
    | {
        config: TalosContext | TalosConfigReloader;
        /** Where a ConfigChange's configSecretRef is: the controller's namespace (default $POD_NAMESPACE, else gatehouse-system). */
        namespace?: string;
        client?: TalosClientOptions;
        /** Between evictions a PodDisruptionBudget refused; default 5s. */
        drainRetryMs?: number;
      };
  /**
   * The Cluster API management-cluster mode (docs/integrations.md): hold the deletion of
   * the Machines of one Cluster, through gatehouse's pre-drain hook on them, until an
   * External Reset NodeAction of their Node is Approved. Needs `actions`.
   */
  clusterApi?: ClusterApiOptions;
  /**
   * Send the steps of actions and rollouts to the receivers of NotificationPolicies
   * (default: as `actions`); an object tunes the notifier (tests, benchmarks).
   */
  notifications?: boolean | Pick<NotifierOptions, 'holdGraceMs' | 'statusIntervalMs' | 'queue'>;
}

export class Controller {
  readonly rest: RestClient;
  readonly checks: CheckRunner;
  readonly checkInformer: Informer<ObservedCheck>;
  readonly nodeInformer: Informer<KubeObject>;
  readonly metrics: Metrics;
  /** Every reconciler's Events, sent in the background; flushed on stop. */
  private readonly events: EventRecorder;
  readonly leader: LeaderElector | undefined;
  /** The turn the instances take (undefined with `actions: false`). */
  readonly turn: TurnLease | undefined;
  readonly actionInformer: Informer<ActionObject>;
  /** Other controller instances' actions, trimmed to what the admission pass reads of them. */
  private readonly foreignActionInformer: Informer<ActionObject>;
  readonly policyInformer: Informer<ActionPolicy & KubeObject>;
  readonly hookInformers: ReadonlyMap<HookKindName, Informer<KubeObject & { spec: HookSpec }>>;
  readonly jobInformer: Informer<KubeObject>;
  readonly hooks: HookRunner;
  /**
   * Undefined with `talos: false` or `actions: false`. Without credentials yet (a followed
   * talosconfig that does not exist yet) it exists and acts as if it did not.
   */
  readonly executor: TalosExecutor | undefined;
  /** The etcd guard's reads (src/talos/etcd-check.ts), for the action gate and /v1/health. */
  readonly etcd: EtcdCheck;
  /** Undefined when the controller was started with `actions: false`. */
  readonly actions: ActionReconciler | undefined;
  /** Undefined when the controller was started with `boots: false` (or `actions: false`). */
  readonly boots: BootReconciler | undefined;
  readonly audit: AuditReconciler | undefined;
  readonly rolloutInformer: Informer<RolloutObject>;
  /** Undefined when the controller was started with `actions: false`: a rollout is made of actions. */
  readonly rollouts: RolloutReconciler | undefined;
  readonly notificationPolicyInformer: Informer<NotificationPolicyObject>;
  /** Sends NotificationPolicies' messages; undefined with `notifications: false` or `actions: false`. */
  readonly notifier: Notifier | undefined;
  /** The Cluster API mode's reconciler, with `clusterApi` (and `actions`). */
  readonly machines: MachineReconciler | undefined;
  /** Undefined when the controller was started with `dashboard: false`. */
  dashboard: Dashboard | undefined;
  private server: Server | undefined;
  private stopping: AbortController | undefined;
  private readonly log: Logger;
  /** The talosconfig file the executor's credentials come from, when followed. */
  private readonly talosConfig: TalosConfigReloader | undefined;

  private constructor(options: ControllerOptions, probe: ProbeFunction, clusterCA: string | undefined) {
    this.log = options.log;
    this.rest = new RestClient(options.kubeConfig);
    this.events = new EventRecorder(this.rest, options.log);
    const serviceResolution =
      options.serviceResolution ?? (process.env.KUBERNETES_SERVICE_HOST ? 'dns' : 'endpoints');
    this.metrics = options.metrics ?? new Metrics();
    const election = options.leaderElection ?? {};
    const namespace = process.env.POD_NAMESPACE ?? 'gatehouse-system';
    const replica =
      (election !== false ? election.identity : undefined) ??
      `${process.env.HOSTNAME ?? 'gatehouse'}-${process.pid.toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
    this.leader = election === false ? undefined : this.leaderElector(election, replica, namespace);
    this.checks = this.checkRunner(probe, serviceResolution);
    const informers = this.makeInformers(options);
    this.checkInformer = informers.checks;
    this.nodeInformer = informers.nodes;
    this.actionInformer = informers.actions;
    this.foreignActionInformer = informers.foreignActions;
    this.policyInformer = informers.policies;
    this.rolloutInformer = informers.rollouts;
    this.hookInformers = informers.hooks;
    this.jobInformer = informers.jobs;
    this.notificationPolicyInformer = informers.notificationPolicies;
    this.hooks = this.hookRunner(serviceResolution, clusterCA);
    const talos = options.talos;
    const followed = talos && talos.config instanceof TalosConfigReloader ? talos.config : undefined;
    // Without a talosconfig the executor still cordons and drains (a Maintenance).
    this.executor = options.actions === false ? undefined : this.talosExecutor(talos || {});
    this.talosConfig = this.executor ? followed : undefined;
    // The etcd guard reads through the executor's client; without one it says so.
    const executor = this.executor;
    this.etcd = new EtcdCheck({
      withClient: (fn) => (executor ? executor.withClient(fn) : Promise.resolve(undefined)),
      nodes: () => this.nodeInformer.list(),
    });
    this.turn = options.actions === false ? undefined : this.turnLease(options, replica, namespace);
    this.actions = options.actions === false ? undefined : this.actionReconciler(options);
    this.boots = (options.boots ?? options.actions !== false) ? this.bootReconciler(options) : undefined;
    const audit = options.audit ?? options.boots ?? options.actions !== false;
    this.audit = audit ? this.auditReconciler(options, audit) : undefined;
    this.rollouts = options.actions === false ? undefined : this.rolloutReconciler(options);
    this.notifier =
      options.actions === false || options.notifications === false
        ? undefined
        : this.notifierFor(options, namespace);
    this.machines =
      options.actions === false || !options.clusterApi
        ? undefined
        : this.machineReconciler(options, options.clusterApi);
    this.followLeadership();
  }

  // The parts the constructor composes, each made from the options and the parts before it.

  private leaderElector(
    election: Exclude<ControllerOptions['leaderElection'], false | undefined>,
    identity: string,
    namespace: string,
  ): LeaderElector {
    return new LeaderElector({
      rest: this.rest,
      log: this.log,
      namespace: election.namespace ?? namespace,
      name: election.name ?? 'gatehouse-controller',
      identity,
      ...(election.leaseDurationMs !== undefined ? { leaseDurationMs: election.leaseDurationMs } : {}),
      ...(election.renewDeadlineMs !== undefined ? { renewDeadlineMs: election.renewDeadlineMs } : {}),
      ...(election.retryPeriodMs !== undefined ? { retryPeriodMs: election.retryPeriodMs } : {}),
    });
  }

  private checkRunner(probe: ProbeFunction, serviceResolution: 'dns' | 'endpoints'): CheckRunner {
    return new CheckRunner({
      rest: this.rest,
      probe,
      log: this.log,
      metrics: this.metrics,
      events: this.events,
      serviceResolution,
      mayWrite: () => this.isLeader(),
      // The informers exist before any check is probed (probes start on their events).
      nodes: {
        get: (name) => this.nodeInformer.get(name),
        select: (selector) => this.nodeInformer.select(selector),
        busy: () => nodesWithUnfinishedActions(this.actionInformer.list()),
        live: () => this.nodeInformer.live,
        synced: async () => {
          await Promise.all([this.nodeInformer.waitForSync(), this.actionInformer.waitForSync()]);
        },
      },
    });
  }

  /** Every informer, the checks' wired to the check runner. */
  private makeInformers(options: ControllerOptions) {
    const common = { rest: this.rest, log: this.log, ...options.informerOptions };
    const checks = new Informer<ObservedCheck>({
      ...common,
      path: CHECKS_PATH,
      ...(options.checkSelector ? { labelSelector: options.checkSelector } : {}),
    });
    checks.on('add', (c) => this.checks.upsert(c));
    checks.on('update', (_, c) => this.checks.upsert(c));
    checks.on('delete', (c) => this.checks.remove(c.metadata.name));
    return {
      checks,
      nodes: new Informer<KubeObject>({
        ...common,
        path: '/api/v1/nodes',
        transform: slimNode,
        omit: NODE_UNREAD,
        protobuf: NODE_LIST,
      }),
      actions: new Informer<ActionObject>({
        ...common,
        path: NODE_ACTIONS_PATH,
        labelSelector: instanceSelector(options.instance),
      }),
      foreignActions: new Informer<ActionObject>({
        ...common,
        path: NODE_ACTIONS_PATH,
        labelSelector: foreignInstanceSelector(options.instance),
        transform: slimForeignAction,
      }),
      policies: new Informer<ActionPolicy & KubeObject>({ ...common, path: ACTION_POLICIES_PATH }),
      // Rollouts are assigned to an instance like actions: the instance creates their actions.
      rollouts: new Informer<RolloutObject>({
        ...common,
        path: NODE_ROLLOUTS_PATH,
        labelSelector: instanceSelector(options.instance),
      }),
      hooks: new Map(
        hookKinds.map((k) => [
          k.kind as HookKindName,
          new Informer<KubeObject & { spec: HookSpec }>({
            ...common,
            path: collectionPath(k),
          }),
        ]),
      ),
      jobs: new Informer<KubeObject>({
        ...common,
        path: '/apis/batch/v1/jobs',
        labelSelector: HOOK_JOB_SELECTOR,
      }),
      notificationPolicies: new Informer<NotificationPolicyObject>({
        ...common,
        path: NOTIFICATION_POLICIES_PATH,
      }),
    };
  }

  private hookRunner(serviceResolution: 'dns' | 'endpoints', clusterCA: string | undefined): HookRunner {
    return new HookRunner({
      rest: this.rest,
      log: this.log,
      jobs: this.jobInformer,
      metrics: this.metrics,
      mayWrite: () => this.isLeader(),
      webhook: {
        rest: this.rest,
        serviceResolution,
        namespace: process.env.POD_NAMESPACE ?? 'gatehouse-system',
        ...(clusterCA ? { clusterCA } : {}),
      },
    });
  }

  private talosExecutor(
    talos: Partial<Exclude<ControllerOptions['talos'], false | undefined>>,
  ): TalosExecutor {
    return new TalosExecutor({
      rest: this.rest,
      log: this.log,
      context: talos.config instanceof TalosConfigReloader ? talos.config.current : talos.config,
      namespace: talos.namespace ?? process.env.POD_NAMESPACE ?? 'gatehouse-system',
      node: (name) => this.nodeInformer.get(name),
      mayWrite: () => this.isLeader(),
      ...(talos.client ? { client: talos.client } : {}),
      ...(talos.drainRetryMs !== undefined ? { drainRetryMs: talos.drainRetryMs } : {}),
    });
  }

  private turnLease(options: ControllerOptions, replica: string, namespace: string): TurnLease {
    const election = options.leaderElection ?? {};
    const { namespace: turnNamespace, name: turnName, ...timing } = options.turn ?? {};
    return new TurnLease({
      rest: this.rest,
      log: this.log.child({ component: 'turn' }),
      namespace: turnNamespace ?? (election !== false ? election.namespace : undefined) ?? namespace,
      ...(turnName ? { name: turnName } : {}),
      identity: turnIdentity(options.instance, replica),
      active: () => this.isLeader(),
      timing,
      ...(options.informerOptions ? { informerOptions: options.informerOptions } : {}),
    });
  }

  private actionReconciler(options: ControllerOptions): ActionReconciler {
    return new ActionReconciler({
      rest: this.rest,
      log: this.log,
      events: this.events,
      metrics: this.metrics,
      checks: this.checks,
      actions: this.actionInformer,
      foreignActions: this.foreignActionInformer,
      policies: this.policyInformer,
      nodes: this.nodeInformer,
      hooks: this.hookInformers,
      jobs: this.jobInformer,
      checkInformer: this.checkInformer,
      runner: this.hooks,
      ...(this.executor ? { executor: this.executor } : {}),
      etcd: this.etcd,
      ...(this.turn ? { turn: this.turn } : {}),
      ...(options.controlPlaneAcrossInstances
        ? { controlPlaneAcrossInstances: options.controlPlaneAcrossInstances }
        : {}),
      isLeader: () => this.isLeader(),
      ...(options.instance ? { instance: options.instance } : {}),
      retention: { ...DEFAULT_RETENTION, ...options.retention },
    });
  }

  private bootReconciler(options: ControllerOptions): BootReconciler {
    return new BootReconciler({
      rest: this.rest,
      log: this.log.child({ reconciler: 'boots' }),
      events: this.events,
      nodes: this.nodeInformer,
      hooks: this.hookInformers,
      jobs: this.jobInformer,
      actions: this.actionInformer,
      runner: this.hooks,
      isLeader: () => this.isLeader(),
      ...(options.instance ? { instance: options.instance } : {}),
    });
  }

  private auditReconciler(
    options: ControllerOptions,
    audit: true | Exclude<ControllerOptions['audit'], boolean | undefined>,
  ): AuditReconciler {
    return new AuditReconciler({
      rest: this.rest,
      log: this.log.child({ reconciler: 'audit' }),
      events: this.events,
      nodes: this.nodeInformer,
      registry: this.metrics.registry,
      isLeader: () => this.isLeader(),
      ...(options.instance ? { instance: options.instance } : {}),
      ...(typeof audit === 'object' ? { notReadyAfterMs: audit.notReadyAfterMs } : {}),
    });
  }

  private rolloutReconciler(options: ControllerOptions): RolloutReconciler {
    return new RolloutReconciler({
      rest: this.rest,
      log: this.log.child({ reconciler: 'rollouts' }),
      events: this.events,
      metrics: this.metrics,
      rollouts: this.rolloutInformer,
      actions: this.actionInformer,
      nodes: this.nodeInformer,
      policies: this.policyInformer,
      checks: this.checkInformer,
      isLeader: () => this.isLeader(),
      ...(options.instance ? { instance: options.instance } : {}),
    });
  }

  /** The notifier, tapping every Event recorded; a policy's Secrets are read when it changes. */
  private notifierFor(options: ControllerOptions, namespace: string): Notifier {
    const tuning = typeof options.notifications === 'object' ? options.notifications : {};
    const policies = this.notificationPolicyInformer;
    const notifier = new Notifier({
      rest: this.rest,
      log: this.log.child({ component: 'notifications' }),
      namespace,
      policies: () => policies.list(),
      policy: (name) => policies.get(name),
      nodeLabels: (name) => {
        const node = this.nodeInformer.get(name);
        return node ? (node.metadata.labels ?? {}) : undefined;
      },
      current: (kind, name) =>
        (kind === 'NodeAction' ? this.actionInformer.get(name) : this.rolloutInformer.get(name))?.status,
      isLeader: () => this.isLeader(),
      ...tuning,
    });
    this.events.onRecord((object, event) => notifier.observe(object, event));
    policies.on('add', (p) => void notifier.policyChanged(p));
    policies.on('update', (old, p) => {
      if (old.metadata.generation !== p.metadata.generation) void notifier.policyChanged(p);
    });
    return notifier;
  }

  private machineReconciler(
    options: ControllerOptions,
    clusterApi: NonNullable<ControllerOptions['clusterApi']>,
  ): MachineReconciler {
    return new MachineReconciler({
      ...clusterApi,
      rest: this.rest,
      log: this.log.child({ reconciler: 'machines' }),
      namespace: process.env.POD_NAMESPACE ?? 'gatehouse-system',
      actions: this.actionInformer,
      nodes: this.nodeInformer,
      policies: this.policyInformer,
      isLeader: () => this.isLeader(),
      ...(options.instance ? { instance: options.instance } : {}),
      ...(options.informerOptions ? { informerOptions: options.informerOptions } : {}),
    });
  }

  /** A new leader queues every key again; a replica that stops leading stops its Talos steps. */
  private followLeadership(): void {
    this.leader?.on('started', () => {
      this.turn?.kick();
      this.machines?.enqueueAll();
      this.actions?.enqueueAll();
      this.rollouts?.enqueueAll();
      this.boots?.enqueueAll();
      this.audit?.enqueueAll();
      for (const p of this.notificationPolicyInformer.list()) void this.notifier?.policyChanged(p);
    });
    // The new leader decides from the status alone (a call recorded there is not made again).
    this.leader?.on('stopped', () => {
      this.executor?.stopAll('this replica stopped leading');
      this.turn?.kick();
    });
  }

  /**
   * The informers the controller runs, by what they watch: checks, nodes and actions
   * always (the HTTP API serves them), the gate's own when it reconciles actions.
   */
  private namedInformers(): [string, Informer<KubeObject>][] {
    return [
      ['clusterhealthchecks', this.checkInformer],
      ['nodes', this.nodeInformer],
      ['nodeactions', this.actionInformer],
      ...(this.actions || this.boots
        ? [
            ['actionpolicies', this.policyInformer],
            ...(this.actions ? [['nodeactions of other instances', this.foreignActionInformer]] : []),
            ...(this.rollouts ? [['noderollouts', this.rolloutInformer]] : []),
            ...(this.notifier ? [['notificationpolicies', this.notificationPolicyInformer]] : []),
            ['jobs', this.jobInformer],
            ...[...this.hookInformers].map(([kind, i]) => [`${kind.toLowerCase()}s`, i]),
          ]
        : []),
    ] as [string, Informer<KubeObject>][];
  }

  private informers(): Informer<KubeObject>[] {
    return this.namedInformers().map(([, i]) => i);
  }

  static async start(options: ControllerOptions): Promise<Controller> {
    // Milliseconds since the process started: what loading the code took (logged at sync).
    const loadedMs = performance.now();
    const probe: ProbeFunction = options.probe ?? (await import('./checks/probes/index.ts')).runProbe;
    const controller = new Controller(options, probe, await loadClusterCA());
    const executor = controller.executor;
    if (executor)
      controller.talosConfig?.start({
        onChange: (context) => executor.useCredentials(context),
        registry: controller.metrics.registry,
      });
    for (const informer of controller.informers()) informer.start();
    const listingFrom = performance.now();
    void controller.waitForSync().then(
      () => {
        const now = performance.now();
        options.log.info(
          {
            sinceStartMs: Math.round(now),
            loadingMs: Math.round(loadedMs),
            listingMs: Math.round(now - listingFrom),
            nodes: controller.nodeInformer.list().length,
          },
          'caches synced',
        );
      },
      () => undefined,
    );
    controller.turn?.start();
    controller.leader?.start();
    const stopping = new AbortController();
    controller.stopping = stopping;
    void controller.boots?.start(stopping.signal).catch((error: unknown) => {
      if (!stopping.signal.aborted)
        options.log.error({ err: String(error) }, 'the boot reconciler could not start');
    });
    void controller.audit?.start(stopping.signal).catch((error: unknown) => {
      if (!stopping.signal.aborted)
        options.log.error({ err: String(error) }, 'the unplanned-disruption audit could not start');
    });
    void controller.actions?.start(stopping.signal).catch((error: unknown) => {
      if (!stopping.signal.aborted)
        options.log.error({ err: String(error) }, 'the action reconciler could not start');
    });
    void controller.rollouts?.start(stopping.signal).catch((error: unknown) => {
      if (!stopping.signal.aborted)
        options.log.error({ err: String(error) }, 'the rollout reconciler could not start');
    });
    void controller.machines?.start(stopping.signal).catch((error: unknown) => {
      if (!stopping.signal.aborted)
        options.log.error({ err: String(error) }, 'the Cluster API machine reconciler could not start');
    });
    const router = new Router();
    router.on('GET', '/healthz', () => ({ status: 200, body: { ok: true } }));
    const unsynced = () =>
      controller
        .namedInformers()
        .filter(([, i]) => !i.synced)
        .map(([name]) => name);
    controller.metrics.watchController({
      isLeader: () => controller.isLeader(),
      ready: () => unsynced().length === 0,
      actions: () => controller.actionInformer.list(),
    });
    router.on('GET', '/readyz', () => {
      const waiting = unsynced();
      return waiting.length
        ? { status: 503, body: { ready: false, message: `caches not synced yet: ${waiting.join(', ')}` } }
        : { status: 200, body: { ready: true } };
    });
    router.on('GET', '/metrics', async () => ({
      status: 200,
      body: await controller.metrics.registry.metrics(),
      contentType: controller.metrics.registry.contentType,
    }));
    controller.dashboard = apiRoutes(router, {
      rest: controller.rest,
      log: options.log,
      metrics: controller.metrics,
      actions: controller.actionInformer,
      nodes: controller.nodeInformer,
      checks: controller.checks,
      nodeLabels: (name) => {
        const node = controller.nodeInformer.get(name);
        return node ? (node.metadata.labels ?? {}) : undefined;
      },
      etcd: (node) => controller.etcd.cached(node),
      ...(options.instance ? { instance: options.instance } : {}),
      ...options.api,
      ...(options.dashboard !== false
        ? {
            dashboard: {
              checks: controller.checks,
              checkInformer: controller.checkInformer,
              nodes: controller.nodeInformer,
              actions: controller.actionInformer,
              // Watched only when the controller gates actions or boots (see namedInformers).
              ...(controller.actions || controller.boots ? { policies: controller.policyInformer } : {}),
              ...(controller.rollouts ? { rollouts: controller.rolloutInformer } : {}),
              ...(options.instance ? { instance: options.instance } : {}),
              log: options.log,
            },
          }
        : {}),
      dashboardAnonymousActions: options.dashboardAnonymousActions === true,
      routes: [(r, access) => talosCertificateRoutes(r, access, controller.rest)],
    }).dashboard;
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
    await Promise.all(this.informers().map((i) => i.waitForSync(signal)));
  }

  async stop(): Promise<void> {
    this.stopping?.abort(new Error('controller stopping'));
    this.actions?.stop();
    this.boots?.stop();
    this.audit?.stop();
    this.rollouts?.stop();
    this.machines?.stop();
    this.talosConfig?.stop();
    this.executor?.close();
    // The turn goes on to whoever asked for it before the lease that makes us leader.
    await this.turn?.stop();
    await this.leader?.stop();
    this.checks.stop();
    this.notifier?.stop();
    await this.events.flush(2000);
    await Promise.all(this.informers().map((i) => i.stop()));
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

/** The nodes an unfinished action is about: Node-scoped checks evaluate them every interval. */
function nodesWithUnfinishedActions(actions: readonly ActionObject[]): Set<string> {
  const nodes = new Set<string>();
  for (const a of actions) if (!isTerminal(a.status?.phase)) nodes.add(a.spec.nodeName);
  return nodes;
}
