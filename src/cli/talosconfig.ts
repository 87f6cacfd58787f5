// `gatehouse talosconfig`: a talosconfig context for the Talos API gate. The person is
// authenticated by Kubernetes — with any kubeconfig (token, client certificate, exec
// plugin) the command sends a CertificateSigningRequest for the gate's signer itself;
// with only gatehouse's HTTP API and a bearer token (--server, --token) it sends the
// request there (POST /v1/talos/certificates) — and the gate signs it if RBAC grants the
// Talos role asked for (docs/talos-gate.md). The key never leaves this machine; the
// certificate is short-lived.
import { Command, InvalidArgumentError, Option } from 'commander';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { parse, stringify } from 'yaml';
import { parseDuration } from '../duration.ts';
import { loadCredentials } from '../kube/kubeconfig.ts';
import { RestClient } from '../kube/rest.ts';
import { endpointAddress } from '../talos/config.ts';
import { TALOS_ROLES } from '../talos-gate/methods.ts';
import { createCertificateRequest, newKey } from '../talos-gate/pki.ts';
import { awaitSigning, CSR_PATH, gateSigningRequest } from '../talos-gate/signing-request.ts';
import { connect } from './connection.ts';
import { CliError, EXIT } from './exit.ts';
import { HttpBackend } from './http-backend.ts';

interface Options {
  kubeconfig?: string;
  context?: string;
  server?: string;
  token?: string;
  tokenFile?: string;
  endpoint: string[];
  role: string;
  duration: number;
  talosconfig?: string;
  name: string;
  nodes: string[];
  timeout: number;
}

const list = (value: string, previous: string[]) => [
  ...previous,
  ...value
    .split(',')
    .map((v) => v.trim())
    .filter(Boolean),
];

function duration(value: string): number {
  try {
    return parseDuration(value);
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
}

/** The PEM blocks of a certificate chain, leaf first. */
export function splitChain(pem: string): string[] {
  return pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----\n?/g) ?? [];
}

/** Who asks for the certificate, and how its request reaches the gate's signer. */
interface Issuer {
  user: string;
  /** The chain's PEM for the request `pem` (CN the user, O the role), or throws with the signer's reason. */
  sign(pem: string, durationMs: number, timeoutMs: number): Promise<string>;
}

/** Through the Kubernetes API: a CertificateSigningRequest of the person's own. */
async function kubeIssuer(opts: Options): Promise<Issuer> {
  const rest = new RestClient(await loadCredentials(opts));
  const review = await rest.request<{ status: { userInfo: { username: string } } }>(
    '/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { method: 'POST', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
  );
  const user = review.status.userInfo.username;
  return {
    user,
    sign: (pem, durationMs, timeoutMs) => requestGateCertificate(rest, user, pem, durationMs, timeoutMs),
  };
}

/** Through gatehouse's HTTP API, with a bearer token: the controller asks on the person's behalf. */
async function httpIssuer(opts: Options): Promise<Issuer> {
  const backend = await connect(opts);
  if (!(backend instanceof HttpBackend))
    throw new CliError('--server is needed for the HTTP API', EXIT.usage);
  const user = await backend.whoami();
  return {
    user,
    // The API asks for 10 minutes to 7 days; the gate cuts it to its own longest anyway.
    sign: (pem, durationMs) =>
      backend.talosCertificate(pem, Math.min(7 * 86_400, Math.max(600, Math.round(durationMs / 1000)))),
  };
}

/** Sends the request as the person and waits for the gate's signer; the chain's PEM. */
async function requestGateCertificate(
  rest: RestClient,
  user: string,
  pem: string,
  durationMs: number,
  timeoutMs: number,
): Promise<string> {
  const { name, body } = gateSigningRequest(user, pem, Math.round(durationMs / 1000));
  await rest.request(CSR_PATH, { method: 'POST', body });
  const verdict = await awaitSigning(rest, name, timeoutMs, 500);
  if ('certificate' in verdict) return verdict.certificate;
  if ('refused' in verdict) throw new Error(`the Talos API gate refused the certificate: ${verdict.refused}`);
  throw new Error(
    `CertificateSigningRequest ${name} was not signed within ${String(timeoutMs / 1000)}s: is the Talos API gate running (it signs them)?`,
  );
}

