// The talos.dev/v1alpha1 CRDs, as the real API server enforces them: every example
// applies, bad objects are refused with a message naming the field and what is
// allowed, and `kubectl get` shows the printer columns.
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { KubernetesObject } from '@kubernetes/client-node';
import { API_VERSION, type KindDefinition } from '../../src/api/common.ts';
import { KINDS } from '../../src/api/kinds.ts';
import { installGatehouseAPI, readManifests, repoRoot } from '../support/install.ts';
import {
  getTable,
  impersonate,
  refusal,
  resourcePath,
  rest,
  serverSideApply,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const RUN = uniqueName('api-crds');
const RUN_LABEL = { 'gatehouse.dev/test-run': RUN };
const EXAMPLES_MANAGER = 'gatehouse-examples';

const kindOf = (kind: string): KindDefinition => {
  const found = KINDS.find((k) => k.kind === kind);
  if (!found) throw new Error(`no kind ${kind}`);
  return found;
};

function collectionPath(kind: string, namespace?: string): string {
  const definition = kindOf(kind);
  const ns = definition.scope === 'Namespaced' ? `/namespaces/${namespace ?? 'default'}` : '';
  return `/apis/${API_VERSION}${ns}/${definition.plural}`;
}

type Obj = KubernetesObject & { spec?: Record<string, unknown>; status?: Record<string, unknown> };

async function create(object: Obj, dryRun = false): Promise<Obj> {
  return client.request<Obj>(collectionPath(object.kind ?? '', object.metadata?.namespace), {
    method: 'POST',
    body: object,
    query: dryRun ? { dryRun: 'All' } : {},
  });
}

/** Deletes every talos.dev object this file created (by label), NodeActions included. */
async function deleteRunObjects(namespace?: string): Promise<void> {
  await Promise.all(
    KINDS.map((k) =>
      client
        .request(collectionPath(k.kind, namespace), {
          method: 'DELETE',
          query: { labelSelector: `gatehouse.dev/test-run=${RUN}` },
        })
        .catch(() => undefined),
    ),
  );
}

let namespace = '';
let admin = '';

before(async () => {
  await installGatehouseAPI(kc);
  namespace = uniqueName('api-crds');
  await client.request('/api/v1/namespaces', {
    method: 'POST',
    body: {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: namespace, labels: { 'gatehouse.dev/test': 'true' } },
    },
  });
  const review = await client.request<{ status: { userInfo: { username: string } } }>(
    '/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { method: 'POST', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
  );
  admin = review.status.userInfo.username;
});

after(async () => {
  await deleteRunObjects(namespace);
  await client.request(`/api/v1/namespaces/${namespace}`, { method: 'DELETE' }).catch(() => undefined);
});

