// talosconfig: the client configuration talosctl uses, and so does gatehouse.
//
//   context: prod
//   contexts:
//     prod:
//       endpoints: [10.5.0.2, 10.5.0.3:50000]   # apid addresses; port 50000 by default
//       nodes: [10.5.0.4]                       # default targets (gatehouse names its own)
//       ca: <base64 PEM>    # the Talos CA, which signs apid's serving certificate
//       crt: <base64 PEM>   # the client certificate, signed by the same CA
//       key: <base64 PEM>
//
// Found, in order: an explicit path, $TALOSCONFIG, the in-cluster path Talos mounts into
// pods it grants API access (/var/run/secrets/talos.dev/config), then talosctl's
// default ~/.talos/config. Or read from a Kubernetes Secret.
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import type { RestClient } from '../kube/rest.ts';

export const IN_CLUSTER_TALOSCONFIG = '/var/run/secrets/talos.dev/config';
export const DEFAULT_TALOS_API_PORT = 50000;
/** The key of a Secret that holds a talosconfig, as Talos' own ServiceAccount secrets have it. */
export const TALOSCONFIG_SECRET_KEY = 'config';

export interface TalosContextFile {
  endpoints?: string[];
  nodes?: string[];
  ca?: string;
  crt?: string;
  key?: string;
}

export interface TalosConfigFile {
  context?: string;
  contexts?: Record<string, TalosContextFile | null>;
}

/** One context, ready to connect with: PEM text decoded, endpoints as host:port. */
export interface TalosContext {
  name: string;
  endpoints: string[];
  nodes: string[];
  ca: string;
  crt: string;
  key: string;
  /** Where the configuration came from, for error messages. */
  source: string;
}

export class TalosConfigError extends Error {
  override readonly name = 'TalosConfigError';
}

