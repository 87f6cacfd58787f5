// ClusterHealthCheck: something that must hold before an action may proceed. Checks
// are impact-free and periodic; each object carries exactly one probe.
import Type, { type Static } from 'typebox';
import {
  ACTIONS,
  AGE_COLUMN,
  CATEGORY,
  Conditions,
  DnsLabel,
  DnsSubdomain,
  Duration,
  Int32,
  Int64,
  LabelSelector,
  Resource,
  StringEnum,
  Text,
  DURATION_REGEX,
  Timestamp,
  oneOf,
  rules,
  type KindDefinition,
} from './common.ts';
import { jobTemplate } from './hooks.ts';

const HTTP_URL_RULE = (field: string) => ({
  rule: "isURL(self) && url(self).getScheme() in ['http', 'https']",
  message: `${field} must be an absolute http:// or https:// URL, e.g. http://prometheus.monitoring.svc:9090`,
});

const Url = (field: string, description: string) =>
  Type.String({ description, minLength: 1, maxLength: 2048, ...rules(HTTP_URL_RULE(field)) });

const Port = (description: string) => Int32(description, { minimum: 1, maximum: 65535 });

/** The variables a Node-scoped check's text may use, Kubernetes' `$(VAR)` syntax. */
export const NODE_VARIABLES = ['NODE_NAME', 'NODE_IP'] as const;
export type NodeVariable = (typeof NODE_VARIABLES)[number];

/** `self` with every known variable removed: what must not contain `$(` any more. */
const withoutVariables = (expression: string) =>
  NODE_VARIABLES.reduce((text, v) => `${text}.replace('$(${v})', '')`, expression);

/** Refuses an unknown `$(VAR)` in a field that may use the node variables. */
const NODE_VARIABLES_RULE = (field: string) => ({
  rule: `!${withoutVariables('self')}.contains('$(')`,
  message: `${field} may use only the variables ${NODE_VARIABLES.map((v) => `$(${v})`).join(' and ')} (with spec.scope: Node); remove or correct any other $(...)`,
});

/** A URL field that may carry node variables: valid once they are replaced by sample values. */
const NODE_URL_RULE = (field: string) => ({
  rule: `isURL(self.replace('$(NODE_NAME)', 'node').replace('$(NODE_IP)', '192.0.2.1')) && url(self.replace('$(NODE_NAME)', 'node').replace('$(NODE_IP)', '192.0.2.1')).getScheme() in ['http', 'https']`,
  message: `${field} must be an absolute http:// or https:// URL, e.g. http://prometheus.monitoring.svc:9090 or, Node-scoped, http://$(NODE_IP):9100/health`,
});

export const ServiceReference = Type.Object(
  {
    name: DnsLabel('Name of the Service.'),
    namespace: DnsLabel('Namespace of the Service.'),
  },
  {
    description:
      'A Service: in a cluster reached through its DNS name <name>.<namespace>.svc; a controller running outside the cluster uses its ExternalName or a ready endpoint.',
  },
);

