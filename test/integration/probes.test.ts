// Every probe type against the real world: the sandbox's API server, controllers and
// kwok nodes for Kubernetes probes, local servers for HTTP, TCP and Prometheus. Each
// scenario goes healthy → unhealthy → healthy by changing that world.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CertificateAuthority } from '../../sandbox/pki.ts';
import type { ProbeContext, ProbeResult } from '../../src/checks/probe.ts';
import { runProbe } from '../../src/checks/probes/index.ts';
import { resolveService } from '../../src/checks/service-address.ts';
import { prometheusProbe } from '../../src/checks/probes/prometheus.ts';
import { Informer, type KubeObject } from '../../src/kube/informer.ts';
import type { LabelSelector } from '../../src/kube/labels.ts';
import { slimNode } from '../../src/kube/nodes.ts';
import { RestClient, type RestRequest } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { errorMessage } from '../../src/wait.ts';
import {
  localHttpServer,
  nodesScenario,
  probeScenarios,
  type ProbeSpecFragment,
} from '../support/probe-scenarios.ts';
import { freshNamespace, rest, testKubeConfig, waitFor } from '../support/kube.ts';
import { prometheusProxy, startTestMonitoring } from '../support/monitoring.ts';
import type { Monitoring } from '../../sandbox/monitoring.ts';

const kc = testKubeConfig();
const client = rest(kc);

function probeContext(
  serviceResolution: ProbeContext['serviceResolution'] = 'endpoints',
  signal: AbortSignal = AbortSignal.timeout(10_000),
  namespace = 'gatehouse-system',
): ProbeContext {
  return { rest: client, signal, serviceResolution, namespace };
}

const probe = (spec: ProbeSpecFragment, serviceResolution?: ProbeContext['serviceResolution']) =>
  runProbe(spec, probeContext(serviceResolution));

