// The controller's Namespace, ServiceAccount, Deployment, Service and disruption budget.
import packageJson from '../../package.json' with { type: 'json' };

export const DEFAULT_NAMESPACE = 'gatehouse-system';
/**
 * No image is published yet: the default names a locally built one (`localhost/` is
 * where podman and buildah put local builds), so nothing is ever pulled from a public
 * registry by accident. Pass --image to use your own.
 */
export const DEFAULT_IMAGE = `localhost/gatehouse:${packageJson.version}`;
export const SERVICE_ACCOUNT = 'gatehouse';
export const DEPLOYMENT_NAME = 'gatehouse-controller';
/** The coordination.k8s.io Lease the controller replicas elect their leader on. */
export const LEASE_NAME = 'gatehouse-controller';
/** The Secret Talos creates for a talos.dev/v1alpha1 ServiceAccount of that name, or one made from a talosconfig. */
export const TALOS_SECRET = 'gatehouse-talos';
export const HTTP_PORT = 8080;
/**
 * The Node flags the controller runs with (NODE_OPTIONS); the scale benchmark starts it
 * with the same. A young generation of 4 MiB semi-spaces: V8's default scales with the
 * memory it sees (on the 24 GiB benchmark machine, semi-spaces of up to 64 MiB), and the
 * controller's bursts of short-lived objects — list pages, a thousand probes at start —
 * grew its new space to 50 MiB and more, which RSS then kept. Scavenges come more often
 * (~10% more CPU during a sync); what lives and what is collected is unchanged. See
 * docs/decisions.md, "What the controller caches".
 */
export const CONTROLLER_NODE_OPTIONS = '--max-semi-space-size=4';

/**
 * glibc's malloc arenas, at most (MALLOC_ARENA_MAX): by default up to eight per core, one
 * for each thread that allocates (V8's compiler and GC threads, libuv's pool), and what is
 * freed in one stays there. With two, the controller's memory outside the V8 heap was
 * 82 MiB instead of 102 at the scale benchmark's peak (docs/decisions.md, "What had
 * grown since"), and the benchmark's sync and probe figures did not move.
 */
export const CONTROLLER_MALLOC_ARENA_MAX = '2';

/**
 * The controller container's requests and limits (the chart's default `resources`). Node
 * sizes the V8 heap from the memory limit it runs under (a 512 MiB limit: a 259 MiB heap,
 * major collections early); the scale benchmark starts the controller under the same
 * limit (bench/memory-limit.ts).
 */
export const CONTROLLER_RESOURCES = {
  requests: { cpu: '50m', memory: '128Mi' },
  limits: { cpu: '1', memory: '512Mi' },
} as const;

export function labels(component?: string): Record<string, string> {
  return {
    'app.kubernetes.io/name': 'gatehouse',
    'app.kubernetes.io/part-of': 'gatehouse',
    ...(component ? { 'app.kubernetes.io/component': component } : {}),
  };
}

export const selector = {
  'app.kubernetes.io/name': 'gatehouse',
  'app.kubernetes.io/component': 'controller',
};

export function namespaceObject(namespace: string): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: {
      name: namespace,
      labels: { ...labels(), 'pod-security.kubernetes.io/enforce': 'restricted' },
    },
  };
}

export function serviceAccountObject(namespace: string): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: SERVICE_ACCOUNT, namespace, labels: labels('controller') },
  };
}

/**
 * Two replicas: one leader acts, the other keeps warm caches to take over. The pod
 * runs restricted (non-root, read-only root filesystem with a writable /tmp, no
 * privilege escalation, no capabilities, RuntimeDefault seccomp), tolerates the
 * control-plane taint and the preready taint (the controller is what lifts it, so it
 * must be able to run on a node that still carries it), and mounts Talos API
 * credentials when present (Managed execution needs them; External does not).
 */
export function deploymentObject(namespace: string, image: string): Record<string, unknown> {
  const httpProbe = (path: string, periodSeconds: number) => ({
    httpGet: { path, port: 'http' },
    periodSeconds,
    timeoutSeconds: 2,
    failureThreshold: 3,
  });
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: DEPLOYMENT_NAME, namespace, labels: labels('controller') },
    spec: {
      replicas: 2,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: labels('controller') },
        spec: {
          serviceAccountName: SERVICE_ACCOUNT,
          securityContext: {
            runAsNonRoot: true,
            runAsUser: 65532,
            runAsGroup: 65532,
            fsGroup: 65532,
            seccompProfile: { type: 'RuntimeDefault' },
          },
          containers: [
            {
              name: 'controller',
              image,
              imagePullPolicy: 'IfNotPresent',
              args: ['controller'],
              env: [
                { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
                { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
                { name: 'NODE_OPTIONS', value: CONTROLLER_NODE_OPTIONS },
                { name: 'MALLOC_ARENA_MAX', value: CONTROLLER_MALLOC_ARENA_MAX },
              ],
              ports: [{ name: 'http', containerPort: HTTP_PORT, protocol: 'TCP' }],
              livenessProbe: httpProbe('/healthz', 10),
              readinessProbe: httpProbe('/readyz', 5),
              resources: structuredClone(CONTROLLER_RESOURCES),
              securityContext: {
                allowPrivilegeEscalation: false,
                readOnlyRootFilesystem: true,
                runAsNonRoot: true,
                capabilities: { drop: ['ALL'] },
                seccompProfile: { type: 'RuntimeDefault' },
              },
              volumeMounts: [
                { name: 'tmp', mountPath: '/tmp' },
                { name: 'talos', mountPath: '/var/run/secrets/talos.dev', readOnly: true },
              ],
            },
          ],
          volumes: [
            { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } },
            { name: 'talos', secret: { secretName: TALOS_SECRET, optional: true } },
          ],
          tolerations: [
            { key: 'node-role.kubernetes.io/control-plane', operator: 'Exists', effect: 'NoSchedule' },
            { key: 'talos.dev/preready', operator: 'Exists', effect: 'NoSchedule' },
          ],
          affinity: {
            podAntiAffinity: {
              preferredDuringSchedulingIgnoredDuringExecution: [
                {
                  weight: 100,
                  podAffinityTerm: {
                    topologyKey: 'kubernetes.io/hostname',
                    labelSelector: { matchLabels: selector },
                  },
                },
              ],
            },
          },
        },
      },
    },
  };
}

/** The HTTP API, health and metrics, for in-cluster clients and probes. */
export function serviceObject(namespace: string): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'gatehouse', namespace, labels: labels('controller') },
    spec: { selector, ports: [{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }] },
  };
}

/** gatehouse drains nodes too: never let a drain take both replicas at once. */
export function podDisruptionBudgetObject(namespace: string): Record<string, unknown> {
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: { name: DEPLOYMENT_NAME, namespace, labels: labels('controller') },
    spec: { maxUnavailable: 1, selector: { matchLabels: selector } },
  };
}
