// What integration tests need to work against the shared sandbox.
//
// NOTE: @kubernetes/client-node's typed APIs (including KubernetesObjectApi) silently
// DROP keys such as `x-kubernetes-validations` from CRD bodies, because they serialise
// through generated models. Send manifests with `rest()` / `apply()` below (src/kube/rest.ts).
import { randomBytes } from 'node:crypto';
import type { TestContext } from 'node:test';
import { CoreV1Api, KubeConfig, KubernetesObjectApi, type KubernetesObject } from '@kubernetes/client-node';

import { dirname } from 'node:path';
import { readState, type SandboxState } from '../../sandbox/cluster.ts';
import {
  serverSideApply as applyObjects,
  waitForEstablished as crdsEstablished,
} from '../../src/kube/apply.ts';
import { RestClient } from '../../src/kube/rest.ts';

import { waitFor } from '../../src/wait.ts';

export { waitFor };
export { KubeApiError } from '../../src/kube/rest.ts';

/** The sandbox's admin kubeconfig; integration tests need `npm test` (or GATEHOUSE_TEST_KUBECONFIG). */
export function testKubeConfig(): KubeConfig {
  const path = process.env.GATEHOUSE_TEST_KUBECONFIG;
  if (!path) {
    throw new Error(
      'no sandbox: run integration tests through `npm test` (it starts one), or set GATEHOUSE_TEST_KUBECONFIG to a running sandbox (`gatehouse sandbox up`)',
    );
  }
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

/** The same cluster, as another user (Impersonate-User), for authorisation tests. */
export function impersonate(kc: KubeConfig, username: string): KubeConfig {
  const copy = new KubeConfig();
  copy.loadFromString(kc.exportConfig());
  const user = copy.getCurrentUser();
  if (!user) throw new Error('kubeconfig has no current user');
  copy.users = copy.users.map((u) => (u.name === user.name ? { ...u, impersonateUser: username } : u));
  return copy;
}

export function uniqueName(prefix: string): string {
  const slug = prefix
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  return `${slug}-${randomBytes(3).toString('hex')}`;
}

/** A namespace for this test alone, deleted (without waiting) when the test ends. */
export async function freshNamespace(t: TestContext, kc: KubeConfig = testKubeConfig()): Promise<string> {
  const core = kc.makeApiClient(CoreV1Api);
  const name = uniqueName(`t-${t.name}`);
  await core.createNamespace({ body: { metadata: { name, labels: { 'gatehouse.dev/test': 'true' } } } });
  t.after(async () => {
    await core.deleteNamespace({ name }).catch(() => undefined);
  });
  return name;
}

/** Deletes cluster-scoped objects a test created, when it ends. */
export function cleanup(t: TestContext, kc: KubeConfig, ...objects: KubernetesObject[]): void {
  const api = KubernetesObjectApi.makeApiClient(kc);
  t.after(async () => {
    await Promise.all(objects.map((o) => api.delete(o).catch(() => undefined)));
  });
}

/** The status code and message of an API server refusal, from either client's error. */
export function refusalOf(error: unknown): { code: number; message: string } {
  const e = error as { code?: number; body?: unknown; serverMessage?: string };
  if (typeof e.serverMessage === 'string') return { code: e.code ?? 0, message: e.serverMessage };
  const body =
    typeof e.body === 'string'
      ? (JSON.parse(e.body) as { message?: string })
      : (e.body as { message?: string } | undefined);
  return { code: e.code ?? 0, message: body?.message ?? String(error) };
}

/** Awaits a request that the API server must refuse, and returns the refusal. */
export async function refusal(promise: Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await promise;
  } catch (error) {
    return refusalOf(error);
  }
  throw new Error('expected the API server to refuse the request, but it was accepted');
}

/** A raw JSON client for the sandbox (objects are sent exactly as written). */
export function rest(kc: KubeConfig = testKubeConfig()): RestClient {
  return new RestClient(kc);
}

export { resourcePath } from '../../src/kube/apply.ts';

/** Server-side applies objects in order, sent exactly as written (src/kube/apply.ts). */
export async function serverSideApply(
  kc: KubeConfig,
  objects: readonly KubernetesObject[],
  fieldManager = 'gatehouse-tests',
): Promise<KubernetesObject[]> {
  return applyObjects(rest(kc), objects, fieldManager);
}

/** Waits until every named CustomResourceDefinition is Established and its kind is in discovery. */
export async function waitForEstablished(kc: KubeConfig, names: readonly string[]): Promise<void> {
  await crdsEstablished(rest(kc), names);
}

export interface Table {
  columnDefinitions: { name: string; type: string; priority?: number }[];
  rows: { cells: unknown[] }[];
}

