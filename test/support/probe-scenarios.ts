// Real-world setups that a probe of each type finds healthy, that can be broken and
// fixed again by changing the world (never by stubbing the probe). The probe tests
// drive them through runProbe directly; the controller's tests can drive the same
// scenarios through ClusterHealthCheck objects.
//
// Usage: `const spec = await scenario.setup(ctx)` gives the probe part of a
// ClusterHealthCheck spec (e.g. `{ nodes: {...} }`), healthy once the cluster has
// settled; `breakIt()` makes it unhealthy, `fixIt()` healthy again (both return once
// the change is made; controllers may take a moment to reflect it); `cleanup()` undoes
// everything `setup` made outside the namespace it was given, and closes local servers.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import type { ClusterHealthCheckSpec, PROBES } from '../../src/api/cluster-health-check.ts';
import type { ProbeContext } from '../../src/checks/probe.ts';
import { KubeApiError, type RestClient } from '../../src/kube/rest.ts';
import { talosNode } from '../../sandbox/nodes.ts';
import type { Monitoring } from '../../sandbox/monitoring.ts';
import { rest } from './kube.ts';
import { gaugeExporter, startTestMonitoring } from './monitoring.ts';

export type ProbeType = (typeof PROBES)[number];
/** The probe part of a ClusterHealthCheck spec: exactly one probe type set. */
export type ProbeSpecFragment = Partial<Pick<ClusterHealthCheckSpec, ProbeType>>;

export interface ScenarioContext {
  kc: KubeConfig;
  /** A namespace the scenario may create objects in; the caller deletes it. */
  namespace: string;
}

export interface ProbeScenario {
  /** Short name, for test titles. */
  readonly name: string;
  readonly probe: ProbeType;
  /** How the controller must resolve Services for this scenario's targets. */
  readonly serviceResolution: ProbeContext['serviceResolution'];
  /** What a healthy result's message and a broken one's must say. */
  readonly healthyMessage: RegExp;
  readonly unhealthyMessage: RegExp;
  setup(ctx: ScenarioContext): Promise<ProbeSpecFragment>;
  breakIt(): Promise<void>;
  fixIt(): Promise<void>;
  cleanup(): Promise<void>;
}

// --- helpers -------------------------------------------------------------------------

