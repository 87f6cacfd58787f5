// The drain forecast against the sandbox (real API server, scheduler, disruption
// controller; kwok nodes): a Pod whose nodeSelector pins it to the action's node is named
// in status.drainForecast as fitting nowhere else; under an ActionPolicy with
// drainForecast: Block a Reboot waits at the health gate naming it, and goes once the Pod
// is gone; a Pod whose PodDisruptionBudget allows no disruption is named with its budget.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { DRAIN_FORECAST_CHECK } from '../../src/actions/phases/drain-forecast-gate.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  TEST_NODE_TAINT,
  createAction,
  createPolicy,
  createTestNodes,
  deleteActionsAfter,
  events,
  getAction,
  startGateController,
  testPlace,
  waitForPhase,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { cordon } from '../../src/talos/drain.ts';
import { freshNamespace, rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('forecast');
let controller: Controller | undefined;
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await controller?.stop();
});

const TOLERATE = [{ key: TEST_NODE_TAINT, operator: 'Exists', effect: 'NoSchedule' }];

/** A one-replica Deployment whose Pod the scheduler can place only where `nodeSelector` says. */
async function deploy(namespace: string, name: string, nodeSelector: Record<string, string>): Promise<void> {
  await client.request(`/apis/apps/v1/namespaces/${namespace}/deployments`, {
    method: 'POST',
    body: {
      metadata: { name },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: {
            nodeSelector,
            tolerations: TOLERATE,
            containers: [
              { name: 'main', image: 'registry.example/app', resources: { requests: { cpu: '100m' } } },
            ],
          },
        },
      },
    },
  });
}

/** The name of the Deployment's Pod, once it runs on `node`. */
async function runningPod(namespace: string, app: string, node: string): Promise<string> {
  return waitFor(`the Pod of ${app} running on ${node}`, async () => {
    const list = await client.request<{
      items: { metadata: { name: string }; spec: { nodeName?: string }; status?: { phase?: string } }[];
    }>(`/api/v1/namespaces/${namespace}/pods`, { query: { labelSelector: `app=${app}` } });
    const p = list.items.find((i) => i.spec.nodeName === node && i.status?.phase === 'Running');
    return p?.metadata.name;
  });
}

async function reboot(t: TestContext, node: string): Promise<ActionObject> {
  const action = await createAction(client, instance, me, { nodeName: node, action: 'Reboot' });
  deleteActionsAfter(t, client, action.metadata.name);
  return action;
}

/** The action's drain forecast, once one names `pod`. */
async function forecastNaming(name: string, pod: string) {
  try {
    return await waitFor(`the drain forecast of ${name} to name ${pod}`, async () => {
      const f = (await getAction(client, name)).status?.drainForecast;
      return f?.pods?.some((p) => p.pod === pod) ? f : undefined;
    });
  } catch (error) {
    const a = await getAction(client, name);
    throw new Error(`${String(error)}; its status: ${JSON.stringify(a.status)}`, { cause: error });
  }
}

describe('drain forecast', () => {
  it('names a Pod pinned to the action’s node as fitting nowhere else', async (t) => {
    const place = await testPlace(t, client, 'forecast-pin');
    await deploy(place.namespace, 'pinned', { 'kubernetes.io/hostname': place.node });
    const pod = await runningPod(place.namespace, 'pinned', place.node);

    const action = await reboot(t, place.node);
    const forecast = await forecastNaming(action.metadata.name, pod);
    const named = forecast.pods?.find((p) => p.pod === pod);
    assert.equal(named?.namespace, place.namespace);
    assert.match(named.fitsNowhere ?? '', /node selector or required affinity does not match/);
    assert.equal(named.unmanaged, undefined, 'its ReplicaSet recreates it');
    assert.ok(forecast.fitsNowhere >= 1);
    assert.match(forecast.message, /not simulated: pod affinity/);
    // Warn, the default: recorded and said, never held.
    await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
    const reasons = (await events(client, action.metadata.name)).map((e) => e.reason);
    assert.ok(reasons.includes('DrainForecast'), reasons.join(', '));
  });

  it('under drainForecast: Block, a Reboot waits at the gate naming the Pod, and goes once it is gone', async (t) => {
    const place = await testPlace(t, client, 'forecast-block');
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': place.group } },
      maxConcurrent: 1,
      drainForecast: 'Block',
    });
    await deploy(place.namespace, 'pinned', { 'kubernetes.io/hostname': place.node });
    const pod = await runningPod(place.namespace, 'pinned', place.node);

    const action = await reboot(t, place.node);
    const name = action.metadata.name;
    const record = await waitFor(`${name} to be held by the drain forecast`, async (observe) => {
      const a = await getAction(client, name);
      observe(JSON.stringify(a.status));
      const r = a.status?.checks?.find((c) => c.name === DRAIN_FORECAST_CHECK);
      return r && !r.healthy ? { r, a } : undefined;
    });
    assert.equal(record.a.status?.phase, 'WaitingForHealth');
    assert.match(record.r.message ?? '', new RegExp(`${place.namespace}/${pod}: fits on no other node`));
    assert.match(record.r.message ?? '', new RegExp(`ActionPolicy ${policy}`));

    await client.request(`/apis/apps/v1/namespaces/${place.namespace}/deployments/pinned`, {
      method: 'DELETE',
      body: { propagationPolicy: 'Background' },
    });
    const approved = await waitForPhase(client, name, 'Approved', 60_000);
    const passed = approved.status?.checks?.find((c) => c.name === DRAIN_FORECAST_CHECK);
    assert.equal(passed?.healthy, true);
    assert.equal(approved.status?.drainForecast?.fitsNowhere, 0);
  });

  it('names a Pod whose PodDisruptionBudget allows no disruption', async (t) => {
    const namespace = await freshNamespace(t);
    const group = uniqueName('forecast-pdb');
    const [target = '', other = ''] = await createTestNodes(t, client, group, 2, {
      'gatehouse.test/group': group,
    });
    // The Pod starts on the target (the other node is cordoned meanwhile), and could move
    // to the other: only its budget is in the way.
    await cordon(client, other, true);
    await deploy(namespace, 'db', { 'gatehouse.test/group': group });
    const pod = await runningPod(namespace, 'db', target);
    await cordon(client, other, false);
    await client.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`, {
      method: 'POST',
      body: { metadata: { name: 'db' }, spec: { minAvailable: 1, selector: { matchLabels: { app: 'db' } } } },
    });
    await waitFor('the budget to allow no disruption with its Pod healthy', async () => {
      const pdb = await client.request<{ status?: { currentHealthy?: number; disruptionsAllowed?: number } }>(
        `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/db`,
      );
      return pdb.status?.currentHealthy === 1 && pdb.status.disruptionsAllowed === 0 ? true : undefined;
    });

    const action = await reboot(t, target);
    const forecast = await forecastNaming(action.metadata.name, pod);
    const named = forecast.pods?.find((p) => p.pod === pod);
    assert.equal(named?.podDisruptionBudget, 'db');
    assert.equal(named.fitsNowhere, undefined, `it fits on ${other}: ${forecast.message}`);
    assert.equal(forecast.blockedByPDB, 1);
  });
});