/** The message a probe rejects with (fails if it resolves). */
async function probeError(spec: ProbeSpecFragment, serviceResolution?: ProbeContext['serviceResolution']) {
  try {
    const result = await probe(spec, serviceResolution);
    assert.fail(`expected a probe error, got ${JSON.stringify(result)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return errorMessage(error);
  }
}

/**
 * Probes until the result is `healthy` with a message matching `message` (the world
 * changes through controllers, so not at once), and returns that result.
 */
async function eventually(
  spec: ProbeSpecFragment,
  healthy: boolean,
  message: RegExp,
  serviceResolution?: ProbeContext['serviceResolution'],
): Promise<ProbeResult> {
  return waitFor(
    `the probe to find ${healthy ? 'healthy' : 'unhealthy'} with a message like ${String(message)}`,
    async (observe) => {
      const result = await probe(spec, serviceResolution);
      observe(`${result.healthy ? 'healthy' : 'unhealthy'}: ${result.message}`);
      return result.healthy === healthy && message.test(result.message) ? result : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

describe('probes: healthy → unhealthy → healthy by changing the world', () => {
  for (const make of probeScenarios) {
    const scenario = make();
    it(scenario.name, async (t) => {
      const namespace = await freshNamespace(t, kc);
      t.after(() => scenario.cleanup());
      const spec = await scenario.setup({ kc, namespace });
      const mode = scenario.serviceResolution;
      await eventually(spec, true, scenario.healthyMessage, mode);
      await scenario.breakIt();
      await eventually(spec, false, scenario.unhealthyMessage, mode);
      await scenario.fixIt();
      await eventually(spec, true, scenario.healthyMessage, mode);
    });
  }
});

describe('httpGet', () => {
  it('counts 2xx and 3xx as success by default, or exactly the expected codes', async (t) => {
    let status = 302;
    const server = await localHttpServer((_req, res) => {
      res.writeHead(status, status === 302 ? { Location: '/elsewhere' } : {}).end('teapot');
    });
    t.after(() => server.close());
    const url = `http://127.0.0.1:${server.port}/`;
    assert.deepEqual(await probe({ httpGet: { url } }), {
      healthy: true,
      message: `GET ${url} answered 302`,
    });
    status = 418;
    assert.deepEqual(await probe({ httpGet: { url } }), {
      healthy: false,
      message: `GET ${url} answered 418 (expected 2xx or 3xx): teapot`,
    });
    assert.equal((await probe({ httpGet: { url, expectedStatusCodes: [418] } })).healthy, true);
    status = 200;
    assert.deepEqual(await probe({ httpGet: { url, expectedStatusCodes: [204, 418] } }), {
      healthy: false,
      message: `GET ${url} answered 200 (expected 204, 418): teapot`,
    });
  });

  it('finds a body that is not JSON, or lacks the field the expression reads, unhealthy', async (t) => {
    let body = '<html>maintenance</html>';
    const server = await localHttpServer((_req, res) => res.end(body));
    t.after(() => server.close());
    const url = `http://127.0.0.1:${server.port}/health`;
    const spec = { httpGet: { url, bodyExpression: "body.ceph.health == 'HEALTH_OK'" } };
    assert.deepEqual(await probe(spec), {
      healthy: false,
      message: `GET ${url} answered 200 with a body that is not JSON, so \`body.ceph.health == 'HEALTH_OK'\` cannot hold: <html>maintenance</html>`,
    });
    body = '{"ceph": {}}';
    assert.deepEqual(await probe(spec), {
      healthy: false,
      message: `GET ${url} answered 200, but CEL error in \`body.ceph.health == 'HEALTH_OK'\` at column 10: no field 'health' in body.ceph (test for it with has(body.ceph.health))`,
    });
  });

  it('fails to probe with an expression that does not compile', async (t) => {
    let requests = 0;
    const server = await localHttpServer((_req, res) => {
      requests++;
      res.end('{}');
    });
    t.after(() => server.close());
    const message = await probeError({
      httpGet: { url: `http://127.0.0.1:${server.port}/`, bodyExpression: 'body.status = "ok"' },
    });
    assert.match(message, /^CEL error in `body\.status = "ok"` at column \d+: syntax error: /);
    assert.equal(requests, 0, 'a broken expression is reported before the target is asked');
  });

  it('fails to probe a target that refuses the connection', async () => {
    const server = await localHttpServer((_req, res) => res.end());
    const url = `http://127.0.0.1:${server.port}/`;
    await server.close();
    assert.match(
      await probeError({ httpGet: { url } }),
      /^GET http:\/\/127\.0\.0\.1:\d+\/: connect ECONNREFUSED/,
    );
  });

  it('cuts a hanging target off at the abort signal', async (t) => {
    const hanging = await localHttpServer(() => undefined); // never answers
    t.after(() => hanging.close());
    const started = performance.now();
    const error = await runProbe(
      { httpGet: { url: `http://127.0.0.1:${hanging.port}/slow` } },
      probeContext('endpoints', AbortSignal.timeout(300)),
    ).then(
      (result) => assert.fail(`expected the probe to be cut off, got ${JSON.stringify(result)}`),
      (e: unknown) => errorMessage(e),
    );
    const took = performance.now() - started;
    assert.match(
      error,
      /^GET http:\/\/127\.0\.0\.1:\d+\/slow: cut off before an answer came \(.*timeout.*\)$/,
    );
    assert.ok(took >= 250 && took < 2000, `cut off after ${Math.round(took)}ms, expected about 300ms`);
  });

  it('verifies https certificates unless insecureSkipTLSVerify is set', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'gatehouse-probe-tls-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const ca = await CertificateAuthority.create(dir, 'ca', 'probe test CA');
    const paths = await ca.issue({
      name: 'server',
      commonName: 'localhost',
      dnsNames: ['localhost'],
      ipAddresses: ['127.0.0.1'],
      usage: 'server',
    });
    const server = createHttpsServer(
      { cert: await readFile(paths.cert), key: await readFile(paths.key) },
      (_req, res) => res.end('{"ok": true}'),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    assert.match(
      await probeError({ httpGet: { url, bodyExpression: 'body.ok' } }),
      /^GET https:\/\/127\.0\.0\.1:\d+\/: .*(self[- ]signed|unable to (get|verify))/i,
    );
    assert.deepEqual(
      await probe({ httpGet: { url, bodyExpression: 'body.ok', insecureSkipTLSVerify: true } }),
      {
        healthy: true,
        message: `GET ${url} answered 200 and \`body.ok\` holds (body.ok == true)`,
      },
    );
  });

  it('names the Service DNS name in dns mode, and a missing Service in endpoints mode', async (t) => {
    const namespace = await freshNamespace(t, kc);
    const spec = { httpGet: { service: { name: 'absent', namespace }, port: 8080, path: '/health' } };
    // In a cluster the probe would connect to absent.<ns>.svc; outside one that name does not resolve.
    assert.match(
      await probeError(spec, 'dns'),
      new RegExp(`^GET http://absent\\.${namespace}\\.svc:8080/health: .*(ENOTFOUND|EAI_AGAIN)`),
    );
    assert.equal(await probeError(spec, 'endpoints'), `Service ${namespace}/absent not found`);
  });
});

