// The controller's credentials for the API server, read without @kubernetes/client-node.
//
// client-node's KubeConfig module imports the library's whole generated API (models and
// serialisers of every Kubernetes type): 88 MiB of resident memory in a process that uses
// none of it — more than the rest of the controller's code together (docs/decisions.md).
// What a controller meets in practice is small: the in-cluster ServiceAccount, or a
// kubeconfig with a certificate or token. Those are read here; anything else (exec or
// auth-provider plugins, basic auth, impersonation, a proxy, several files in
// $KUBECONFIG) is handed to client-node, imported only then, which supports it all.
import { readFileSync, statSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { parse } from 'yaml';

/** What RestClient needs of a kubeconfig; client-node's KubeConfig has the same shape. */
export interface KubeCredentials {
  getCurrentCluster(): { server: string; proxyUrl?: string | undefined } | null;
  /** Puts the TLS material and the Authorization header on a request's options. */
  applyToHTTPSOptions(options: RequestOptions): Promise<void>;
}

export interface CredentialsOptions {
  /** A kubeconfig file; default: $KUBECONFIG, ~/.kube/config, then in-cluster (as client-node). */
  kubeconfig?: string;
  context?: string;
  env?: NodeJS.ProcessEnv;
  /** Where the in-cluster ServiceAccount is mounted. */
  serviceAccountDir?: string;
}

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** How long a file's contents are used before it is read again: tokens and certificates rotate. */
const FILE_TTL_MS = 60_000;

/** A value from a file (read again after FILE_TTL_MS) or given inline. */
type Source = { file: string } | { data: Buffer };

interface Plain {
  server: string;
  ca?: Source;
  cert?: Source;
  key?: Source;
  token?: Source;
  insecureSkipTLSVerify?: boolean;
  tlsServerName?: string;
}

const CLUSTER_KEYS = new Set([
  'server',
  'certificate-authority',
  'certificate-authority-data',
  'insecure-skip-tls-verify',
  'tls-server-name',
  'extensions',
]);
const USER_KEYS = new Set([
  'client-certificate',
  'client-certificate-data',
  'client-key',
  'client-key-data',
  'token',
  'tokenFile',
  'extensions',
]);

class PlainCredentials implements KubeCredentials {
  private readonly cache = new Map<string, { at: number; value: Buffer }>();
  private readonly plain: Plain;
  constructor(plain: Plain) {
    this.plain = plain;
  }

  getCurrentCluster(): { server: string } {
    return { server: this.plain.server };
  }

  applyToHTTPSOptions(options: RequestOptions): Promise<void> {
    const { ca, cert, key, token, insecureSkipTLSVerify, tlsServerName } = this.plain;
    if (ca) options.ca = this.read(ca);
    if (cert) options.cert = this.read(cert);
    if (key) options.key = this.read(key);
    if (insecureSkipTLSVerify) options.rejectUnauthorized = false;
    if (tlsServerName) options.servername = tlsServerName;
    if (token) {
      const value = this.read(token).toString('utf8').trim();
      // RestClient's headers are a plain object (never the raw array form).
      if (value)
        options.headers = {
          ...(options.headers as Record<string, string>),
          Authorization: `Bearer ${value}`,
        };
    }
    return Promise.resolve();
  }

  private read(source: Source): Buffer {
    if ('data' in source) return source.data;
    const now = Date.now();
    const cached = this.cache.get(source.file);
    if (cached && now - cached.at < FILE_TTL_MS) return cached.value;
    const value = readFileSync(source.file);
    this.cache.set(source.file, { at: now, value });
    return value;
  }
}

function exists(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function record(value: unknown): Record<string, unknown> | undefined {
  return value && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function named(list: unknown, name: string, field: string): Record<string, unknown> | undefined {
  if (!Array.isArray(list)) return undefined;
  const entry = list.map(record).find((e) => e?.name === name);
  return record(entry?.[field]);
}

/**
 * The plain reading of a kubeconfig's context, or undefined when it uses anything beyond
 * certificates and tokens. Relative paths are relative to the file, as kubectl reads them.
 */
export function plainKubeconfig(text: string, path: string, context?: string): Plain | undefined {
  const doc = record(parse(text));
  if (!doc) throw new Error(`kubeconfig ${path} is not a YAML mapping`);
  const contextName = context ?? (typeof doc['current-context'] === 'string' ? doc['current-context'] : '');
  const ctx = named(doc.contexts, contextName, 'context');
  if (!ctx) return undefined;
  if (typeof ctx.cluster !== 'string') return undefined;
  const cluster = named(doc.clusters, ctx.cluster, 'cluster');
  const user =
    ctx.user === undefined
      ? {}
      : typeof ctx.user === 'string'
        ? named(doc.users, ctx.user, 'user')
        : undefined;
  if (!cluster || !user || typeof cluster.server !== 'string') return undefined;
  if (Object.keys(cluster).some((k) => !CLUSTER_KEYS.has(k))) return undefined;
  if (Object.keys(user).some((k) => !USER_KEYS.has(k))) return undefined;
  const file = (value: unknown): Source | undefined =>
    typeof value === 'string' && value !== ''
      ? { file: isAbsolute(value) ? value : join(dirname(path), value) }
      : undefined;
  const data = (value: unknown): Source | undefined =>
    typeof value === 'string' && value !== '' ? { data: Buffer.from(value, 'base64') } : undefined;
  const plain: Plain = { server: cluster.server };
  const ca = data(cluster['certificate-authority-data']) ?? file(cluster['certificate-authority']);
  const cert = data(user['client-certificate-data']) ?? file(user['client-certificate']);
  const key = data(user['client-key-data']) ?? file(user['client-key']);
  const token =
    typeof user.token === 'string' && user.token !== ''
      ? { data: Buffer.from(user.token) }
      : file(user.tokenFile);
  if (ca) plain.ca = ca;
  if (cert) plain.cert = cert;
  if (key) plain.key = key;
  if (token) plain.token = token;
  if (cluster['insecure-skip-tls-verify'] === true) plain.insecureSkipTLSVerify = true;
  if (typeof cluster['tls-server-name'] === 'string') plain.tlsServerName = cluster['tls-server-name'];
  return plain;
}

/** client-node's KubeConfig, for what the plain reading leaves to it. */
async function clientNode(
  kubeconfig: string | undefined,
  context: string | undefined,
): Promise<KubeCredentials> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  if (kubeconfig) kc.loadFromFile(kubeconfig);
  else kc.loadFromDefault();
  if (context) kc.setCurrentContext(context);
  return kc;
}

/** The credentials, found where client-node's loadFromDefault looks, in the same order. */
export async function loadCredentials(options: CredentialsOptions = {}): Promise<KubeCredentials> {
  const env = options.env ?? process.env;
  const fromEnv = env.KUBECONFIG?.trim();
  // Several files in $KUBECONFIG are merged by client-node; one is read here.
  if (!options.kubeconfig && fromEnv?.includes(':')) return clientNode(undefined, options.context);
  const home = join(env.HOME ?? homedir(), '.kube', 'config');
  const path = options.kubeconfig ?? (fromEnv || (exists(home) ? home : undefined));
  if (path) {
    const plain = plainKubeconfig(readFileSync(path, 'utf8'), path, options.context);
    return plain ? new PlainCredentials(plain) : clientNode(path, options.context);
  }
  const host = env.KUBERNETES_SERVICE_HOST;
  const dir = options.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  if (host && !options.context) {
    const port = env.KUBERNETES_SERVICE_PORT ?? '443';
    return new PlainCredentials({
      server: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
      ca: { file: join(dir, 'ca.crt') },
      token: { file: join(dir, 'token') },
    });
  }
  return clientNode(undefined, options.context);
}

/** A kubeconfig read from a Secret: its credentials and the name of its current cluster. */
export interface InlineKubeconfig {
  credentials: KubeCredentials;
  clusterName: string;
}

/**
 * A kubeconfig held in a Secret, with everything inline: a server, its CA, a token or a
 * client certificate. Files, exec and auth-provider plugins are refused: whoever wrote the
 * Secret must not make the controller read its own files (its ServiceAccount token sent to
 * a server of their choosing) or run a program. Errors never quote the text, which may
 * be some other Secret's content.
 */
export function inlineKubeconfig(text: string): InlineKubeconfig {
  let doc: Record<string, unknown> | undefined;
  try {
    doc = record(parse(text));
  } catch {
    doc = undefined;
  }
  if (!doc) throw new Error('is not a kubeconfig (not a YAML mapping)');
  const plain = plainKubeconfig(text, '/', undefined);
  if (!plain)
    throw new Error(
      'is not a kubeconfig gatehouse reads from a Secret: its current context needs a cluster with a server and a user with a token or client certificate, given inline',
    );
  const sources = [plain.ca, plain.cert, plain.key, plain.token];
  if (sources.some((source) => source !== undefined && 'file' in source))
    throw new Error(
      'refers to files (certificate-authority, client-certificate, client-key or tokenFile): a kubeconfig in a Secret must carry them inline (the *-data fields, token)',
    );
  const contextName = typeof doc['current-context'] === 'string' ? doc['current-context'] : '';
  const cluster = named(doc.contexts, contextName, 'context')?.cluster;
  return {
    credentials: new PlainCredentials(plain),
    clusterName: typeof cluster === 'string' ? cluster : '',
  };
}
