// `gatehouse controller`: the long-running controller (what the Deployment runs).
import { KubeConfig } from '@kubernetes/client-node';
import { Command, InvalidArgumentError, Option } from 'commander';
import { Controller } from '../controller.ts';
import { createLogger } from '../log.ts';

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new InvalidArgumentError('must be a port number, 0-65535');
  return n;
}

export function loadKubeConfig(options: { kubeconfig?: string; context?: string }): KubeConfig {
  const kc = new KubeConfig();
  if (options.kubeconfig) kc.loadFromFile(options.kubeconfig);
  else kc.loadFromDefault();
  if (options.context) kc.setCurrentContext(options.context);
  return kc;
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
      '--instance <name>',
      'act only on NodeActions and policies labelled talos.dev/controller-instance=<name> (several gatehouses in one cluster)',
    )
    .option('--check-selector <selector>', 'run only the ClusterHealthChecks matching this label selector')
    .option('--no-leader-elect', 'act without taking the Lease (only when no other replica runs)')
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
      }) => {
        const log = createLogger({ level: opts.logLevel });
        const controller = await Controller.start({
          kubeConfig: loadKubeConfig(opts),
          log,
          host: opts.listenHost,
          port: opts.port,
          ...(opts.serviceResolution ? { serviceResolution: opts.serviceResolution } : {}),
          ...(opts.instance ? { instance: opts.instance } : {}),
          ...(opts.checkSelector ? { checkSelector: opts.checkSelector } : {}),
          ...(opts.leaderElect ? {} : { leaderElection: false as const }),
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