/** An HTTP server on 127.0.0.1 with a port of its own. */
export async function localHttpServer(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ server: Server; port: number; close: () => Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const port = (server.address() as AddressInfo).port;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return { server, port, close };
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** A TCP listener on 127.0.0.1 that can be closed and reopened on the same port. */
class TcpListener {
  port = 0;
  private server: TcpServer | undefined;
  private readonly sockets = new Set<Socket>();

  async open(): Promise<void> {
    const server = createTcpServer((socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
      socket.on('error', () => undefined);
      socket.end();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', resolve);
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

async function create(client: RestClient, path: string, body: object): Promise<void> {
  await client.request(path, { method: 'POST', body });
}

async function mergePatch(client: RestClient, path: string, body: object): Promise<void> {
  await client.request(path, { method: 'PATCH', contentType: 'application/merge-patch+json', body });
}

/** Deletes, and ignores objects already gone (cleanup may run twice, or after a failed setup). */
async function remove(client: RestClient, path: string): Promise<void> {
  try {
    await client.request(path, { method: 'DELETE', query: { propagationPolicy: 'Background' } });
  } catch (error) {
    if (!(error instanceof KubeApiError && error.code === 404)) throw error;
  }
}

function timestamp(): string {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`scenario used before setup(): no ${what}`);
  return value;
}

/** A pod template's container; `cpu` makes it unschedulable when larger than any node. */
function container(cpu?: string) {
  return {
    name: 'main',
    image: 'registry.example/app:1',
    ...(cpu ? { resources: { requests: { cpu } } } : {}),
  };
}

// --- httpGet ---------------------------------------------------------------------------

/** A JSON health endpoint on 127.0.0.1; broken, it answers 200 with status "degraded". */
export function httpGetScenario(): ProbeScenario {
  let status = 'ok';
  let server: Awaited<ReturnType<typeof localHttpServer>> | undefined;
  return {
    name: 'httpGet (URL, JSON body)',
    probe: 'httpGet',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^GET http:\/\/127\.0\.0\.1:\d+\/healthz answered 200 and `body\.status == 'ok'` holds \(body\.status == 'ok'\)$/,
    unhealthyMessage: /answered 200, but `body\.status == 'ok'` is false \(body\.status == 'degraded'\)$/,
    async setup() {
      server = await localHttpServer((req, res) => {
        // The probe's configured headers must arrive.
        if (req.headers['x-gatehouse-probe'] !== 'yes')
          return sendJson(res, 400, { error: 'missing header' });
        if (req.url !== '/healthz') return sendJson(res, 404, { error: 'not found' });
        sendJson(res, 200, { status, checks: { storage: status === 'ok' ? 'up' : 'down' } });
      });
      return {
        httpGet: {
          url: `http://127.0.0.1:${server.port}/healthz`,
          httpHeaders: [{ name: 'X-Gatehouse-Probe', value: 'yes' }],
          bodyExpression: "body.status == 'ok'",
        },
      };
    },
    breakIt() {
      status = 'degraded';
      return Promise.resolve();
    },
    fixIt() {
      status = 'ok';
      return Promise.resolve();
    },
    async cleanup() {
      await server?.close();
    },
  };
}

/**
 * An HTTP endpoint behind a Service of type ExternalName pointing at localhost, so
 * the probe must resolve the Service (serviceResolution `endpoints`); broken, it
 * answers 503.
 */
export function httpGetServiceScenario(): ProbeScenario {
  let healthy = true;
  let server: Awaited<ReturnType<typeof localHttpServer>> | undefined;
  return {
    name: 'httpGet (ExternalName Service)',
    probe: 'httpGet',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^GET http:\/\/[a-z0-9-]+\.[a-z0-9-]+\.svc:\d+\/ready \(via ExternalName localhost\) answered 204$/,
    unhealthyMessage: /answered 503 \(expected 2xx or 3xx\): \{"ready":false\}$/,
    async setup({ kc, namespace }) {
      server = await localHttpServer((req, res) => {
        if (req.url !== '/ready') return sendJson(res, 404, { error: 'not found' });
        if (healthy) {
          res.writeHead(204).end();
          return;
        }
        sendJson(res, 503, { ready: false });
      });
      const name = 'web-health';
      await create(rest(kc), `/api/v1/namespaces/${namespace}/services`, {
        metadata: { name },
        spec: { type: 'ExternalName', externalName: 'localhost' },
      });
      return { httpGet: { service: { name, namespace }, port: server.port, path: '/ready' } };
    },
    breakIt() {
      healthy = false;
      return Promise.resolve();
    },
    fixIt() {
      healthy = true;
      return Promise.resolve();
    },
    async cleanup() {
      await server?.close();
    },
  };
}

// --- tcpSocket -------------------------------------------------------------------------

/** A TCP listener on 127.0.0.1; broken, it is closed (connections refused). */
export function tcpSocketScenario(): ProbeScenario {
  const listener = new TcpListener();
  return {
    name: 'tcpSocket (host)',
    probe: 'tcpSocket',
    serviceResolution: 'endpoints',
    healthyMessage: /^TCP connection to 127\.0\.0\.1:\d+ opened in \d+ms$/,
    unhealthyMessage: /^TCP connection to 127\.0\.0\.1:\d+ failed: connect ECONNREFUSED 127\.0\.0\.1:\d+$/,
    async setup() {
      await listener.open();
      return { tcpSocket: { host: '127.0.0.1', port: listener.port } };
    },
    breakIt: () => listener.close(),
    fixIt: () => listener.open(),
    cleanup: () => listener.close(),
  };
}

/**
 * A TCP listener behind a Service of type ExternalName pointing at localhost (a probe
 * outside the cluster resolves it with serviceResolution `endpoints`). Broken, the
 * listener is closed.
 */
export function tcpSocketServiceScenario(): ProbeScenario {
  const listener = new TcpListener();
  return {
    name: 'tcpSocket (ExternalName Service)',
    probe: 'tcpSocket',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^TCP connection to Service [a-z0-9-]+\/db port \d+ \(via ExternalName localhost\) opened in \d+ms$/,
    unhealthyMessage:
      /^TCP connection to Service [a-z0-9-]+\/db port \d+ \(via ExternalName localhost\) failed: .*ECONNREFUSED/,
    async setup({ kc, namespace }) {
      await listener.open();
      await create(rest(kc), `/api/v1/namespaces/${namespace}/services`, {
        metadata: { name: 'db' },
        spec: { type: 'ExternalName', externalName: 'localhost' },
      });
      return { tcpSocket: { service: { name: 'db', namespace }, port: listener.port } };
    },
    breakIt: () => listener.close(),
    fixIt: () => listener.open(),
    cleanup: () => listener.close(),
  };
}

// --- resource --------------------------------------------------------------------------

/**
 * Three objects of a custom resource (a CRD of its own, with an irregular plural so
 * nothing can guess the resource name) that report a Ceph-style health; broken, one
 * reports HEALTH_WARN.
 */
export function resourceScenario(): ProbeScenario {
  let client: RestClient | undefined;
  let crdName: string | undefined;
  let objectPath: string | undefined;
  const setHealth = (health: string) =>
    mergePatch(required(client, 'client'), required(objectPath, 'object'), { status: { ceph: { health } } });
  return {
    name: 'resource (custom resource)',
    probe: 'resource',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^3\/3 StorageQuorum objects in namespace [a-z0-9-]+ labelled app=storage match `self\.status\.ceph\.health == 'HEALTH_OK'` \(all must\)$/,
    unhealthyMessage:
      /^2\/3 StorageQuorum objects in namespace ([a-z0-9-]+) labelled app=storage match `[^`]+` \(all must\): \1\/b has status\.ceph\.health == 'HEALTH_WARN'$/,
    async setup({ kc, namespace }) {
      client = rest(kc);
      const group = `${randomBytes(4).toString('hex')}.probes.gatehouse.test`;
      crdName = `quora.${group}`;
      await create(client, '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', {
        apiVersion: 'apiextensions.k8s.io/v1',
        kind: 'CustomResourceDefinition',
        metadata: { name: crdName },
        spec: {
          group,
          scope: 'Namespaced',
          names: { plural: 'quora', singular: 'storagequorum', kind: 'StorageQuorum' },
          versions: [
            {
              name: 'v1',
              served: true,
              storage: true,
              schema: {
                openAPIV3Schema: {
                  type: 'object',
                  properties: {
                    spec: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
                    status: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
                  },
                },
              },
            },
          ],
        },
      });
      const base = `/apis/${group}/v1/namespaces/${namespace}/quora`;
      objectPath = `${base}/b`;
      const object = (name: string, app: string, health: string) => ({
        apiVersion: `${group}/v1`,
        kind: 'StorageQuorum',
        metadata: { name, labels: { app } },
        spec: { members: 3 },
        status: { ceph: { health } },
      });
      const objects = [
        object('a', 'storage', 'HEALTH_OK'),
        object('b', 'storage', 'HEALTH_OK'),
        object('c', 'storage', 'HEALTH_OK'),
        // Left out by the label selector, whatever its health.
        object('other', 'other', 'HEALTH_ERR'),
      ];
      // The API server serves a new kind a moment after the CRD is created.
      const deadline = Date.now() + 30_000;
      for (const body of objects) {
        for (;;) {
          try {
            await create(client, base, body);
            break;
          } catch (error) {
            if (!(error instanceof KubeApiError && error.code === 404) || Date.now() > deadline) throw error;
            await new Promise((r) => setTimeout(r, 200));
          }
        }
      }
      return {
        resource: {
          apiVersion: `${group}/v1`,
          kind: 'StorageQuorum',
          namespace,
          labelSelector: { matchLabels: { app: 'storage' } },
          expression: "self.status.ceph.health == 'HEALTH_OK'",
        },
      };
    },
    breakIt: () => setHealth('HEALTH_WARN'),
    fixIt: () => setHealth('HEALTH_OK'),
    async cleanup() {
      if (client && crdName)
        await remove(client, `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crdName}`);
    },
  };
}

// --- workloads -------------------------------------------------------------------------

/**
 * A Deployment, a StatefulSet and a DaemonSet (on the kwok nodes) that kwok runs to
 * Ready; broken, the Deployment's and DaemonSet's pod templates request more CPU than
 * any node has, so their new pods never schedule and the rollouts stall. Everything runs
 * on three kwok nodes of the scenario's own, away from the sandbox's workers, which
 * other test files reboot.
 */
export function workloadsScenario(): ProbeScenario {
  let client: RestClient | undefined;
  let namespace = '';
  const labels = { 'gatehouse.test/scenario': 'workloads' };
  const id = randomBytes(3).toString('hex');
  const nodeNames = [1, 2, 3].map((i) => `workloads-${id}-${String(i)}`);
  const nodeLabel = 'gatehouse.test/workloads';
  const setCpu = async (cpu: string | undefined) => {
    const c = required(client, 'client');
    const template = { spec: { containers: [container(cpu)] } };
    await mergePatch(c, `/apis/apps/v1/namespaces/${namespace}/deployments/web`, { spec: { template } });
    await mergePatch(c, `/apis/apps/v1/namespaces/${namespace}/daemonsets/agent`, { spec: { template } });
  };
  return {
    name: 'workloads',
    probe: 'workloads',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^3 workloads in namespace [a-z0-9-]+ labelled gatehouse\.test\/scenario=workloads rolled out and available \(1 Deployment, 1 StatefulSet, 1 DaemonSet\)$/,
    unhealthyMessage:
      /^2\/3 workloads .* not rolled out or not available: Deployment ([a-z0-9-]+)\/web: .*1\/2 updated.*; DaemonSet \1\/agent: .*\d\/3 (updated|available)/,
    async setup(ctx) {
      client = rest(ctx.kc);
      namespace = ctx.namespace;
      const version = await client.request<{ gitVersion: string }>('/version');
      for (const [i, name] of nodeNames.entries()) {
        const node = talosNode(
          { name, role: 'worker', internalIP: `10.8.0.${String(i + 2)}` },
          version.gitVersion,
        );
        node.metadata = Object.assign({}, node.metadata, {
          labels: { ...node.metadata?.labels, [nodeLabel]: id },
        });
        node.spec = { taints: [{ key: nodeLabel, value: id, effect: 'NoSchedule' }] };
        await create(client, '/api/v1/nodes', node);
      }
      const selector = (app: string) => ({ matchLabels: { app } });
      const template = (app: string) => ({
        metadata: { labels: { app } },
        spec: {
          containers: [container()],
          nodeSelector: { [nodeLabel]: id },
          tolerations: [{ key: nodeLabel, operator: 'Equal', value: id, effect: 'NoSchedule' }],
        },
      });
      const apps = `/apis/apps/v1/namespaces/${namespace}`;
      await create(client, `${apps}/deployments`, {
        metadata: { name: 'web', labels },
        spec: { replicas: 2, selector: selector('web'), template: template('web') },
      });
      await create(client, `${apps}/statefulsets`, {
        metadata: { name: 'db', labels },
        spec: { replicas: 2, serviceName: 'db', selector: selector('db'), template: template('db') },
      });
      await create(client, `${apps}/daemonsets`, {
        metadata: { name: 'agent', labels },
        spec: { selector: selector('agent'), template: template('agent') },
      });
      return { workloads: { namespace, selector: { matchLabels: labels } } };
    },
    breakIt: () => setCpu('1000'),
    fixIt: () => setCpu(undefined),
    // Everything else lives in the caller's namespace.
    async cleanup() {
      if (client) for (const name of nodeNames) await remove(client, `/api/v1/nodes/${name}`);
    },
  };
}

// --- podDisruptionBudgets -----------------------------------------------------------------

/**
 * A PodDisruptionBudget over three ready pods that allows one disruption; broken, none.
 * The pods run on a kwok node of the scenario's own: on the sandbox's workers, which
 * other test files reboot, a pod goes unready for as long as its node is NotReady.
 */
export function podDisruptionBudgetsScenario(): ProbeScenario {
  let client: RestClient | undefined;
  let pdbPath = '';
  const nodeName = `pdb-${randomBytes(3).toString('hex')}`;
  return {
    name: 'podDisruptionBudgets',
    probe: 'podDisruptionBudgets',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^1 PodDisruptionBudget in namespace [a-z0-9-]+ labelled tier=storage allows at least 1 disruption$/,
    unhealthyMessage:
      /^1\/1 PodDisruptionBudget .* does not allow at least 1 disruption: [a-z0-9-]+\/osd allows 0 \(3 healthy of 3 pods, 3 needed\)$/,
    async setup({ kc, namespace }) {
      client = rest(kc);
      const version = await client.request<{ gitVersion: string }>('/version');
      const node = talosNode({ name: nodeName, role: 'worker', internalIP: '10.7.0.2' }, version.gitVersion);
      // Tainted so nothing else lands there; the pods are bound to it by name.
      node.spec = { taints: [{ key: 'gatehouse.test/probe-scenario', effect: 'NoSchedule' }] };
      await create(client, '/api/v1/nodes', node);
      await create(client, `/apis/apps/v1/namespaces/${namespace}/deployments`, {
        metadata: { name: 'osd' },
        spec: {
          replicas: 3,
          selector: { matchLabels: { app: 'osd' } },
          template: {
            metadata: { labels: { app: 'osd' } },
            spec: { nodeName, containers: [container()] },
          },
        },
      });
      const pdbs = `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`;
      await create(client, pdbs, {
        metadata: { name: 'osd', labels: { tier: 'storage' } },
        spec: { minAvailable: 2, selector: { matchLabels: { app: 'osd' } } },
      });
      // Not selected: its labels do not match, and it never allows a disruption.
      await create(client, pdbs, {
        metadata: { name: 'strict', labels: { tier: 'other' } },
        spec: { maxUnavailable: 0, selector: { matchLabels: { app: 'osd' } } },
      });
      pdbPath = `${pdbs}/osd`;
      return { podDisruptionBudgets: { namespace, selector: { matchLabels: { tier: 'storage' } } } };
    },
    breakIt: () => mergePatch(required(client, 'client'), pdbPath, { spec: { minAvailable: 3 } }),
    fixIt: () => mergePatch(required(client, 'client'), pdbPath, { spec: { minAvailable: 2 } }),
    async cleanup() {
      if (client) await remove(client, `/api/v1/nodes/${nodeName}`);
    },
  };
}

// --- nodes -------------------------------------------------------------------------------

/**
 * Two Nodes of the scenario's own, which kwok does not manage (no kwok annotation): the
 * scenario sets their Ready condition itself through the status subresource and
 * renews their Leases as a kubelet would, so the node controller leaves them alone.
 * They are tainted so nothing schedules there. Broken, one is Ready=False.
 */
export function nodesScenario(): ProbeScenario {
  let client: RestClient | undefined;
  const id = randomBytes(3).toString('hex');
  const names = [`probe-${id}-a`, `probe-${id}-b`];
  const label = 'gatehouse.test/probe-scenario';
  let heartbeat: NodeJS.Timeout | undefined;

  const setReady = async (name: string, ready: boolean) => {
    const now = timestamp();
    await mergePatch(required(client, 'client'), `/api/v1/nodes/${name}/status`, {
      status: {
        conditions: [
          {
            type: 'Ready',
            status: ready ? 'True' : 'False',
            reason: ready ? 'KubeletReady' : 'KubeletNotReady',
            message: ready ? 'kubelet is posting ready status' : 'container runtime is down',
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ],
      },
    });
  };
  const renewLeases = async () => {
    const c = required(client, 'client');
    await Promise.all(
      names.map((name) =>
        mergePatch(c, `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`, {
          spec: { renewTime: new Date().toISOString().replace('Z', '000Z') },
        }),
      ),
    );
  };

  return {
    name: 'nodes',
    probe: 'nodes',
    serviceResolution: 'endpoints',
    healthyMessage: new RegExp(
      `^2/2 nodes labelled ${label.replace(/[./]/g, '\\$&')}=${id} Ready \\(at most 0 may be not Ready\\)$`,
    ),
    unhealthyMessage: new RegExp(
      `^1/2 nodes labelled .* Ready \\(at most 0 may be not Ready\\): probe-${id}-b Ready=False \\(KubeletNotReady: container runtime is down\\)$`,
    ),
    async setup({ kc }) {
      client = rest(kc);
      const version = await client.request<{ gitVersion: string }>('/version');
      for (const [i, name] of names.entries()) {
        // Shaped like the sandbox's Talos nodes (so node listings stay uniform), minus the kwok annotation.
        const node = talosNode(
          { name, role: 'worker', internalIP: `10.6.${i}.${Number.parseInt(id.slice(0, 2), 16)}` },
          version.gitVersion,
        );
        const spec = { taints: [{ key: label, value: id, effect: 'NoSchedule' }] };
        await create(client, '/api/v1/nodes', {
          apiVersion: 'v1',
          kind: 'Node',
          status: node.status,
          metadata: { name, labels: { ...node.metadata?.labels, type: 'probe-scenario', [label]: id } },
          spec,
        });
        await create(client, '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', {
          metadata: { name },
          spec: {
            holderIdentity: name,
            leaseDurationSeconds: 40,
            renewTime: new Date().toISOString().replace('Z', '000Z'),
          },
        });
        await setReady(name, true);
      }
      heartbeat = setInterval(() => void renewLeases().catch(() => undefined), 10_000);
      heartbeat.unref();
      return { nodes: { selector: { matchLabels: { [label]: id } } } };
    },
    breakIt: () => setReady(names[1] ?? '', false),
    fixIt: () => setReady(names[1] ?? '', true),
    async cleanup() {
      clearInterval(heartbeat);
      if (!client) return;
      for (const name of names) {
        await remove(client, `/api/v1/nodes/${name}`);
        await remove(client, `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`);
      }
    },
  };
}

// --- prometheus ----------------------------------------------------------------------------

/**
 * A real Prometheus scraping an exporter of `ceph_health_status` (0 is HEALTH_OK), which
 * must lie in [0, 0]; broken, the exporter says 1 (HEALTH_WARN).
 */
export function prometheusQueryScenario(): ProbeScenario {
  let monitoring: Monitoring | undefined;
  let exporter: Awaited<ReturnType<typeof gaugeExporter>> | undefined;
  const labels = { cluster: 'rook-ceph' };
  return {
    name: 'prometheus (query with value range)',
    probe: 'prometheus',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^query `max by \(cluster\) \(ceph_health_status\)`: its sample lies in \[0, 0\] \(\{cluster="rook-ceph"\} 0\)$/,
    unhealthyMessage:
      /^query `max by \(cluster\) \(ceph_health_status\)`: 1\/1 sample outside \[0, 0\]: \{cluster="rook-ceph"\} 1$/,
    async setup() {
      monitoring = await startTestMonitoring({ alertmanager: false });
      exporter = await gaugeExporter('ceph_health_status', 'Ceph health: 0 OK, 1 WARN, 2 ERR.', ['cluster']);
      exporter.gauge.set(labels, 0);
      await monitoring.setTargets('ceph', [exporter.target]);
      return {
        prometheus: {
          url: monitoring.prometheusUrl,
          query: 'max by (cluster) (ceph_health_status)',
          valueRange: { min: 0, max: 0 },
        },
      };
    },
    breakIt() {
      exporter?.gauge.set(labels, 1);
      return Promise.resolve();
    },
    fixIt() {
      exporter?.gauge.set(labels, 0);
      return Promise.resolve();
    },
    async cleanup() {
      await exporter?.close();
      await monitoring?.stop();
    },
  };
}

/**
 * A real Prometheus evaluating alert rules: Watchdog always fires, a critical alert is
 * only pending (its `for` is an hour), a warning about something else fires; broken,
 * the exporter reports Ceph unhealthy and a critical Ceph alert fires.
 */
export function prometheusAlertsScenario(): ProbeScenario {
  let monitoring: Monitoring | undefined;
  let exporter: Awaited<ReturnType<typeof gaugeExporter>> | undefined;
  const always = (alert: string, labels: Record<string, string>, pendingFor?: string) => ({
    alert,
    expr: 'vector(1)',
    labels,
    ...(pendingFor ? { for: pendingFor } : {}),
  });
  return {
    name: 'prometheus (alerts)',
    probe: 'prometheus',
    serviceResolution: 'endpoints',
    healthyMessage:
      /^no firing alert matches severity="critical", alertname!="Watchdog" \(2 alerts firing in all\)$/,
    unhealthyMessage:
      /^1 firing alert matches severity="critical", alertname!="Watchdog": CephHealthError\{namespace="rook-ceph", severity="critical"\}$/,
    async setup() {
      // Served under a path prefix, as behind a proxy.
      monitoring = await startTestMonitoring({ alertmanager: false, prometheusRoutePrefix: '/prom' });
      exporter = await gaugeExporter('ceph_health_status', 'Ceph health: 0 OK, 1 WARN, 2 ERR.');
      exporter.gauge.set(0);
      await monitoring.setTargets('ceph', [exporter.target]);
      await monitoring.setRules('alerts', [
        {
          name: 'scenario',
          rules: [
            always('Watchdog', { severity: 'none' }),
            always('KubeNodeNotReady', { severity: 'critical', node: 'worker-9' }, '1h'),
            always('CPUThrottlingHigh', { severity: 'info' }),
            {
              alert: 'CephHealthError',
              expr: 'max(ceph_health_status) > 0',
              labels: { severity: 'critical', namespace: 'rook-ceph' },
            },
          ],
        },
      ]);
      return {
        prometheus: {
          url: `${monitoring.prometheusUrl}/`,
          alerts: { matchers: ['severity="critical"', 'alertname!="Watchdog"'] },
        },
      };
    },
    breakIt() {
      exporter?.gauge.set(1);
      return Promise.resolve();
    },
    fixIt() {
      exporter?.gauge.set(0);
      return Promise.resolve();
    },
    async cleanup() {
      await exporter?.close();
      await monitoring?.stop();
    },
  };
}

/** Every scenario, one or more per probe type. */
export const probeScenarios: readonly (() => ProbeScenario)[] = [
  httpGetScenario,
  httpGetServiceScenario,
  tcpSocketScenario,
  tcpSocketServiceScenario,
  resourceScenario,
  workloadsScenario,
  podDisruptionBudgetsScenario,
  nodesScenario,
  prometheusQueryScenario,
  prometheusAlertsScenario,
];