export const HttpGetProbe = Type.Object(
  {
    url: Type.Optional(
      Type.String({
        description:
          'Absolute http:// or https:// URL to GET, e.g. http://rook-ceph-mgr.rook-ceph.svc:9283/. Set either url or service. A Node-scoped check may use $(NODE_NAME) and $(NODE_IP), replaced URL-escaped.',
        minLength: 1,
        maxLength: 2048,
        ...rules(NODE_URL_RULE('httpGet.url'), NODE_VARIABLES_RULE('httpGet.url')),
      }),
    ),
    service: Type.Optional(ServiceReference),
    port: Type.Optional(
      Port('Port of the Service to connect to; required with service, not allowed with url.'),
    ),
    path: Type.Optional(
      Type.String({
        description:
          'Path to GET on the Service, starting with /; only with service (a url carries its path). Defaults to /. A Node-scoped check may use $(NODE_NAME) and $(NODE_IP), replaced URL-escaped.',
        maxLength: 2048,
        ...rules(
          { rule: "self.startsWith('/')", message: 'httpGet.path must start with /' },
          NODE_VARIABLES_RULE('httpGet.path'),
        ),
      }),
    ),
    scheme: Type.Optional(
      StringEnum(['HTTP', 'HTTPS'], {
        description: 'Scheme to use with service: HTTP or HTTPS. Defaults to HTTP.',
      }),
    ),
    httpHeaders: Type.Optional(
      Type.Array(
        Type.Object(
          {
            name: Type.String({ description: 'Header name, e.g. Accept.', minLength: 1, maxLength: 256 }),
            value: Type.String({
              description:
                'Header value. A Node-scoped check may use $(NODE_NAME) and $(NODE_IP), replaced as they are.',
              maxLength: 4096,
              ...rules(NODE_VARIABLES_RULE('httpGet.httpHeaders[].value')),
            }),
          },
          { description: 'One request header.' },
        ),
        { description: 'Extra request headers.', maxItems: 16 },
      ),
    ),
    expectedStatusCodes: Type.Optional(
      Type.Array(Int32('An HTTP status code.', { minimum: 100, maximum: 599 }), {
        description:
          'Status codes that count as success. Absent: any 2xx or 3xx, as with Kubernetes httpGet probes.',
        maxItems: 32,
        'x-kubernetes-list-type': 'set',
      }),
    ),
    bodyExpression: Type.Optional(
      Type.String({
        description:
          "CEL expression over the response body decoded as JSON (bound as `body`) that must be true for success, e.g. body.status == 'ok'. A body that is not JSON fails the probe. A Node-scoped check also sees the Node (bound as `node`).",
        minLength: 1,
        maxLength: 4096,
      }),
    ),
    insecureSkipTLSVerify: Type.Optional(
      Type.Boolean({ description: 'Accept any server certificate for https. Defaults to false: verify it.' }),
    ),
  },
  {
    description:
      'Probe by HTTP GET: healthy when the response has an expected status code (and body, if asked).',
    ...rules(
      oneOf(['url', 'service'], 'httpGet', true),
      {
        rule: 'has(self.service) == has(self.port)',
        message:
          'httpGet.port is required with httpGet.service and not allowed with httpGet.url (the URL carries its port)',
        fieldPath: '.port',
      },
      {
        rule: '!has(self.path) || has(self.service)',
        message: 'httpGet.path is only allowed with httpGet.service (a URL carries its path)',
        fieldPath: '.path',
        reason: 'FieldValueForbidden',
      },
      {
        rule: '!has(self.scheme) || has(self.service)',
        message: 'httpGet.scheme is only allowed with httpGet.service (a URL carries its scheme)',
        fieldPath: '.scheme',
        reason: 'FieldValueForbidden',
      },
    ),
  },
);

export const TcpSocketProbe = Type.Object(
  {
    host: Type.Optional(
      Type.String({
        description: 'Host name or IP address to connect to. Set either host or service.',
        minLength: 1,
        maxLength: 253,
      }),
    ),
    service: Type.Optional(ServiceReference),
    port: Port('TCP port to connect to.'),
  },
  {
    description: 'Probe by TCP connect: healthy when a connection opens within the timeout.',
    ...rules(oneOf(['host', 'service'], 'tcpSocket', true)),
  },
);

/** Core (v1) kinds with field selectors beyond metadata.name and metadata.namespace. */
const FIELD_SELECTABLE_CORE_KINDS = [
  'Pod',
  'Node',
  'Event',
  'Secret',
  'Namespace',
  'ReplicationController',
  'Service',
] as const;

/** Another cluster a probe reads instead of this one (e.g. the Cluster API management cluster). */
export const RemoteCluster = Type.Object(
  {
    kubeconfigSecretRef: Type.Object(
      {
        namespace: Type.Optional(
          DnsLabel(
            'Namespace of the Secret. gatehouse reads Secrets only in its own namespace: absent means that one, and any other is refused.',
          ),
        ),
        name: DnsSubdomain('Name of the Secret.'),
        key: Type.String({
          description: 'Key of the Secret holding the kubeconfig, e.g. value (as Cluster API names it).',
          minLength: 1,
          maxLength: 253,
        }),
      },
      {
        description:
          'A Secret holding a kubeconfig for the other cluster: a server, its CA, and a token or client certificate given inline (files, exec and auth-provider plugins are refused).',
      },
    ),
  },
  {
    description:
      "Read another cluster's API instead of this one, with the credentials of a kubeconfig Secret. Errors (unreachable, forbidden, expired credentials) make the check fail, naming the cluster.",
  },
);

