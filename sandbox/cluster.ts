// The sandbox: a real Kubernetes control plane on loopback, built from the Go modules
// (see build.sh), with kwok simulating Talos nodes and the pods that run on them, and a
// Talos API simulator that reboots, upgrades, shuts down and resets those nodes.
//
//   etcd → kube-apiserver → kube-controller-manager + kube-scheduler + kwok → nodes
//                                                      Talos API simulator ↗
//
// All state lives in one directory: PKI, kubeconfigs, etcd data, logs and state.json
// (the PIDs and ports). `stopSandbox(dir)` works from any process and removes it all.
import { request } from 'node:https';
import { request as httpRequest } from 'node:http';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { TalosClient } from '../src/talos/client.ts';
import { loadTalosConfig } from '../src/talos/config.ts';
import { errorMessage, sleep, WaitAbortedError, waitFor } from '../src/wait.ts';
import { formatDuration } from '../src/duration.ts';
import { ensureBinaries, type Binaries } from './binaries.ts';
import { kwokConfiguration } from './kwok-config.ts';
import { startMonitoring } from './monitoring.ts';
import { createNodes, defaultNodeSpecs, type NodeSpec } from './nodes.ts';
import { base64File, CertificateAuthority, generateKeyPair } from './pki.ts';
import { freePorts, isAlive, logTail, startProcess, stopProcess, type StartedProcess } from './processes.ts';
import { createTalosPki, writeTalosConfig } from './talos-pki.ts';

export interface SandboxOptions {
  /** Directory for all of the sandbox's files; created, and removed by stop. */
  dir: string;
  /** Simulated nodes: a count (1 control plane, the rest workers) or explicit specs. Default 3. */
  nodes?: number | NodeSpec[];
  /**
   * When set, the sandbox belongs to this process: a later `reapOrphans` stops it
   * if the process has died without stopping it (a crashed test run).
   */
  ownerPid?: number;
  /**
   * Start the Talos API simulator (a process of its own) and write a talosconfig for
   * it into the sandbox directory. Default true.
   */
  talos?: boolean;
  /** How long a node the simulator reboots stays down. Default 2s. */
  talosBootDelay?: string;
  /**
   * Start Prometheus and Alertmanager too (sandbox/monitoring.ts); Prometheus scrapes
   * a controller on 127.0.0.1:`controllerPort` (the controller's default, 8080).
   */
  monitoring?: boolean | { controllerPort?: number };
  log?: (line: string) => void;
}

export interface SandboxState {
  version: 1;
  dir: string;
  server: string;
  kubeconfig: string;
  /** The talosconfig that reaches the Talos API simulator, when it runs. */
  talosconfig?: string;
  /** The simulator's Talos PKI (CA, apid and admin certificates), when it runs. */
  talosPki?: string;
  /** How long a node the simulator reboots stays down (a Go duration). */
  talosBootDelay?: string;
  kubernetesVersion: string;
  startedAt: string;
  ownerPid?: number;
  ports: Record<string, number>;
  processes: { name: string; pid: number; log: string }[];
  /** How kube-apiserver was started, so that a fault test can restart it as it was. */
  apiserverCommand?: { command: string; args: string[] };
  nodes: string[];
  /** Prometheus's and Alertmanager's URLs, when the sandbox runs them. */
  monitoring?: { prometheus: string; alertmanager: string };
}

const STATE_FILE = 'state.json';
const SERVICE_CIDR = '10.96.0.0/16';
const SERVICE_IP = '10.96.0.1';
const TALOS_SIMULATOR = join(dirname(fileURLToPath(import.meta.url)), 'talos-simulator.ts');

export class Sandbox {
  readonly state: SandboxState;

  constructor(state: SandboxState) {
    this.state = state;
  }

  get kubeconfig(): string {
    return this.state.kubeconfig;
  }