describe('examples', () => {
  it('every example applies cleanly', async (t) => {
    const dir = join(repoRoot, 'examples');
    const files = (await readdir(dir)).filter((f) => f.endsWith('.yaml')).sort();
    const objects = (await Promise.all(files.map((f) => readManifests(join(dir, f))))).flat() as Obj[];
    assert.ok(objects.length >= 16, `only ${objects.length} example objects`);

    // The namespaces the examples live in (rook-ceph, ...), as on a real cluster.
    const namespaces = [
      ...new Set(objects.map((o) => o.metadata?.namespace).filter((n): n is string => !!n)),
    ];
    // (A field manager of their own: the install owns gatehouse-system's labels.)
    await serverSideApply(
      kc,
      namespaces.map((name) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } })),
      EXAMPLES_MANAGER,
    );

    const actions = objects.filter((o) => o.kind === 'NodeAction');
    const others = objects.filter((o) => o.kind !== 'NodeAction');
    for (const kind of [
      'ClusterHealthCheck',
      'ActionPolicy',
      'PreRebootJob',
      'NodeReadyJob',
      'PreResetJob',
      'PreUpgradeJob',
    ]) {
      assert.ok(
        others.some((o) => o.kind === kind),
        `no ${kind} example`,
      );
    }
    assert.deepEqual(
      actions.map((a) => a.spec?.action).sort(),
      ['ConfigChange', 'Reboot', 'Reset', 'Shutdown', 'Upgrade'],
      'one NodeAction example per action',
    );
    t.after(async () => {
      await Promise.all(
        objects.map(async (o) => {
          const path = `${await resourcePath(client, o)}/${o.metadata?.name ?? ''}`;
          await client.request(path, { method: 'DELETE' }).catch(() => undefined);
        }),
      );
    });

    const applied = await serverSideApply(kc, others, EXAMPLES_MANAGER);
    assert.equal(applied.length, others.length);

    // NodeActions are applied by the user they name in requestedBy, holding the shipped
    // gatehouse:requester role, as the admission policy insists.
    const requesters = [...new Set(actions.map((a) => String(a.spec?.requestedBy)))];
    const binding = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: `${RUN}-requesters` },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'gatehouse:requester' },
      subjects: requesters.map((name) => ({ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name })),
    };
    await serverSideApply(kc, [binding]);
    t.after(() =>
      client.request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${binding.metadata.name}`, {
        method: 'DELETE',
      }),
    );
    for (const action of actions) {
      const as = impersonate(kc, String(action.spec?.requestedBy));
      // The binding reaches the authorizer asynchronously.
      const stored = (await waitFor(
        `example NodeAction ${action.metadata?.name ?? ''} to be admitted`,
        async () => {
          const [result] = await serverSideApply(as, [action], EXAMPLES_MANAGER);
          return result;
        },
      )) as Obj;
      assert.equal(stored.spec?.nodeName, action.spec?.nodeName);
      // Defaults are filled in by the API server: the record says what will happen.
      assert.equal(
        typeof (stored.spec?.deadlines as Record<string, unknown> | undefined)?.executing,
        'string',
      );
      assert.ok(stored.spec?.execution === 'Managed' || stored.spec?.execution === 'External');
    }
  });
});

// ---------------------------------------------------------------------------------
// Invalid objects. Each is refused by the API server with 422 and a message that
// names the field (path) and says what is allowed.

const meta = (prefix: string, namespaced = false) => ({
  name: uniqueName(prefix),
  labels: RUN_LABEL,
  ...(namespaced ? { namespace } : {}),
});
const check = (spec: Record<string, unknown>): Obj => ({
  apiVersion: API_VERSION,
  kind: 'ClusterHealthCheck',
  metadata: meta('bad-check'),
  spec,
});
const job = {
  spec: {
    template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.37' }] } },
  },
};
const hook = (kind: string, spec: Record<string, unknown>): Obj => ({
  apiVersion: API_VERSION,
  kind,
  metadata: meta('bad-hook', true),
  spec,
});
const action = (spec: Record<string, unknown>): Obj => ({
  apiVersion: API_VERSION,
  kind: 'NodeAction',
  metadata: meta('bad-action'),
  spec: { nodeName: 'worker-1', requestedBy: admin, ...spec },
});
const policy = (spec: Record<string, unknown>): Obj => ({
  apiVersion: API_VERSION,
  kind: 'ActionPolicy',
  metadata: meta('bad-policy'),
  spec,
});
const window = (w: Record<string, unknown>) => ({
  windows: [{ schedule: '0 2 * * *', duration: '4h', ...w }],
});
const cephProbe = {
  apiVersion: 'ceph.rook.io/v1',
  kind: 'CephCluster',
  expression: "self.status.ceph.health == 'HEALTH_OK'",
};
const configSecretRef = { name: 'machine-config' };

const DURATION = 'must be a duration such as 30s, 5m or 1h30m';

const ONLY_VARIABLES = 'may use only the variables \\$\\(NODE_NAME\\) and \\$\\(NODE_IP\\)';
const nodeHttp = (httpGet: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  check({ scope: 'Node', httpGet, ...extra });
const service = { service: { name: 'node-agent', namespace: 'kube-system' }, port: 9100 };
const pods = (resource: Record<string, unknown>, extra: Record<string, unknown> = { scope: 'Node' }) =>
  check({ ...extra, resource: { apiVersion: 'v1', kind: 'Pod', expression: 'true', ...resource } });
const CLUSTER_ONLY =
  /spec\.scope: Invalid value: .*spec uses \$\(NODE_NAME\) or \$\(NODE_IP\), which are replaced only in a check with spec\.scope: Node; set scope: Node or remove them/;
const CANNOT_USE_NODE =
  /spec\.scope: Invalid value: .*spec\.scope: Node needs a probe that can use the node \(httpGet or resource or job\)/;
const checkerTemplate = (podSpec: Record<string, unknown> = {}) => ({
  spec: {
    template: {
      spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox' }], ...podSpec },
    },
  },
});
const checkerJob = (job: Record<string, unknown>, extra: Record<string, unknown> = { scope: 'Node' }) =>
  check({ timeout: '2m', ...extra, job: { namespace: 'rook-ceph', template: checkerTemplate(), ...job } });

const NODE_SCOPED_INVALID: [string, () => Obj, RegExp][] = [
  [
    'an unknown variable in an httpGet URL',
    () => nodeHttp({ url: 'http://$(NODE_ZONE):9100/' }),
    new RegExp(
      `spec\\.httpGet\\.url: Invalid value: "http://\\$\\(NODE_ZONE\\):9100/": httpGet\\.url ${ONLY_VARIABLES}`,
    ),
  ],
  [
    'a variable in lower case',
    () => nodeHttp({ url: 'http://$(node_ip):9100/' }),
    new RegExp(`spec\\.httpGet\\.url: .*httpGet\\.url ${ONLY_VARIABLES}`),
  ],
  [
    'an unclosed variable',
    () => nodeHttp({ url: 'http://$(NODE_IP:9100/' }),
    new RegExp(`spec\\.httpGet\\.url: .*httpGet\\.url ${ONLY_VARIABLES}`),
  ],
  [
    'an unknown variable in an httpGet path',
    () => nodeHttp({ ...service, path: '/nodes/$(HOSTNAME)' }),
    new RegExp(`spec\\.httpGet\\.path: .*httpGet\\.path ${ONLY_VARIABLES}`),
  ],
  [
    'an unknown variable in a header',
    () => nodeHttp({ url: 'http://agent:9100/', httpHeaders: [{ name: 'X-Node', value: '$(NODE)' }] }),
    new RegExp(
      `spec\\.httpGet\\.httpHeaders\\[0\\]\\.value: .*httpGet\\.httpHeaders\\[\\]\\.value ${ONLY_VARIABLES}`,
    ),
  ],
  [
    'an unknown variable in a fieldSelector',
    () => pods({ fieldSelector: 'spec.nodeName=$(NODE_HOSTNAME)' }),
    new RegExp(`spec\\.resource\\.fieldSelector: .*resource\\.fieldSelector ${ONLY_VARIABLES}`),
  ],
  [
    'a URL that is no URL once the node is put in',
    () => nodeHttp({ url: '$(NODE_IP):9100/health' }),
    /spec\.httpGet\.url: .*httpGet\.url must be an absolute http:\/\/ or https:\/\/ URL, e\.g\. .* or, Node-scoped, http:\/\/\$\(NODE_IP\):9100\/health/,
  ],
  [
    'a node variable in the URL of a Cluster-scoped check',
    () => check({ httpGet: { url: 'http://$(NODE_IP):9100/' } }),
    CLUSTER_ONLY,
  ],
  [
    'a node variable with scope: Cluster spelled out',
    () => check({ scope: 'Cluster', httpGet: { url: 'http://agent/$(NODE_NAME)' } }),
    CLUSTER_ONLY,
  ],
  [
    'a node variable in a header of a Cluster-scoped check',
    () =>
      check({ httpGet: { url: 'http://agent/', httpHeaders: [{ name: 'X-Node', value: '$(NODE_NAME)' }] } }),
    CLUSTER_ONLY,
  ],
  [
    'a node variable in the path of a Cluster-scoped check',
    () => check({ httpGet: { ...service, path: '/$(NODE_NAME)' } }),
    CLUSTER_ONLY,
  ],
  [
    'a node variable in the fieldSelector of a Cluster-scoped check',
    () => pods({ fieldSelector: 'spec.nodeName=$(NODE_NAME)' }, {}),
    CLUSTER_ONLY,
  ],
  ['scope: Node with a workloads probe', () => check({ scope: 'Node', workloads: {} }), CANNOT_USE_NODE],
  [
    'scope: Node with a podDisruptionBudgets probe',
    () => check({ scope: 'Node', podDisruptionBudgets: {} }),
    CANNOT_USE_NODE,
  ],
  ['scope: Node with a nodes probe', () => check({ scope: 'Node', nodes: {} }), CANNOT_USE_NODE],
  [
    'scope: Node with a prometheus probe',
    () => check({ scope: 'Node', prometheus: { url: 'http://prometheus:9090', alerts: {} } }),
    CANNOT_USE_NODE,
  ],
  [
    'scope: Node with a tcpSocket probe',
    () => check({ scope: 'Node', tcpSocket: { host: 'db', port: 5432 } }),
    CANNOT_USE_NODE,
  ],
  [
    'a scope that does not exist',
    () => check({ scope: 'Zone', nodes: {} }),
    /spec\.scope: Unsupported value: "Zone": supported values: "Cluster", "Node"/,
  ],
  [
    'a nodeInterval on a Cluster-scoped check',
    () => check({ nodeInterval: '5m', nodes: {} }),
    /spec\.nodeInterval: Forbidden: spec\.nodeInterval is only allowed with spec\.scope: Node/,
  ],
  [
    'a nodeInterval with scope: Cluster spelled out',
    () => check({ scope: 'Cluster', nodeInterval: '5m', nodes: {} }),
    /spec\.nodeInterval: Forbidden: spec\.nodeInterval is only allowed with spec\.scope: Node/,
  ],
  [
    'a nodeInterval without a unit',
    () => nodeHttp({ url: 'http://agent/' }, { nodeInterval: '300' }),
    new RegExp(`spec\\.nodeInterval: Invalid value: "300": nodeInterval ${DURATION} .*from 10s to 24h`),
  ],
  [
    'a nodeInterval below 10s',
    () => nodeHttp({ url: 'http://agent/' }, { nodeInterval: '5s' }),
    /spec\.nodeInterval: Invalid value: "5s": nodeInterval must be a duration .*from 10s to 24h/,
  ],
  [
    'a nodeInterval above 24h',
    () => nodeHttp({ url: 'http://agent/' }, { nodeInterval: '48h' }),
    /spec\.nodeInterval: .*from 10s to 24h/,
  ],
  [
    'a fieldSelector on a core kind without selectable fields',
    () =>
      check({
        scope: 'Node',
        resource: {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          fieldSelector: 'spec.nodeName=$(NODE_NAME)',
          expression: 'true',
        },
      }),
    /spec\.resource\.fieldSelector: Invalid value: .*resource\.fieldSelector may use only metadata\.name and metadata\.namespace with a core kind other than Pod, Node/,
  ],
  [
    'a fieldSelector on ServiceAccounts by a field they lack',
    () =>
      check({
        resource: {
          apiVersion: 'v1',
          kind: 'ServiceAccount',
          fieldSelector: 'metadata.name=a,spec.x=1',
          expression: 'true',
        },
      }),
    /spec\.resource\.fieldSelector: .*may use only metadata\.name and metadata\.namespace/,
  ],
  [
    'a fieldSelector together with a name',
    () => pods({ name: 'pg-1', fieldSelector: 'spec.nodeName=$(NODE_NAME)' }),
    /spec\.resource\.fieldSelector: Forbidden: resource: set at most one of name or fieldSelector/,
  ],
  [
    'a fieldSelector term without a value',
    () => pods({ fieldSelector: 'spec.nodeName' }),
    /spec\.resource\.fieldSelector: Invalid value: "spec\.nodeName": resource\.fieldSelector must be comma-separated field=value \(or field!=value\) terms/,
  ],
  [
    'a fieldSelector term with two operators',
    () => pods({ fieldSelector: 'spec.nodeName=a=b' }),
    /spec\.resource\.fieldSelector: .*must be comma-separated field=value/,
  ],
  [
    'an empty fieldSelector',
    () => pods({ fieldSelector: '' }),
    /spec\.resource\.fieldSelector: Invalid value: "": .*at least 1 chars long/,
  ],
  [
    'a fieldSelector longer than 512 characters',
    () => pods({ fieldSelector: `metadata.name=${'a'.repeat(510)}` }),
    /spec\.resource\.fieldSelector: Too long: .*512/,
  ],
  [
    'a negative maxMatching',
    () => pods({ maxMatching: -1 }),
    /spec\.resource\.maxMatching: Invalid value: -1: .*greater than or equal to 0/,
  ],
  [
    'maxMatching with minMatching',
    () => pods({ maxMatching: 0, minMatching: 1 }),
    /spec\.resource\.maxMatching: Forbidden: resource\.maxMatching may not be combined with minMatching or all/,
  ],
  [
    'a job probe without a template',
    () => check({ scope: 'Node', timeout: '2m', job: { namespace: 'rook-ceph' } }),
    /spec\.job\.template: Required value/,
  ],
  [
    'a job probe without a namespace',
    () => check({ scope: 'Node', timeout: '2m', job: { template: checkerTemplate() } }),
    /spec\.job\.namespace: Required value/,
  ],
  [
    'a checker Job template without containers',
    () => checkerJob({ template: checkerTemplate({ containers: [] }) }),
    /spec\.job\.template\.spec\.template\.spec\.containers: Invalid value: .*should have at least 1 items/,
  ],
  [
    'a checker Job that restarts Always',
    () => checkerJob({ template: checkerTemplate({ restartPolicy: 'Always' }) }),
    /spec\.job\.template\.spec\.template\.spec\.restartPolicy: .*restartPolicy must be Never or OnFailure: a checker Job has to finish/,
  ],
  [
    'a job probe with the default 5s timeout',
    () => check({ scope: 'Node', job: { namespace: 'rook-ceph', template: checkerTemplate() } }),
    /spec\.timeout: Invalid value: .*spec\.job needs spec\.timeout of at least 30s .*set e\.g\. timeout: 2m/,
  ],
  [
    'a job probe with a 10s timeout',
    () => checkerJob({}, { scope: 'Node', timeout: '10s' }),
    /spec\.timeout: Invalid value: .*spec\.job needs spec\.timeout of at least 30s/,
  ],
  [
    'a placement on a Cluster-scoped checker Job',
    () => checkerJob({ placement: 'OnTarget' }, {}),
    /spec\.job\.placement: Invalid value: .*spec\.job\.placement AwayFromTarget or OnTarget needs spec\.scope: Node/,
  ],
  [
    'a placement that does not exist',
    () => checkerJob({ placement: 'Elsewhere' }),
    /spec\.job\.placement: Unsupported value: "Elsewhere": supported values: "Anywhere", "AwayFromTarget", "OnTarget"/,
  ],
  [
    'a checker Job namespace that is no DNS label',
    () => checkerJob({ namespace: 'Rook_Ceph' }),
    /spec\.job\.namespace: Invalid value: "Rook_Ceph"/,
  ],
  [
    'maxMatching with all',
    () => pods({ maxMatching: 0, all: true }),
    /spec\.resource\.maxMatching: Forbidden: resource\.maxMatching may not be combined with minMatching or all/,
  ],
  [
    'a listExpression with maxMatching',
    () => pods({ expression: undefined, listExpression: 'items.size() == 0', maxMatching: 0 }),
    /spec\.resource\.listExpression: Forbidden: resource\.listExpression is a verdict on the selection as a whole, so minMatching, maxMatching and all .* do not apply/,
  ],
  [
    'both expression and listExpression',
    () => pods({ listExpression: 'items.size() == 0' }),
    /spec\.resource: Invalid value: .*resource: set exactly one of expression or listExpression/,
  ],
];

/** [what, object (built lazily: it needs the namespace and admin name), expected message]. */
const INVALID: [string, () => Obj, RegExp][] = [
  // ClusterHealthCheck
  [
    'a check without a probe',
    () => check({}),
    /spec: Invalid value: .*spec must set exactly one probe: httpGet, tcpSocket, resource, workloads, podDisruptionBudgets, nodes, prometheus/,
  ],
  [
    'a check with two probes',
    () => check({ nodes: {}, tcpSocket: { host: 'db', port: 5432 } }),
    /spec must set exactly one probe/,
  ],
  [
    'an interval without a unit',
    () => check({ nodes: {}, interval: '30' }),
    new RegExp(`spec\\.interval: Invalid value: "30": interval ${DURATION} .*from 1s to 24h`),
  ],
  [
    'an interval below 1s',
    () => check({ nodes: {}, interval: '500ms' }),
    /spec\.interval: Invalid value: "500ms": interval must be a duration .*from 1s to 24h/,
  ],
  ['an interval above 24h', () => check({ nodes: {}, interval: '48h' }), /spec\.interval: .*from 1s to 24h/],
  [
    'a timeout in years',
    () => check({ nodes: {}, timeout: '1y' }),
    /spec\.timeout: Invalid value: "1y": timeout must be a duration .*from 1s to 10m/,
  ],
  [
    'a successThreshold of 0',
    () => check({ nodes: {}, successThreshold: 0 }),
    /spec\.successThreshold: Invalid value: 0: .*greater than or equal to 1/,
  ],
  [
    'an unknown action',
    () => check({ nodes: {}, actions: ['Explode'] }),
    /spec\.actions\[0\]: Unsupported value: "Explode": supported values: "Upgrade", "Reboot", "Shutdown", "Reset", "ConfigChange"/,
  ],
  [
    'httpGet with url and service',
    () => check({ httpGet: { url: 'http://a', service: { name: 'a', namespace: 'b' }, port: 80 } }),
    /spec\.httpGet: Invalid value: .*httpGet: set exactly one of url or service/,
  ],
  [
    'httpGet with an ftp url',
    () => check({ httpGet: { url: 'ftp://files.example.com/' } }),
    /spec\.httpGet\.url: Invalid value: "ftp:\/\/files\.example\.com\/": httpGet\.url must be an absolute http:\/\/ or https:\/\/ URL/,
  ],
  [
    'httpGet service without a port',
    () => check({ httpGet: { service: { name: 'ceph-mgr', namespace: 'rook-ceph' } } }),
    /spec\.httpGet\.port: .*httpGet\.port is required with httpGet\.service/,
  ],
  [
    'httpGet path with a url',
    () => check({ httpGet: { url: 'http://a/', path: '/health' } }),
    /spec\.httpGet\.path: Forbidden: httpGet\.path is only allowed with httpGet\.service/,
  ],
  [
    'an HTTP status code of 700',
    () => check({ httpGet: { url: 'http://a/', expectedStatusCodes: [700] } }),
    /spec\.httpGet\.expectedStatusCodes\[0\]: Invalid value: 700: .*less than or equal to 599/,
  ],
  [
    'a TCP port of 70000',
    () => check({ tcpSocket: { host: 'db', port: 70000 } }),
    /spec\.tcpSocket\.port: Invalid value: 70000: .*less than or equal to 65535/,
  ],
  [
    'tcpSocket without host or service',
    () => check({ tcpSocket: { port: 5432 } }),
    /spec\.tcpSocket: Invalid value: .*tcpSocket: set exactly one of host or service/,
  ],
  [
    'resource with name and labelSelector',
    () => check({ resource: { ...cephProbe, name: 'ceph', labelSelector: { matchLabels: { a: 'b' } } } }),
    /spec\.resource: Invalid value: .*resource: set at most one of name or labelSelector/,
  ],
  [
    'resource with all and minMatching',
    () => check({ resource: { ...cephProbe, all: true, minMatching: 2 } }),
    /spec\.resource: .*resource: set at most one of minMatching or all/,
  ],
  [
    'resource with all: false',
    () => check({ resource: { ...cephProbe, all: false } }),
    /spec\.resource\.all: Invalid value: .*resource\.all may only be true; to require fewer than all objects set resource\.minMatching/,
  ],
  [
    'resource without an expression',
    () => check({ resource: { apiVersion: 'ceph.rook.io/v1', kind: 'CephCluster' } }),
    /spec\.resource: Invalid value: .*resource: set exactly one of expression or listExpression/,
  ],
  [
    'resource with a malformed apiVersion',
    () => check({ resource: { ...cephProbe, apiVersion: 'Ceph.Rook/v1' } }),
    /spec\.resource\.apiVersion: Invalid value: "Ceph\.Rook\/v1": resource\.apiVersion must be <group>\/<version>/,
  ],
  [
    'workloads with namespace and namespaceSelector',
    () => check({ workloads: { namespace: 'a', namespaceSelector: {} } }),
    /spec\.workloads: .*workloads: set at most one of namespace or namespaceSelector/,
  ],
  [
    'PDBs allowing 0 disruptions',
    () => check({ podDisruptionBudgets: { minDisruptionsAllowed: 0 } }),
    /spec\.podDisruptionBudgets\.minDisruptionsAllowed: Invalid value: 0: .*greater than or equal to 1/,
  ],
  [
    'nodes with maxNotReady -1',
    () => check({ nodes: { maxNotReady: -1 } }),
    /spec\.nodes\.maxNotReady: Invalid value: -1: .*greater than or equal to 0/,
  ],
  [
    'a selector In without values',
    () => check({ nodes: { selector: { matchExpressions: [{ key: 'zone', operator: 'In' }] } } }),
    /spec\.nodes\.selector\.matchExpressions\[0\]\.values: Invalid value: .*must list at least one value for operator In or NotIn/,
  ],
  [
    'prometheus with query and alerts',
    () => check({ prometheus: { url: 'http://prom:9090', query: 'up == 0', alerts: {} } }),
    /spec\.prometheus: .*prometheus: set exactly one of query or alerts/,
  ],
  [
    'prometheus range with min above max',
    () => check({ prometheus: { url: 'http://prom:9090', query: 'x', valueRange: { min: 5, max: 1 } } }),
    /spec\.prometheus\.valueRange: .*prometheus\.valueRange\.min must not exceed prometheus\.valueRange\.max/,
  ],
  [
    'a malformed alert matcher',
    () => check({ prometheus: { url: 'http://prom:9090', alerts: { matchers: ['severity=critical'] } } }),
    /spec\.prometheus\.alerts\.matchers\[0\]: .*must each be label, operator \(=, !=, =~ or !~\) and a double-quoted value/,
  ],
  // Hooks
  [
    'a pre-action hook with neither template, webhook nor approval',
    () => hook('PreRebootJob', {}),
    /spec: Invalid value: .*a pre-action hook runs a Job, calls a webhook or asks a person: set exactly one of template, webhook or approval/,
  ],
  [
    'an approval hook that would pass when nobody answers',
    () => hook('PreRebootJob', { approval: {}, failurePolicy: 'Ignore' }),
    /spec\.failurePolicy: .*failurePolicy must be Fail in an approval hook/,
  ],
  [
    'a hook with both template and webhook',
    () => hook('NodeReadyJob', { template: job, webhook: { service: { name: 'svc' } } }),
    /spec must set exactly one of template \(a Job\) or webhook \(a callback\)/,
  ],
  [
    'a hook Job restarting Always',
    () =>
      hook('PreUpgradeJob', {
        template: { spec: { template: { spec: { ...job.spec.template.spec, restartPolicy: 'Always' } } } },
      }),
    /spec\.template\.spec\.template\.spec\.restartPolicy: Invalid value: .*restartPolicy must be Never or OnFailure/,
  ],
  [
    'a hook Job without restartPolicy',
    () =>
      hook('PreShutdownJob', {
        template: { spec: { template: { spec: { containers: job.spec.template.spec.containers } } } },
      }),
    /spec\.template\.spec\.template\.spec\.restartPolicy: Required value/,
  ],
  [
    'a hook Job without containers',
    () =>
      hook('PreShutdownJob', {
        template: { spec: { template: { spec: { restartPolicy: 'Never', containers: [] } } } },
      }),
    /spec\.template\.spec\.template\.spec\.containers: Invalid value: .*should have at least 1 items/,
  ],
  [
    'failurePolicy Maybe',
    () => hook('PreResetJob', { template: job, failurePolicy: 'Maybe' }),
    /spec\.failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore"/,
  ],
  [
    'placement Nowhere',
    () => hook('NodePrereadyJob', { template: job, placement: 'Nowhere' }),
    /spec\.placement: Unsupported value: "Nowhere": supported values: "AwayFromTarget", "OnTarget", "Anywhere"/,
  ],
  [
    'a webhook path without /',
    () => hook('PreRebootJob', { webhook: { service: { name: 'svc' }, path: 'hooks' } }),
    /spec\.webhook\.path: Invalid value: "hooks": webhook\.path must start with \//,
  ],
  [
    'a hook timeout of forever',
    () => hook('PreRebootJob', { template: job, timeout: 'forever' }),
    /spec\.timeout: Invalid value: "forever": timeout must be a duration .*from 1s to 24h/,
  ],
  [
    'a hook order of 5000',
    () => hook('PreRebootJob', { template: job, order: 5000 }),
    /spec\.order: Invalid value: 5000: .*less than or equal to 1000/,
  ],
  // NodeAction
  [
    'an Upgrade without upgrade',
    () => action({ action: 'Upgrade' }),
    /spec\.upgrade: Required value: spec\.upgrade \(with upgrade\.image\) is required when spec\.action is Upgrade/,
  ],
  [
    'an Upgrade without upgrade.image',
    () => action({ action: 'Upgrade', upgrade: {} }),
    /spec\.upgrade\.image: Required value/,
  ],
  [
    'an upgrade image without tag or digest',
    () => action({ action: 'Upgrade', upgrade: { image: 'ghcr.io/siderolabs/installer' } }),
    /spec\.upgrade\.image: Invalid value: "ghcr\.io\/siderolabs\/installer": upgrade\.image must be an image reference with a tag or digest/,
  ],
  [
    'a Reboot with upgrade parameters',
    () => action({ action: 'Reboot', upgrade: { image: 'ghcr.io/siderolabs/installer:v1.11.5' } }),
    /spec\.upgrade: Forbidden: spec\.upgrade is only allowed when spec\.action is Upgrade/,
  ],
  [
    'a Shutdown with reset parameters',
    () => action({ action: 'Shutdown', reset: { graceful: true } }),
    /spec\.reset: Forbidden: spec\.reset is only allowed when spec\.action is Reset/,
  ],
  [
    'an Upgrade with reboot parameters',
    () =>
      action({
        action: 'Upgrade',
        upgrade: { image: 'ghcr.io/siderolabs/installer:v1.11.5' },
        reboot: { mode: 'PowerCycle' },
      }),
    /spec\.reboot: Forbidden: spec\.reboot is only allowed when spec\.action is Reboot/,
  ],
  [
    'a reboot mode Hard',
    () => action({ action: 'Reboot', reboot: { mode: 'Hard' } }),
    /spec\.reboot\.mode: Unsupported value: "Hard": supported values: "Default", "PowerCycle"/,
  ],
  [
    'a ConfigChange without configChange',
    () => action({ action: 'ConfigChange' }),
    /spec\.configChange: Required value: spec\.configChange is required when spec\.action is ConfigChange/,
  ],
  [
    'a Managed ConfigChange without configSecretRef',
    () => action({ action: 'ConfigChange', configChange: { mode: 'NoReboot' } }),
    /spec\.configChange: Required value: spec\.configChange\.configSecretRef is required with Managed execution/,
  ],
  [
    'an External ConfigChange with mode Auto',
    () => action({ action: 'ConfigChange', execution: 'External', configChange: {} }),
    /spec\.configChange\.mode: Invalid value: .*must be NoReboot, Reboot, Staged or Try with External execution/,
  ],
  [
    'an External ConfigChange with configSecretRef',
    () =>
      action({
        action: 'ConfigChange',
        execution: 'External',
        configChange: { mode: 'Reboot', configSecretRef },
      }),
    /spec\.configChange\.configSecretRef: Forbidden: .*only allowed with Managed execution/,
  ],
  [
    'a Managed ConfigChange stating its disruption class',
    () =>
      action({
        action: 'ConfigChange',
        configChange: { mode: 'NoReboot', configSecretRef, disruptionClass: 'None' },
      }),
    /spec\.configChange\.disruptionClass: Forbidden: .*only allowed with External execution/,
  ],
  [
    'drain with External execution',
    () => action({ action: 'Reboot', execution: 'External', drain: {} }),
    /spec\.drain: Forbidden: spec\.drain is only allowed with Managed execution/,
  ],
  [
    'a negative deadline',
    () => action({ action: 'Reboot', deadlines: { executing: '-5m' } }),
    /spec\.deadlines\.executing: Invalid value: "-5m": deadlines\.executing must be a duration .*from 1s to 168h/,
  ],
  [
    'a node name with capitals',
    () => action({ action: 'Reboot', nodeName: 'Worker_1' }),
    /spec\.nodeName: Invalid value: "Worker_1": spec\.nodeName in body should match/,
  ],
  [
    'no requestedBy',
    () => ({ ...action({ action: 'Reboot' }), spec: { nodeName: 'worker-1', action: 'Reboot' } }),
    /spec\.requestedBy: Required value/,
  ],
  [
    'an unknown action',
    () => action({ action: 'Explode' }),
    /spec\.action: Unsupported value: "Explode": supported values: "Upgrade", "Reboot", "Shutdown", "Reset", "ConfigChange"/,
  ],
  // ActionPolicy
  [
    'maxConcurrent 0',
    () => policy({ maxConcurrent: 0 }),
    /spec\.maxConcurrent: Invalid value: 0: maxConcurrent must be a whole number of at least 1 or a percentage from 1% to 100%/,
  ],
  [
    'maxConcurrent 0%',
    () => policy({ maxConcurrent: '0%' }),
    /spec\.maxConcurrent: Invalid value: "0%": maxConcurrent must be .*from 1% to 100%/,
  ],
  [
    'maxConcurrent 150%',
    () => policy({ maxConcurrent: '150%' }),
    /spec\.maxConcurrent: Invalid value: "150%": maxConcurrent must be/,
  ],
  [
    'maxConcurrent two',
    () => policy({ maxConcurrent: 'two' }),
    /spec\.maxConcurrent: Invalid value: "two": maxConcurrent must be/,
  ],
  [
    'per-kind limits for no kind',
    () => policy({ perAction: [{ actions: [], maxConcurrent: 1 }] }),
    /spec\.perAction\[0\]\.actions: Invalid value: 0: spec\.perAction\[0\]\.actions in body should have at least 1 items/,
  ],
  [
    'a freeze that ends before it starts',
    () => policy({ freezes: [{ start: '2026-12-24T00:00:00Z', end: '2026-12-20T00:00:00Z' }] }),
    /spec\.freezes\[0\]: Invalid value: freezes\[\]\.end must be after freezes\[\]\.start/,
  ],
  [
    'a freeze whose start is not a time',
    () => policy({ freezes: [{ start: 'Christmas', end: '2026-12-27T00:00:00Z' }] }),
    /spec\.freezes\[0\]\.start: Invalid value: "Christmas": spec\.freezes\[0\]\.start in body must be of type date-time/,
  ],
  [
    'a window schedule in words',
    () => policy(window({ schedule: 'every night' })),
    /spec\.windows\[0\]\.schedule: Invalid value: "every night": windows\[\]\.schedule must be a 5-field cron expression/,
  ],
  [
    'a 6-field cron schedule',
    () => policy(window({ schedule: '0 0 2 * * *' })),
    /spec\.windows\[0\]\.schedule: .*must be a 5-field cron expression \(minute hour day-of-month month day-of-week/,
  ],
  [
    'a window of 30s',
    () => policy(window({ duration: '30s' })),
    /spec\.windows\[0\]\.duration: Invalid value: "30s": windows\[\]\.duration must be a duration .*from 1m to 168h/,
  ],
  [
    'a window of 200h',
    () => policy(window({ duration: '200h' })),
    /spec\.windows\[0\]\.duration: .*from 1m to 168h/,
  ],
  [
    'a window without duration',
    () => policy({ windows: [{ schedule: '@daily' }] }),
    /spec\.windows\[0\]\.duration: Required value/,
  ],
  [
    'an empty time zone',
    () => policy(window({ timeZone: '' })),
    /spec\.windows\[0\]\.timeZone: Invalid value: "": .*at least 1 chars long/,
  ],
  [
    'a time zone with spaces',
    () => policy(window({ timeZone: 'Mars Standard' })),
    /spec\.windows\[0\]\.timeZone: Invalid value: "Mars Standard": windows\[\]\.timeZone must be an IANA time zone name/,
  ],
  [
    'an Alertmanager URL without scheme',
    () => policy({ alertmanagerSilence: { url: 'alertmanager:9093' } }),
    /spec\.alertmanagerSilence\.url: Invalid value: "alertmanager:9093": alertmanagerSilence\.url must be an absolute http:\/\/ or https:\/\/ URL/,
  ],
  // Node-scoped checks: variables, the probes that can use a node, fieldSelector, maxMatching.
  ...NODE_SCOPED_INVALID,
];

describe('invalid objects are refused with a message naming the field and what is allowed', () => {
  it('has at least 30 cases', () => {
    assert.ok(INVALID.length >= 30, `${INVALID.length}`);
  });

  for (const [what, build, expected] of INVALID) {
    it(what, async () => {
      const refused = await refusal(create(build()));
      assert.equal(refused.code, 422, refused.message);
      assert.match(refused.message, expected);
    });
  }

  it('a NodeAction spec cannot change after creation', async () => {
    const created = await create(action({ action: 'Reboot' }));
    const name = created.metadata?.name ?? '';
    const refused = await refusal(
      client.request(`${collectionPath('NodeAction')}/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { spec: { nodeName: 'worker-2' } },
      }),
    );
    assert.equal(refused.code, 422, refused.message);
    assert.match(
      refused.message,
      /spec: Invalid value: .*spec is immutable: delete this NodeAction \(which cancels it\) and create a new one/,
    );
    // The rule locks the spec only: metadata stays writable. (Who may set the
    // talos.dev/executed mark, and when, is the admission policy's; api-admission tests it.)
    const marked = await client.request<Obj>(`${collectionPath('NodeAction')}/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { 'example.com/note': 'kept' } } },
    });
    assert.equal(marked.metadata?.annotations?.['example.com/note'], 'kept');
  });
});

// ---------------------------------------------------------------------------------
// Printer columns, through the API server's own table rendering.

const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
const SAMPLES: Record<string, { spec: Record<string, unknown>; status: Record<string, unknown> }> = {
  ClusterHealthCheck: {
    spec: { resource: cephProbe },
    status: {
      healthy: false,
      consecutiveFailures: 2,
      consecutiveSuccesses: 0,
      lastProbeTime: now,
      message: 'HEALTH_WARN: 1 osds down',
      conditions: [
        {
          type: 'Healthy',
          status: 'False',
          reason: 'ProbeFailed',
          message: 'HEALTH_WARN',
          lastTransitionTime: now,
        },
      ],
    },
  },
  NotificationPolicy: {
    spec: { webhook: { format: 'Slack', url: 'https://hooks.example.com/gatehouse' } },
    status: {
      sent: 12,
      failed: 1,
      conditions: [
        { type: 'Ready', status: 'True', reason: 'Delivered', message: 'delivered', lastTransitionTime: now },
      ],
    },
  },
  hook: {
    spec: { template: job, order: 10, failurePolicy: 'Ignore', placement: 'Anywhere' },
    status: {
      active: 1,
      succeeded: 4,
      failed: 1,
      lastRuns: [
        {
          action: 'reboot-worker-1',
          node: 'worker-1',
          attempt: 1,
          jobName: 'gh-abc-1',
          phase: 'Succeeded',
          startTime: now,
          completionTime: now,
        },
      ],
    },
  },
  NodeAction: {
    spec: {
      nodeName: 'worker-1',
      action: 'ConfigChange',
      execution: 'External',
      configChange: { mode: 'NoReboot', disruptionClass: 'CRIRestart' },
    },
    status: {
      phase: 'WaitingForHealth',
      message: 'waiting for ceph-health-ok',
      startTime: now,
      configDisruption: {
        class: 'CRIRestart',
        basis: 'Stated',
        message: 'CRIRestart: as spec.configChange.disruptionClass states it',
        time: now,
      },
      bootIDBefore: '0b9c4a4e-3c39-4a55-9d5e-6d1b27a1c001',
      checks: [{ name: 'ceph-health-ok', healthy: false, probeTime: now, message: 'HEALTH_WARN' }],
      hooks: [
        {
          kind: 'PreRebootJob',
          namespace: 'rook-ceph',
          name: 'ceph-set-noout',
          attempt: 1,
          phase: 'Pending',
        },
      ],
    },
  },
  ActionPolicy: {
    spec: {
      maxConcurrent: '50%',
      windows: [{ schedule: '0 1 * * *', duration: '4h', timeZone: 'Europe/Berlin' }],
    },
    status: {
      matchingNodes: 3,
      allowedConcurrent: 1,
      activeActions: 1,
      windowOpen: false,
      nextWindowStart: now,
    },
  },
  NodeRollout: {
    // Paused, and selecting no node: no controller that happens to run acts on it.
    spec: {
      action: 'Upgrade',
      upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
      nodeSelector: { matchLabels: { 'gatehouse.test/none': 'none' } },
      paused: true,
    },
    status: {
      targetVersion: 'v1.13.1',
      counts: { pending: 1, running: 2, succeeded: 3, failed: 1, skipped: 4, vanished: 0 },
      message: '2 running, 1 to go',
    },
  },
};

function valueAt(object: unknown, jsonPath: string): unknown {
  // Keys, and the one filter printer columns use: `conditions[?(@.type=="Ready")]`.
  return (jsonPath.match(/[^.[\]]+(\[\?\(@\.type=="[^"]+"\)\])?/g) ?? []).reduce<unknown>((v, step) => {
    const [key = '', type] = step.split(/\[\?\(@\.type=="|"\)\]/);
    const next = v && typeof v === 'object' ? (v as Record<string, unknown>)[key] : undefined;
    return type === undefined
      ? next
      : Array.isArray(next)
        ? (next as { type?: string }[]).find((c) => c.type === type)
        : undefined;
  }, object);
}

describe('printer columns', () => {
  for (const definition of KINDS) {
    it(`${definition.kind}: kubectl get shows ${definition.printerColumns.map((c) => c.name).join(', ')}`, async () => {
      const sample = SAMPLES[definition.kind] ?? SAMPLES.hook;
      assert.ok(sample);
      const spec =
        definition.kind === 'NodeAction' || definition.kind === 'NodeRollout'
          ? { ...sample.spec, requestedBy: admin }
          : sample.spec;
      const created = await create({
        apiVersion: API_VERSION,
        kind: definition.kind,
        metadata: meta('columns', definition.scope === 'Namespaced'),
        spec,
      });
      const path = `${collectionPath(definition.kind, namespace)}/${created.metadata?.name ?? ''}`;
      const withStatus = await client.request<Obj>(`${path}/status`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { status: sample.status },
      });
      assert.deepEqual(
        withStatus.status,
        sample.status,
        'the status subresource stores the status as written',
      );

      const table = await getTable(kc, path);
      assert.deepEqual(
        table.columnDefinitions.map((c) => c.name),
        ['Name', ...definition.printerColumns.map((c) => c.name)],
      );
      const [row] = table.rows;
      assert.ok(row);
      assert.equal(row.cells[0], created.metadata?.name);
      definition.printerColumns.forEach((column, i) => {
        const cell = row.cells[i + 1];
        assert.equal(
          table.columnDefinitions[i + 1]?.priority ?? 0,
          column.priority ?? 0,
          `${column.name} priority`,
        );
        if (column.type === 'date') {
          assert.match(String(cell), /^\d+[smhd]/, `${column.name}: ${String(cell)}`);
          return;
        }
        const value = valueAt(withStatus, column.jsonPath);
        assert.notEqual(value, undefined, `${column.name}: the sample sets ${column.jsonPath}`);
        assert.deepEqual(
          cell,
          column.type === 'string' ? String(value) : value,
          `${column.name} (${column.jsonPath})`,
        );
      });
    });
  }
});
