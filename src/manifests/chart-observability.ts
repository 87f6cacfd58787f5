// The chart's optional observability and availability objects: a ServiceMonitor, a
// PrometheusRule, a Grafana dashboard (a ConfigMap the Grafana sidecar loads), the
// PodDisruptionBudget and a NetworkPolicy. Only the chart has them: they depend on
// operators (prometheus-operator, Grafana's sidecar) or choices a plain install leaves
// to its user. Written as Helm templates here, because each is wrapped in a condition.
//
// The alert rules use only what the controller exports (src/metrics.ts) and the `up`
// series Prometheus itself records for each scrape.
import { stringify } from 'yaml';
import { DEPLOYMENT_NAME, labels, selector } from './controller.ts';

/** Defaults: everything that needs an operator is off; the budget is on (two replicas). */
export const observabilityValues = {
  metrics: {
    serviceMonitor: { enabled: false, interval: '30s', scrapeTimeout: '10s', labels: {} },
  },
  prometheusRule: {
    enabled: false,
    labels: {},
    /** Which series are this release's: the ServiceMonitor's job is the Service's name. */
    selector: 'job="gatehouse"',
    checkUnhealthyFor: '15m',
    actionStuckAfterSeconds: 3600,
    notReadyFor: '10m',
    leaderlessFor: '5m',
    unplannedDisruptionWindow: '15m',
  },
  grafanaDashboard: { enabled: false, labels: { grafana_dashboard: '1' }, annotations: {} },
  podDisruptionBudget: { enabled: true, maxUnavailable: 1 },
  networkPolicy: { enabled: false, ingressFrom: [] },
  priorityClassName: '',
  topologySpreadConstraints: [],
  extraArgs: [],
  extraEnv: [],
};

const labelMap = { type: 'object', additionalProperties: { type: 'string' } };
const duration = { type: 'string', pattern: '^([0-9]+(ms|s|m|h|d|w|y))+$' };

export const observabilitySchema = {
  metrics: {
    type: 'object',
    additionalProperties: false,
    properties: {
      serviceMonitor: {
        type: 'object',
        additionalProperties: false,
        description: 'A prometheus-operator ServiceMonitor scraping /metrics (needs its CRD).',
        properties: {
          enabled: { type: 'boolean' },
          interval: duration,
          scrapeTimeout: duration,
          labels: { ...labelMap, description: "Labels the Prometheus's serviceMonitorSelector looks for." },
        },
      },
    },
  },
  prometheusRule: {
    type: 'object',
    additionalProperties: false,
    description: 'A prometheus-operator PrometheusRule with gatehouse alerts (needs its CRD).',
    properties: {
      enabled: { type: 'boolean' },
      labels: { ...labelMap, description: "Labels the Prometheus's ruleSelector looks for." },
      selector: {
        type: 'string',
        description: 'Label matchers selecting this release\'s series, e.g. job="gatehouse".',
      },
      checkUnhealthyFor: {
        ...duration,
        description: 'GatehouseCheckUnhealthy: a check unhealthy this long.',
      },
      actionStuckAfterSeconds: {
        type: 'integer',
        minimum: 1,
        description: 'GatehouseActionStuck: an unfinished action in one phase this many seconds.',
      },
      notReadyFor: {
        ...duration,
        description: 'GatehouseNotReady: a replica not ready or not scraped this long.',
      },
      leaderlessFor: { ...duration, description: 'GatehouseLeaderless: no replica leads this long.' },
      unplannedDisruptionWindow: {
        ...duration,
        description:
          'GatehouseUnplannedDisruption: fires while a disruption that went around the gate is this recent.',
      },
    },
  },
  grafanaDashboard: {
    type: 'object',
    additionalProperties: false,
    description: "A ConfigMap holding gatehouse's Grafana dashboard, for Grafana's dashboard sidecar.",
    properties: {
      enabled: { type: 'boolean' },
      labels: { ...labelMap, description: "The sidecar's label (grafana_dashboard by default)." },
      annotations: { ...labelMap, description: 'E.g. the folder annotation of the sidecar.' },
    },
  },
  podDisruptionBudget: {
    type: 'object',
    additionalProperties: false,
    properties: {
      enabled: { type: 'boolean', description: 'A PodDisruptionBudget for the controller replicas.' },
      maxUnavailable: { type: ['integer', 'string'] },
    },
  },
  networkPolicy: {
    type: 'object',
    additionalProperties: false,
    description:
      'A NetworkPolicy admitting traffic to the controller port only (egress is not restricted: the API server, Talos on every node, webhooks and probe targets depend on configuration).',
    properties: {
      enabled: { type: 'boolean' },
      ingressFrom: {
        type: 'array',
        items: { type: 'object' },
        description: 'NetworkPolicy peers allowed to reach the controller port; empty: any source.',
      },
    },
  },
  priorityClassName: { type: 'string', description: "The controller pods' PriorityClass." },
  topologySpreadConstraints: {
    type: 'array',
    items: { type: 'object' },
    description: "The controller pods' topologySpreadConstraints (labelSelector defaults to theirs).",
  },
  extraArgs: {
    type: 'array',
    items: { type: 'string' },
    description: 'More arguments for `gatehouse controller`.',
  },
  extraEnv: { type: 'array', items: { type: 'object' }, description: 'More container env entries.' },
};