describe('Service resolution through EndpointSlices', () => {
  it('maps a Service port to the target port of a ready endpoint the EndpointSlice controller published', async (t) => {
    const namespace = await freshNamespace(t, kc);
    await client.request(`/apis/apps/v1/namespaces/${namespace}/deployments`, {
      method: 'POST',
      body: {
        metadata: { name: 'web' },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'web' } },
          template: {
            metadata: { labels: { app: 'web' } },
            spec: {
              containers: [
                { name: 'main', image: 'nginx', ports: [{ name: 'http-alt', containerPort: 8080 }] },
              ],
            },
          },
        },
      },
    });
    await client.request(`/api/v1/namespaces/${namespace}/services`, {
      method: 'POST',
      body: {
        metadata: { name: 'web' },
        spec: {
          selector: { app: 'web' },
          ports: [
            { name: 'metrics', port: 9100, targetPort: 9100 },
            { name: 'http', port: 80, targetPort: 'http-alt' },
          ],
        },
      },
    });
    // kwok runs the pod to Ready with a pod IP; the EndpointSlice controller then publishes it.
    const address = await waitFor('a ready endpoint of Service web', async (observe) => {
      try {
        return await resolveService({ name: 'web', namespace }, 80, probeContext());
      } catch (error) {
        observe(errorMessage(error));
        return undefined;
      }
    });
    const pods = await client.request<{ items: { status?: { podIP?: string } }[] }>(
      `/api/v1/namespaces/${namespace}/pods`,
      { query: { labelSelector: 'app=web' } },
    );
    const podIP = pods.items[0]?.status?.podIP;
    assert.ok(podIP, 'the pod has an IP');
    assert.deepEqual(address, {
      host: podIP,
      port: 8080,
      serviceHost: `web.${namespace}.svc`,
      via: address.via,
    });
    assert.match(
      address.via,
      new RegExp(`^endpoint ${podIP.replace(/\./g, '\\.')}:8080 of EndpointSlice web-`),
    );
    // In a cluster, the DNS name and the Service port.
    assert.deepEqual(await resolveService({ name: 'web', namespace }, 80, probeContext('dns')), {
      host: `web.${namespace}.svc`,
      port: 80,
      serviceHost: `web.${namespace}.svc`,
      via: '',
    });
  });

  it('fails to probe a Service without a ready endpoint or without the port, and says so', async (t) => {
    const namespace = await freshNamespace(t, kc);
    await client.request(`/api/v1/namespaces/${namespace}/services`, {
      method: 'POST',
      body: { metadata: { name: 'cache' }, spec: { ports: [{ name: 'redis', port: 6379 }] } },
    });
    // Selector-less, so the endpoints are the test's to declare (TEST-NET-1: never reached).
    await client.request(`/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`, {
      method: 'POST',
      body: {
        metadata: {
          name: 'cache-1',
          labels: {
            'kubernetes.io/service-name': 'cache',
            'endpointslice.kubernetes.io/managed-by': 'gatehouse-tests',
          },
        },
        addressType: 'IPv4',
        ports: [{ name: 'redis', port: 6379, protocol: 'TCP' }],
        endpoints: [{ addresses: ['192.0.2.10'], conditions: { ready: false } }],
      },
    });
    assert.equal(
      await probeError({ tcpSocket: { service: { name: 'cache', namespace }, port: 6379 } }),
      `Service ${namespace}/cache has no ready endpoint for port 6379 (1 EndpointSlice, 1 endpoint not ready)`,
    );
    assert.equal(
      await probeError({ tcpSocket: { service: { name: 'cache', namespace }, port: 6380 } }),
      `Service ${namespace}/cache has no TCP port 6380; it has 6379/TCP (redis)`,
    );
  });
});