export const ResourceProbe = Type.Object(
  {
    cluster: Type.Optional(RemoteCluster),
    apiVersion: Type.String({
      description: 'API version of the objects, e.g. ceph.rook.io/v1 or v1 for the core group.',
      minLength: 1,
      maxLength: 317,
      ...rules({
        rule: "self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$')",
        message:
          'resource.apiVersion must be <group>/<version> (e.g. ceph.rook.io/v1) or a core version (e.g. v1)',
      }),
    }),
    kind: Type.String({
      description: 'Kind of the objects, e.g. CephCluster.',
      minLength: 1,
      maxLength: 63,
      ...rules({
        rule: "self.matches('^[A-Z][A-Za-z0-9]*$')",
        message: 'resource.kind must be a kind name in CamelCase, e.g. CephCluster',
      }),
    }),
    namespace: Type.Optional(
      DnsLabel('Namespace of the objects. Absent: every namespace (or none, for a cluster-scoped kind).'),
    ),
    name: Type.Optional(
      DnsSubdomain('Name of the single object to evaluate. Set at most one of name or labelSelector.'),
    ),
    labelSelector: Type.Optional(
      LabelSelector('Select the objects by label. Absent (and no name): every object of the kind in scope.'),
    ),
    fieldSelector: Type.Optional(
      Type.String({
        description:
          'Select the objects by field as well, e.g. spec.nodeName=$(NODE_NAME) for the Pods on the node a Node-scoped check is evaluated for. Comma-separated field=value or field!=value terms; the kind must support the fields (core kinds: Pod, Node, Event, Secret, Namespace, ReplicationController, Service; every kind: metadata.name, metadata.namespace; custom resources: their selectableFields).',
        minLength: 1,
        maxLength: 512,
        ...rules(
          {
            rule: "self.matches('^[A-Za-z0-9_.]+(=|==|!=)[^=!,]*(,[A-Za-z0-9_.]+(=|==|!=)[^=!,]*)*$')",
            message:
              'resource.fieldSelector must be comma-separated field=value (or field!=value) terms, e.g. spec.nodeName=$(NODE_NAME),status.phase=Running',
          },
          NODE_VARIABLES_RULE('resource.fieldSelector'),
        ),
      }),
    ),
    expression: Type.Optional(
      Type.String({
        description:
          "CEL expression evaluated over each selected object (bound as `self`), true when that object is healthy, e.g. self.status.ceph.health == 'HEALTH_OK'. An evaluation error (a missing field, say) counts as unhealthy. A Node-scoped check also sees the Node it is evaluated for (bound as `node`). Set exactly one of expression or listExpression.",
        minLength: 1,
        maxLength: 4096,
      }),
    ),
    listExpression: Type.Optional(
      Type.String({
        description:
          "CEL expression evaluated once over all the selected objects (a list bound as `items`; a Node-scoped check also sees `node`), for what no single object shows, e.g. a volume's replicas compared with each other. It gives true when healthy, false or a message saying what is wrong when not, or a list of messages, one per finding, healthy when empty, e.g. items.filter(r, ...).map(r, 'volume ' + r.spec.volumeName + ' has its only healthy replica here'). Selecting no object is healthy if the expression says so. An evaluation error is a probe error. Not combined with minMatching, maxMatching or all, which count objects the per-object expression matches.",
        minLength: 1,
        maxLength: 4096,
      }),
    ),
    minMatching: Type.Optional(
      Int32(
        'Healthy when at least this many selected objects satisfy the expression. Set at most one of minMatching or all.',
        {
          minimum: 1,
        },
      ),
    ),
    maxMatching: Type.Optional(
      Int32(
        'Healthy when at most this many selected objects satisfy the expression, selecting none included; e.g. 0 with an expression that is true of a primary: no primary here. Set at most one of minMatching, maxMatching or all.',
        { minimum: 0 },
      ),
    ),
    all: Type.Optional(
      Type.Boolean({
        description:
          'Healthy when every selected object satisfies the expression; the default when minMatching and maxMatching are absent. Only true is meaningful: to require fewer, set minMatching. Either way, selecting no object at all is unhealthy.',
      }),
    ),
  },
  {
    description:
      'Probe any Kubernetes resource, including custom resources, with a CEL expression over each object, or one over all of them together (listExpression). The controller needs read access to the kind: grant it with a ClusterRole labelled talos.dev/aggregate-to-gatehouse-probes: "true".',
    ...rules(
      oneOf(['expression', 'listExpression'], 'resource', true),
      {
        rule: '!has(self.listExpression) || (!has(self.minMatching) && !has(self.maxMatching) && !has(self.all))',
        message:
          'resource.listExpression is a verdict on the selection as a whole, so minMatching, maxMatching and all (which count the objects matching resource.expression) do not apply: remove them, or use expression instead',
        fieldPath: '.listExpression',
        reason: 'FieldValueForbidden',
      },
      oneOf(['name', 'labelSelector'], 'resource', false),
      oneOf(['minMatching', 'all'], 'resource', false),
      {
        rule: '!has(self.maxMatching) || (!has(self.minMatching) && !has(self.all))',
        message:
          'resource.maxMatching may not be combined with minMatching or all: set one of minMatching, maxMatching or all',
        fieldPath: '.maxMatching',
        reason: 'FieldValueForbidden',
      },
      {
        rule: '!has(self.name) || !has(self.fieldSelector)',
        message:
          'resource: set at most one of name or fieldSelector (name is a field selector on metadata.name already)',
        fieldPath: '.fieldSelector',
        reason: 'FieldValueForbidden',
      },
      {
        // Core kinds answer field selectors only on the fields they register; other
        // groups' kinds may declare selectableFields, so only the core ones are known here.
        rule: `!has(self.fieldSelector) || self.apiVersion != 'v1' || self.kind in [${FIELD_SELECTABLE_CORE_KINDS.map((k) => `'${k}'`).join(', ')}] || self.fieldSelector.matches('^metadata[.][^,]*(,metadata[.][^,]*)*$')`,
        message: `resource.fieldSelector may use only metadata.name and metadata.namespace with a core kind other than ${FIELD_SELECTABLE_CORE_KINDS.join(', ')} (the kind has no other selectable fields); use labelSelector or the expression instead`,
        fieldPath: '.fieldSelector',
      },
      {
        rule: '!has(self.all) || self.all',
        message:
          'resource.all may only be true; to require fewer than all objects set resource.minMatching instead',
        fieldPath: '.all',
      },
    ),
  },
);

