// The controller runs ClusterHealthChecks against the real API server: status follows the
// world (healthy → unhealthy → healthy) with an Event at each transition, the HTTP health
// endpoints answer 200/503 as plain probes, and metrics and readiness are served.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it, type TestContext } from 'node:test';
import { Controller } from '../../src/controller.ts';
import { createLogger } from '../../src/log.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { freshNamespace, rest, setNodeReady, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { probeScenarios } from '../support/probe-scenarios.ts';

const kc = testKubeConfig();
/** The label on this file's checks, which its controller selects. */
const SUITE_LABEL = 'gatehouse.test/checks-controller';
const api = rest(kc);

/** A Node that kwok does not manage, so the test alone decides whether it is Ready. */
async function createOwnNode(name: string, label: string): Promise<void> {
  await api.request('/api/v1/nodes', {
    method: 'POST',
    body: {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, labels: { 'gatehouse.test/group': label } },
      // Nothing runs on a node kwok does not simulate: keep other tests' pods away.
      spec: { taints: [{ key: 'gatehouse.test/unmanaged', effect: 'NoSchedule' }] },
    },
  });
  await setReady(name, true);
}

function setReady(name: string, ready: boolean): Promise<void> {
  return setNodeReady(api, name, ready, ready ? 'ready' : 'container runtime down');
}

/** Creates one of this file's checks (its controller selects them), deleted after the test. */
async function createCheck(t: TestContext, name: string, spec: Record<string, unknown>): Promise<string> {
  const path = `/apis/talos.dev/v1alpha1/clusterhealthchecks/${name}`;
  await api.request('/apis/talos.dev/v1alpha1/clusterhealthchecks', {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ClusterHealthCheck',
      metadata: { name, labels: { [SUITE_LABEL]: '' } },
      spec,
    },
  });
  t.after(() => api.request(path, { method: 'DELETE' }).catch(() => undefined));
  return path;
}

interface HealthBody {
  healthy: boolean;
  message: string;
  checks: { name: string; state: string; message: string }[];
}

async function health(controller: Controller, path: string): Promise<{ status: number; body: HealthBody }> {
  const res = await fetch(`${controller.url}${path}`);
  return { status: res.status, body: (await res.json()) as HealthBody };
}

