// The shipped RBAC and namespace, judged by the API server's own authorizer
// (SubjectAccessReview) and admission: what the controller may and may not do, how
// hook editing reaches the built-in edit role, how resource probes get read access,
// and that the controller's pod passes the restricted Pod Security Standard.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { controllerUsername } from '../../src/manifests/admission-policy.ts';
import { DEFAULT_NAMESPACE, deploymentObject } from '../../src/manifests/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { refusal, rest, serverSideApply, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const RUN = uniqueName('api-rbac');
/** A kind nobody else grants the controller (the examples grant CephClusters, say). */
const WIDGETS = { group: `${RUN}.gatehouse.test`, resource: 'widgets' };

interface Attributes {
  verb: string;
  group?: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
}

const controller = {
  user: controllerUsername(DEFAULT_NAMESPACE),
  groups: ['system:serviceaccounts', `system:serviceaccounts:${DEFAULT_NAMESPACE}`, 'system:authenticated'],
};

async function allowed(
  subject: { user: string; groups?: string[] },
  attributes: Attributes,
): Promise<boolean> {
  const review = await client.request<{ status: { allowed: boolean } }>(
    '/apis/authorization.k8s.io/v1/subjectaccessreviews',
    {
      method: 'POST',
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: { ...subject, resourceAttributes: { group: '', ...attributes } },
      },
    },
  );
  return review.status.allowed;
}

const cleanups: (() => Promise<unknown>)[] = [];

before(async () => {
  await installGatehouseAPI(kc);
});

after(async () => {
  for (const cleanup of cleanups) await cleanup().catch(() => undefined);
});

describe('the controller ServiceAccount', () => {
  const may: Attributes[] = [
    { verb: 'watch', group: 'talos.dev', resource: 'nodeactions' },
    { verb: 'patch', group: 'talos.dev', resource: 'nodeactions', subresource: 'status' },
    { verb: 'update', group: 'talos.dev', resource: 'clusterhealthchecks', subresource: 'status' },
    { verb: 'list', group: 'talos.dev', resource: 'nodereadyjobs', namespace: 'rook-ceph' },
    { verb: 'create', group: 'batch', resource: 'jobs', namespace: 'rook-ceph' },
    { verb: 'delete', group: 'batch', resource: 'jobs', namespace: 'rook-ceph' },
    { verb: 'patch', resource: 'nodes' },
    { verb: 'create', resource: 'pods', subresource: 'eviction', namespace: 'default' },
    { verb: 'create', group: 'events.k8s.io', resource: 'events', namespace: 'default' },
    { verb: 'create', group: 'authentication.k8s.io', resource: 'tokenreviews' },
    { verb: 'create', group: 'authorization.k8s.io', resource: 'subjectaccessreviews' },
    { verb: 'list', group: 'policy', resource: 'poddisruptionbudgets' },
    { verb: 'create', group: 'coordination.k8s.io', resource: 'leases', namespace: DEFAULT_NAMESPACE },
    {
      verb: 'update',
      group: 'coordination.k8s.io',
      resource: 'leases',
      namespace: DEFAULT_NAMESPACE,
      name: 'gatehouse-controller',
    },
    { verb: 'get', resource: 'secrets', namespace: DEFAULT_NAMESPACE, name: 'cp-1-machine-config' },
  ];
  const mayNot: Attributes[] = [
    { verb: 'get', resource: 'secrets', namespace: 'kube-system', name: 'anything' },
    { verb: 'list', resource: 'secrets', namespace: DEFAULT_NAMESPACE },
    { verb: 'create', group: 'talos.dev', resource: 'prerebootjobs', namespace: 'rook-ceph' },
    { verb: 'bypass', group: 'talos.dev', resource: 'nodeactions' },
    { verb: 'delete', resource: 'nodes' },
    { verb: 'delete', resource: 'pods', namespace: 'default' },
    {
      verb: 'update',
      group: 'coordination.k8s.io',
      resource: 'leases',
      namespace: DEFAULT_NAMESPACE,
      name: 'other',
    },
    { verb: 'create', group: 'coordination.k8s.io', resource: 'leases', namespace: 'kube-system' },
    { verb: 'list', ...WIDGETS },
  ];
  for (const attributes of may) {
    it(`may ${attributes.verb} ${[attributes.group, attributes.resource, attributes.subresource].filter(Boolean).join('/')}`, async () => {
      assert.equal(await allowed(controller, attributes), true);
    });
  }
  for (const attributes of mayNot) {
    it(`may not ${attributes.verb} ${[attributes.group, attributes.resource].filter(Boolean).join('/')} in ${attributes.namespace ?? 'the cluster'}`, async () => {
      assert.equal(await allowed(controller, attributes), false);
    });
  }

  it('may read a kind for resource probes once a ClusterRole labelled for aggregation grants it', async () => {
    const widgets = { verb: 'list', ...WIDGETS, namespace: 'default' };
    assert.equal(await allowed(controller, widgets), false);
    const role = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: {
        name: `${RUN}-probe-widgets`,
        labels: { 'talos.dev/aggregate-to-gatehouse-probes': 'true' },
      },
      rules: [{ apiGroups: [WIDGETS.group], resources: [WIDGETS.resource], verbs: ['get', 'list', 'watch'] }],
    };
    await serverSideApply(kc, [role]);
    cleanups.push(() =>
      client.request(`/apis/rbac.authorization.k8s.io/v1/clusterroles/${role.metadata.name}`, {
        method: 'DELETE',
      }),
    );
    await waitFor('the probe ClusterRole to be aggregated for the controller', async () =>
      (await allowed(controller, widgets)) ? true : undefined,
    );
  });
});