  kubeConfig(): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromFile(this.state.kubeconfig);
    return kc;
  }

  async stop(): Promise<void> {
    await stopSandbox(this.state.dir);
  }

  /**
   * Stops kube-apiserver and starts it again on the same address, as a control-plane
   * upgrade or a reboot of its node does to clients: every connection and watch is cut,
   * and for `downMs` nothing answers. Resolves once it is ready again. For fault tests.
   */
  async restartApiServer(options: { downMs?: number } = {}): Promise<void> {
    const entry = this.state.processes.find((p) => p.name === 'kube-apiserver');
    const how = this.state.apiserverCommand;
    if (!entry || !how) throw new Error('this sandbox did not record how it started kube-apiserver');
    // A moment to shut down cleanly, then gone, as when its node is powered off.
    await stopProcess(entry.pid, 1000);
    await sleep(options.downMs ?? 0);
    const restarted = startProcess(entry.name, how.command, how.args, entry.log);
    entry.pid = restarted.pid;
    await writeFile(join(this.state.dir, STATE_FILE), JSON.stringify(this.state, null, 2));
    const pki = join(this.state.dir, 'pki');
    const tls: TlsFiles = {
      ca: await readFile(join(pki, 'ca.crt')),
      cert: await readFile(join(pki, 'admin.crt')),
      key: await readFile(join(pki, 'admin.key')),
    };
    await waitFor(
      'kube-apiserver ready again',
      async (observe) => {
        if (restarted.exited)
          throw new WaitAbortedError(`kube-apiserver exited: ${await logTail(entry.log)}`);
        return (
          await get(`${this.state.server}/readyz`, tls).catch((error: unknown) => {
            observe(errorMessage(error));
            return { status: 0 };
          })
        ).status === 200
          ? true
          : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 100 },
    );
  }
}

export async function readState(dir: string): Promise<SandboxState | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, STATE_FILE), 'utf8')) as SandboxState;
  } catch {
    return undefined;
  }
}

/** The sandbox in `dir` if it is up (every recorded process alive). */
export async function attachSandbox(dir: string): Promise<Sandbox | undefined> {
  const state = await readState(dir);
  if (!state || !state.processes.every((p) => isAlive(p.pid))) return undefined;
  return new Sandbox(state);
}

/**
 * Compacts etcd's history up to now, as the API server does every few minutes in a
 * real cluster: afterwards, watches from any older resourceVersion get 410 Gone. For
 * fault tests; returns the revision compacted to.
 */
export async function compactEtcd(state: SandboxState): Promise<number> {
  const base = `http://127.0.0.1:${String(state.ports.etcdClient)}`;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(base + path, { method: 'POST', body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`etcd ${path}: ${String(res.status)} ${await res.text()}`);
    return (await res.json()) as { header?: { revision?: string } };
  };
  const status = await post('/v3/maintenance/status', {});
  const revision = Number(status.header?.revision);
  if (!Number.isInteger(revision) || revision < 1)
    throw new Error(`etcd reported no revision: ${JSON.stringify(status)}`);
  await post('/v3/kv/compaction', { revision, physical: true });
  return revision;
}

/** Stops every process recorded for the sandbox in `dir`, newest first, and removes the directory. */
export async function stopSandbox(dir: string): Promise<void> {
  const state = await readState(dir);
  for (const p of [...(state?.processes ?? [])].reverse()) await stopProcess(p.pid);
  await rm(dir, { recursive: true, force: true });
}

/** Stops sandboxes under `base` whose owning process has died (crashed test runs). */
export async function reapOrphans(base: string): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(base);
  } catch {
    return [];
  }
  const reaped: string[] = [];
  for (const entry of entries) {
    const dir = join(base, entry);
    const state = await readState(dir);
    if (state?.ownerPid !== undefined && !isAlive(state.ownerPid)) {
      await stopSandbox(dir);
      reaped.push(dir);
    }
  }
  return reaped;
}