const HEADER =
  '# Generated by scripts/generate.ts from src/api and src/manifests. Do not edit: run npm run generate.';

const sel = ' {{ .Values.prometheusRule.selector }} ';

/** The alerts, as the PrometheusRule holds them (Helm expressions in their text). */
export function alertRules(): Record<string, unknown>[] {
  return [
    {
      alert: 'GatehouseCheckUnhealthy',
      expr: `max by (check) (gatehouse_check_healthy{${sel}}) == 0`,
      for: '{{ .Values.prometheusRule.checkUnhealthyFor }}',
      labels: { severity: 'warning' },
      annotations: {
        summary: 'ClusterHealthCheck {{`{{ $labels.check }}`}} is unhealthy',
        description:
          'The check has failed for {{ .Values.prometheusRule.checkUnhealthyFor }}; every action it gates waits. See `kubectl get clusterhealthcheck {{`{{ $labels.check }}`}}`.',
      },
    },
    {
      // kured's alert gate (--prometheus-url, --alert-filter-regexp): reboots wait while
      // it fires. At once, with no `for`: kured must hold from the first failed probe. It
      // fires too while no gatehouse replica is scraped: no word from the gate is no gate.
      alert: 'GatehouseRebootHeld',
      expr: `max by (check) (gatehouse_check_healthy{${sel}} < 1) and on (check) max by (check) (gatehouse_check_gates{action="Reboot",${sel}}) or on () (max(up{${sel}}) or vector(0)) == 0`,
      labels: { severity: 'info' },
      annotations: {
        summary:
          'Reboots are held: {{`{{ if $labels.check }}ClusterHealthCheck {{ $labels.check }} is not healthy{{ else }}gatehouse is not scraped{{ end }}`}}',
        description:
          'A check that gates Reboot is unhealthy or unknown (or gatehouse cannot be scraped): tools that gate on this alert, such as kured, hold their reboots until it clears.',
      },
    },
    {
      alert: 'GatehouseActionStuck',
      expr: `time() - max by (action, node, phase) (gatehouse_action_phase_start_timestamp_seconds{${sel}}) > {{ .Values.prometheusRule.actionStuckAfterSeconds }}`,
      labels: { severity: 'warning' },
      annotations: {
        summary: 'NodeAction {{`{{ $labels.action }}`}} has been {{`{{ $labels.phase }}`}} too long',
        description:
          'NodeAction {{`{{ $labels.action }}`}} on node {{`{{ $labels.node }}`}} entered {{`{{ $labels.phase }}`}} {{`{{ $value | humanizeDuration }}`}} ago.',
      },
    },
    {
      alert: 'GatehouseHookFailed',
      expr: `max by (action, node) (gatehouse_action_hook_failures{${sel}}) > 0`,
      labels: { severity: 'warning' },
      annotations: {
        summary: 'A hook of NodeAction {{`{{ $labels.action }}`}} failed',
        description:
          '{{`{{ $value }}`}} hook attempt(s) of NodeAction {{`{{ $labels.action }}`}} on node {{`{{ $labels.node }}`}} failed (status.hooks says why); the alert lasts while the action exists.',
      },
    },
    {
      alert: 'GatehouseNotReady',
      expr: `max by (instance) (gatehouse_ready{${sel}}) == 0 or max by (instance) (up{${sel}}) == 0`,
      for: '{{ .Values.prometheusRule.notReadyFor }}',
      labels: { severity: 'warning' },
      annotations: {
        summary: 'gatehouse replica {{`{{ $labels.instance }}`}} is not ready',
        description: 'Its caches are not synced, or it cannot be scraped at all.',
      },
    },
    {
      // A boot, a Talos version or a long NotReady with no gatehouse action in flight:
      // what went around the gate (talosctl straight at apid, Talos's fallback, a crash).
      alert: 'GatehouseUnplannedDisruption',
      // A series is born at its first disruption (at 1), which increase() cannot see: it
      // counts while it is younger than the window (absent the window's length ago).
      expr: `sum by (node, kind) (increase(gatehouse_unplanned_disruptions_total{${sel}}[{{ .Values.prometheusRule.unplannedDisruptionWindow }}])) > 0 or sum by (node, kind) (gatehouse_unplanned_disruptions_total{${sel}} unless gatehouse_unplanned_disruptions_total{${sel}} offset {{ .Values.prometheusRule.unplannedDisruptionWindow }}) > 0`,
      labels: { severity: 'warning' },
      annotations: {
        summary: 'Node {{`{{ $labels.node }}`}} was disrupted around the gate ({{`{{ $labels.kind }}`}})',
        description:
          'No gatehouse action explains it. See `kubectl get events --field-selector reason=UnplannedDisruption,involvedObject.name={{`{{ $labels.node }}`}}`; hand people gate certificates only (docs/talos-gate.md) to close the direct path.',
      },
    },
    {
      alert: 'GatehouseLeaderless',
      expr: `(max(gatehouse_leader{${sel}}) or vector(0)) == 0`,
      for: '{{ .Values.prometheusRule.leaderlessFor }}',
      labels: { severity: 'critical' },
      annotations: {
        summary: 'No gatehouse replica leads',
        description:
          'No action is approved or followed and no boot hook runs (nodes keep their preready taint) until a replica holds the leader Lease.',
      },
    },
  ];
}