describe('users', () => {
  it('with the built-in edit role in a namespace can manage hooks there, like Jobs; with view only read them', async () => {
    const namespace = uniqueName('api-rbac');
    await client.request('/api/v1/namespaces', {
      method: 'POST',
      body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } },
    });
    cleanups.push(() => client.request(`/api/v1/namespaces/${namespace}`, { method: 'DELETE' }));
    const [editor, viewer] = [`editor-${RUN}`, `viewer-${RUN}`];
    await serverSideApply(
      kc,
      [
        ['edit', editor],
        ['view', viewer],
      ].map(([role, user]) => ({
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: `${String(role)}-${RUN}`, namespace },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: String(role) },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: String(user) }],
      })),
    );
    const hook = (verb: string, resource: string) => ({ verb, group: 'talos.dev', resource, namespace });
    // Aggregation into the built-in roles is done by the controller manager, asynchronously.
    await waitFor('hook editing to reach the edit role', async () =>
      (await allowed({ user: editor }, hook('create', 'prerebootjobs'))) ? true : undefined,
    );
    for (const resource of [
      'preupgradejobs',
      'preshutdownjobs',
      'preresetjobs',
      'nodeprereadyjobs',
      'nodereadyjobs',
    ]) {
      assert.equal(await allowed({ user: editor }, hook('delete', resource)), true, resource);
    }
    assert.equal(
      await allowed({ user: editor }, hook('patch', 'prerebootjobs/status')),
      false,
      'status is the controller’s',
    );
    assert.equal(
      await allowed({ user: editor }, { verb: 'create', group: 'talos.dev', resource: 'nodeactions' }),
      false,
    );
    await waitFor('hook reading to reach the view role', async () =>
      (await allowed({ user: viewer }, hook('list', 'nodereadyjobs'))) ? true : undefined,
    );
    assert.equal(await allowed({ user: viewer }, hook('create', 'nodereadyjobs')), false);
  });
});

describe('the controller namespace', () => {
  it('enforces the restricted Pod Security Standard, which the controller pod meets', async () => {
    const deployment = deploymentObject(DEFAULT_NAMESPACE, 'registry.example.com/gatehouse:test') as {
      spec: { template: { metadata: object; spec: { containers: Record<string, unknown>[] } } };
    };
    const pod = (name: string, spec: object) => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name },
      spec,
    });
    const pods = `/api/v1/namespaces/${DEFAULT_NAMESPACE}/pods`;
    await client.request(pods, {
      method: 'POST',
      query: { dryRun: 'All' },
      body: pod(`${RUN}-controller`, deployment.spec.template.spec),
    });
    // The control: the same pod without its hardening is refused in this namespace.
    const [container] = deployment.spec.template.spec.containers;
    const refused = await refusal(
      client.request(pods, {
        method: 'POST',
        query: { dryRun: 'All' },
        body: pod(`${RUN}-unhardened`, { containers: [{ name: 'controller', image: container?.image }] }),
      }),
    );
    assert.equal(refused.code, 403);
    assert.match(refused.message, /violates PodSecurity "restricted/);
  });
});