const NamespaceScope = {
  namespace: Type.Optional(
    DnsLabel('Only objects in this namespace. Set at most one of namespace or namespaceSelector.'),
  ),
  namespaceSelector: Type.Optional(
    LabelSelector(
      'Only objects in namespaces with matching labels. Absent (and no namespace): every namespace.',
    ),
  ),
};

export const WorkloadsProbe = Type.Object(
  {
    ...NamespaceScope,
    cluster: Type.Optional(RemoteCluster),
    selector: Type.Optional(
      LabelSelector('Only workloads with matching labels. Absent: every workload in scope.'),
    ),
    kinds: Type.Optional(
      Type.Array(
        StringEnum(['Deployment', 'StatefulSet', 'DaemonSet'], { description: 'A workload kind.' }),
        {
          description: 'Which workload kinds to consider. Absent: Deployments, StatefulSets and DaemonSets.',
          maxItems: 3,
          'x-kubernetes-list-type': 'set',
        },
      ),
    ),
  },
  {
    description:
      'Healthy when every selected Deployment, StatefulSet and DaemonSet is fully rolled out (its controller observed the latest generation, every replica updated) and all its replicas are available. No workload selected counts as healthy; the status message says how many were checked.',
    ...rules(oneOf(['namespace', 'namespaceSelector'], 'workloads', false)),
  },
);

export const PodDisruptionBudgetsProbe = Type.Object(
  {
    ...NamespaceScope,
    selector: Type.Optional(
      LabelSelector('Only PodDisruptionBudgets with matching labels. Absent: all in scope.'),
    ),
    minDisruptionsAllowed: Type.Optional(
      Int32(
        'Each selected PodDisruptionBudget must allow at least this many disruptions (status.disruptionsAllowed). Defaults to 1.',
        {
          minimum: 1,
          default: 1,
        },
      ),
    ),
  },
  {
    description:
      'Healthy when every selected PodDisruptionBudget allows at least minDisruptionsAllowed disruptions.',
    ...rules(oneOf(['namespace', 'namespaceSelector'], 'podDisruptionBudgets', false)),
  },
);