export function talosconfigCommand(): Command {
  return new Command('talosconfig')
    .description(
      'write a talosconfig context that reaches the Talos nodes through the Talos API gate, with a short-lived certificate for you',
    )
    .requiredOption(
      '--endpoint <address>',
      "the Talos API gate's address (host or host:port; repeat or comma-separate)",
      list,
      [] as string[],
    )
    .option(
      '--role <role>',
      `the Talos role to ask for: ${TALOS_ROLES.join(', ')} (RBAC must grant it)`,
      'os:reader',
    )
    .option(
      '--duration <duration>',
      'how long the certificate is valid (the gate may cut it shorter)',
      duration,
      8 * 3_600_000,
    )
    .option(
      '--talosconfig <path>',
      'the talosconfig to write the context into (default: $TALOSCONFIG, else ~/.talos/config)',
    )
    .option('--name <context>', 'the name of the context written (made current)', 'gatehouse')
    .option('--nodes <nodes>', 'default nodes of the context (comma-separated)', list, [] as string[])
    .option('--kubeconfig <path>', 'kubeconfig file (default: in-cluster, $KUBECONFIG or ~/.kube/config)')
    .option('--context <name>', 'kubeconfig context to use')
    .addOption(
      new Option(
        '--server <url>',
        "ask through gatehouse's HTTP API at this URL (with --token) instead of the Kubernetes API",
      ).env('GATEHOUSE_SERVER'),
    )
    .addOption(
      new Option('--token <token>', 'bearer token for --server (a Kubernetes token)').env('GATEHOUSE_TOKEN'),
    )
    .option('--token-file <path>', 'read the bearer token for --server from this file')
    .option('--timeout <duration>', 'how long to wait for the gate to sign', duration, 60_000)
    .action(async (opts: Options) => {
      if (!(TALOS_ROLES as readonly string[]).includes(opts.role))
        throw new InvalidArgumentError(`--role must be one of ${TALOS_ROLES.join(', ')}`);
      const issuer = opts.server !== undefined ? await httpIssuer(opts) : await kubeIssuer(opts);
      const user = issuer.user;
      const key = newKey();
      const pem = createCertificateRequest({ commonName: user, organizations: [opts.role] }, key.privateKey);
      const chain = splitChain(await issuer.sign(pem, opts.duration, opts.timeout));
      const [crt, ...cas] = chain;
      if (!crt || cas.length === 0) throw new Error('the signed certificate came without the gate CA');
      const path = opts.talosconfig ?? process.env.TALOSCONFIG ?? join(homedir(), '.talos', 'config');
      const existing: { contexts?: Record<string, unknown> } = await readFile(path, 'utf8').then(
        (t) => (parse(t) ?? {}) as { contexts?: Record<string, unknown> },
        () => ({}),
      );
      const b64 = (text: string) => Buffer.from(text).toString('base64');
      const file = {
        ...existing,
        context: opts.name,
        contexts: {
          ...(existing.contexts ?? {}),
          [opts.name]: {
            endpoints: opts.endpoint.map(endpointAddress),
            nodes: opts.nodes,
            ca: b64(cas.join('')),
            crt: b64(crt),
            key: b64(key.keyPem),
          },
        },
      };
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, stringify(file), { mode: 0o600 });
      process.stdout.write(
        `wrote context "${opts.name}" to ${path}: ${user} with the Talos role ${opts.role}, through the gate at ${opts.endpoint.join(', ')}, valid ${String(Math.round(opts.duration / 60_000))} minutes at most\n  try: talosctl --talosconfig ${path} -n <node> version\n`,
      );
    });
}