function metadata(name: string, extra: string): string {
  return [
    'metadata:',
    `  name: ${name}`,
    '  namespace: {{ .Release.Namespace }}',
    '  labels:',
    ...Object.entries(labels('controller')).map(([k, v]) => `    ${k}: ${v}`),
    extra,
  ]
    .filter(Boolean)
    .join('\n');
}

const extraLabels = (path: string) =>
  `    {{- with .Values.${path} }}\n    {{- toYaml . | nindent 4 }}\n    {{- end }}`;

function serviceMonitor(): string {
  return `${HEADER}
{{- if .Values.metrics.serviceMonitor.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
${metadata('gatehouse', extraLabels('metrics.serviceMonitor.labels'))}
spec:
  selector:
    matchLabels:
${Object.entries(selector)
  .map(([k, v]) => `      ${k}: ${v}`)
  .join('\n')}
  namespaceSelector:
    matchNames:
      - {{ .Release.Namespace }}
  endpoints:
    - port: http
      path: /metrics
      interval: {{ .Values.metrics.serviceMonitor.interval }}
      scrapeTimeout: {{ .Values.metrics.serviceMonitor.scrapeTimeout }}
{{- end }}
`;
}

function prometheusRule(): string {
  const spec = stringify({ groups: [{ name: 'gatehouse', rules: alertRules() }] }, { lineWidth: 0 });
  return `${HEADER}
{{- if .Values.prometheusRule.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
${metadata('gatehouse', extraLabels('prometheusRule.labels'))}
spec:
${spec
  .trimEnd()
  .split('\n')
  .map((l) => `  ${l}`)
  .join('\n')}
{{- end }}
`;
}

function grafanaDashboard(): string {
  return `${HEADER}
{{- if .Values.grafanaDashboard.enabled }}
apiVersion: v1
kind: ConfigMap
${metadata('gatehouse-dashboard', extraLabels('grafanaDashboard.labels'))}
  {{- with .Values.grafanaDashboard.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
data:
  gatehouse.json: |-
    {{- .Files.Get "dashboards/gatehouse.json" | nindent 4 }}
{{- end }}
`;
}

function podDisruptionBudget(): string {
  return `${HEADER}
{{- if .Values.podDisruptionBudget.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
${metadata(DEPLOYMENT_NAME, '')}
spec:
  maxUnavailable: {{ .Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
${Object.entries(selector)
  .map(([k, v]) => `      ${k}: ${v}`)
  .join('\n')}
{{- end }}
`;
}

function networkPolicy(): string {
  return `${HEADER}
{{- if .Values.networkPolicy.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
${metadata('gatehouse-controller', '')}
spec:
  podSelector:
    matchLabels:
${Object.entries(selector)
  .map(([k, v]) => `      ${k}: ${v}`)
  .join('\n')}
  policyTypes:
    - Ingress
  ingress:
    - ports:
        - port: http
          protocol: TCP
      {{- with .Values.networkPolicy.ingressFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
`;
}

type Panel = Record<string, unknown>;

function panel(
  id: number,
  title: string,
  expr: string,
  legend: string,
  gridPos: object,
  type = 'timeseries',
): Panel {
  return {
    id,
    type,
    title,
    datasource: { type: 'prometheus', uid: '${datasource}' },
    gridPos,
    targets: [{ refId: 'A', expr, legendFormat: legend }],
  };
}