export const NodesProbe = Type.Object(
  {
    cluster: Type.Optional(RemoteCluster),
    selector: Type.Optional(LabelSelector('Only nodes with matching labels. Absent: every node.')),
    maxNotReady: Type.Optional(
      Int32('How many selected nodes may be not Ready (or unreachable) while still healthy. Defaults to 0.', {
        minimum: 0,
        default: 0,
      }),
    ),
  },
  { description: 'Healthy when at most maxNotReady of the selected nodes are not Ready.' },
);

// label, operator, double-quoted value (without escaped quotes, to keep the rule simple).
const PROMETHEUS_MATCHER = '^[a-zA-Z_][a-zA-Z0-9_]*[ ]*(=|!=|=~|!~)[ ]*"[^"]*"$';

export const PrometheusProbe = Type.Object(
  {
    url: Url(
      'prometheus.url',
      'Base URL of the Prometheus (or compatible) HTTP API, e.g. http://prometheus.monitoring.svc:9090.',
    ),
    query: Type.Optional(
      Type.String({
        description:
          'PromQL instant query. Without valueRange, healthy when it returns no sample (e.g. ALERTS{severity="critical"}); with valueRange, when it returns at least one sample and every sample lies in the range (no sample is unhealthy: a stopped exporter must not pass). Set exactly one of query or alerts.',
        minLength: 1,
        maxLength: 8192,
      }),
    ),
    valueRange: Type.Optional(
      Type.Object(
        {
          min: Type.Optional(Type.Number({ description: 'Lowest healthy value (inclusive).' })),
          max: Type.Optional(Type.Number({ description: 'Highest healthy value (inclusive).' })),
        },
        {
          description: 'Range every sample of the query must lie in; only with query.',
          ...rules(
            {
              rule: 'has(self.min) || has(self.max)',
              message: 'prometheus.valueRange must set min, max or both',
            },
            {
              rule: '!has(self.min) || !has(self.max) || self.min <= self.max',
              message: 'prometheus.valueRange.min must not exceed prometheus.valueRange.max',
            },
          ),
        },
      ),
    ),
    bearerTokenSecretRef: Type.Optional(
      Type.Object(
        {
          name: DnsSubdomain("Name of the Secret, in gatehouse's own namespace."),
          key: Type.String({
            description: 'Key of the Secret holding the token.',
            minLength: 1,
            maxLength: 253,
          }),
        },
        {
          description:
            "Bearer token for the Prometheus API, from a Secret in the controller's namespace (gatehouse reads Secrets only there).",
        },
      ),
    ),
    alerts: Type.Optional(
      Type.Object(
        {
          matchers: Type.Optional(
            Type.Array(
              Type.String({
                maxLength: 1024,
                ...rules({
                  rule: `self.matches('${PROMETHEUS_MATCHER}')`,
                  message:
                    'prometheus.alerts.matchers[] must each be label, operator (=, !=, =~ or !~) and a double-quoted value, e.g. severity="critical"',
                }),
              }),
              {
                description:
                  'Matchers a firing alert must all satisfy to make the check unhealthy, e.g. severity=~"critical|warning" and alertname!="Watchdog". Absent: any firing alert.',
                maxItems: 32,
              },
            ),
          ),
        },
        {
          description:
            'Healthy when no firing alert reported by the alerts API (/api/v1/alerts) matches every matcher. Set exactly one of query or alerts.',
        },
      ),
    ),
  },
  {
    description:
      'Probe by Prometheus: a PromQL query must return nothing or values in range, or no matching alert may be firing.',
    ...rules(oneOf(['query', 'alerts'], 'prometheus', true), {
      rule: '!has(self.valueRange) || has(self.query)',
      message: 'prometheus.valueRange is only allowed with prometheus.query',
      fieldPath: '.valueRange',
      reason: 'FieldValueForbidden',
    }),
  },
);

/** Where a checker Job may run, relative to the node a Node-scoped check is evaluated for. */
export const CHECKER_JOB_PLACEMENTS = ['Anywhere', 'AwayFromTarget', 'OnTarget'] as const;

