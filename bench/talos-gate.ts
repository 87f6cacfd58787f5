// The Talos API gate's cost, each figure against the same thing done directly in the
// same run: a non-gated unary call (Hostname, a method gatehouse has no .proto for)
// through the gate and straight to the sandbox's Talos simulator, p50 and p99; a 100 MB
// client stream (EtcdRecover, the snapshot upload) both ways, as throughput; and the
// memory an idle held call costs the gate (a reboot held while its action waits),
// read from the gate process's RSS with and without them. The gate runs as the process
// the chart runs (`gatehouse talos-gate`), sharing the machine's cores with the rest.
import { spawn } from 'node:child_process';
import { createPublicKey } from 'node:crypto';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Client, credentials, Metadata } from '@grpc/grpc-js';
import type { Sandbox } from '../sandbox/cluster.ts';
import { freePorts } from '../sandbox/processes.ts';
import { WIRE_METHODS } from '../sandbox/talos-wire.ts';
import { loadTalosConfig, type TalosContext } from '../src/talos/config.ts';
import { createAuthority, issueCertificate, newKey } from '../src/talos-gate/pki.ts';
import { RestClient } from '../src/kube/rest.ts';
import { waitFor } from '../src/wait.ts';
import { controllerKubeConfig } from '../test/support/kube.ts';
import { installGatehouseAPI } from '../test/support/install.ts';
import { NODE, MAIN } from '../test/support/cli.ts';
import { ms, percentile, report } from './stats.ts';
import { record } from './summary.ts';

const identity = (b: Buffer) => b;
const STREAM_BYTES = 100 * 1024 * 1024;
const CHUNK = 64 * 1024;

function client(context: TalosContext): Client {
  return new Client(
    context.endpoints[0] ?? '',
    credentials.createSsl(Buffer.from(context.ca), Buffer.from(context.key), Buffer.from(context.crt), {
      checkServerIdentity: () => undefined,
    }),
    { 'grpc.ssl_target_name_override': 'talos-api' },
  );
}

function unary(c: Client, path: string, md: Metadata): Promise<void> {
  return new Promise((resolve, reject) => {
    c.makeUnaryRequest(path, identity, identity, Buffer.alloc(0), md, (e) => (e ? reject(e) : resolve()));
  });
}

/** Uploads STREAM_BYTES as common.Data chunks; resolves to MB/s. */
async function upload(c: Client, node: string): Promise<number> {
  const md = new Metadata();
  md.set('node', node);
  const payload = Buffer.alloc(CHUNK, 7);
  // common.Data{bytes: payload}: field 2, length-delimited (varint 65536 = 0x80 0x80 0x04).
  const chunk = Buffer.concat([Buffer.from([0x12, 0x80, 0x80, 0x04]), payload]);
  const t0 = performance.now();
  await new Promise<void>((resolve, reject) => {
    const call = c.makeClientStreamRequest(WIRE_METHODS.EtcdRecover.path, identity, identity, md, (e) =>
      e ? reject(e) : resolve(),
    );
    let sent = 0;
    const pump = () => {
      while (sent < STREAM_BYTES) {
        sent += CHUNK;
        if (!call.write(chunk)) {
          call.once('drain', pump);
          return;
        }
      }
      call.end();
    };
    pump();
  });
  return STREAM_BYTES / 1024 / 1024 / ((performance.now() - t0) / 1000);
}

