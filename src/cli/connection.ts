// How a command reaches gatehouse: a kubeconfig (--kubeconfig, --context, as kubectl
// does; the default) or the controller's HTTP API (--server with --token). Every
// command that talks to a cluster takes these options, before or after its name.
import { readFile } from 'node:fs/promises';
import { Command, Option } from 'commander';
import type { KubeConfig } from '@kubernetes/client-node';
import { errorMessage } from '../wait.ts';
import type { Backend } from './backend.ts';
import { CliError, EXIT, EXIT_CODES_HELP } from './exit.ts';
import { HttpBackend } from './http-backend.ts';
import { KubeBackend } from './kube-backend.ts';

export interface ConnectionOptions {
  kubeconfig?: string;
  context?: string;
  server?: string;
  token?: string;
  tokenFile?: string;
  controllerNamespace?: string;
  controllerInstance?: string;
}

/** The connection options, on the program (before a command) and on each command (after it). */
export function addConnectionOptions(command: Command): Command {
  return command
    .option('--kubeconfig <path>', 'kubeconfig file (default: $KUBECONFIG or ~/.kube/config)')
    .option('--context <name>', 'kubeconfig context to use')
    .addOption(
      new Option(
        '--server <url>',
        'talk to the gatehouse HTTP API at this URL instead of the Kubernetes API',
      ).env('GATEHOUSE_SERVER'),
    )
    .addOption(
      new Option(
        '--token <token>',
        'bearer token for --server (a Kubernetes token, e.g. kubectl create token)',
      ).env('GATEHOUSE_TOKEN'),
    )
    .option('--token-file <path>', 'read the bearer token for --server from this file')
    .option(
      '--controller-namespace <namespace>',
      "the controller's namespace (where apply-config puts configuration Secrets)",
      'gatehouse-system',
    )
    .addOption(
      new Option(
        '--controller-instance <name>',
        'with a kubeconfig: address the controller started with this instance name (e.g. a canary); its actions carry the label talos.dev/controller-instance',
      ).env('GATEHOUSE_CONTROLLER_INSTANCE'),
    );
}

/** A command that talks to a cluster: connection options, and the exit codes in its help. */
export function clusterCommand(name: string): Command {
  return addConnectionOptions(new Command(name)).addHelpText('after', EXIT_CODES_HELP);
}

export async function connect(options: ConnectionOptions): Promise<Backend> {
  if (options.server !== undefined) {
    if (options.kubeconfig !== undefined || options.context !== undefined) {
      throw new CliError(
        'use either --server (the gatehouse API) or --kubeconfig/--context, not both',
        EXIT.usage,
      );
    }
    let token = options.token;
    if (options.tokenFile !== undefined) {
      try {
        token = (await readFile(options.tokenFile, 'utf8')).trim();
      } catch (error) {
        throw new CliError(`cannot read --token-file: ${errorMessage(error)}`, EXIT.usage);
      }
    }
    if (!token) {
      throw new CliError(
        '--server needs a bearer token: --token, --token-file or $GATEHOUSE_TOKEN',
        EXIT.usage,
      );
    }
    return new HttpBackend({ server: options.server, token });
  }
  let kubeConfig;
  try {
    kubeConfig = await loadKubeConfig(options);
  } catch (error) {
    throw new CliError(`cannot load the kubeconfig: ${errorMessage(error)}`, EXIT.unreachable);
  }
  return new KubeBackend(kubeConfig, {
    ...(options.controllerNamespace ? { controllerNamespace: options.controllerNamespace } : {}),
    ...(options.controllerInstance ? { instance: options.controllerInstance } : {}),
  });
}

/**
 * The CLI's kubeconfig, by client-node (exec plugins and all a laptop's kubeconfig may
 * use), imported when a command talks to a cluster: not at every start of the CLI, and
 * never by `gatehouse controller` (src/kube/kubeconfig.ts says why).
 */
export async function loadKubeConfig(options: {
  kubeconfig?: string;
  context?: string;
}): Promise<KubeConfig> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  if (options.kubeconfig) kc.loadFromFile(options.kubeconfig);
  else kc.loadFromDefault();
  if (options.context) kc.setCurrentContext(options.context);
  return kc;
}