interface TlsFiles {
  ca: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

/** GET over HTTP(S) returning status and body; never throws on HTTP errors. */
function get(url: string, tls?: TlsFiles): Promise<{ status: number; body: string }> {
  return new Promise((resolvePromise, reject) => {
    const options = { timeout: 2000, ...(tls ? { ca: tls.ca, cert: tls.cert, key: tls.key } : {}) };
    const send = url.startsWith('https:') ? request : httpRequest;
    const req = send(url, options, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolvePromise({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

function kubeconfigYaml(server: string, user: string, ca: string, cert: string, key: string): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'gatehouse-sandbox', cluster: { server, 'certificate-authority-data': ca } }],
    users: [{ name: user, user: { 'client-certificate-data': cert, 'client-key-data': key } }],
    contexts: [{ name: 'gatehouse-sandbox', context: { cluster: 'gatehouse-sandbox', user } }],
    'current-context': 'gatehouse-sandbox',
  });
}

export async function startSandbox(options: SandboxOptions): Promise<Sandbox> {
  const log = options.log ?? (() => undefined);
  const began = Date.now();
  const dir = resolve(options.dir);
  if (await attachSandbox(dir)) throw new Error(`a sandbox is already running in ${dir}; stop it first`);
  await rm(dir, { recursive: true, force: true });
  const paths = {
    pki: join(dir, 'pki'),
    logs: join(dir, 'logs'),
    etcd: join(dir, 'etcd'),
    certs: join(dir, 'certs'),
    talosPki: join(dir, 'talos-pki'),
  };
  await Promise.all(Object.values(paths).map((p) => mkdir(p, { recursive: true })));

  const binaries = await ensureBinaries(log);
  const ports = await freePorts([
    'etcdClient',
    'etcdPeer',
    'apiserver',
    'controllerManager',
    'scheduler',
    'kwok',
    'talos',
  ]);
  const { etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok, talos } = ports;
  const server = `https://127.0.0.1:${String(apiserver)}`;
  const started: StartedProcess[] = [];
  const state: SandboxState = {
    version: 1,
    dir,
    server,
    kubeconfig: join(dir, 'admin.kubeconfig'),
    kubernetesVersion: binaries.kubernetesVersion,
    startedAt: new Date().toISOString(),
    ...(options.ownerPid !== undefined ? { ownerPid: options.ownerPid } : {}),
    ports,
    processes: [],
    nodes: [],
  };
  const saveState = async () => {
    state.processes = started.map(({ name, pid, log: l }) => ({ name, pid, log: l }));
    await writeFile(join(dir, STATE_FILE), JSON.stringify(state, null, 2));
  };
  const launch = async (
    name: string,
    args: string[],
    command = binaries.path(name as Parameters<Binaries['path']>[0]),
  ) => {
    const p = startProcess(name, command, args, join(paths.logs, `${name}.log`));
    started.push(p);
    await saveState(); // recorded at once, so a crash from here on still leaves a stoppable sandbox
    return p;
  };
  /** Waits for a health probe, failing fast (with its log) if the process dies meanwhile. */
  const waitHealthy = async (
    p: StartedProcess,
    what: string,
    probe: () => Promise<boolean>,
    timeoutMs = 60_000,
  ) => {
    const t0 = Date.now();
    await waitFor(
      what,
      async (observe) => {
        if (p.exited) {
          const how = p.exited.signal ? `signal ${p.exited.signal}` : `code ${String(p.exited.code)}`;
          throw new WaitAbortedError(`${p.name} exited with ${how} while waiting for ${what}`);
        }
        try {
          return (await probe()) ? true : undefined;
        } catch (error) {
          observe(errorMessage(error));
          return undefined;
        }
      },
      { timeoutMs, intervalMs: 100 },
    ).catch(async (error: unknown) => {
      throw new Error(`${errorMessage(error)}\n--- last lines of ${p.log} ---\n${await logTail(p.log)}`);
    });
    log(`${what}: ok in ${formatDuration(Date.now() - t0)}`);
  };

  try {
    log(`sandbox in ${dir} (kubernetes ${binaries.kubernetesVersion})`);
    const ca = await CertificateAuthority.create(paths.pki, 'ca', 'gatehouse-sandbox-ca');
    const [apiserverCert, admin, kcm, sched, kwokUser, simulatorUser, serviceAccount] = await Promise.all([
      ca.issue({
        name: 'apiserver',
        commonName: 'kube-apiserver',
        usage: 'server',
        dnsNames: [
          'localhost',
          'kubernetes',
          'kubernetes.default',
          'kubernetes.default.svc',
          'kubernetes.default.svc.cluster.local',
        ],
        ipAddresses: ['127.0.0.1', SERVICE_IP],
      }),
      ca.issue({
        name: 'admin',
        commonName: 'gatehouse-sandbox-admin',
        organizations: ['system:masters'],
        usage: 'client',
      }),
      ca.issue({ name: 'controller-manager', commonName: 'system:kube-controller-manager', usage: 'client' }),
      ca.issue({ name: 'scheduler', commonName: 'system:kube-scheduler', usage: 'client' }),
      // kwok plays every kubelet and the node lease holder, so it gets cluster-admin rights.
      ca.issue({ name: 'kwok', commonName: 'kwok', organizations: ['system:masters'], usage: 'client' }),
      // The Talos simulator drives nodes as the kubelets and the node lifecycle would.
      ca.issue({
        name: 'talos-simulator',
        commonName: 'talos-simulator',
        organizations: ['system:masters'],
        usage: 'client',
      }),
      generateKeyPair(paths.pki, 'service-account'),
    ]);
    const caData = await base64File(ca.cert);
    const kubeconfigFor = async (name: string, user: string, cert: { cert: string; key: string }) => {
      const path = join(dir, `${name}.kubeconfig`);
      await writeFile(
        path,
        kubeconfigYaml(server, user, caData, await base64File(cert.cert), await base64File(cert.key)),
      );
      return path;
    };
    const [, kcmConfig, schedConfig, kwokConfig, simulatorConfig] = await Promise.all([
      kubeconfigFor('admin', 'admin', admin),
      kubeconfigFor('controller-manager', 'system:kube-controller-manager', kcm),
      kubeconfigFor('scheduler', 'system:kube-scheduler', sched),
      kubeconfigFor('kwok', 'kwok', kwokUser),
      kubeconfigFor('talos-simulator', 'talos-simulator', simulatorUser),
    ]);
    const tls: TlsFiles = {
      ca: await readFile(ca.cert),
      cert: await readFile(admin.cert),
      key: await readFile(admin.key),
    };

    const etcdUrl = `http://127.0.0.1:${String(etcdClient)}`;
    const peerUrl = `http://127.0.0.1:${String(etcdPeer)}`;
    const etcd = await launch('etcd', [
      '--name=sandbox',
      `--data-dir=${paths.etcd}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${peerUrl}`,
      `--initial-advertise-peer-urls=${peerUrl}`,
      `--initial-cluster=sandbox=${peerUrl}`,
      '--initial-cluster-state=new',
      // A throwaway cluster: durability costs seconds per test run and buys nothing.
      '--unsafe-no-fsync',
      '--log-level=warn',
    ]);
    await waitHealthy(etcd, 'etcd healthy', async () =>
      (await get(`${etcdUrl}/health`)).body.includes('"health":"true"'),
    );

    const apiserverArgs = [
      `--etcd-servers=${etcdUrl}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--secure-port=${String(apiserver)}`,
      `--cert-dir=${paths.certs}`,
      `--tls-cert-file=${apiserverCert.cert}`,
      `--tls-private-key-file=${apiserverCert.key}`,
      `--client-ca-file=${ca.cert}`,
      '--authorization-mode=RBAC',
      '--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook',
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${serviceAccount.pub}`,
      `--service-account-signing-key-file=${serviceAccount.key}`,
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      // The default reconciler refuses to publish a loopback address as the
      // kubernetes Service's endpoint; nothing in the sandbox dials it.
      '--endpoint-reconciler-type=none',
      '--allow-privileged=true',
      // PodTemplates, which nothing else here uses, bypass the watch cache so that fault
      // tests can provoke 410 Gone by compacting etcd (see compactEtcd), as happens to a
      // client that falls behind a real cluster's watch cache.
      '--watch-cache-sizes=podtemplates#0',
      '--profiling=false',
    ];
    state.apiserverCommand = { command: binaries.path('kube-apiserver'), args: apiserverArgs };
    const kubeApiserver = await launch('kube-apiserver', apiserverArgs);
    await waitHealthy(
      kubeApiserver,
      'kube-apiserver ready',
      async () => (await get(`${server}/readyz`, tls)).status === 200,
      90_000,
    );

    const controllerManagerProcess = await launch('kube-controller-manager', [
      `--kubeconfig=${kcmConfig}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${String(controllerManager)}`,
      `--cert-dir=${join(paths.certs, 'controller-manager')}`,
      `--service-account-private-key-file=${serviceAccount.key}`,
      `--root-ca-file=${ca.cert}`,
      `--cluster-signing-cert-file=${ca.cert}`,
      `--cluster-signing-key-file=${ca.key}`,
      '--use-service-account-credentials=true',
      '--controllers=*',
      '--leader-elect=false',
      '--cluster-name=gatehouse-sandbox',
      '--profiling=false',
    ]);
    const schedulerProcess = await launch('kube-scheduler', [
      `--kubeconfig=${schedConfig}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${String(scheduler)}`,
      `--cert-dir=${join(paths.certs, 'scheduler')}`,
      '--leader-elect=false',
      '--profiling=false',
    ]);
    const kwokConfigPath = join(dir, 'kwok.yaml');
    await writeFile(kwokConfigPath, kwokConfiguration({ serverAddress: `127.0.0.1:${String(kwok)}` }));
    const kwokProcess = await launch('kwok', [`--kubeconfig=${kwokConfig}`, `--config=${kwokConfigPath}`]);

    // Their serving certificates are self-signed; only liveness is probed here.
    const healthz = (port: number) => async () => {
      const res = await new Promise<number>((ok, fail) => {
        const req = request(
          `https://127.0.0.1:${String(port)}/healthz`,
          { rejectUnauthorized: false, timeout: 2000 },
          (r) => {
            r.resume();
            ok(r.statusCode ?? 0);
          },
        );
        req.on('error', fail);
        req.end();
      });
      return res === 200;
    };
    const kc = new KubeConfig();
    kc.loadFromFile(state.kubeconfig);
    const core = kc.makeApiClient(CoreV1Api);
    await Promise.all([
      waitHealthy(controllerManagerProcess, 'kube-controller-manager healthy', healthz(controllerManager)),
      waitHealthy(schedulerProcess, 'kube-scheduler healthy', healthz(scheduler)),
      waitHealthy(
        kwokProcess,
        'kwok healthy',
        async () => (await get(`http://127.0.0.1:${String(kwok)}/healthz`)).status === 200,
      ),
      // Pods cannot be created in a namespace before its default ServiceAccount exists.
      waitHealthy(
        controllerManagerProcess,
        'controllers serving (default ServiceAccount created)',
        async () => {
          await core.readNamespacedServiceAccount({ name: 'default', namespace: 'default' });
          return true;
        },
      ),
    ]);

