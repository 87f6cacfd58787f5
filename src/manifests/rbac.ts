// What the controller may do (least privilege, derived from DESIGN.md's controller),
// and the roles users are given: view and edit aggregated into Kubernetes' built-in
// roles, requesting actions, and bypass.
import { GROUP } from '../api/common.ts';
import { KINDS } from '../api/kinds.ts';
import { hookKinds } from '../api/hooks.ts';
import { TURN_LEASE_NAME } from '../kube/turn-lease.ts';
import { TALOS_ROLES } from '../talos/roles.ts';
import { LEASE_NAME, SERVICE_ACCOUNT, labels } from './controller.ts';

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };

const READ = ['get', 'list', 'watch'];
const WRITE = ['create', 'update', 'patch', 'delete', 'deletecollection'];

/** Label that adds a ClusterRole's rules to what the controller may read for resource probes. */
export const PROBE_AGGREGATION_LABEL = 'talos.dev/aggregate-to-gatehouse-probes';

export const CLUSTER_ROLES = {
  controller: 'gatehouse:controller',
  probes: 'gatehouse:controller:resource-probes',
  view: 'gatehouse:view',
  edit: 'gatehouse:edit',
  requester: 'gatehouse:requester',
  bypass: 'gatehouse:bypass',
  approve: 'gatehouse:approve',
  promote: 'gatehouse:promote',
} as const;

/**
 * The ClusterRoles that grant Talos roles through the Talos API gate (`gatehouse
 * talosconfig`): the custom verbs os:<role> on talosapi.talos.dev (no such resource
 * exists: RBAC answers the gate's SubjectAccessReview), and creating the
 * CertificateSigningRequest the certificate comes from. Each grants the roles below it.
 */
export const TALOS_GATE_ROLES = {
  'gatehouse:talos-reader': ['os:reader'],
  'gatehouse:talos-operator': ['os:operator', 'os:reader'],
  'gatehouse:talos-admin': TALOS_ROLES,
} as const;

const plurals = KINDS.map((k) => k.plural);
const hookPlurals = hookKinds.map((k) => k.plural);

function clusterRole(
  name: string,
  rules: Rule[],
  extraLabels: Record<string, string> = {},
  description?: string,
) {
  return {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: {
      name,
      labels: { ...labels(), ...extraLabels },
      ...(description ? { annotations: { 'talos.dev/description': description } } : {}),
    },
    rules,
  };
}