/** The API server's own table rendering of a path (what `kubectl get` prints), printer columns included. */
export async function getTable(kc: KubeConfig, path: string): Promise<Table> {
  return rest(kc).request<Table>(path, {
    headers: { Accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' },
  });
}

/** The state of the sandbox the tests run against (its ports, for fault injection). */
export async function testSandboxState(): Promise<SandboxState> {
  const kubeconfig = process.env.GATEHOUSE_TEST_KUBECONFIG;
  const state = kubeconfig ? await readState(dirname(kubeconfig)) : undefined;
  if (!state) throw new Error(`no sandbox state next to GATEHOUSE_TEST_KUBECONFIG=${String(kubeconfig)}`);
  return state;
}

/** Creates a ServiceAccount (if missing) and returns a real token for it (TokenRequest API). */
export async function serviceAccountToken(
  kc: KubeConfig,
  namespace: string,
  name: string,
  expirationSeconds = 3600,
): Promise<string> {
  const client = rest(kc);
  await client
    .request(`/api/v1/namespaces/${namespace}/serviceaccounts`, {
      method: 'POST',
      body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } },
    })
    .catch((error: unknown) => {
      if ((error as { code?: number }).code !== 409) throw error;
    });
  const review = await client.request<{ status: { token: string } }>(
    `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
    {
      method: 'POST',
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds } },
    },
  );
  return review.status.token;
}

/** A ClusterRoleBinding of a ClusterRole to users (by name), for authorisation tests. */
export function userBinding(name: string, role: string, users: readonly string[]): KubernetesObject {
  return {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
    subjects: users.map((u) => ({ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: u })),
  } as KubernetesObject;
}

/** Binds a ClusterRole cluster-wide to a ServiceAccount or a user; the binding is removed when the test ends. */
export async function bindClusterRole(
  t: TestContext | undefined,
  kc: KubeConfig,
  role: string,
  subject: { namespace: string; name: string } | { user: string },
): Promise<string> {
  const client = rest(kc);
  const who = 'user' in subject ? subject.user : subject.name;
  const name = uniqueName(`${role.replace(/[^a-z0-9]+/g, '-')}-${who}`);
  await client.request('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    method: 'POST',
    body: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name, labels: { 'gatehouse.dev/test': 'true' } },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
      subjects: [
        'user' in subject
          ? { apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: subject.user }
          : { kind: 'ServiceAccount', ...subject },
      ],
    },
  });
  t?.after(async () => {
    await client
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
  });
  return name;
}

/** The same cluster, authenticated by a bearer token instead of the admin's credentials. */
export function kubeConfigWithToken(kc: KubeConfig, token: string): KubeConfig {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('kubeconfig has no current cluster');
  const copy = new KubeConfig();
  copy.loadFromOptions({
    clusters: [cluster],
    users: [{ name: 'token', token }],
    contexts: [{ name: 'token', cluster: cluster.name, user: 'token' }],
    currentContext: 'token',
  });
  return copy;
}

/** The gatehouse controller's own identity (its ServiceAccount token), as the Deployment runs it. */
export async function controllerKubeConfig(kc: KubeConfig): Promise<KubeConfig> {
  return kubeConfigWithToken(kc, await serviceAccountToken(kc, 'gatehouse-system', 'gatehouse'));
}

/** Sets a Node's Ready condition as a kubelet would report it (for Nodes kwok does not manage). */
export async function setNodeReady(
  client: RestClient,
  name: string,
  ready: boolean,
  message: string,
): Promise<void> {
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
  await client.request(`/api/v1/nodes/${name}/status`, {
    method: 'PATCH',
    contentType: 'application/strategic-merge-patch+json',
    body: {
      status: {
        conditions: [
          {
            type: 'Ready',
            status: ready ? 'True' : 'False',
            reason: ready ? 'KubeletReady' : 'KubeletNotReady',
            message,
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ],
      },
    },
  });
}

/**
 * A ClusterHealthCheck gating Reboot (or `actions`) on nodes labelled gatehouse.test/group=<group>, whose
 * health the test switches: a `nodes` probe over a Node kwok does not manage, made Ready
 * or NotReady at will. Both are deleted when the test ends. `labels` go on the check (a
 * controller started with a checkSelector runs only the checks it selects).
 */
export async function switchableCheck(
  t: TestContext,
  kc: KubeConfig,
  group: string,
  healthy: boolean,
  labels: Record<string, string> = {},
  actions: readonly string[] = ['Reboot'],
): Promise<{ name: string; set: (healthy: boolean) => Promise<void> }> {
  const client = rest(kc);
  const name = uniqueName(`switch-${group}`);
  const set = (ready: boolean) =>
    setNodeReady(client, name, ready, ready ? 'switched healthy' : 'switched unhealthy by the test');
  t.after(async () => {
    await client
      .request(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
    await client.request(`/api/v1/nodes/${name}`, { method: 'DELETE' }).catch(() => undefined);
  });
  await client.request('/api/v1/nodes', {
    method: 'POST',
    body: {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, labels: { 'gatehouse.test/switch': name } },
      // Nothing runs on a node kwok does not simulate: keep other tests' pods away.
      spec: { taints: [{ key: 'gatehouse.test/unmanaged', effect: 'NoSchedule' }] },
    },
  });
  await set(healthy);
  await client.request('/apis/talos.dev/v1alpha1/clusterhealthchecks', {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ClusterHealthCheck',
      metadata: { name, labels },
      spec: {
        interval: '1s',
        timeout: '2s',
        failureThreshold: 1,
        actions,
        nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
        nodes: { selector: { matchLabels: { 'gatehouse.test/switch': name } } },
      },
    },
  });
  return { name, set };
}
