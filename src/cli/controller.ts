// `gatehouse controller`: the long-running controller (what the Deployment runs).
import { Command, InvalidArgumentError, Option } from 'commander';
import { Controller } from '../controller.ts';
import { loadCredentials } from '../kube/kubeconfig.ts';
import { createLogger, type Logger } from '../log.ts';
import { IN_CLUSTER_TALOSCONFIG, TalosConfigError } from '../talos/config.ts';
import { TalosConfigReloader } from '../talos/config-reload.ts';

/** `NAMESPACE/NAME` of a Cluster API Cluster. */
function namespacedName(value: string): { namespace: string; name: string } {
  const match = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-.a-z0-9]*[a-z0-9])?)$/.exec(value);
  if (!match?.[1] || !match[3])
    throw new InvalidArgumentError('must be NAMESPACE/NAME, e.g. default/workload');
  return { namespace: match[1], name: match[3] };
}

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new InvalidArgumentError('must be a port number, 0-65535');
  return n;
}

/**
 * The talosconfig for Managed execution: --talosconfig, else $TALOSCONFIG, else the one
 * Talos mounts into pods it grants API access (the Deployment mounts it there). The file
 * is followed while the controller runs (a renewed certificate is used without a
 * restart). None at all is not an error: Managed actions then wait for someone to
 * perform them, until the in-cluster one appears. A file named explicitly must exist,
 * and any file there at start must be usable.
 */
export async function controllerTalosConfig(
  options: { talosconfig?: string; talosContext?: string },
  log: Logger,
  env: NodeJS.ProcessEnv = process.env,
  inClusterPath: string = IN_CLUSTER_TALOSCONFIG,
): Promise<TalosConfigReloader> {
  const named = options.talosconfig
    ? { path: options.talosconfig, why: 'given' }
    : env.TALOSCONFIG
      ? { path: env.TALOSCONFIG, why: '$TALOSCONFIG' }
      : undefined;
  const reloader = new TalosConfigReloader({
    path: named?.path ?? inClusterPath,
    log,
    ...(options.talosContext ? { context: options.talosContext } : {}),
  });
  if (await reloader.load()) return reloader;
  if (named) throw new TalosConfigError(`talosconfig ${named.path} (${named.why}) does not exist`);
  log.warn(
    { looked: inClusterPath },
    'no talosconfig (--talosconfig, $TALOSCONFIG or the in-cluster one): Managed actions are approved but not performed until it appears',
  );
  return reloader;
}

export function controllerCommand(): Command {
  return new Command('controller')
    .description('run the gatehouse controller: checks, gates, hooks and the HTTP API')
    .option('--kubeconfig <path>', 'kubeconfig file (default: in-cluster, $KUBECONFIG or ~/.kube/config)')
    .option('--context <name>', 'kubeconfig context to use')
    .option('--listen-host <host>', 'address to serve HTTP on', '0.0.0.0')
    .option('--port <port>', 'port to serve HTTP on', port, 8080)
    .addOption(
      new Option(
        '--service-resolution <how>',
        'how Service references are reached (default: dns in a cluster, endpoints outside)',
      ).choices(['dns', 'endpoints']),
    )
    .option('--log-level <level>', 'debug, info, warn or error', 'info')
    .option(
      '--talosconfig <path>',
      `talosconfig for Managed execution, reread when it changes (default: $TALOSCONFIG, else ${IN_CLUSTER_TALOSCONFIG}; until it exists, Managed actions are approved but not performed)`,
    )
    .option('--talos-context <name>', "talosconfig context to use (default: the file's current one)")
    .option(
      '--instance <name>',
      'act only on NodeActions and policies labelled talos.dev/controller-instance=<name> (several gatehouses in one cluster)',
    )
    .option('--check-selector <selector>', 'run only the ClusterHealthChecks matching this label selector')
    .option(
      '--cluster-api-kubeconfig-secret <name>',
      "Cluster API mode: a Secret in the controller's namespace holding the management cluster's kubeconfig (key: --cluster-api-kubeconfig-key); needs --cluster-api-cluster",
    )
    .option('--cluster-api-kubeconfig-key <key>', 'the key of that Secret holding the kubeconfig', 'value')
    .option(
      '--cluster-api-cluster <namespace/name>',
      'Cluster API mode: the Cluster (in the management cluster) whose Machines are the Nodes of this cluster; their deletion waits for a gated Reset of their Node',
      namespacedName,
    )
    .option('--no-leader-elect', 'act without taking the Lease (only when no other replica runs)')
    .option(
      '--leader-elect-lease <name>',
      "the leader election Lease in the controller's namespace: another --instance in the same namespace needs its own (and RBAC for it)",
      'gatehouse-controller',
    )
    .option(
      '--turn-namespace <namespace>',
      "where the Lease gatehouse-turn is that every controller instance of the cluster takes turns on to admit and approve (default: the controller's namespace; every instance must name the same, with RBAC there)",
    )
    .option('--no-dashboard', 'do not serve the read-only dashboard at / and /v1/dashboard')
    .option(
      '--dashboard-anonymous-actions',
      "show the dashboard's actions (requesters, bypass reasons) to readers without a token allowed to list nodeactions",
    )
    .action(
      async (opts: {
        kubeconfig?: string;
        context?: string;
        listenHost: string;
        port: number;
        serviceResolution?: 'dns' | 'endpoints';
        logLevel: string;
        instance?: string;
        checkSelector?: string;
        leaderElect: boolean;
        leaderElectLease: string;
        turnNamespace?: string;
        dashboard: boolean;
        dashboardAnonymousActions?: boolean;
        talosconfig?: string;
        talosContext?: string;
        clusterApiKubeconfigSecret?: string;
        clusterApiKubeconfigKey: string;
        clusterApiCluster?: { namespace: string; name: string };
      }) => {
        if ((opts.clusterApiKubeconfigSecret === undefined) !== (opts.clusterApiCluster === undefined))
          throw new InvalidArgumentError(
            'the Cluster API mode needs both --cluster-api-kubeconfig-secret and --cluster-api-cluster',
          );
        const log = createLogger({ level: opts.logLevel });
        const talos = await controllerTalosConfig(opts, log);
        const controller = await Controller.start({
          kubeConfig: await loadCredentials(opts),
          log,
          host: opts.listenHost,
          port: opts.port,
          ...(opts.serviceResolution ? { serviceResolution: opts.serviceResolution } : {}),
          ...(opts.instance ? { instance: opts.instance } : {}),
          ...(opts.checkSelector ? { checkSelector: opts.checkSelector } : {}),
          leaderElection: opts.leaderElect ? { name: opts.leaderElectLease } : false,
          ...(opts.turnNamespace ? { turn: { namespace: opts.turnNamespace } } : {}),
          dashboard: opts.dashboard,
          ...(opts.dashboardAnonymousActions ? { dashboardAnonymousActions: true } : {}),
          talos: { config: talos },
          ...(opts.clusterApiKubeconfigSecret && opts.clusterApiCluster
            ? {
                clusterApi: {
                  kubeconfigSecretRef: {
                    name: opts.clusterApiKubeconfigSecret,
                    key: opts.clusterApiKubeconfigKey,
                  },
                  cluster: opts.clusterApiCluster,
                },
              }
            : {}),
        });
        await new Promise<void>((resolve) => {
          const shutdown = (signal: string) => {
            log.info({ signal }, 'shutting down');
            void controller.stop().then(resolve);
          };
          process.once('SIGTERM', () => shutdown('SIGTERM'));
          process.once('SIGINT', () => shutdown('SIGINT'));
        });
      },
    );
}
