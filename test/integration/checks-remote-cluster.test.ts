// A probe reading another cluster through a kubeconfig Secret (`cluster.kubeconfigSecretRef`):
// a second sandbox plays the Cluster API management cluster, holding MachineHealthChecks
// of a CRD made here (v1beta2 and v1beta1 served, the fields gatehouse reads). The probe
// runs as the controller's own identity in the workload sandbox, which reads the Secret in
// its namespace; the kubeconfig carries a token of a ServiceAccount of the management
// cluster allowed to read MachineHealthChecks only. Failures (a revoked token: 401; a kind
// it may not read: 403; a Secret elsewhere) fail closed, name the cluster, and never show
// the Secret's data.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import { startSandbox, type Sandbox } from '../../sandbox/cluster.ts';
import type { ProbeContext } from '../../src/checks/probe.ts';
import { runProbe } from '../../src/checks/probes/index.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { errorMessage } from '../../src/wait.ts';
import {
  controllerKubeConfig,
  rest,
  serverSideApply,
  serviceAccountToken,
  testKubeConfig,
  uniqueName,
  waitForEstablished,
} from '../support/kube.ts';
import { installGatehouseAPI } from '../support/install.ts';
import type { ProbeSpecFragment } from '../support/probe-scenarios.ts';

const NAMESPACE = 'gatehouse-system';
const workload = testKubeConfig();
const admin = rest(workload);
let asController: RestClient;
let dir: string;
let mgmt: Sandbox | undefined;
let mgmtKc: KubeConfig;
let mgmtClient: RestClient;
let token: string;

const MHC_CRD = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'machinehealthchecks.cluster.x-k8s.io' },
  spec: {
    group: 'cluster.x-k8s.io',
    scope: 'Namespaced',
    names: { plural: 'machinehealthchecks', singular: 'machinehealthcheck', kind: 'MachineHealthCheck' },
    versions: ['v1beta2', 'v1beta1'].map((name) => ({
      name,
      served: true,
      storage: name === 'v1beta2',
      subresources: { status: {} },
      schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
    })),
  },
};

/** A MachineHealthCheck's status as Cluster API writes it in each version. */
async function setMachineHealthCheck(name: string, healthy: number, expected: number, version: string) {
  const path = `/apis/cluster.x-k8s.io/${version}/namespaces/default/machinehealthchecks/${name}`;
  const status =
    version === 'v1beta2'
      ? {
          expectedMachines: expected,
          currentHealthy: healthy,
          remediationsAllowed: expected - healthy,
          conditions: [
            {
              type: 'RemediationAllowed',
              status: 'True',
              reason: 'RemediationAllowed',
              lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
            },
          ],
        }
      : { expectedMachines: expected, currentHealthy: healthy, remediationsAllowed: expected - healthy };
  const body = {
    apiVersion: `cluster.x-k8s.io/${version}`,
    kind: 'MachineHealthCheck',
    metadata: { name, namespace: 'default' },
    spec: { clusterName: 'workload', selector: { matchLabels: { pool: name } } },
  };
  await mgmtClient.apply(path, body, 'test');
  await mgmtClient.apply(`${path}/status`, { ...body, status }, 'test');
}

/** The kubeconfig a management cluster's admin would hand out: its server and CA, a token. */
function kubeconfigText(server: string, ca: string, bearer: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'current-context: mgmt',
    'clusters:',
    `- name: mgmt`,
    `  cluster: {server: "${server}", certificate-authority-data: "${ca}"}`,
    'users:',
    `- name: gatehouse`,
    `  user: {token: "${bearer}"}`,
    'contexts:',
    '- name: mgmt',
    '  context: {cluster: mgmt, user: gatehouse}',
    '',
  ].join('\n');
}

async function putSecret(t: TestContext, name: string, data: Record<string, string>) {
  const path = `/api/v1/namespaces/${NAMESPACE}/secrets/${name}`;
  await admin.apply(
    path,
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name, namespace: NAMESPACE },
      data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
    },
    'test',
  );
  t.after(() => admin.request(path, { method: 'DELETE' }).catch(() => undefined));
}

function mgmtKubeconfig(bearer = token): string {
  const cluster = mgmtKc.getCurrentCluster();
  assert.ok(cluster?.caData);
  return kubeconfigText(cluster.server, cluster.caData, bearer);
}

const probe = (spec: ProbeSpecFragment) => {
  const context: ProbeContext = {
    rest: asController,
    signal: AbortSignal.timeout(15_000),
    serviceResolution: 'endpoints',
    namespace: NAMESPACE,
  };
  return runProbe(spec, context);
};

