// `gatehouse talos-gate` as a process of its own, and `gatehouse talosconfig` as a person
// runs it: a certificate signed after Kubernetes authentication for the role RBAC grants,
// and the gate SIGKILLed while it holds a call — restarted, the repeated call passes
// once, never twice (invariant 10 under a crash).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { ObservedNodeAction } from '../../src/api/node-action.ts';
import { freePorts } from '../../sandbox/processes.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import { X509Certificate } from 'node:crypto';
import { Controller } from '../../src/controller.ts';
import { silentLogger } from '../../src/log.ts';
import { createCertificateRequest, newKey } from '../../src/talos-gate/pki.ts';
import {
  GATE_SIGNER,
  REQUESTED_FOR_ANNOTATION,
  type CertificateSigningRequest,
} from '../../src/talos-gate/signing-request.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import { TalosApiError } from '../../src/talos/errors.ts';
import { API, startGateController } from '../support/gate.ts';
import { cliEnv, MAIN, NODE, runCli } from '../support/cli.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  freshNamespace,
  kubeConfigWithToken,
  rest,
  serviceAccountToken,
  switchableCheck,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { createTalosNodes, type NodeView } from '../support/talos-nodes.ts';
import { talosClient } from '../support/talos-gate.ts';

const kc = testKubeConfig();
const api = rest(kc);
const instance = uniqueName('talos-gate-proc');
let dir: string;
let controller: Controller;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'talos-gate-'));
  await installGatehouseAPI(kc);
  controller = await startGateController(instance);
});
after(async () => {
  await controller.stop();
  await rm(dir, { recursive: true, force: true });
});

interface GateProcess {
  child: ChildProcess;
  endpoint: string;
}

