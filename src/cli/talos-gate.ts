// `gatehouse talos-gate`: the Talos API gate (what the chart's talos-gate Deployment
// runs). It serves the Talos API over mutual TLS with certificates from its own CA (a
// Secret in gatehouse's namespace, made by the first replica), forwards to apid with
// gatehouse's talosconfig, and signs gate certificates for `gatehouse talosconfig`.
import { InvalidArgumentError, Command } from 'commander';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { parseDuration } from '../duration.ts';
import { Authorizer } from '../http/auth.ts';
import { loadCredentials } from '../kube/kubeconfig.ts';
import { RestClient } from '../kube/rest.ts';
import { createLogger } from '../log.ts';
import { DEFAULT_NAMESPACE } from '../manifests/controller.ts';
import { TalosConfigError } from '../talos/config.ts';
import { loadOrCreateAuthority, servingCertificate } from '../talos-gate/authority-store.ts';
import { loadAuthority } from '../talos-gate/pki.ts';
import { TalosGate } from '../talos-gate/server.ts';
import { CertificateSigner } from '../talos-gate/signer.ts';
import { Upstream } from '../talos-gate/upstream.ts';
import { controllerTalosConfig } from './controller.ts';

/** The gate CA Secret's default name, in gatehouse's namespace. */
export const GATE_CA_SECRET = 'gatehouse-talos-gate-ca';

function duration(value: string): number {
  try {
    return parseDuration(value);
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
}

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new InvalidArgumentError('must be a port number, 0-65535');
  return n;
}

interface Options {
  kubeconfig?: string;
  context?: string;
  listenHost: string;
  port: number;
  talosconfig?: string;
  talosContext?: string;
  namespace: string;
  caSecret: string;
  caCert?: string;
  caKey?: string;
  name: string[];
  hold: number;
  approvedDeadline: string;
  maxCertificateLifetime: number;
  instance?: string;
  logLevel: string;
  sign: boolean;
  delegate: string[];
}

export function talosGateCommand(): Command {
  return new Command('talos-gate')
    .description(
      'serve the Talos API gate: talosctl pointed here passes non-disruptive calls through and holds disruptive ones as NodeActions',
    )
    .option('--kubeconfig <path>', 'kubeconfig file (default: in-cluster, $KUBECONFIG or ~/.kube/config)')
    .option('--context <name>', 'kubeconfig context to use')
    .option('--listen-host <host>', 'address to serve the Talos API on', '0.0.0.0')
    .option('--port <port>', 'port to serve the Talos API on', port, 50000)
    .option(
      '--talosconfig <path>',
      "gatehouse's own talosconfig, to reach apid (default: $TALOSCONFIG, else the in-cluster one)",
    )
    .option('--talos-context <name>', "talosconfig context to use (default: the file's current one)")
    .option(
      '--namespace <ns>',
      "gatehouse's namespace (the CA Secret is there)",
      process.env.POD_NAMESPACE ?? DEFAULT_NAMESPACE,
    )
    .option(
      '--ca-secret <name>',
      'the Secret holding the gate CA (ca.crt, ca.key), made when missing',
      GATE_CA_SECRET,
    )
    .option('--ca-cert <path>', 'the gate CA certificate from a file instead of the Secret (with --ca-key)')
    .option('--ca-key <path>', 'the gate CA key from a file')
    .option(
      '--name <name>',
      'a DNS name or IP address the gate is reached at, for its serving certificate (repeat; the Service names)',
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .option(
      '--hold <duration>',
      'how long a held call waits for its action before it is answered (keep under 2s: the person at the terminal learns why)',
      duration,
      1500,
    )
    .option(
      '--approved-deadline <duration>',
      'deadlines.approved of the actions the gate creates: how long an approval waits for the repeated call',
      '15m',
    )
    .option(
      '--max-certificate-lifetime <duration>',
      'longest validity of a certificate the gate signs',
      duration,
      8 * 3_600_000,
    )
    .option(
      '--instance <name>',
      'label the actions the gate creates with talos.dev/controller-instance=<name>',
    )
    .option('--no-sign', 'do not sign gate certificates (another replica or process does)')
    .option(
      '--delegate <user>',
      "a Kubernetes user whose certificate requests may name someone else (talos.dev/requested-for): the controller's ServiceAccount, for its HTTP API (repeat)",
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .option('--log-level <level>', 'debug, info, warn or error', 'info')
    .action(async (opts: Options) => {
      const log = createLogger({ level: opts.logLevel });
      const rest = new RestClient(await loadCredentials(opts));
      const talos = await controllerTalosConfig(opts, log);
      const context = talos.current;
      if (!context)
        throw new TalosConfigError(
          'the Talos API gate needs a talosconfig to reach apid: --talosconfig, $TALOSCONFIG or the in-cluster one',
        );
      const authority =
        opts.caCert && opts.caKey
          ? loadAuthority(await readFile(opts.caCert, 'utf8'), await readFile(opts.caKey, 'utf8'))
          : await loadOrCreateAuthority(rest, opts.namespace, opts.caSecret);
      const names = ['localhost', '127.0.0.1', ...opts.name];
      const serving = servingCertificate(authority, {
        dnsNames: names.filter((n) => isIP(n) === 0),
        ipAddresses: names.filter((n) => isIP(n) !== 0),
      });
      const upstream = new Upstream(context);
      talos.start({ onChange: (next) => upstream.replaceContext(next) });
      const gate = await TalosGate.start({
        rest,
        upstream,
        tls: { cert: serving.cert, key: serving.key, clientCa: authority.cert },
        host: opts.listenHost,
        port: opts.port,
        holdMs: opts.hold,
        approvedDeadline: opts.approvedDeadline,
        log,
        ...(opts.instance ? { instance: opts.instance } : {}),
      });
      const signer = opts.sign
        ? new CertificateSigner({
            rest,
            authorizer: new Authorizer({ rest, log }),
            authority,
            log,
            maxLifetimeMs: opts.maxCertificateLifetime,
            delegates: opts.delegate,
          })
        : undefined;
      signer?.start();
      log.info({ endpoint: gate.endpoint, upstream: context.endpoints }, 'talos gate: serving');
      await new Promise<void>((resolve) => {
        const shutdown = (signal: string) => {
          log.info({ signal }, 'shutting down');
          talos.stop();
          void Promise.all([gate.stop(), signer?.stop()]).then(() => resolve());
        };
        process.once('SIGTERM', () => shutdown('SIGTERM'));
        process.once('SIGINT', () => shutdown('SIGINT'));
      });
    });
}