export const JobProbe = Type.Object(
  {
    namespace: DnsLabel(
      'Namespace the checker Job runs in (checks are cluster-scoped, Jobs are not), e.g. rook-ceph for a Job that needs the Ceph admin keyring. Its editors can influence the verdict (docs/security.md): choose one whose editors you trust with the check.',
    ),
    placement: Type.Optional(
      StringEnum(CHECKER_JOB_PLACEMENTS, {
        description:
          'Node-scoped checks: where the Job may run. Anywhere (the default): wherever the scheduler likes, since a check is impact-free and the node it asks about may be cordoned or down; AwayFromTarget: never on that node; OnTarget: only there (a Job that must look at the node itself). Cluster-scoped checks: Anywhere only.',
        default: 'Anywhere',
      }),
    ),
    template: jobTemplate({
      what: 'a checker Job',
      podSpec:
        'The pod spec (core/v1 PodSpec). gatehouse sets restartPolicy Never, adds node affinity for the placement, and, for a Node-scoped check, the environment variables GATEHOUSE_NODE and GATEHOUSE_NODE_IP to every container. A container that writes nothing to its termination message path gets terminationMessagePolicy FallbackToLogsOnError, so a failure says its last log line.',
      jobSpec:
        "The Job spec (batch/v1 JobSpec). gatehouse sets backoffLimit 0 (one exit is one verdict), activeDeadlineSeconds to at most the check's timeout, and ttlSecondsAfterFinished.",
      template:
        "The checker Job (batch/v1 JobTemplateSpec), run in job.namespace, read-only by contract: exit code 0 is healthy, anything else unhealthy, and the container's termination message (its last line) is the check's message. The Job is owned by the check and labelled with it and the node.",
    }),
  },
  {
    description:
      'Probe by running a checker Job, for what only a command can tell (ceph osd ok-to-stop). One Job at a time per check and node; the check timeout bounds it. Checks are impact-free by contract: give the Job read-only access (docs/checks.md).',
  },
);

/**
 * The probe types, by the spec field that sets each: the one list every other probe
 * list derives from (the spec's fields, PROBES, the CEL rule, the probe registry in
 * src/checks/probes), so a type added here is a compile error until it is implemented.
 */
const PROBE_SCHEMAS = {
  httpGet: HttpGetProbe,
  tcpSocket: TcpSocketProbe,
  resource: ResourceProbe,
  workloads: WorkloadsProbe,
  podDisruptionBudgets: PodDisruptionBudgetsProbe,
  nodes: NodesProbe,
  prometheus: PrometheusProbe,
  job: JobProbe,
};

export type ProbeName = keyof typeof PROBE_SCHEMAS;
/** Each probe type's part of the spec, e.g. `ProbeSpecs['httpGet']`. */
export type ProbeSpecs = { [K in ProbeName]: Static<(typeof PROBE_SCHEMAS)[K]> };

export const PROBES = Object.keys(PROBE_SCHEMAS) as readonly ProbeName[];

/**
 * The probe types that can ask about one node (their text takes the node variables, their
 * CEL sees `node`), so a Node-scoped check may use them. The others judge the cluster.
 */
export const NODE_SCOPED_PROBES = ['httpGet', 'resource', 'job'] as const satisfies readonly ProbeName[];

export const SCOPES = ['Cluster', 'Node'] as const;
export type CheckScope = (typeof SCOPES)[number];

const NODE_SCOPE = "self.scope == 'Node'";
/** A checker Job has to be scheduled, pulled and run within the check's timeout. */
export const MIN_JOB_TIMEOUT = '30s';
/** Whether any field of the spec uses a node variable (`$(`, as the field rules allow nothing else). */
const USES_VARIABLES = [
  "has(self.httpGet) && has(self.httpGet.url) && self.httpGet.url.contains('$(')",
  "has(self.httpGet) && has(self.httpGet.path) && self.httpGet.path.contains('$(')",
  "has(self.httpGet) && has(self.httpGet.httpHeaders) && self.httpGet.httpHeaders.exists(h, h.value.contains('$('))",
  "has(self.resource) && has(self.resource.fieldSelector) && self.resource.fieldSelector.contains('$(')",
]
  .map((c) => `(${c})`)
  .join(' || ');

const probeFields = Object.fromEntries(
  Object.entries(PROBE_SCHEMAS).map(([name, schema]) => [name, Type.Optional(schema)]),
) as { [K in ProbeName]: Type.TOptional<(typeof PROBE_SCHEMAS)[K]> };