describe('resource', () => {
  it('evaluates core kinds, cluster-scoped by name and namespaced by label with minMatching', async (t) => {
    const namespace = await freshNamespace(t, kc);
    const byName = await probe({
      resource: {
        apiVersion: 'v1',
        kind: 'Namespace',
        name: namespace,
        expression: "self.status.phase == 'Active'",
      },
    });
    assert.deepEqual(byName, {
      healthy: true,
      message: `1/1 Namespace object named ${namespace} match \`self.status.phase == 'Active'\` (all must)`,
    });

    for (const [name, mode] of [
      ['a', 'primary'],
      ['b', 'replica'],
      ['c', 'replica'],
    ] as const)
      await client.request(`/api/v1/namespaces/${namespace}/configmaps`, {
        method: 'POST',
        body: { metadata: { name, labels: { role: 'db' } }, data: { mode } },
      });
    const spec = (minMatching?: number) => ({
      resource: {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        namespace,
        labelSelector: { matchExpressions: [{ key: 'role', operator: 'In' as const, values: ['db'] }] },
        expression: "self.kind == 'ConfigMap' && self.data.mode == 'replica'",
        ...(minMatching === undefined ? {} : { minMatching }),
      },
    });
    assert.deepEqual(await probe(spec(2)), {
      healthy: true,
      message: `2/3 ConfigMap objects in namespace ${namespace} labelled role in (db) match \`self.kind == 'ConfigMap' && self.data.mode == 'replica'\` (at least 2 must): ${namespace}/a has data.mode == 'primary'`,
    });
    assert.equal((await probe(spec(3))).healthy, false);
    assert.equal((await probe(spec())).healthy, false);
  });

  it('finds selecting no object at all unhealthy', async (t) => {
    const namespace = await freshNamespace(t, kc);
    assert.deepEqual(
      await probe({
        resource: {
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          namespace,
          labelSelector: { matchLabels: { app: 'rook-ceph-mgr' } },
          expression: 'self.status.readyReplicas == self.spec.replicas',
        },
      }),
      {
        healthy: false,
        message: `no Deployment objects in namespace ${namespace} labelled app=rook-ceph-mgr: nothing to evaluate, so unhealthy`,
      },
    );
  });

  it('counts an object the expression fails on as unhealthy, naming the missing field', async (t) => {
    const namespace = await freshNamespace(t, kc);
    await client.request(`/api/v1/namespaces/${namespace}/configmaps`, {
      method: 'POST',
      body: { metadata: { name: 'settings' }, data: { other: 'x' } },
    });
    const result = await probe({
      resource: {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        namespace,
        name: 'settings',
        expression: "self.data.mode == 'on'",
      },
    });
    assert.deepEqual(result, {
      healthy: false,
      message: `0/1 ConfigMap object in namespace ${namespace} named settings match \`self.data.mode == 'on'\` (all must): ${namespace}/settings fails: no field 'mode' in self.data (test for it with has(self.data.mode))`,
    });
  });

  it('fails to probe an unknown group or kind, a misplaced namespace, or an expression that does not compile', async () => {
    const base = { expression: 'true' };
    assert.match(
      await probeError({ resource: { ...base, apiVersion: 'nothing.gatehouse.test/v1', kind: 'Thing' } }),
      /^the API server does not serve nothing\.gatehouse\.test\/v1 \(GET \/apis\/nothing\.gatehouse\.test\/v1: 404\); is the API group installed/,
    );
    assert.match(
      await probeError({ resource: { ...base, apiVersion: 'apps/v1', kind: 'Deploymnet' } }),
      /^apps\/v1 has no kind Deploymnet; it serves .*DaemonSet, Deployment, .*StatefulSet/,
    );
    assert.equal(
      await probeError({ resource: { ...base, apiVersion: 'v1', kind: 'Node', namespace: 'default' } }),
      'Node (v1) is cluster-scoped; remove resource.namespace (default)',
    );
    assert.equal(
      await probeError({
        resource: { apiVersion: 'v1', kind: 'Node', expression: "object.status.phase == 'x'" },
      }),
      "CEL error in `object.status.phase == 'x'` at column 1: unknown variable 'object'; it can use self",
    );
  });
});

