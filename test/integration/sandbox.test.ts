// The sandbox behaves as a real cluster does: the scheduler places pods, the Job,
// Deployment and disruption controllers run, CRD validation and admission policies are
// enforced by the API server, and watches deliver events.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  AdmissionregistrationV1Api,
  ApiextensionsV1Api,
  AppsV1Api,
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PolicyV1Api,
  RbacAuthorizationV1Api,
  VersionApi,
  Watch,
} from '@kubernetes/client-node';
import { KWOK_NODE_ANNOTATION } from '../../sandbox/kwok-config.ts';
import { TALOS_VERSION } from '../../sandbox/nodes.ts';
import {
  cleanup,
  freshNamespace,
  impersonate,
  refusal,
  refusalOf,
  rest,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);

describe('sandbox', () => {
  it('reports the Kubernetes version it was built from', async () => {
    const version = await kc.makeApiClient(VersionApi).getCode();
    assert.match(version.gitVersion, /^v1\.3\d\.\d+$/);
    assert.equal(version.major, '1');
    assert.equal(`v${version.major}.${version.minor}`, version.gitVersion.split('.').slice(0, 2).join('.'));
  });

  it('has Ready nodes that look like Talos nodes', async () => {
    // Other suites add nodes of their own, some simulated by kwok too (and rebooted or
    // shut down by the Talos simulator); the sandbox's are the ones it started with.
    const { nodes: own } = await testSandboxState();
    const nodes = (await core.listNode()).items.filter(
      (n) => n.metadata?.annotations?.[KWOK_NODE_ANNOTATION] && own.includes(n.metadata.name ?? ''),
    );
    assert.ok(nodes.length >= 2, `expected several nodes, got ${nodes.length}`);
    for (const node of nodes) {
      assert.equal(node.status?.nodeInfo?.osImage, `Talos (${TALOS_VERSION})`);
      assert.match(node.status.nodeInfo.bootID, /^[0-9a-f-]{36}$/);
      assert.ok(node.status.addresses?.some((a) => a.type === 'InternalIP'));
      assert.ok(
        node.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        `${node.metadata?.name} Ready`,
      );
    }
    const roles = nodes.map((n) =>
      'node-role.kubernetes.io/control-plane' in (n.metadata?.labels ?? {}) ? 'cp' : 'worker',
    );
    assert.ok(roles.includes('cp') && roles.includes('worker'));
  });

  it('schedules a Job by node affinity and completes it through the Job controller', async (t) => {
    const namespace = await freshNamespace(t);
    const batch = kc.makeApiClient(BatchV1Api);
    const target = 'worker-2';
    await batch.createNamespacedJob({
      namespace,
      body: {
        metadata: { name: 'pinned' },
        spec: {
          backoffLimit: 0,
          template: {
            spec: {
              restartPolicy: 'Never',
              affinity: {
                nodeAffinity: {
                  requiredDuringSchedulingIgnoredDuringExecution: {
                    nodeSelectorTerms: [
                      {
                        matchExpressions: [
                          { key: 'kubernetes.io/hostname', operator: 'In', values: [target] },
                        ],
                      },
                    ],
                  },
                },
              },
              containers: [{ name: 'main', image: 'busybox' }],
            },
          },
        },
      },
    });
    await waitFor('Job pinned to complete', async (observe) => {
      const job = await batch.readNamespacedJob({ name: 'pinned', namespace });
      observe(JSON.stringify(job.status ?? {}));
      return job.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True')
        ? job
        : undefined;
    });
    const pods = await core.listNamespacedPod({ namespace, labelSelector: 'job-name=pinned' });
    assert.equal(pods.items.length, 1);
    assert.equal(pods.items[0]?.spec?.nodeName, target);
    assert.equal(pods.items[0].status?.phase, 'Succeeded');
  });

  it('keeps pods off tainted control-plane nodes', async (t) => {
    const namespace = await freshNamespace(t);
    const apps = kc.makeApiClient(AppsV1Api);
    await apps.createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name: 'spread' },
        spec: {
          replicas: 6,
          selector: { matchLabels: { app: 'spread' } },
          template: {
            metadata: { labels: { app: 'spread' } },
            spec: { containers: [{ name: 'main', image: 'nginx' }] },
          },
        },
      },
    });
    const pods = await waitFor('6 scheduled pods', async () => {
      const list = await core.listNamespacedPod({ namespace, labelSelector: 'app=spread' });
      return list.items.filter((p) => p.spec?.nodeName).length === 6 ? list.items : undefined;
    });
    for (const pod of pods) assert.doesNotMatch(pod.spec?.nodeName ?? '', /^cp-/);
  });

  it('runs a Deployment to Ready and reports a PodDisruptionBudget', async (t) => {
    const namespace = await freshNamespace(t);
    const apps = kc.makeApiClient(AppsV1Api);
    await apps.createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name: 'web' },
        spec: {
          replicas: 3,
          selector: { matchLabels: { app: 'web' } },
          template: {
            metadata: { labels: { app: 'web' } },
            spec: { containers: [{ name: 'web', image: 'nginx' }] },
          },
        },
      },
    });
    await kc.makeApiClient(PolicyV1Api).createNamespacedPodDisruptionBudget({
      namespace,
      body: {
        metadata: { name: 'web' },
        spec: { minAvailable: 2, selector: { matchLabels: { app: 'web' } } },
      },
    });
    await waitFor('Deployment web to have 3 ready replicas', async (observe) => {
      const d = await apps.readNamespacedDeployment({ name: 'web', namespace });
      observe(JSON.stringify(d.status ?? {}));
      return d.status?.readyReplicas === 3 ? d : undefined;
    });
    const pdb = await waitFor('PodDisruptionBudget web to allow 1 disruption', async (observe) => {
      const p = await kc
        .makeApiClient(PolicyV1Api)
        .readNamespacedPodDisruptionBudget({ name: 'web', namespace });
      observe(JSON.stringify(p.status ?? {}));
      return p.status?.disruptionsAllowed === 1 ? p : undefined;
    });
    assert.equal(pdb.status?.currentHealthy, 3);
    assert.equal(pdb.status.desiredHealthy, 2);
  });

  it('enforces a CRD x-kubernetes-validations rule with its message', async (t) => {
    const group = `${uniqueName('smoke')}.gatehouse.test`;
    const crd = {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: `widgets.${group}` },
      spec: {
        group,
        scope: 'Cluster',
        names: { plural: 'widgets', singular: 'widget', kind: 'Widget' },
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            schema: {
              openAPIV3Schema: {
                type: 'object',
                properties: {
                  spec: {
                    type: 'object',
                    properties: { min: { type: 'integer' }, max: { type: 'integer' } },
                    'x-kubernetes-validations': [
                      { rule: 'self.min <= self.max', message: 'min must not exceed max' },
                    ],
                  },
                },
              },
            },
          },
        ],
      },
    };
    const apiext = kc.makeApiClient(ApiextensionsV1Api);
    await rest(kc).request('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', {
      method: 'POST',
      body: crd,
    });
    cleanup(t, kc, crd);
    const stored = await apiext.readCustomResourceDefinition({ name: crd.metadata.name });
    assert.equal(
      stored.spec.versions[0]?.schema?.openAPIV3Schema?.properties?.spec?.x_kubernetes_validations?.length,
      1,
    );
    await waitFor('CRD to be established', async () => {
      const c = await apiext.readCustomResourceDefinition({ name: crd.metadata.name });
      return c.status?.conditions?.some((x) => x.type === 'Established' && x.status === 'True')
        ? c
        : undefined;
    });
    const objects = kc.makeApiClient(CustomObjectsApi);
    const create = (name: string, spec: object) =>
      objects.createClusterCustomObject({
        group,
        version: 'v1',
        plural: 'widgets',
        body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name }, spec },
      });
    // The API server may need a moment after Established before it serves the new kind.
    await waitFor('a valid Widget to be accepted', () => create('good', { min: 1, max: 2 }).then(() => true));
    const refused = await refusal(create('bad', { min: 3, max: 2 }));
    assert.equal(refused.code, 422);
    assert.match(refused.message, /spec: Invalid value: .*min must not exceed max/);
  });

  it('admits through a ValidatingAdmissionPolicy only users the authorizer allows a custom verb', async (t) => {
    const namespace = await freshNamespace(t);
    const name = uniqueName('smoke-bypass');
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    const policy = {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicy',
      metadata: { name },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: {
          resourceRules: [
            { apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['configmaps'] },
          ],
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } },
        },
        validations: [
          {
            expression:
              "!has(object.data) || !('force' in object.data) || authorizer.group('example.gatehouse.test').resource('widgets').check('force').allowed()",
            message: 'forcing needs the verb force on widgets.example.gatehouse.test',
          },
        ],
      },
    };
    const binding = {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name },
      spec: { policyName: name, validationActions: ['Deny'] },
    };
    await admission.createValidatingAdmissionPolicy({ body: policy });
    await admission.createValidatingAdmissionPolicyBinding({ body: binding });
    cleanup(t, kc, binding, policy);

    // Both users may create config maps; only the admin may also "force".
    await rbac.createNamespacedRole({
      namespace,
      body: {
        metadata: { name: 'cm-writer' },
        rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['create'] }],
      },
    });
    const forceRole = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: `${name}-force` },
      rules: [{ apiGroups: ['example.gatehouse.test'], resources: ['widgets'], verbs: ['force'] }],
    };
    await rbac.createClusterRole({ body: forceRole });
    const forceBinding = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: `${name}-force` },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: forceRole.metadata.name },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'alice' }],
    };
    await rbac.createClusterRoleBinding({ body: forceBinding });
    cleanup(t, kc, forceBinding, forceRole);
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: 'cm-writers' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'cm-writer' },
        subjects: ['alice', 'bob'].map((u) => ({
          apiGroup: 'rbac.authorization.k8s.io',
          kind: 'User',
          name: u,
        })),
      },
    });

    const as = (user: string) => impersonate(kc, user).makeApiClient(CoreV1Api);
    const forced = (n: string) => ({ metadata: { name: n }, data: { force: 'yes' } });
    // RBAC and admission policies both take effect asynchronously (each from its own informer).
    // First wait until the authorizer lets bob create config maps at all (before that he gets
    // 403 Forbidden, which is not what this test is about), then until the policy refuses him.
    await waitFor('the RBAC authorizer to let bob create config maps', async () => {
      try {
        await as('bob').createNamespacedConfigMap({
          namespace,
          body: { metadata: { name: uniqueName('plain') }, data: { a: 'b' } },
        });
        return true;
      } catch (error) {
        if (refusalOf(error).code === 403) return undefined;
        throw error;
      }
    });
    const refused = await waitFor('the policy to refuse bob', async () => {
      try {
        await as('bob').createNamespacedConfigMap({ namespace, body: forced(uniqueName('bob')) });
        return undefined;
      } catch (error) {
        return refusalOf(error);
      }
    });
    assert.equal(refused.code, 422);
    assert.match(refused.message, /forcing needs the verb force/);
    // The policy is in force now; alice passes its check once the authorizer has her force binding.
    await waitFor('alice (who may force) to be admitted', async () => {
      try {
        await as('alice').createNamespacedConfigMap({ namespace, body: forced(uniqueName('alice')) });
        return true;
      } catch (error) {
        const refusal = refusalOf(error);
        if (refusal.code === 403 || (refusal.code === 422 && /forcing needs/.test(refusal.message))) {
          return undefined;
        }
        throw error;
      }
    });
    // And with the policy in force, bob may still create what does not force.
    await as('bob').createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: 'plain' }, data: { a: 'b' } },
    });
  });

  it('delivers a watch event for a created object', async (t) => {
    const namespace = await freshNamespace(t);
    const watch = new Watch(kc);
    const seen = new Promise<string>((resolve, reject) => {
      void watch
        .watch(
          `/api/v1/namespaces/${namespace}/configmaps`,
          {},
          (phase, obj: { metadata?: { name?: string } }) => {
            if (phase === 'ADDED' && obj.metadata?.name === 'watched') resolve(phase);
          },
          (err: unknown) => {
            if (err) reject(err instanceof Error ? err : new Error(JSON.stringify(err)));
          },
        )
        .then((req) => t.after(() => req.abort()));
    });
    // Let the watch open before the create, so ADDED comes from the stream and not a list.
    await new Promise((r) => setTimeout(r, 300));
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'watched' } } });
    assert.equal(await seen, 'ADDED');
  });
});