export const ClusterHealthCheckSpec = Type.Object(
  {
    actions: Type.Optional(
      Type.Array(StringEnum(ACTIONS, { description: 'An action.' }), {
        description: `Actions this check gates: ${ACTIONS.join(', ')}. Absent or empty: every action, including kinds added later.`,
        maxItems: ACTIONS.length,
        'x-kubernetes-list-type': 'set',
      }),
    ),
    nodeSelector: Type.Optional(
      LabelSelector('Gate only actions on nodes with matching labels. Absent: actions on every node.'),
    ),
    interval: Type.Optional(
      Duration('interval', 'How often the controller probes, as periodSeconds of a Kubernetes probe.', {
        min: '1s',
        max: '24h',
        default: '30s',
      }),
    ),
    timeout: Type.Optional(
      Duration('timeout', 'How long one probe may take before it counts as a failure.', {
        min: '1s',
        max: '10m',
        default: '5s',
      }),
    ),
    successThreshold: Type.Optional(
      Int32('Consecutive successes after which an unhealthy check becomes healthy. Defaults to 1.', {
        minimum: 1,
        maximum: 100,
        default: 1,
      }),
    ),
    failureThreshold: Type.Optional(
      Int32('Consecutive failures after which a healthy check becomes unhealthy. Defaults to 3.', {
        minimum: 1,
        maximum: 100,
        default: 3,
      }),
    ),
    scope: Type.Optional(
      StringEnum(SCOPES, {
        description: `Cluster (the default): one verdict for the whole cluster. Node: the check is evaluated for a node — the node of the action it gates, and periodically each selected node — with $(NODE_NAME) and $(NODE_IP) replaced in its URL, path, headers and field selector, and the Node bound as \`node\` in its CEL. Node needs a probe that can use the node: ${NODE_SCOPED_PROBES.join(', ')}.`,
        default: 'Cluster',
      }),
    ),
    nodeInterval: Type.Optional(
      Duration(
        'nodeInterval',
        'Node-scoped only: how often the controller evaluates the check for every selected node, on top of every interval for the nodes with an unfinished action. Defaults to 5m, except for a job probe (a Job per node): without nodeInterval it runs only for the nodes with an unfinished action and for gates.',
        { min: '10s', max: '24h' },
      ),
    ),
    ...probeFields,
  },
  {
    description: `What must hold, which actions it gates, and how often it is probed. Exactly one probe: ${PROBES.slice(0, -1).join(', ')} or ${PROBES.at(-1) ?? ''}.`,
    ...rules(
      {
        rule: `[${PROBES.map((p) => `has(self.${p})`).join(', ')}].filter(x, x).size() == 1`,
        message: `spec must set exactly one probe: ${PROBES.join(', ')}`,
      },
      {
        rule: `!has(self.scope) || !(${NODE_SCOPE}) || ${NODE_SCOPED_PROBES.map((p) => `has(self.${p})`).join(' || ')}`,
        message: `spec.scope: Node needs a probe that can use the node (${NODE_SCOPED_PROBES.join(' or ')}); ${PROBES.filter((p) => !(NODE_SCOPED_PROBES as readonly string[]).includes(p)).join(', ')} judge the whole cluster, so use scope: Cluster`,
        fieldPath: '.scope',
      },
      {
        rule: `!has(self.nodeInterval) || (has(self.scope) && ${NODE_SCOPE})`,
        message:
          'spec.nodeInterval is only allowed with spec.scope: Node (a Cluster-scoped check has interval only)',
        fieldPath: '.nodeInterval',
        reason: 'FieldValueForbidden',
      },
      {
        rule: `!has(self.job) || !has(self.job.placement) || self.job.placement == 'Anywhere' || (has(self.scope) && ${NODE_SCOPE})`,
        message:
          'spec.job.placement AwayFromTarget or OnTarget needs spec.scope: Node (a Cluster-scoped check has no node to run away from or on); remove it or set scope: Node',
        fieldPath: '.job.placement',
      },
      {
        rule: `!has(self.job) || !has(self.timeout) || !self.timeout.matches('${DURATION_REGEX}') || duration(self.timeout) >= duration('${MIN_JOB_TIMEOUT}')`,
        message: `spec.job needs spec.timeout of at least ${MIN_JOB_TIMEOUT} (the default 5s is too short to schedule a pod and run it): set e.g. timeout: 2m`,
        fieldPath: '.timeout',
      },
      {
        rule: `(has(self.scope) && ${NODE_SCOPE}) || !(${USES_VARIABLES})`,
        message:
          'spec uses $(NODE_NAME) or $(NODE_IP), which are replaced only in a check with spec.scope: Node; set scope: Node or remove them',
        fieldPath: '.scope',
      },
    ),
  },
);