describe('workloads', () => {
  it('names a StatefulSet whose pods cannot schedule, filters by kind, and passes an empty selection', async (t) => {
    const namespace = await freshNamespace(t, kc);
    await client.request(`/apis/apps/v1/namespaces/${namespace}/statefulsets`, {
      method: 'POST',
      body: {
        metadata: { name: 'mon' },
        spec: {
          replicas: 2,
          serviceName: 'mon',
          selector: { matchLabels: { app: 'mon' } },
          template: {
            metadata: { labels: { app: 'mon' } },
            spec: {
              containers: [{ name: 'main', image: 'registry.example/mon:1' }],
              nodeSelector: { 'kubernetes.io/hostname': 'no-such-node' },
            },
          },
        },
      },
    });
    await eventually(
      { workloads: { namespace } },
      false,
      new RegExp(
        `^1/1 workload in namespace ${namespace} not rolled out or not available: StatefulSet ${namespace}/mon: .*0/2 available$`,
      ),
    );
    assert.deepEqual(await probe({ workloads: { namespace, kinds: ['Deployment', 'DaemonSet'] } }), {
      healthy: true,
      message: `no Deployments, DaemonSets in namespace ${namespace}: nothing to wait for`,
    });
  });

  it('selects namespaces by label', async (t) => {
    const namespace = await freshNamespace(t, kc);
    const label = `probe-${namespace}`;
    await client.request(`/api/v1/namespaces/${namespace}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { labels: { 'gatehouse.test/ns': label } } },
    });
    await client.request(`/apis/apps/v1/namespaces/${namespace}/deployments`, {
      method: 'POST',
      body: {
        metadata: { name: 'api' },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'api' } },
          template: {
            metadata: { labels: { app: 'api' } },
            spec: { containers: [{ name: 'main', image: 'x' }] },
          },
        },
      },
    });
    await eventually(
      { workloads: { namespaceSelector: { matchLabels: { 'gatehouse.test/ns': label } } } },
      true,
      new RegExp(
        `^1 workload in namespaces labelled gatehouse\\.test/ns=${label} \\(${namespace}\\) rolled out and available \\(1 Deployment\\)$`,
      ),
    );
  });
});

describe('podDisruptionBudgets', () => {
  it('passes when no PodDisruptionBudget is selected', async (t) => {
    const namespace = await freshNamespace(t, kc);
    assert.deepEqual(await probe({ podDisruptionBudgets: { namespace } }), {
      healthy: true,
      message: `no PodDisruptionBudgets in namespace ${namespace}: nothing to violate`,
    });
  });
});

describe('nodes', () => {
  it('sees the sandbox nodes Ready', async () => {
    const result = await probe({ nodes: { selector: { matchLabels: { type: 'kwok' } } } });
    assert.equal(result.healthy, true, result.message);
    assert.match(result.message, /^(\d+)\/\1 nodes labelled type=kwok Ready \(at most 0 may be not Ready\)$/);
  });

  it('tolerates up to maxNotReady nodes that are not Ready', async (t) => {
    const scenario = nodesScenario();
    t.after(() => scenario.cleanup());
    const spec = await scenario.setup({ kc, namespace: 'default' });
    const selector = spec.nodes?.selector;
    await scenario.breakIt();
    const tolerant = { nodes: { selector, maxNotReady: 1 } };
    const result = await eventually(
      tolerant,
      true,
      /^1\/2 nodes labelled .* Ready \(at most 1 may be not Ready\): probe-[0-9a-f]+-b Ready=False/,
    );
    assert.ok(result.healthy);
    assert.equal((await probe({ nodes: { selector, maxNotReady: 0 } })).healthy, false);
  });
});

/** A client that notes every request it sends: path and query. */
class CountingRest extends RestClient {
  readonly sent: { path: string; query: RestRequest['query'] }[] = [];
  override request<T = unknown>(path: string, req: RestRequest = {}): Promise<T> {
    this.sent.push({ path, query: req.query });
    return super.request<T>(path, req);
  }
}

describe('periodic reads (ProbeContext.cached)', () => {
  it('a periodic nodes probe answers from the live Node cache as the API server would, and asks the server otherwise', async (t) => {
    const nodes = new Informer<KubeObject>({
      rest: client,
      path: '/api/v1/nodes',
      log: silentLogger(),
      transform: slimNode,
    });
    nodes.start();
    t.after(() => nodes.stop());
    await nodes.waitForSync();
    await waitFor('the Node watch to open', () => (nodes.live ? true : undefined));
    const cached = {
      nodes: (selector: LabelSelector | undefined) => (nodes.live ? nodes.select(selector) : undefined),
    };
    const run = async (spec: ProbeSpecFragment, withCache: boolean) => {
      const counting = new CountingRest(kc);
      const context = { ...probeContext(), rest: counting, ...(withCache ? { cached } : {}) };
      const result = await runProbe(spec, context).catch((error: unknown) => ({
        error: errorMessage(error),
      }));
      return { result, requests: counting.sent.length };
    };
    const selectors: (LabelSelector | undefined)[] = [
      undefined,
      { matchLabels: { type: 'kwok' } },
      { matchLabels: { type: 'none-such' } },
      { matchExpressions: [{ key: 'type', operator: 'In' as const, values: ['kwok', 'x'] }] },
      { matchExpressions: [{ key: 'type', operator: 'In' as const, values: ['kwok', 'kwok'] }] },
      { matchLabels: { type: 'kwok', 'kubernetes.io/os': 'linux' } },
      { matchExpressions: [{ key: 'type', operator: 'NotIn' as const, values: ['kwok'] }] },
      { matchExpressions: [{ key: 'node-role.kubernetes.io/control-plane', operator: 'Exists' as const }] },
      {
        matchExpressions: [
          { key: 'node-role.kubernetes.io/control-plane', operator: 'DoesNotExist' as const },
        ],
      },
    ];
    for (const selector of selectors) {
      const spec = { nodes: selector ? { selector } : {} };
      // Other test files create and delete Nodes meanwhile: the cache follows the server a
      // moment later, so the two answers are compared until a pair read back to back agrees.
      let pair: { fromServer: Awaited<ReturnType<typeof run>>; fromCache: Awaited<ReturnType<typeof run>> };
      for (let attempt = 1; ; attempt++) {
        pair = { fromServer: await run(spec, false), fromCache: await run(spec, true) };
        if (
          attempt === 10 ||
          JSON.stringify(pair.fromCache.result) === JSON.stringify(pair.fromServer.result)
        )
          break;
        await new Promise((r) => setTimeout(r, 500));
      }
      assert.deepEqual(pair.fromCache.result, pair.fromServer.result, JSON.stringify(selector));
      assert.equal(pair.fromCache.requests, 0, `cache read without a request: ${JSON.stringify(selector)}`);
      assert.ok(pair.fromServer.requests >= 1);
    }
    // A selector the API server refuses is its error, never "no such nodes" from the cache.
    const refused = await run({ nodes: { selector: { matchLabels: { 'bad key': 'x' } } } }, true);
    assert.equal(refused.requests, 1);
    assert.match(JSON.stringify(refused.result), /"error":"GET \/api\/v1\/nodes: 400 /);
    // Not live (the watch is down): the server is asked.
    await nodes.stop();
    assert.equal((await run({ nodes: { selector: { matchLabels: { type: 'kwok' } } } }, true)).requests, 1);
  });

  it("periodic lists ask the API server's watch cache (resourceVersion=0); a gate's are consistent reads", async (t) => {
    const namespace = await freshNamespace(t, kc);
    const spec = {
      resource: { apiVersion: 'v1', kind: 'ConfigMap', namespace, expression: 'true', maxMatching: 100 },
    };
    const versions = async (withCache: boolean) => {
      const counting = new CountingRest(kc);
      const context = {
        ...probeContext(),
        rest: counting,
        ...(withCache ? { cached: { nodes: () => undefined } } : {}),
      };
      const result = await runProbe(spec, context);
      assert.ok(result.healthy, result.message);
      return counting.sent.filter((r) => r.path.endsWith('/configmaps')).map((r) => r.query?.resourceVersion);
    };
    assert.deepEqual(await versions(true), ['0']);
    assert.deepEqual(await versions(false), [undefined]);
  });
});

describe('prometheus', () => {
  // The real Prometheus (sandbox/monitoring.ts), behind a proxy that records what the
  // probe sends; each test loads the alert rules it needs.
  let monitoring: Monitoring;
  let proxy: Awaited<ReturnType<typeof prometheusProxy>>;
  before(async () => {
    monitoring = await startTestMonitoring({ alertmanager: false });
    proxy = await prometheusProxy(monitoring.prometheusUrl);
  });
  after(async () => {
    await proxy.close();
    await monitoring.stop();
  });

  /** Loads rules that fire `alerts` at once (each `vector(1)`), and waits until exactly those fire. */
  async function firing(alerts: Record<string, Record<string, string>>) {
    const rules = Object.entries(alerts).map(([alert, labels]) => ({ alert, expr: 'vector(1)', labels }));
    // Prometheus keeps no group without rules: nothing to fire is no group at all.
    await monitoring.setRules('probe-test', rules.length ? [{ name: 'probe-test', rules }] : []);
    await waitFor(
      `Prometheus to fire ${Object.keys(alerts).join(', ') || 'nothing'}`,
      async (observe) => {
        const data = (await monitoring.prometheusApi('/api/v1/alerts')) as {
          alerts: { labels: Record<string, string>; state: string }[];
        };
        const names = data.alerts.filter((a) => a.state === 'firing').map((a) => a.labels.alertname ?? '');
        observe(names.join(', '));
        return JSON.stringify(names.sort()) === JSON.stringify(Object.keys(alerts).sort()) ? true : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200 },
    );
  }

  it('requires an empty result without a value range, and a sample with one', async () => {
    await firing({});
    const url = proxy.url;
    const query = 'ALERTS{alertstate="firing", severity="critical"}';
    assert.deepEqual(await probe({ prometheus: { url, query } }), {
      healthy: true,
      message: `query \`${query}\` returned no samples, as required`,
    });
    assert.equal(new URL(proxy.requests.at(-1)?.url ?? '', url).searchParams.get('query'), query);
    // This Prometheus scrapes nothing, so `up` has no samples.
    assert.deepEqual(await probe({ prometheus: { url, query: 'up', valueRange: { min: 1 } } }), {
      healthy: false,
      message: 'query `up` returned no samples; the range [1, +Inf] needs at least one',
    });
    await firing({
      CephHealthError: { severity: 'critical' },
      NodeDown: { severity: 'critical' },
    });
    // ALERTS carries the alert's state as a label of its own.
    assert.deepEqual(await probe({ prometheus: { url, query } }), {
      healthy: false,
      message: `query \`${query}\` returned 2 samples, expected none: ALERTS{alertname="CephHealthError", alertstate="firing", severity="critical"} 1, ALERTS{alertname="NodeDown", alertstate="firing", severity="critical"} 1`,
    });
    // No series x: scalar() of an empty vector is NaN.
    assert.deepEqual(
      await probe({ prometheus: { url, query: 'scalar(x)', valueRange: { min: 0, max: 1 } } }),
      {
        healthy: false,
        message: 'query `scalar(x)`: 1/1 sample outside [0, 1]: scalar NaN',
      },
    );
  });

  it('reports Prometheus errors and answers that are not the Prometheus API clearly', async (t) => {
    const url = monitoring.prometheusUrl;
    assert.equal(
      await probeError({ prometheus: { url, query: 'up{}}' } }),
      `Prometheus at ${url}/ refused /api/v1/query (400 bad_data): invalid parameter "query": 1:5: parse error: unexpected character: '}'`,
    );
    // Stand-in kept on purpose: a real Prometheus never answers its API with HTML; this is
    // another web application (here "Grafana") at the configured URL.
    const other = await localHttpServer((_req, res) =>
      res.writeHead(200).end('<!doctype html><title>Grafana</title>'),
    );
    t.after(() => other.close());
    const grafana = `http://127.0.0.1:${other.port}`;
    assert.equal(
      await probeError({ prometheus: { url: grafana, query: 'up' } }),
      `Prometheus at ${grafana}/ answered /api/v1/query with 200 and a body that is not JSON (is this the Prometheus API?): <!doctype html><title>Grafana</title>`,
    );
    assert.equal(
      await probeError({ prometheus: { url, query: '"hello"' } }),
      'Prometheus answered `"hello"` with a string result; the query must give an instant vector or a scalar',
    );
  });

  it('sends a bearer token read from a Secret', async (t) => {
    const namespace = await freshNamespace(t, kc);
    // Prometheus checks no bearer tokens itself: a proxy in front of it does.
    const guarded = await prometheusProxy(monitoring.prometheusUrl, 's3cret-token');
    t.after(() => guarded.close());
    await firing({ Watchdog: {} });
    await client.request(`/api/v1/namespaces/${namespace}/secrets`, {
      method: 'POST',
      body: { metadata: { name: 'prom-token' }, stringData: { token: 's3cret-token\n', wrong: 'guess' } },
    });
    const spec = (key: string) => ({
      url: guarded.url,
      alerts: { matchers: ['alertname=~"Ceph.*"'] },
      bearerTokenSecretRef: { name: 'prom-token', key },
    });
    const result = await prometheusProbe(
      spec('token'),
      probeContext('endpoints', AbortSignal.timeout(10_000), namespace),
    );
    assert.deepEqual(result, {
      healthy: true,
      message: 'no firing alert matches alertname=~"Ceph.*" (1 alert firing in all)',
    });
    assert.equal(guarded.requests.at(-1)?.authorization, 'Bearer s3cret-token');
    await assert.rejects(
      prometheusProbe(spec('wrong'), probeContext('endpoints', AbortSignal.timeout(10_000), namespace)),
      { message: /401/ },
    );
    await assert.rejects(
      prometheusProbe(spec('missing'), probeContext('endpoints', AbortSignal.timeout(10_000), namespace)),
      {
        message: `bearer token Secret ${namespace}/prom-token has no key missing (it has token, wrong)`,
      },
    );
  });

  it('reaches a Prometheus URL with a cluster DNS name through its Service in endpoints mode', async (t) => {
    const namespace = await freshNamespace(t, kc);
    await firing({});
    const seen = proxy.requests.length;
    await client.request(`/api/v1/namespaces/${namespace}/services`, {
      method: 'POST',
      body: { metadata: { name: 'prometheus' }, spec: { type: 'ExternalName', externalName: 'localhost' } },
    });
    const result = await probe({
      prometheus: { url: `http://prometheus.${namespace}.svc:${proxy.port}`, alerts: {} },
    });
    assert.deepEqual(result, {
      healthy: true,
      message: 'no alert firing (no matchers: any firing alert would count)',
    });
    assert.equal(proxy.requests.length - seen, 1);
  });
});

describe('runProbe', () => {
  it('refuses a spec with no probe or with two', async () => {
    await assert.rejects(runProbe({}, probeContext()), {
      message:
        'a ClusterHealthCheck must set exactly one probe (httpGet, tcpSocket, resource, workloads, podDisruptionBudgets, nodes, prometheus, job); this one sets none',
    });
    await assert.rejects(runProbe({ nodes: {}, tcpSocket: { host: '127.0.0.1', port: 1 } }, probeContext()), {
      message: /this one sets tcpSocket, nodes$/,
    });
  });
});