/** What the controller needs cluster-wide, each rule with the reason it exists. */
export function controllerRules(): Rule[] {
  return [
    // Its own API: read everything, record status; actions are also created (HTTP
    // API), patched (finalizer, executed mark) and deleted (cancel, retention).
    { apiGroups: [GROUP], resources: plurals, verbs: READ },
    { apiGroups: [GROUP], resources: plurals.map((p) => `${p}/status`), verbs: ['get', 'update', 'patch'] },
    { apiGroups: [GROUP], resources: ['nodeactions'], verbs: ['create', 'update', 'patch', 'delete'] },
    // Hook Jobs are owned by their NodeAction with blockOwnerDeletion.
    { apiGroups: [GROUP], resources: ['nodeactions/finalizers'], verbs: ['update'] },
    // Hook Jobs: created once per (action, hook, attempt), deleted on timeout or cancel.
    // Checker Jobs (job probes): one per (check, node) at a time, in the check's
    // job.namespace, deleted when replaced or cut by the timeout; their pods are read
    // (rule below) for the termination message.
    { apiGroups: ['batch'], resources: ['jobs'], verbs: ['get', 'list', 'watch', 'create', 'delete'] },
    // Boots, readiness, the preready taint, cordon.
    { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch', 'patch'] },
    // Drain: find the node's pods, evict them through the eviction API (PDBs respected).
    { apiGroups: [''], resources: ['pods'], verbs: READ },
    { apiGroups: [''], resources: ['pods/eviction'], verbs: ['create'] },
    // The readiness preset of NodePrereadyJobs: the CSI drivers registered on a node (the
    // node's Pods through the rule above, listed by spec.nodeName).
    { apiGroups: ['storage.k8s.io'], resources: ['csinodes'], verbs: ['get'] },
    // Other maintainers: a node under a medik8s NodeMaintenance is not taken (src/actions/maintainers.ts).
    { apiGroups: ['nodemaintenance.medik8s.io'], resources: ['nodemaintenances'], verbs: ['list'] },
    // ... and a node whose medik8s Lease (medik8s-leases/node-<node>) another operator holds:
    // read only (a cluster-wide get: the namespace may not exist when gatehouse is installed).
    { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get'] },
    // Probes: Service references, namespace selectors, workloads, disruption budgets.
    // (EndpointSlices: a controller running outside the cluster reaches a Service
    // through a ready endpoint instead of cluster DNS.)
    { apiGroups: [''], resources: ['services', 'namespaces'], verbs: READ },
    { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: READ },
    { apiGroups: ['apps'], resources: ['deployments', 'statefulsets', 'daemonsets'], verbs: READ },
    { apiGroups: ['policy'], resources: ['poddisruptionbudgets'], verbs: READ },
    // Every bypass and every phase change is an Event (the recorder writes core/v1 Events).
    { apiGroups: ['', 'events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
    // The HTTP API authenticates bearer tokens and authorises callers (create, bypass).
    { apiGroups: ['authentication.k8s.io'], resources: ['tokenreviews'], verbs: ['create'] },
    { apiGroups: ['authorization.k8s.io'], resources: ['subjectaccessreviews'], verbs: ['create'] },
    // The Talos API gate signs its client certificates from CertificateSigningRequests
    // with its own signerName, after a SubjectAccessReview of the requester; the HTTP API
    // creates them for callers who have only a bearer token (POST /v1/talos/certificates).
    {
      apiGroups: ['certificates.k8s.io'],
      resources: ['certificatesigningrequests'],
      verbs: [...READ, 'create'],
    },
    {
      apiGroups: ['certificates.k8s.io'],
      resources: ['certificatesigningrequests/approval', 'certificatesigningrequests/status'],
      verbs: ['update'],
    },
    {
      apiGroups: ['certificates.k8s.io'],
      resources: ['signers'],
      verbs: ['approve', 'sign'],
      resourceNames: ['talos.dev/gate'],
    },
  ];
}

/** What the controller needs in its own namespace only. */
export function controllerNamespaceRules(): Rule[] {
  return [
    // Leader election on one Lease, and the turn the controller instances take (watched:
    // a list or watch names it with a metadata.name field selector); create cannot be
    // limited by name.
    { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
    {
      apiGroups: ['coordination.k8s.io'],
      resources: ['leases'],
      verbs: ['get', 'update', 'patch'],
      resourceNames: [LEASE_NAME, TURN_LEASE_NAME],
    },
    {
      apiGroups: ['coordination.k8s.io'],
      resources: ['leases'],
      verbs: ['list', 'watch'],
      resourceNames: [TURN_LEASE_NAME],
    },
    // Managed ConfigChange reads the machine configuration from a Secret here, and a
    // talosconfig may be provided as a Secret here: no cluster-wide Secret access.
    { apiGroups: [''], resources: ['secrets'], verbs: ['get'] },
    // The Talos API gate keeps its CA in a Secret here, made by the first replica
    // (create cannot be limited by name).
    { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
  ];
}

export function rbacObjects(namespace: string): Record<string, unknown>[] {
  const subject = { kind: 'ServiceAccount', name: SERVICE_ACCOUNT, namespace };
  const binding = (
    kind: 'ClusterRoleBinding' | 'RoleBinding',
    name: string,
    roleKind: 'ClusterRole' | 'Role',
  ) => ({
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind,
    metadata: { name, ...(kind === 'RoleBinding' ? { namespace } : {}), labels: labels() },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: roleKind, name },
    subjects: [subject],
  });
  return [
    clusterRole(
      CLUSTER_ROLES.controller,
      controllerRules(),
      {},
      'What the gatehouse controller may do cluster-wide.',
    ),
    {
      ...clusterRole(
        CLUSTER_ROLES.probes,
        [],
        {},
        `Read access for resource probes (e.g. CephClusters), aggregated from ClusterRoles labelled ${PROBE_AGGREGATION_LABEL}: "true". The controller cannot read a kind nobody granted this way.`,
      ),
      aggregationRule: { clusterRoleSelectors: [{ matchLabels: { [PROBE_AGGREGATION_LABEL]: 'true' } }] },
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: CLUSTER_ROLES.controller, namespace, labels: labels() },
      rules: controllerNamespaceRules(),
    },
    binding('ClusterRoleBinding', CLUSTER_ROLES.controller, 'ClusterRole'),
    binding('ClusterRoleBinding', CLUSTER_ROLES.probes, 'ClusterRole'),
    binding('RoleBinding', CLUSTER_ROLES.controller, 'Role'),
    clusterRole(
      CLUSTER_ROLES.view,
      [{ apiGroups: [GROUP], resources: plurals, verbs: READ }],
      { 'rbac.authorization.k8s.io/aggregate-to-view': 'true' },
      'Read every gatehouse object; aggregated into the built-in view role (and so edit and admin).',
    ),
    clusterRole(
      CLUSTER_ROLES.edit,
      [{ apiGroups: [GROUP], resources: hookPlurals, verbs: WRITE }],
      {
        'rbac.authorization.k8s.io/aggregate-to-edit': 'true',
        'rbac.authorization.k8s.io/aggregate-to-admin': 'true',
      },
      'Create and change hooks in a namespace; aggregated into edit and admin, since a hook is as powerful as a Job there.',
    ),
    clusterRole(
      CLUSTER_ROLES.requester,
      [
        {
          apiGroups: [GROUP],
          resources: ['nodeactions', 'noderollouts'],
          verbs: [...READ, 'create', 'patch', 'update', 'delete'],
        },
        // The CLI a requester runs (gate, talosctl, rollout) checks the node exists, maps
        // talosctl addresses to Node names and follows the node while it waits.
        { apiGroups: [''], resources: ['nodes'], verbs: READ },
      ],
      {},
      'Request node actions and rollouts, mark External actions executed, pause, resume and cancel them; read Nodes, which the CLI follows while it waits. Bind it cluster-wide to the people and automation that reboot and upgrade nodes.',
    ),
    ...Object.entries(TALOS_GATE_ROLES).map(([name, roles]) =>
      clusterRole(
        name,
        [
          { apiGroups: [GROUP], resources: ['talosapi'], verbs: [...roles] },
          {
            apiGroups: ['certificates.k8s.io'],
            resources: ['certificatesigningrequests'],
            verbs: ['create', 'get'],
          },
        ],
        {},
        `Get a Talos API gate certificate (gatehouse talosconfig) with the Talos role ${roles.join(' or ')}.`,
      ),
    ),
    clusterRole(
      CLUSTER_ROLES.bypass,
      [{ apiGroups: [GROUP], resources: ['nodeactions'], verbs: ['bypass'] }],
      {},
      'Bypass health checks and hooks in a NodeAction (spec.bypass); checked by the admission policy and the HTTP API.',
    ),
    clusterRole(
      CLUSTER_ROLES.approve,
      [{ apiGroups: [GROUP], resources: ['nodeactions'], verbs: ['approve', ...READ, 'patch'] }],
      {},
      "Approve or refuse NodeActions waiting at an approval hook (gatehouse approve, the HTTP API, or the talos.dev/approval annotations), where the hook's approvers allow; checked by the admission policy and the HTTP API. Bind it to the people who decide.",
    ),
    clusterRole(
      CLUSTER_ROLES.promote,
      [{ apiGroups: [GROUP], resources: ['noderollouts'], verbs: ['promote', ...READ, 'patch'] }],
      {},
      'Promote a NodeRollout past the gate it waits at — a canary soak, a soak between groups, a pause before a node — (gatehouse rollout promote, or the talos.dev/promote annotations); checked by the admission policy, recorded in status.promotions and an Event.',
    ),
  ];
}