/** Parses talosconfig YAML and checks its shape; `source` names it in errors. */
export function parseTalosConfig(text: string, source: string): TalosConfigFile {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (error) {
    throw new TalosConfigError(
      `talosconfig ${source} is not valid YAML: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw new TalosConfigError(`talosconfig ${source} is not a mapping with "context" and "contexts"`);
  const file = doc as Record<string, unknown>;
  if (file.context !== undefined && typeof file.context !== 'string')
    throw new TalosConfigError(`talosconfig ${source}: "context" must be a string`);
  const contexts = file.contexts;
  if (
    contexts !== undefined &&
    (typeof contexts !== 'object' || contexts === null || Array.isArray(contexts))
  )
    throw new TalosConfigError(`talosconfig ${source}: "contexts" must map context names to contexts`);
  for (const [name, ctx] of Object.entries((contexts ?? {}) as Record<string, unknown>)) {
    if (ctx === null) continue;
    if (typeof ctx !== 'object' || Array.isArray(ctx))
      throw new TalosConfigError(`talosconfig ${source}: context "${name}" must be a mapping`);
    const c = ctx as Record<string, unknown>;
    for (const list of ['endpoints', 'nodes'])
      if (c[list] !== undefined && !(Array.isArray(c[list]) && c[list].every((e) => typeof e === 'string')))
        throw new TalosConfigError(
          `talosconfig ${source}: contexts.${name}.${list} must be a list of addresses`,
        );
    for (const field of ['ca', 'crt', 'key'])
      if (c[field] !== undefined && typeof c[field] !== 'string')
        throw new TalosConfigError(
          `talosconfig ${source}: contexts.${name}.${field} must be a base64 string`,
        );
  }
  return file;
}

/** `host:port` for an endpoint written as a host, host:port, [v6] or [v6]:port. */
export function endpointAddress(endpoint: string): string {
  const e = endpoint
    .trim()
    .replace(/^(https?|tcp|grpc):\/\//, '')
    .replace(/\/+$/, '');
  if (e.startsWith('[')) return /\]:\d+$/.test(e) ? e : `${e}:${String(DEFAULT_TALOS_API_PORT)}`;
  const colons = (e.match(/:/g) ?? []).length;
  if (colons > 1) return `[${e}]:${String(DEFAULT_TALOS_API_PORT)}`; // a bare IPv6 address
  return colons === 1 ? e : `${e}:${String(DEFAULT_TALOS_API_PORT)}`;
}

function decodePem(value: string | undefined, field: string, kind: RegExp, where: string): string {
  if (!value) throw new TalosConfigError(`${where}: "${field}" is missing`);
  const text = Buffer.from(value, 'base64').toString('utf8');
  if (!kind.test(text))
    throw new TalosConfigError(
      `${where}: "${field}" is not base64-encoded PEM (${field === 'key' ? 'a private key' : 'a certificate'})`,
    );
  return text;
}

/** The named context (default: the file's current one), decoded and checked. */
export function selectContext(file: TalosConfigFile, source: string, name?: string): TalosContext {
  const contexts = file.contexts ?? {};
  const chosen = name ?? file.context;
  if (!chosen)
    throw new TalosConfigError(
      `talosconfig ${source} names no current context; choose one of: ${Object.keys(contexts).join(', ') || '(none)'}`,
    );
  const ctx = contexts[chosen];
  if (!ctx)
    throw new TalosConfigError(
      `talosconfig ${source} has no context "${chosen}" (it has: ${Object.keys(contexts).join(', ') || 'none'})`,
    );
  const where = `talosconfig ${source}, context "${chosen}"`;
  const endpoints = (ctx.endpoints ?? []).filter((e) => e.trim() !== '');
  if (endpoints.length === 0)
    throw new TalosConfigError(`${where} has no endpoints: list the Talos API addresses under "endpoints"`);
  return {
    name: chosen,
    endpoints: endpoints.map(endpointAddress),
    nodes: ctx.nodes ?? [],
    ca: decodePem(ctx.ca, 'ca', /-----BEGIN CERTIFICATE-----/, where),
    crt: decodePem(ctx.crt, 'crt', /-----BEGIN CERTIFICATE-----/, where),
    key: decodePem(ctx.key, 'key', /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/, where),
    source,
  };
}

/** What the controller logs about the client certificate it uses. */
export interface ClientCertificate {
  subject: string;
  /** Talos roles: the certificate's organisations (O=os:admin). */
  roles: string[];
  notAfter: Date;
}

/**
 * Parses the context's certificates and checks that the key belongs to the client
 * certificate: a talosconfig half-replaced (a new crt with the old key) is refused here
 * rather than at the first TLS handshake.
 */
export function clientCertificate(context: TalosContext): ClientCertificate {
  const where = `talosconfig ${context.source}, context "${context.name}"`;
  const parse = (field: 'ca' | 'crt', pem: string) => {
    try {
      return new X509Certificate(pem);
    } catch (error) {
      throw new TalosConfigError(
        `${where}: "${field}" is not a valid certificate (${(error as Error).message})`,
      );
    }
  };
  parse('ca', context.ca);
  const crt = parse('crt', context.crt);
  let matches: boolean;
  try {
    matches = crt.checkPrivateKey(createPrivateKey(context.key));
  } catch (error) {
    throw new TalosConfigError(`${where}: "key" is not a valid private key (${(error as Error).message})`);
  }
  if (!matches)
    throw new TalosConfigError(`${where}: "key" is not the private key of the client certificate "crt"`);
  const lines = crt.subject.split('\n');
  return {
    subject: lines.join(', '),
    roles: lines.filter((l) => l.startsWith('O=')).map((l) => l.slice(2)),
    notAfter: crt.validToDate,
  };
}

export interface LoadOptions {
  /** An explicit file (e.g. --talosconfig); nothing else is tried when given. */
  path?: string;
  /** A context other than the file's current one. */
  context?: string;
  env?: NodeJS.ProcessEnv;
  /** Overrides for tests. */
  inClusterPath?: string;
  home?: string;
}

async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new TalosConfigError(`cannot read talosconfig ${path}: ${(error as Error).message}`);
  }
}

/** Finds and loads a talosconfig context (see the top of this file for the order). */
export async function loadTalosConfig(options: LoadOptions = {}): Promise<TalosContext> {
  const env = options.env ?? process.env;
  const candidates: { path: string; why: string; required: boolean }[] = [];
  if (options.path) candidates.push({ path: options.path, why: 'given', required: true });
  else {
    if (env.TALOSCONFIG) candidates.push({ path: env.TALOSCONFIG, why: '$TALOSCONFIG', required: true });
    else {
      candidates.push({
        path: options.inClusterPath ?? IN_CLUSTER_TALOSCONFIG,
        why: 'in-cluster',
        required: false,
      });
      candidates.push({
        path: join(options.home ?? homedir(), '.talos', 'config'),
        why: 'default',
        required: false,
      });
    }
  }
  for (const { path, why, required } of candidates) {
    const text = await readIfExists(path);
    if (text === undefined) {
      if (required) throw new TalosConfigError(`talosconfig ${path} (${why}) does not exist`);
      continue;
    }
    return selectContext(parseTalosConfig(text, path), path, options.context);
  }
  throw new TalosConfigError(
    `no talosconfig found: pass a path, set $TALOSCONFIG, or run in a pod Talos grants API access (${candidates.map((c) => c.path).join(', ')} do not exist)`,
  );
}

export interface SecretReference {
  namespace: string;
  name: string;
  /** The data key holding the talosconfig; default `config`. */
  key?: string;
}

/** Loads a talosconfig context from a Kubernetes Secret. */
export async function loadTalosConfigFromSecret(
  rest: RestClient,
  ref: SecretReference,
  context?: string,
): Promise<TalosContext> {
  const key = ref.key ?? TALOSCONFIG_SECRET_KEY;
  const source = `Secret ${ref.namespace}/${ref.name} key "${key}"`;
  const secret = await rest
    .request<{ data?: Record<string, string> }>(
      `/api/v1/namespaces/${encodeURIComponent(ref.namespace)}/secrets/${encodeURIComponent(ref.name)}`,
    )
    .catch((error: unknown) => {
      throw new TalosConfigError(
        `cannot read the talosconfig from ${source}: ${error instanceof Error ? error.message : String(error)}`,
      );
    });
  const data = secret.data?.[key];
  if (data === undefined)
    throw new TalosConfigError(
      `${source} does not exist in the Secret (it has: ${Object.keys(secret.data ?? {}).join(', ') || 'no keys'})`,
    );
  return selectContext(
    parseTalosConfig(Buffer.from(data, 'base64').toString('utf8'), source),
    source,
    context,
  );
}

/** A talosconfig with one context, PEM given as text (for the sandbox and tests). */
export function talosConfigYaml(context: {
  name: string;
  endpoints: string[];
  nodes?: string[];
  ca: string;
  crt: string;
  key: string;
}): string {
  const b64 = (pem: string) => Buffer.from(pem, 'utf8').toString('base64');
  return stringify({
    context: context.name,
    contexts: {
      [context.name]: {
        endpoints: context.endpoints,
        nodes: context.nodes ?? [],
        ca: b64(context.ca),
        crt: b64(context.crt),
        key: b64(context.key),
      },
    },
  });
}
