// What the Talos API gate's tests share: a Talos simulator of their own (in this process,
// so the bytes it saw can be compared), a gate in front of it with gatehouse's Talos
// credentials, a gate CA, and clients holding certificates that CA issued to test users.
import { createPublicKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { credentials, Client, Metadata, type ServiceError } from '@grpc/grpc-js';
import { talosPkiPaths } from '../../sandbox/talos-pki.ts';
import { TalosSimulator } from '../../sandbox/talos-simulator.ts';
import type { WireRecord } from '../../sandbox/talos-wire.ts';
import { RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { TalosClient } from '../../src/talos/client.ts';
import { loadTalosConfig, type TalosContext } from '../../src/talos/config.ts';
import { createAuthority, issueCertificate, newKey, type Authority } from '../../src/talos-gate/pki.ts';
import { TalosGate, type TalosGateOptions } from '../../src/talos-gate/server.ts';
import { Upstream } from '../../src/talos-gate/upstream.ts';
import type { TestContext } from 'node:test';
import { bindClusterRole, controllerKubeConfig, testKubeConfig, testSandboxState } from './kube.ts';
import { installGatehouseAPI } from './install.ts';

export interface GateStack {
  simulator: TalosSimulator;
  gate: TalosGate;
  ca: Authority;
  /** What the simulator saw of each raw call, in order. */
  wire: WireRecord[];
  /** gatehouse's own talosconfig context, reaching the simulator directly. */
  direct: TalosContext;
  /** A talosconfig context for the gate, with a certificate issued to `user`. */
  /** Another gate in front of the same simulator, with other options (a longer hold). */
  startGate: (options: Partial<TalosGateOptions>) => Promise<TalosGate>;
  contextFor: (
    user: string,
    roles: string[],
    options?: { groups?: string[]; notAfter?: Date; ca?: Authority; endpoint?: string },
  ) => TalosContext;
  stop: () => Promise<void>;
}

export async function startGateStack(options: Partial<TalosGateOptions> = {}): Promise<GateStack> {
  const kc = testKubeConfig();
  await installGatehouseAPI(kc);
  const sandbox = await testSandboxState();
  if (!sandbox.talosconfig || !sandbox.talosPki)
    throw new Error('the sandbox runs no Talos simulator: restart it');
  const pki = talosPkiPaths(sandbox.talosPki);
  const wire: WireRecord[] = [];
  const simulator = await TalosSimulator.start({
    kubeConfig: kc,
    tls: { ca: pki.ca, cert: pki.server.cert, key: pki.server.key },
    bootDelayMs: 1500,
    onWire: (record) => wire.push(record),
  });
  const admin = await loadTalosConfig({ path: sandbox.talosconfig });
  const direct: TalosContext = { ...admin, endpoints: [simulator.endpoint], source: 'the test simulator' };
  const ca = createAuthority('gatehouse talos gate test CA');
  const serving = newKey();
  const cert = issueCertificate(
    {
      subject: { commonName: 'talos-gate' },
      publicKey: createPublicKey(serving.privateKey),
      notAfter: new Date(Date.now() + 86_400_000),
      usage: 'server',
      ipAddresses: ['127.0.0.1'],
      dnsNames: ['localhost'],
    },
    ca,
  );
  const gateRest = new RestClient(await controllerKubeConfig(kc));
  const extra: TalosGate[] = [];
  const startGate = async (o: Partial<TalosGateOptions>) => {
    const g = await TalosGate.start({
      rest: gateRest,
      upstream: new Upstream(direct),
      tls: { cert, key: serving.keyPem, clientCa: ca.cert },
      log: silentLogger(),
      ...o,
    });
    extra.push(g);
    return g;
  };
  const gate = await startGate(options);
  const contextFor: GateStack['contextFor'] = (user, roles, o = {}) => {
    const key = newKey();
    const crt = issueCertificate(
      {
        subject: {
          commonName: user,
          organizations: roles,
          organizationalUnits: o.groups ?? ['system:authenticated'],
        },
        publicKey: createPublicKey(key.privateKey),
        notBefore: o.notAfter ? new Date(o.notAfter.getTime() - 3_600_000) : undefined,
        notAfter: o.notAfter ?? new Date(Date.now() + 3_600_000),
        usage: 'client',
      },
      o.ca ?? ca,
    );
    return {
      name: user,
      endpoints: [o.endpoint ?? gate.endpoint],
      nodes: [],
      ca: ca.cert,
      crt,
      key: key.keyPem,
      source: `the gate, as ${user}`,
    };
  };
  return {
    simulator,
    gate,
    ca,
    wire,
    direct,
    contextFor,
    startGate,
    stop: async () => {
      await Promise.all(extra.map((g) => g.stop()));
      await simulator.stop();
    },
  };
}

/** A gRPC client that sends and receives bytes as they are: for comparing what passes through the gate. */
export function rawClient(context: TalosContext): Client {
  const address = context.endpoints[0] ?? '';
  return new Client(
    address,
    credentials.createSsl(Buffer.from(context.ca), Buffer.from(context.key), Buffer.from(context.crt), {
      checkServerIdentity: () => undefined,
    }),
    { 'grpc.ssl_target_name_override': 'talos-api', 'grpc.max_receive_message_length': 64 * 1024 * 1024 },
  );
}

const identity = (b: Buffer) => b;

export function rawUnary(
  client: Client,
  path: string,
  request: Buffer,
  metadata: Record<string, string | Buffer>,
): Promise<{ reply: Buffer; headers: Metadata; trailers: Metadata }> {
  const md = new Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  return new Promise((resolve, reject) => {
    let headers = new Metadata();
    const call = client.makeUnaryRequest(
      path,
      identity,
      identity,
      request,
      md,
      { deadline: Date.now() + 20_000 },
      (error, reply) => {
        if (error) reject(error);
        else resolve({ reply: reply ?? Buffer.alloc(0), headers, trailers });
      },
    );
    let trailers = new Metadata();
    call.on('metadata', (m) => (headers = m));
    call.on('status', (s) => (trailers = s.metadata));
  });
}

export type { ServiceError };

export async function pemFile(path: string): Promise<string> {
  return readFile(path, 'utf8');
}

/** Binds a ClusterRole to a user (as a gate certificate names it) until the test ends. */
export async function bindUser(t: TestContext, role: string, user: string): Promise<void> {
  await bindClusterRole(t, testKubeConfig(), role, { user });
}

export function talosClient(context: TalosContext, timeoutMs = 20_000): TalosClient {
  return new TalosClient(context, { timeoutMs });
}