/** The Grafana dashboard: checks, actions, probes and the controller's own health. */
export function dashboardJson(): string {
  const j = '{job=~"$job"}';
  const panels: Panel[] = [
    panel(
      1,
      'Checks unhealthy',
      `count(gatehouse_check_healthy${j} == 0) or vector(0)`,
      'unhealthy',
      { h: 4, w: 6, x: 0, y: 0 },
      'stat',
    ),
    panel(
      2,
      'Leader',
      `max(gatehouse_leader${j}) or vector(0)`,
      'leader',
      { h: 4, w: 6, x: 6, y: 0 },
      'stat',
    ),
    panel(3, 'Replicas ready', `sum(gatehouse_ready${j})`, 'ready', { h: 4, w: 6, x: 12, y: 0 }, 'stat'),
    panel(
      4,
      'Unfinished actions',
      `count(max by (action) (gatehouse_action_phase_start_timestamp_seconds${j})) or vector(0)`,
      'actions',
      { h: 4, w: 6, x: 18, y: 0 },
      'stat',
    ),
    panel(
      5,
      'Check health (1 healthy, 0 unhealthy, -1 unknown)',
      `max by (check) (gatehouse_check_healthy${j})`,
      '{{check}}',
      { h: 8, w: 12, x: 0, y: 4 },
    ),
    panel(
      6,
      'Probe results',
      `sum by (check, result) (rate(gatehouse_probes_total${j}[5m]))`,
      '{{check}} {{result}}',
      { h: 8, w: 12, x: 12, y: 4 },
    ),
    panel(
      7,
      'Probe duration p90',
      `histogram_quantile(0.9, sum by (check, le) (rate(gatehouse_probe_duration_seconds_bucket${j}[5m])))`,
      '{{check}}',
      { h: 8, w: 12, x: 0, y: 12 },
    ),
    panel(
      8,
      'Action phase transitions',
      `sum by (phase) (increase(gatehouse_action_transitions_total${j}[$__rate_interval]))`,
      '{{phase}}',
      { h: 8, w: 12, x: 12, y: 12 },
    ),
    panel(
      9,
      'Time in current phase',
      `time() - max by (action, node, phase) (gatehouse_action_phase_start_timestamp_seconds${j})`,
      '{{action}} ({{node}}) {{phase}}',
      { h: 8, w: 12, x: 0, y: 20 },
    ),
    panel(
      10,
      'Hook Jobs created, failed hook attempts',
      `sum by (kind) (increase(gatehouse_hook_jobs_created_total${j}[$__rate_interval]))`,
      'created {{kind}}',
      { h: 8, w: 12, x: 12, y: 20 },
    ),
    panel(11, 'Status writes', `sum(rate(gatehouse_status_writes_total${j}[5m]))`, 'writes/s', {
      h: 8,
      w: 12,
      x: 0,
      y: 28,
    }),
    panel(
      12,
      'Controller memory',
      `max by (instance) (gatehouse_process_resident_memory_bytes${j})`,
      '{{instance}}',
      { h: 8, w: 12, x: 12, y: 28 },
    ),
  ];
  const hookFailures = panels[9];
  if (hookFailures)
    (hookFailures.targets as object[]).push({
      refId: 'B',
      expr: `sum by (action) (max by (action) (gatehouse_action_hook_failures${j}))`,
      legendFormat: 'failed {{action}}',
    });
  const dashboard = {
    uid: 'gatehouse',
    title: 'gatehouse',
    tags: ['gatehouse', 'talos'],
    timezone: 'browser',
    schemaVersion: 39,
    refresh: '30s',
    time: { from: 'now-6h', to: 'now' },
    templating: {
      list: [
        { name: 'datasource', type: 'datasource', query: 'prometheus', label: 'Data source' },
        {
          name: 'job',
          type: 'query',
          label: 'Job',
          datasource: { type: 'prometheus', uid: '${datasource}' },
          query: 'label_values(gatehouse_leader, job)',
          includeAll: false,
          refresh: 2,
        },
      ],
    },
    panels,
  };
  return `${JSON.stringify(dashboard, null, 2)}\n`;
}

/** The chart's files for the objects above, by relative path. */
export function observabilityFiles(): Map<string, string> {
  return new Map([
    ['templates/servicemonitor.yaml', serviceMonitor()],
    ['templates/prometheusrule.yaml', prometheusRule()],
    ['templates/grafana-dashboard.yaml', grafanaDashboard()],
    ['templates/poddisruptionbudget.yaml', podDisruptionBudget()],
    ['templates/networkpolicy.yaml', networkPolicy()],
    ['dashboards/gatehouse.json', dashboardJson()],
  ]);
}
