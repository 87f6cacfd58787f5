// The chart's Talos API gate (docs/talos-gate.md): a Deployment of `gatehouse
// talos-gate` and the Service talosctl reaches it at, off unless talosGate.enabled.
// Several replicas are safe: the gate keeps no state of its own (every held call is a
// NodeAction, every forwarded one claimed on it), its CA is one Secret, and any replica
// signs a certificate request (the write is conditional). Written as a Helm template
// here, like chart-observability.ts, because it is wrapped in a condition.
import { labels, SERVICE_ACCOUNT, TALOS_SECRET } from './controller.ts';

export const TALOS_GATE_NAME = 'gatehouse-talos-gate';
export const TALOS_GATE_PORT = 50000;

export const talosGateValues = {
  talosGate: {
    enabled: false,
    replicaCount: 2,
    hold: '1500ms',
    approvedDeadline: '15m',
    maxCertificateLifetime: '8h',
    service: { type: 'ClusterIP', port: TALOS_GATE_PORT, annotations: {} },
    /** Extra names (DNS or IP) for the serving certificate: a LoadBalancer's address, an ingress name. */
    extraNames: [] as string[],
    resources: { requests: { cpu: '50m', memory: '96Mi' }, limits: { cpu: '1', memory: '384Mi' } },
  },
};

const duration = { type: 'string', pattern: '^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$' };

export const talosGateSchema = {
  talosGate: {
    type: 'object',
    additionalProperties: false,
    description:
      'The Talos API gate: talosctl pointed at it passes non-disruptive calls straight through and holds disruptive ones as NodeActions of the caller (docs/talos-gate.md).',
    properties: {
      enabled: { type: 'boolean' },
      replicaCount: {
        type: 'integer',
        minimum: 1,
        maximum: 10,
        description: 'Gate replicas; any number is safe (all state is in NodeActions).',
      },
      hold: {
        ...duration,
        description: 'How long a held call waits for its action before it is answered (keep under 2s).',
      },
      approvedDeadline: {
        ...duration,
        description:
          "deadlines.approved of the gate's actions: how long an approval waits for the repeated call.",
      },
      maxCertificateLifetime: {
        ...duration,
        description: 'Longest validity of a gate certificate (gatehouse talosconfig).',
      },
      service: {
        type: 'object',
        additionalProperties: false,
        properties: {
          type: { type: 'string', enum: ['ClusterIP', 'NodePort', 'LoadBalancer'] },
          port: { type: 'integer', minimum: 1, maximum: 65535 },
          annotations: { type: 'object', additionalProperties: { type: 'string' } },
        },
      },
      extraNames: {
        type: 'array',
        items: { type: 'string' },
        description: 'More names for the serving certificate.',
      },
      resources: { type: 'object', description: 'Container resources of the gate.' },
    },
  },
};

function labelLines(indent: string): string {
  return Object.entries(labels('talos-gate'))
    .map(([k, v]) => `${indent}${k}: ${v}`)
    .join('\n');
}

/** templates/talos-gate.yaml */
export function talosGateTemplate(header: string): string {
  const svc = `${TALOS_GATE_NAME}.{{ .Release.Namespace }}`;
  return `${header}
{{- if .Values.talosGate.enabled }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${TALOS_GATE_NAME}
  namespace: {{ .Release.Namespace }}
  labels:
${labelLines('    ')}
spec:
  replicas: {{ .Values.talosGate.replicaCount }}
  selector:
    matchLabels:
      app.kubernetes.io/name: gatehouse
      app.kubernetes.io/component: talos-gate
  template:
    metadata:
      labels:
${labelLines('        ')}
    spec:
      serviceAccountName: ${SERVICE_ACCOUNT}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: talos-gate
          image: {{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          args:
            - talos-gate
            - --port=${String(TALOS_GATE_PORT)}
            - --hold={{ .Values.talosGate.hold }}
            - --approved-deadline={{ .Values.talosGate.approvedDeadline }}
            - --max-certificate-lifetime={{ .Values.talosGate.maxCertificateLifetime }}
            - --log-level={{ .Values.logLevel }}
            # The controller asks on behalf of HTTP API callers (POST /v1/talos/certificates).
            - --delegate=system:serviceaccount:{{ .Release.Namespace }}:${SERVICE_ACCOUNT}
            - --name=${TALOS_GATE_NAME}
            - --name=${svc}
            - --name=${svc}.svc
            {{- range .Values.talosGate.extraNames }}
            - --name={{ . }}
            {{- end }}
          env:
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
          ports:
            - name: talos-api
              containerPort: ${String(TALOS_GATE_PORT)}
              protocol: TCP
          readinessProbe:
            tcpSocket:
              port: talos-api
            periodSeconds: 5
          resources:
            {{- toYaml .Values.talosGate.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            - name: talos
              mountPath: /var/run/secrets/talos.dev
              readOnly: true
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        - name: talos
          secret:
            secretName: ${TALOS_SECRET}
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    app.kubernetes.io/name: gatehouse
                    app.kubernetes.io/component: talos-gate
---
apiVersion: v1
kind: Service
metadata:
  name: ${TALOS_GATE_NAME}
  namespace: {{ .Release.Namespace }}
  labels:
${labelLines('    ')}
  {{- with .Values.talosGate.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ .Values.talosGate.service.type }}
  selector:
    app.kubernetes.io/name: gatehouse
    app.kubernetes.io/component: talos-gate
  ports:
    - name: talos-api
      port: {{ .Values.talosGate.service.port }}
      targetPort: talos-api
      protocol: TCP
{{- end }}
`;
}