/** Starts `gatehouse talos-gate` as the controller's ServiceAccount, its CA in the Secret `caSecret` of gatehouse's namespace. */
async function startGate(
  t: TestContext,
  caSecret: string,
  port: number,
  hold: string,
  extraArgs: string[] = [],
): Promise<GateProcess> {
  t.after(() =>
    api
      .request(`/api/v1/namespaces/gatehouse-system/secrets/${caSecret}`, { method: 'DELETE' })
      .catch(() => undefined),
  );
  const sandbox = await testSandboxState();
  const kubeconfig = join(dir, `gate-${String(port)}.kubeconfig`);
  await writeFile(kubeconfig, (await controllerKubeConfig(kc)).exportConfig());
  const child = spawn(
    NODE,
    [
      MAIN,
      'talos-gate',
      '--kubeconfig',
      kubeconfig,
      '--talosconfig',
      sandbox.talosconfig ?? '',
      '--namespace',
      'gatehouse-system',
      '--ca-secret',
      caSecret,
      '--listen-host',
      '127.0.0.1',
      '--port',
      String(port),
      '--hold',
      hold,
      '--instance',
      instance,
      '--log-level',
      'warn',
      ...extraArgs,
    ],
    { env: cliEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  t.after(() => child.kill('SIGKILL'));
  const endpoint = `127.0.0.1:${String(port)}`;
  await waitFor(
    `the gate on ${endpoint} to listen (${output})`,
    async () => {
      if (child.exitCode !== null) throw new Error(`the gate exited: ${output}`);
      const net = await import('node:net');
      return new Promise<boolean | undefined>((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => {
          s.destroy();
          resolve(true);
        });
        s.on('error', () => resolve(undefined));
      });
    },
    { timeoutMs: 30_000, intervalMs: 200 },
  );
  return { child, endpoint };
}

/** A person's kubeconfig: a ServiceAccount token of their own, bound to `roles`. */
async function person(
  t: TestContext,
  namespace: string,
  name: string,
  roles: string[],
): Promise<{ kubeconfig: string; user: string }> {
  const token = await serviceAccountToken(kc, namespace, name);
  for (const role of roles) await bindClusterRole(t, kc, role, { namespace, name });
  const kubeconfig = join(dir, `${name}.kubeconfig`);
  await writeFile(kubeconfig, kubeConfigWithToken(kc, token).exportConfig());
  return { kubeconfig, user: `system:serviceaccount:${namespace}:${name}` };
}

/** `gatehouse talosconfig` as `who`, for `role`, through `gate`; the talosconfig written. */
/** `who`: a person's kubeconfig, or the connection flags to use instead (--server, --token). */
async function talosconfigFor(
  who: { kubeconfig: string } | { flags: string[] },
  gate: GateProcess,
  role: string,
  file: string,
) {
  const talosconfig = join(dir, file);
  const result = await runCli([
    'talosconfig',
    ...('flags' in who ? who.flags : ['--kubeconfig', who.kubeconfig]),
    '--endpoint',
    gate.endpoint,
    '--role',
    role,
    '--talosconfig',
    talosconfig,
  ]);
  return { ...result, talosconfig };
}

async function testNode(t: TestContext, group: string): Promise<{ name: string; ip: string }> {
  const [name = ''] = await createTalosNodes(t, api, {
    group,
    count: 1,
    taint: 'gatehouse.test/talos-gate',
    kubernetesVersion: (
      await api.request<{ status: { nodeInfo: { kubeletVersion: string } } }>('/api/v1/nodes/cp-1')
    ).status.nodeInfo.kubeletVersion,
    talosVersion: 'v1.13.0',
    addressBlock: 50,
  });
  t.after(async () => {
    const list = await api.request<{ items: ObservedNodeAction[] }>(`${API}/nodeactions`, {
      query: { fieldSelector: `spec.nodeName=${name}` },
    });
    for (const a of list.items)
      await api.request(`${API}/nodeactions/${a.metadata.name}`, { method: 'DELETE' }).catch(() => undefined);
  });
  const node = await api.request<NodeView>(`/api/v1/nodes/${name}`);
  return { name, ip: node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? '' };
}

const reboots = async (node: string) =>
  talosCallCounts((await api.request<NodeView>(`/api/v1/nodes/${node}`)).metadata.annotations).Reboot ?? 0;

describe('gatehouse talos-gate and gatehouse talosconfig', () => {
  it('talosconfig gets a certificate for the role RBAC grants, and only that one', async (t) => {
    const namespace = await freshNamespace(t);
    const ports = await freePorts(['gate']);
    const caSecret = uniqueName('gate-ca');
    const gate = await startGate(t, caSecret, ports.gate, '1500ms');
    const carol = await person(t, namespace, 'carol', ['gatehouse:talos-operator', 'gatehouse:requester']);
    const ok = await talosconfigFor(carol, gate, 'os:operator', 'carol.talosconfig');
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /os:operator/);
    const context = await loadTalosConfig({ path: ok.talosconfig });
    const client = talosClient(context);
    t.after(() => client.close());
    const node = await testNode(t, uniqueName('tgp'));
    assert.equal((await client.version({ node: node.ip })).tag, 'v1.13.0');

    const refused = await talosconfigFor(carol, gate, 'os:admin', 'no.talosconfig');
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /gatehouse:talos-admin/);
  });

  it('talosconfig through the HTTP API with a bearer token: the role RBAC grants, asked for by the controller on behalf of the caller; a forged delegation is refused', async (t) => {
    const namespace = await freshNamespace(t);
    const ports = await freePorts(['gate']);
    const caSecret = uniqueName('gate-ca');
    const delegate = 'system:serviceaccount:gatehouse-system:gatehouse';
    const gate = await startGate(t, caSecret, ports.gate, '1500ms', ['--delegate', delegate]);
    // The controller as shipped: its own ServiceAccount and ClusterRole, its HTTP API only.
    const api2 = await Controller.start({
      kubeConfig: await controllerKubeConfig(kc),
      log: silentLogger(),
      host: '127.0.0.1',
      port: 0,
      leaderElection: false,
      instance: `${instance}-http`,
      checkSelector: `${INSTANCE_LABEL}=${instance}-http`,
    });
    t.after(() => api2.stop());
    await api2.waitForSync();
    const erin = await person(t, namespace, 'erin', ['gatehouse:talos-operator']);
    const token = await serviceAccountToken(kc, namespace, 'erin');
    const viaHttp = (role: string, file: string) =>
      talosconfigFor({ flags: ['--server', api2.url, '--token', token] }, gate, role, file);
    const ok = await viaHttp('os:operator', 'erin.talosconfig');
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, new RegExp(`${erin.user} with the Talos role os:operator`));
    const context = await loadTalosConfig({ path: ok.talosconfig });
    const cert = new X509Certificate(context.crt);
    assert.match(
      cert.subject,
      new RegExp(`CN=${erin.user}`),
      'the certificate names the caller, not the controller',
    );
    const client = talosClient(context);
    t.after(() => client.close());
    const node = await testNode(t, uniqueName('tgh'));
    assert.equal((await client.version({ node: node.ip })).tag, 'v1.13.0');

    const refused = await viaHttp('os:admin', 'erin-admin.talosconfig');
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /gatehouse:talos-admin/);

    // Someone else cannot borrow the delegation: a request of their own naming erin is denied.
    const mallory = await person(t, namespace, 'mallory', ['gatehouse:talos-operator']);
    const malloryApi = rest(kubeConfigWithToken(kc, await serviceAccountToken(kc, namespace, 'mallory')));
    const key = newKey();
    const forged = uniqueName('forged-csr');
    t.after(() =>
      api
        .request(`/apis/certificates.k8s.io/v1/certificatesigningrequests/${forged}`, { method: 'DELETE' })
        .catch(() => undefined),
    );
    await malloryApi.request('/apis/certificates.k8s.io/v1/certificatesigningrequests', {
      method: 'POST',
      body: {
        apiVersion: 'certificates.k8s.io/v1',
        kind: 'CertificateSigningRequest',
        metadata: {
          name: forged,
          annotations: {
            [REQUESTED_FOR_ANNOTATION]: JSON.stringify({ username: erin.user, groups: ['system:masters'] }),
          },
        },
        spec: {
          request: Buffer.from(
            createCertificateRequest({ commonName: erin.user, organizations: ['os:admin'] }, key.privateKey),
          ).toString('base64'),
          signerName: GATE_SIGNER,
          usages: ['digital signature', 'client auth'],
        },
      },
    });
    const verdict = await waitFor('the signer to judge the forged request', async () => {
      const csr = await api.request<CertificateSigningRequest>(
        `/apis/certificates.k8s.io/v1/certificatesigningrequests/${forged}`,
      );
      return csr.status?.conditions?.[0];
    });
    assert.equal(verdict.type, 'Denied', `${mallory.user}'s request naming ${erin.user} was ${verdict.type}`);
    assert.match(verdict.message ?? '', /only gatehouse's HTTP API/);
  });

  it('the gate SIGKILLed while it holds a reboot: after a restart the repeated call passes once, never twice', async (t) => {
    const namespace = await freshNamespace(t);
    const group = uniqueName('tgk');
    const node = await testNode(t, group);
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
    const dave = await person(t, namespace, 'dave', ['gatehouse:talos-operator', 'gatehouse:requester']);
    const ports = await freePorts(['gate']);
    const caSecret = uniqueName('gate-ca');
    const gate = await startGate(t, caSecret, ports.gate, '120s');
    const got = await talosconfigFor(dave, gate, 'os:operator', 'dave.talosconfig');
    assert.equal(got.code, 0, got.stderr);
    const client = talosClient(await loadTalosConfig({ path: got.talosconfig }), 150_000);
    t.after(() => client.close());

    const held = client.reboot({ node: node.ip }).then(
      () => undefined,
      (e: unknown) => e,
    );
    const action = await waitFor('the held call to create its action', async () => {
      const list = await api.request<{ items: ObservedNodeAction[] }>(`${API}/nodeactions`, {
        query: { fieldSelector: `spec.nodeName=${node.name}` },
      });
      return list.items[0];
    });
    gate.child.kill('SIGKILL');
    assert.ok((await held) instanceof TalosApiError, 'the caller sees the gate go');
    await check.set(true);
    await startGate(t, caSecret, ports.gate, '1500ms');
    await waitFor(
      'the action to be Approved',
      async () => {
        const a = await api.request<ObservedNodeAction>(`${API}/nodeactions/${action.metadata.name}`);
        return a.status?.phase === 'Approved' ? a : undefined;
      },
      { timeoutMs: 60_000 },
    );
    await client.reboot({ node: node.ip });
    await waitFor('the reboot to reach the node', async () =>
      (await reboots(node.name)) === 1 ? true : undefined,
    );
    const again = await client.reboot({ node: node.ip }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(again instanceof TalosApiError && again.codeName === 'FAILED_PRECONDITION', String(again));
    const done = await api.request<ObservedNodeAction>(`${API}/nodeactions/${action.metadata.name}`);
    assert.equal(done.metadata.annotations?.['talos.dev/executed'], 'true');
    assert.equal(done.spec.requestedBy, dave.user);
    assert.equal(await reboots(node.name), 1, 'one Reboot reached the node, whatever the crash');
  });
});