/** CPU time (user + system) a process has used so far, in ms. */
async function cpuMsOf(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${String(pid)}/stat`, 'utf8')).split(') ')[1]?.split(' ') ?? [];
  // utime and stime, fields 14 and 15 of stat(5), in clock ticks (100 a second on Linux).
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function rssOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${String(pid)}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
}

export async function talosGateBench(
  sandbox: Sandbox,
  options: { samples: number; heldCalls: number },
): Promise<void> {
  const kc = sandbox.kubeConfig();
  await installGatehouseAPI(kc);
  // The held calls' caller may ask for actions (the gate's SubjectAccessReview).
  await new RestClient(kc)
    .request('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
      method: 'POST',
      body: {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: 'bench-talos-gate-requester' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'gatehouse:requester' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'bench' }],
      },
    })
    .catch(() => undefined);
  const state = sandbox.state;
  if (!state.talosconfig || !state.talosPki) throw new Error('the sandbox runs no Talos simulator');
  const direct = await loadTalosConfig({ path: state.talosconfig });
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-bench-gate-'));
  const ca = createAuthority('bench gate CA');
  await writeFile(join(dir, 'ca.crt'), ca.cert);
  await writeFile(join(dir, 'ca.key'), ca.keyPem);
  await writeFile(join(dir, 'kubeconfig'), (await controllerKubeConfig(kc)).exportConfig());
  const { port } = await freePorts(['port']);
  const gate = spawn(
    NODE,
    [
      // BENCH_GATE_NODE_FLAGS, e.g. '--cpu-prof --cpu-prof-dir=/tmp/gate-prof': where the gate's time goes.
      ...(process.env.BENCH_GATE_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean),
      MAIN,
      'talos-gate',
      '--kubeconfig',
      join(dir, 'kubeconfig'),
      '--talosconfig',
      state.talosconfig,
      '--ca-cert',
      join(dir, 'ca.crt'),
      '--ca-key',
      join(dir, 'ca.key'),
      '--listen-host',
      '127.0.0.1',
      '--port',
      String(port),
      '--hold',
      '10m',
      '--no-sign',
      '--log-level',
      'error',
    ],
    { stdio: process.env.BENCH_GATE_LOG ? 'inherit' : 'ignore' },
  );
  try {
    const key = newKey();
    const crt = issueCertificate(
      {
        subject: { commonName: 'bench', organizations: ['os:admin'] },
        publicKey: createPublicKey(key.privateKey),
        notAfter: new Date(Date.now() + 3_600_000),
        usage: 'client',
      },
      ca,
    );
    const through: TalosContext = {
      ...direct,
      endpoints: [`127.0.0.1:${String(port)}`],
      ca: ca.cert,
      crt,
      key: key.keyPem,
    };
    const gated = client(through);
    const straight = client(direct);
    const md = new Metadata();
    await waitFor(
      'the gate to answer',
      () =>
        unary(gated, WIRE_METHODS.Hostname.path, md).then(
          () => true,
          () => undefined,
        ),
      { timeoutMs: 30_000 },
    );

    // Unary: warm both, then interleave so neither gets the quieter moments.
    const times = { gate: [] as number[], direct: [] as number[] };
    for (let i = 0; i < 50; i++) {
      await unary(gated, WIRE_METHODS.Hostname.path, md);
      await unary(straight, WIRE_METHODS.Hostname.path, md);
    }
    for (let i = 0; i < options.samples; i++) {
      for (const [which, c] of [
        ['gate', gated],
        ['direct', straight],
      ] as const) {
        const t0 = performance.now();
        await unary(c, WIRE_METHODS.Hostname.path, md);
        times[which].push(performance.now() - t0);
      }
    }
    const p50 = { gate: percentile(times.gate, 50), direct: percentile(times.direct, 50) };
    const limit = p50.direct * 1.3 + 1;
    report('Talos API gate: a non-gated unary call (MachineService.Hostname)', [
      [
        'direct to apid (the simulator), p50 / p99',
        `${ms(p50.direct)} / ${ms(percentile(times.direct, 99))}`,
      ],
      ['through the gate, p50 / p99', `${ms(p50.gate)} / ${ms(percentile(times.gate, 99))}`],
      ['ratio of p50s', `${(p50.gate / p50.direct).toFixed(2)}× (limit 1.3× + 1 ms = ${ms(limit)})`],
    ]);
    record('talos gate unary p50 vs direct', `${ms(p50.gate)} vs ${ms(p50.direct)}`, `≤ ${ms(limit)}`);

    // A 100 MB client stream, each way five times, interleaved; the best of each counts (one
    // transfer lasts under a second, and three processes share two cores: a single round
    // swings by ±30 % with what else the machine schedules).
    const cp =
      (
        await kc.makeApiClient((await import('@kubernetes/client-node')).CoreV1Api).readNode({ name: 'cp-1' })
      ).status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? '';
    const mbps = { gate: 0, direct: 0 };
    // The CPU each process spends on one 100 MB transfer through the gate (medians): on a
    // machine with fewer cores than processes, their sum bounds the throughput.
    const simulator = state.processes.find((p) => p.name === 'talos-simulator')?.pid ?? 0;
    const cpu = { client: [] as number[], gate: [] as number[], simulator: [] as number[] };
    for (let round = 0; round < 5; round++) {
      mbps.direct = Math.max(mbps.direct, await upload(straight, cp));
      const [client0, gate0, sim0] = [
        process.cpuUsage(),
        await cpuMsOf(gate.pid ?? 0),
        await cpuMsOf(simulator),
      ];
      mbps.gate = Math.max(mbps.gate, await upload(gated, cp));
      const client = process.cpuUsage(client0);
      cpu.client.push((client.user + client.system) / 1000);
      cpu.gate.push((await cpuMsOf(gate.pid ?? 0)) - gate0);
      cpu.simulator.push((await cpuMsOf(simulator)) - sim0);
    }
    const [clientMs = 0, gateMs = 1, simMs = 0] = [cpu.client, cpu.gate, cpu.simulator].map((c) =>
      percentile(c, 50),
    );
    report('Talos API gate: a 100 MB client stream (MachineService.EtcdRecover, 64 KiB chunks)', [
      ['direct', `${mbps.direct.toFixed(0)} MB/s`],
      ['through the gate', `${mbps.gate.toFixed(0)} MB/s`],
      ['ratio', `${(mbps.gate / mbps.direct).toFixed(2)}× (at least 0.8×)`],
      [
        'CPU per 100 MB through the gate',
        `client ${ms(clientMs)}, gate ${ms(gateMs)}, simulator ${ms(simMs)} (${String(cpus().length)} cores)`,
      ],
      ['the gate alone, one core', `${(100 / (gateMs / 1000)).toFixed(0)} MB/s`],
    ]);
    record(
      'talos gate forwarding, one core',
      `${(100 / (gateMs / 1000)).toFixed(0)} MB/s`,
      `direct path ${mbps.direct.toFixed(0)} MB/s`,
    );
    record('talos gate 100 MB stream vs direct', `${(mbps.gate / mbps.direct).toFixed(2)}×`, '≥ 0.8×');

    // Idle held calls: reboots of one node held while their action waits (no controller runs here).
    const pid = gate.pid ?? 0;
    const before = await rssOf(pid);
    const node = new Metadata();
    node.set('node', cp);
    const held = Array.from(
      { length: options.heldCalls },
      () =>
        new Promise<void>((resolve) => {
          gated.makeUnaryRequest(
            '/machine.MachineService/Reboot',
            identity,
            identity,
            Buffer.alloc(0),
            node,
            () => resolve(),
          );
        }),
    );
    await new Promise((r) => setTimeout(r, 5000));
    const during = await rssOf(pid);
    report(`Talos API gate: memory of ${String(options.heldCalls)} idle held calls (gate process RSS)`, [
      ['before', `${(before / 1048576).toFixed(1)} MiB`],
      ['holding', `${(during / 1048576).toFixed(1)} MiB`],
      ['per held call', `${((during - before) / options.heldCalls / 1024).toFixed(1)} KiB`],
    ]);
    record(
      'talos gate memory per idle held call',
      `${((during - before) / options.heldCalls / 1024).toFixed(1)} KiB`,
    );
    gated.close();
    straight.close();
    await Promise.race([Promise.all(held), new Promise((r) => setTimeout(r, 1000))]);
  } finally {
    // Stopped as Kubernetes stops it (a profile asked for is written on the way out), then for sure.
    const exited = new Promise((r) => gate.once('exit', r));
    gate.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    gate.kill('SIGKILL');
  }
}