async function probeError(spec: ProbeSpecFragment): Promise<string> {
  try {
    const result = await probe(spec);
    assert.fail(`expected a probe error, got ${JSON.stringify(result)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return errorMessage(error);
  }
}

function mhcCheck(secret: string, version: string, extra: Record<string, unknown> = {}): ProbeSpecFragment {
  return {
    resource: {
      apiVersion: `cluster.x-k8s.io/${version}`,
      kind: 'MachineHealthCheck',
      namespace: 'default',
      expression: 'self.status.currentHealthy >= self.status.expectedMachines',
      cluster: { kubeconfigSecretRef: { name: secret, key: 'value' } },
      ...extra,
    },
  };
}

before(async () => {
  // The controller's namespace and ServiceAccount, which the probes run as.
  await installGatehouseAPI(workload);
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-mgmt-'));
  mgmt = await startSandbox({ dir: join(dir, 'sandbox'), nodes: 1, talos: false, ownerPid: process.pid });
  mgmtKc = mgmt.kubeConfig();
  mgmtClient = rest(mgmtKc);
  await serverSideApply(mgmtKc, [MHC_CRD]);
  await waitForEstablished(mgmtKc, [MHC_CRD.metadata.name]);
  // In the management cluster: a ServiceAccount that may read MachineHealthChecks, nothing else.
  await serverSideApply(mgmtKc, [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'gatehouse-remote-reader' },
      rules: [
        { apiGroups: ['cluster.x-k8s.io'], resources: ['machinehealthchecks'], verbs: ['get', 'list'] },
      ],
    } as never,
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'gatehouse-remote-reader' },
      roleRef: {
        apiGroup: 'rbac.authorization.k8s.io',
        kind: 'ClusterRole',
        name: 'gatehouse-remote-reader',
      },
      subjects: [{ kind: 'ServiceAccount', name: 'gatehouse-reader', namespace: 'default' }],
    } as never,
  ]);
  token = await serviceAccountToken(mgmtKc, 'default', 'gatehouse-reader');
  asController = rest(await controllerKubeConfig(workload));
});

after(async () => {
  await mgmt?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('probes reading another cluster (cluster.kubeconfigSecretRef)', () => {
  for (const version of ['v1beta2', 'v1beta1']) {
    it(`gates on the management cluster's MachineHealthChecks (${version})`, async (t) => {
      const secret = uniqueName('mgmt-kubeconfig');
      await putSecret(t, secret, { value: mgmtKubeconfig() });
      const name = uniqueName('workers');
      await setMachineHealthCheck(name, 3, 3, version);
      t.after(() =>
        mgmtClient
          .request(`/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machinehealthchecks/${name}`, {
            method: 'DELETE',
          })
          .catch(() => undefined),
      );
      const spec = mhcCheck(secret, version, { name });
      const held = await probe(spec);
      assert.equal(held.healthy, true, held.message);
      assert.match(held.message, new RegExp(`^cluster mgmt \\(from Secret ${NAMESPACE}/${secret}\\): 1/1`));

      await setMachineHealthCheck(name, 2, 3, version);
      const remediating = await probe(spec);
      assert.equal(remediating.healthy, false);
      assert.match(remediating.message, /^cluster mgmt .*0\/1 .*currentHealthy/);
    });
  }

  it('fails closed naming the cluster: a revoked token (401), a kind it may not read (403), no Secret data shown', async (t) => {
    const secret = uniqueName('mgmt-kubeconfig');
    const revoked = 'not-a-token-the-server-knows';
    await putSecret(t, secret, { value: mgmtKubeconfig(revoked) });
    const unauthorized = await probeError(mhcCheck(secret, 'v1beta2'));
    assert.match(unauthorized, new RegExp(`^cluster mgmt \\(from Secret ${NAMESPACE}/${secret}\\): .*401`));
    assert.doesNotMatch(unauthorized, new RegExp(revoked));

    // The same client is kept while the Secret is unchanged; a new token is used once it changes.
    await putSecret(t, secret, { value: mgmtKubeconfig() });
    const forbidden = await probeError({
      nodes: { cluster: { kubeconfigSecretRef: { name: secret, key: 'value' } } },
    });
    assert.match(forbidden, new RegExp(`^cluster mgmt \\(from Secret ${NAMESPACE}/${secret}\\): 403`));
    assert.match(forbidden, /cannot list resource "nodes"/);
  });

  it('refuses a Secret that is not an inline kubeconfig, or is elsewhere, without quoting it', async (t) => {
    const secret = uniqueName('not-a-kubeconfig');
    const content = 'talosconfig: {contexts: {}, secret-material: s3cr3t-value}';
    await putSecret(t, secret, { value: content, other: 'x' });
    const notKubeconfig = await probeError(mhcCheck(secret, 'v1beta2'));
    assert.match(
      notKubeconfig,
      new RegExp(`Secret ${NAMESPACE}/${secret}\\): key value is not a kubeconfig`),
    );
    assert.doesNotMatch(notKubeconfig, /s3cr3t/);

    const files = uniqueName('file-kubeconfig');
    const cluster = mgmtKc.getCurrentCluster();
    await putSecret(t, files, {
      value: [
        'apiVersion: v1',
        'current-context: c',
        `clusters: [{name: c, cluster: {server: "${cluster?.server ?? ''}"}}]`,
        'users: [{name: u, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]',
        'contexts: [{name: c, context: {cluster: c, user: u}}]',
      ].join('\n'),
    });
    assert.match(await probeError(mhcCheck(files, 'v1beta2')), /refers to files/);

    const missingKey = await probeError(
      mhcCheck(secret, 'v1beta2', { cluster: { kubeconfigSecretRef: { name: secret, key: 'kubeconfig' } } }),
    );
    assert.match(missingKey, /has no key kubeconfig \(it has other, value\)/);

    const elsewhere = await probeError(
      mhcCheck(secret, 'v1beta2', {
        cluster: { kubeconfigSecretRef: { namespace: 'kube-system', name: secret, key: 'value' } },
      }),
    );
    assert.match(elsewhere, /reads Secrets only in its own namespace gatehouse-system/);
  });
});