    const specs = Array.isArray(options.nodes) ? options.nodes : defaultNodeSpecs(options.nodes ?? 3);
    if (specs.length > 0) {
      const t0 = Date.now();
      await createNodes(core, specs, binaries.kubernetesVersion);
      log(`${String(specs.length)} simulated Talos nodes Ready in ${formatDuration(Date.now() - t0)}`);
    }
    state.nodes = specs.map((s) => s.name);
    await saveState();

    if (options.talos ?? true) {
      const pki = await createTalosPki(paths.talosPki);
      const bootDelay = options.talosBootDelay ?? '2s';
      const endpoint = `127.0.0.1:${String(talos)}`;
      const simulator = await launch(
        'talos-simulator',
        [
          TALOS_SIMULATOR,
          `--kubeconfig=${simulatorConfig}`,
          `--pki=${paths.talosPki}`,
          `--port=${String(talos)}`,
          `--boot-delay=${bootDelay}`,
        ],
        process.execPath,
      );
      const talosconfig = await writeTalosConfig(join(dir, 'talosconfig'), pki, {
        name: 'gatehouse-sandbox',
        endpoints: [endpoint],
        nodes: specs.slice(0, 1).map((s) => s.internalIP),
      });
      const client = new TalosClient(await loadTalosConfig({ path: talosconfig }), { timeoutMs: 2000 });
      try {
        // Version without a node is answered by the simulator itself, over mutual TLS.
        await waitHealthy(simulator, 'Talos API simulator serving', async () => {
          await client.version();
          return true;
        });
      } finally {
        client.close();
      }
      state.talosconfig = talosconfig;
      state.talosPki = paths.talosPki;
      state.talosBootDelay = bootDelay;
      await saveState();
    }
    if (options.monitoring) {
      const controllerPort =
        (options.monitoring === true ? undefined : options.monitoring.controllerPort) ?? 8080;
      const monitoring = await startMonitoring({ dir: join(dir, 'monitoring'), log });
      started.push(...monitoring.processes);
      await monitoring.setTargets('gatehouse', [`127.0.0.1:${String(controllerPort)}`]);
      state.monitoring = {
        prometheus: monitoring.prometheusUrl,
        alertmanager: monitoring.alertmanagerUrl ?? '',
      };
      await saveState();
    }
    log(`sandbox up in ${formatDuration(Date.now() - began)}: ${server}`);
    return new Sandbox(state);
  } catch (error) {
    for (const p of [...started].reverse()) await stopProcess(p.pid);
    // Keep the logs of a failed start: they are the only evidence.
    await rm(paths.etcd, { recursive: true, force: true });
    await rm(join(dir, STATE_FILE), { force: true });
    throw new Error(`sandbox failed to start (logs in ${paths.logs}): ${errorMessage(error)}`, {
      cause: error,
    });
  }
}