describe('ClusterHealthCheck controller', () => {
  let controller: Controller;
  const group = uniqueName('chc');
  const nodes = [`${group}-a`, `${group}-b`];
  const checkName = uniqueName('nodes-ready');
  /** The controller's log lines. */
  const logLines: string[] = [];

  before(async () => {
    await installGatehouseAPI(kc);
    for (const n of nodes) await createOwnNode(n, group);
    controller = await Controller.start({
      kubeConfig: kc,
      log: createLogger({
        level: 'debug',
        destination: { write: (line: string) => void logLines.push(line) },
      }),
      host: '127.0.0.1',
      port: 0,
      leaderElection: false,
      // Checks only: the gate would act on (and write the status of) other files' actions and policies.
      actions: false,
      // And only this file's checks: another file's controller owns the others' status.
      checkSelector: SUITE_LABEL,
    });
    await controller.waitForSync();
  });

  after(async () => {
    await controller.stop();
    await api
      .request(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${checkName}`, { method: 'DELETE' })
      .catch(() => undefined);
    for (const n of nodes)
      await api.request(`/api/v1/nodes/${n}`, { method: 'DELETE' }).catch(() => undefined);
  });

  it('is ready once its caches are synced, and serves metrics', async () => {
    const ready = await fetch(`${controller.url}/readyz`);
    assert.equal(ready.status, 200);
    const metrics = await (await fetch(`${controller.url}/metrics`)).text();
    assert.match(metrics, /# TYPE gatehouse_check_healthy gauge/);
  });

  it('follows the world from healthy to unhealthy and back, with status, events and HTTP', async () => {
    await api.request('/apis/talos.dev/v1alpha1/clusterhealthchecks', {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ClusterHealthCheck',
        metadata: { name: checkName, labels: { [SUITE_LABEL]: '' } },
        spec: {
          interval: '1s',
          timeout: '1s',
          failureThreshold: 1,
          actions: ['Reboot'],
          nodeSelector: { matchLabels: { 'node-role.kubernetes.io/control-plane': '' } },
          nodes: { selector: { matchLabels: { 'gatehouse.test/group': group } } },
        },
      },
    });
    const status = (want: boolean) =>
      waitFor(`status.healthy of ${checkName} to be ${String(want)}`, async (observe) => {
        const chc = await api.request<{
          status?: { healthy?: boolean; message?: string; conditions?: { type: string; status: string }[] };
        }>(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${checkName}`);
        observe(JSON.stringify(chc.status ?? {}));
        return chc.status?.healthy === want ? chc.status : undefined;
      });

    const healthy = await status(true);
    assert.deepEqual(
      healthy.conditions?.map((c) => [c.type, c.status]),
      [['Healthy', 'True']],
    );
    let answer = await health(controller, `/v1/health/${checkName}`);
    assert.equal(answer.status, 200);
    assert.equal(answer.body.checks[0]?.state, 'Healthy');

    await setReady(nodes[1] as string, false);
    const unhealthy = await status(false);
    assert.match(unhealthy.message ?? '', new RegExp(nodes[1] as string));
    answer = await health(controller, '/v1/health');
    assert.equal(answer.status, 503);
    assert.match(answer.body.message, new RegExp(`not healthy: .*${checkName}`));
    // It gates Reboot on control-plane nodes only.
    assert.equal((await health(controller, '/v1/health?action=Reboot&node=cp-1')).status, 503);
    const worker = await health(controller, `/v1/health/${checkName}?action=Reboot&node=worker-1`);
    assert.equal(worker.status, 200);
    assert.match(worker.body.message, /does not gate Reboot on worker-1/);
    assert.equal((await health(controller, `/v1/health/${checkName}?action=Upgrade&node=cp-1`)).status, 200);

    await setReady(nodes[1] as string, true);
    await status(true);
    const events = await waitFor('CheckUnhealthy and CheckHealthy events', async () => {
      const list = await api.request<{ items: { reason: string; message: string }[] }>(
        '/api/v1/namespaces/default/events',
        {
          query: { fieldSelector: `involvedObject.name=${checkName}` },
        },
      );
      const reasons = list.items.map((e) => e.reason);
      return reasons.includes('CheckUnhealthy') && reasons.filter((r) => r === 'CheckHealthy').length >= 2
        ? list.items
        : undefined;
    });
    assert.ok(events.some((e) => e.reason === 'CheckUnhealthy' && e.message.includes(nodes[1] as string)));
  });

  it('when restarted, neither rewrites a status its probes find unchanged nor records a transition nobody saw', async (t) => {
    const name = uniqueName('restart');
    const path = await createCheck(t, name, {
      interval: '1s',
      nodes: { selector: { matchLabels: { 'gatehouse.test/none': name } } },
    });
    type Observed = { metadata: { resourceVersion: string }; status?: { healthy?: boolean } };
    const written = await waitFor(`${name} healthy in its status`, async () => {
      const chc = await api.request<Observed>(path);
      return chc.status?.healthy === true ? chc : undefined;
    });
    const events = async () =>
      (
        await api.request<{ items: { reason: string }[] }>('/api/v1/namespaces/default/events', {
          query: { fieldSelector: `involvedObject.name=${name}` },
        })
      ).items.length;
    const eventsBefore = await waitFor('its CheckHealthy Event', async () =>
      (await events()) >= 1 ? events() : undefined,
    );
    // A second controller, as a restarted one: its state starts unknown.
    const restarted = await Controller.start({
      kubeConfig: kc,
      log: createLogger({ level: 'error', destination: { write: () => undefined } }),
      host: '127.0.0.1',
      port: 0,
      leaderElection: false,
      actions: false,
      checkSelector: SUITE_LABEL,
    });
    t.after(() => restarted.stop());
    const started = Date.now();
    await restarted.waitForSync();
    await waitFor('the restarted controller to have probed it twice', () => {
      const state = restarted.checks.view(name)?.state;
      return state?.healthy === true &&
        state.consecutiveSuccesses >= 2 &&
        (state.lastProbeTime?.getTime() ?? 0) > started
        ? true
        : undefined;
    });
    const after = await api.request<Observed>(path);
    assert.equal(
      after.metadata.resourceVersion,
      written.metadata.resourceVersion,
      'the status was rewritten',
    );
    assert.equal(await events(), eventsBefore, 'a transition was recorded');
  });

  it('never shows the credentials of a check URL: status, health, dashboard, Events, logs, metrics', async (t) => {
    const server = createServer((_req, res) => res.writeHead(500).end('down'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as AddressInfo).port;
    const secrets = ['probe-user', 'S3cretPass', 'T0kenValue', 'K3yValue', 'S1gValue'];
    const name = uniqueName('secret-url');
    await createCheck(t, name, {
      interval: '1s',
      timeout: '1s',
      failureThreshold: 1,
      httpGet: {
        url: `http://probe-user:S3cretPass@127.0.0.1:${String(port)}/healthz?token=T0kenValue&access_key=K3yValue&X-Amz-Signature=S1gValue&q=up`,
      },
    });
    const status = await waitFor(`${name} to be unhealthy, naming its URL`, async () => {
      const chc = await api.request<{ status?: { healthy?: boolean; message?: string } }>(
        `/apis/talos.dev/v1alpha1/clusterhealthchecks/${name}`,
      );
      return chc.status?.healthy === false && /127\.0\.0\.1/.test(chc.status.message ?? '')
        ? chc.status
        : undefined;
    });
    assert.match(
      status.message ?? '',
      /http:\/\/\*\*\*@127\.0\.0\.1:\d+\/healthz\?token=\*\*\*&access_key=\*\*\*&X-Amz-Signature=\*\*\*&q=up/,
    );
    const events = await waitFor('a CheckUnhealthy event', async () => {
      const list = await api.request<{ items: { reason: string; message: string }[] }>(
        '/api/v1/namespaces/default/events',
        { query: { fieldSelector: `involvedObject.name=${name}` } },
      );
      return list.items.some((e) => e.reason === 'CheckUnhealthy') ? list.items : undefined;
    });
    const surfaces: Record<string, string> = {
      status: JSON.stringify(status),
      '/v1/health': await (await fetch(`${controller.url}/v1/health`)).text(),
      [`/v1/health/${name}`]: await (await fetch(`${controller.url}/v1/health/${name}`)).text(),
      '/v1/dashboard': await (await fetch(`${controller.url}/v1/dashboard`)).text(),
      events: JSON.stringify(events),
      logs: logLines.join(''),
      '/metrics': await (await fetch(`${controller.url}/metrics`)).text(),
    };
    for (const [surface, text] of Object.entries(surfaces)) {
      if (surface !== '/metrics')
        assert.match(text, /\*\*\*@127\.0\.0\.1/, `${surface} names the URL, redacted`);
      for (const secret of secrets) assert.ok(!text.includes(secret), `${surface} shows ${secret}`);
    }
  });

  it('runs every probe type through ClusterHealthCheck objects: healthy, unhealthy, healthy', async (t) => {
    const scenarios = probeScenarios.map((make) => make());
    t.after(() => Promise.all(scenarios.map((s) => s.cleanup())));
    await Promise.all(
      scenarios.map(async (scenario) => {
        const name = uniqueName(`scenario-${scenario.name}`);
        const namespace = await freshNamespace(t);
        const probeSpec = await scenario.setup({ kc, namespace });
        await createCheck(t, name, { interval: '1s', timeout: '3s', failureThreshold: 1, ...probeSpec });
        const status = (healthy: boolean, message: RegExp) =>
          waitFor(
            `${scenario.name}: ${name} to report healthy=${String(healthy)} with ${String(message)}`,
            async (observe) => {
              const chc = await api.request<{ status?: { healthy?: boolean; message?: string } }>(
                `/apis/talos.dev/v1alpha1/clusterhealthchecks/${name}`,
              );
              observe(JSON.stringify(chc.status ?? {}));
              return chc.status?.healthy === healthy && message.test(chc.status.message ?? '')
                ? true
                : undefined;
            },
            { timeoutMs: 60_000, intervalMs: 250 },
          );
        await status(true, scenario.healthyMessage);
        await scenario.breakIt();
        await status(false, scenario.unhealthyMessage);
        await scenario.fixIt();
        await status(true, scenario.healthyMessage);
      }),
    );
  });

  it('answers bad questions with a 4xx that says what to fix', async () => {
    const cases: [string, number, RegExp][] = [
      ['/v1/health/no-such-check', 404, /ClusterHealthCheck "no-such-check" does not exist/],
      ['/v1/health?action=Explode&node=cp-1', 400, /action "Explode" is not one of Upgrade, Reboot/],
      ['/v1/health?action=Reboot', 400, /both \?action= and \?node=/],
      ['/v2/nothing', 404, /no such endpoint/],
    ];
    for (const [path, code, message] of cases) {
      const res = await fetch(`${controller.url}${path}`);
      assert.equal(res.status, code, path);
      assert.match(((await res.json()) as { error: string }).error, message, path);
    }
    const post = await fetch(`${controller.url}/v1/health`, { method: 'POST' });
    assert.equal(post.status, 405);
  });

  it('answers about a node that does not exist as about one without labels (no node enumeration)', async () => {
    const known = await fetch(`${controller.url}/v1/health?action=Reboot&node=${nodes[0] as string}`);
    const unknown = await fetch(`${controller.url}/v1/health?action=Reboot&node=no-such-node-anywhere`);
    assert.equal(unknown.status, known.status);
    const [a, b] = [(await known.json()) as HealthBody, (await unknown.json()) as HealthBody];
    assert.deepEqual(Object.keys(b), Object.keys(a));
    assert.doesNotMatch(JSON.stringify(b), /does not exist/);
    const one = await fetch(
      `${controller.url}/v1/health/${checkName}?action=Reboot&node=no-such-node-anywhere`,
    );
    assert.notEqual(one.status, 404);
  });
});