/** How many unsafe nodes a status names: the summary stays small with a thousand nodes. */
export const MAX_UNSAFE_NODES = 20;

export const NodeResults = Type.Object(
  {
    evaluated: Int32('Selected nodes with a result.', { minimum: 0 }),
    safe: Int32('Of those, the nodes the check holds for.', { minimum: 0 }),
    unsafe: Int32('Of those, the nodes it does not hold for (not healthy, or the probe failed).', {
      minimum: 0,
    }),
    unsafeNodes: Type.Optional(
      Type.Array(
        Type.Object(
          {
            name: Type.String({ description: 'Name of the unsafe node.', maxLength: 253 }),
            message: Text('What the last probe for this node found.', 2048),
            lastProbeTime: Type.Optional(Timestamp('When it was last probed for this node.')),
          },
          { description: 'One node the check does not hold for.' },
        ),
        { description: `The first ${MAX_UNSAFE_NODES} unsafe nodes, by name.`, maxItems: MAX_UNSAFE_NODES },
      ),
    ),
  },
  {
    description:
      "Node-scoped checks only: the per-node results. The check gates an action by its own node's result alone.",
  },
);

export const ClusterHealthCheckStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Int64('The metadata.generation the status reflects.', { minimum: 0 })),
    healthy: Type.Optional(
      Type.Boolean({
        description:
          'Whether the check currently holds. Absent (never probed) counts as unhealthy, as does a probe that could not run.',
      }),
    ),
    consecutiveFailures: Type.Optional(Int32('Failed probes in a row, reset by a success.', { minimum: 0 })),
    consecutiveSuccesses: Type.Optional(
      Int32('Successful probes in a row, reset by a failure.', { minimum: 0 }),
    ),
    lastProbeTime: Type.Optional(Timestamp('When the check was last probed.')),
    lastTransitionTime: Type.Optional(Timestamp('When healthy last changed.')),
    message: Type.Optional(Text('What the last probe found, in words: the failure, or what was checked.')),
    conditions: Type.Optional(Conditions('Standard conditions; type Healthy mirrors healthy with a reason.')),
    nodes: Type.Optional(NodeResults),
  },
  { description: 'The result of the latest probes, written by the controller.' },
);

export const ClusterHealthCheck = Resource(
  'ClusterHealthCheck',
  'ClusterHealthCheck is a condition that must hold before gatehouse lets an action proceed, e.g. "Ceph is HEALTH_OK". It is probed periodically and freshly again by every gate it applies to; an unknown result counts as unhealthy. Probes never have side effects.',
  ClusterHealthCheckSpec,
  ClusterHealthCheckStatus,
);

export type ClusterHealthCheck = Static<typeof ClusterHealthCheck>;
export type ClusterHealthCheckSpec = Static<typeof ClusterHealthCheckSpec>;
export type ClusterHealthCheckStatus = Static<typeof ClusterHealthCheckStatus>;

export const clusterHealthCheckKind: KindDefinition = {
  kind: 'ClusterHealthCheck',
  plural: 'clusterhealthchecks',
  singular: 'clusterhealthcheck',
  shortNames: ['chc'],
  categories: [CATEGORY],
  scope: 'Cluster',
  schema: ClusterHealthCheck,
  printerColumns: [
    {
      name: 'Healthy',
      type: 'boolean',
      jsonPath: '.status.healthy',
      description: 'Whether the check currently holds.',
    },
    {
      name: 'Failures',
      type: 'integer',
      jsonPath: '.status.consecutiveFailures',
      description: 'Failed probes in a row.',
    },
    {
      name: 'Last Probe',
      type: 'date',
      jsonPath: '.status.lastProbeTime',
      description: 'When it was last probed.',
    },
    {
      name: 'Message',
      type: 'string',
      jsonPath: '.status.message',
      description: 'What the last probe found.',
      priority: 1,
    },
    AGE_COLUMN,
  ],
};
