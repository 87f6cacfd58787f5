// Two replicas of the gate: only the leader writes; when it dies (without giving the
// lease up), the other takes over within the lease duration and finishes the action.
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { Metrics } from '../../src/metrics.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createTestNodes,
  deleteActionsAfter,
  hookTemplate,
  markExecuted,
  rebootNode,
  startGateController,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import { freshNamespace, rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('gate-leader');
const LEASE_MS = 3000;
let me = '';

async function writes(metrics: Metrics): Promise<number> {
  return (await metrics.statusWrites.get()).values.reduce((n, v) => n + v.value, 0);
}

async function jobsCreated(metrics: Metrics): Promise<number> {
  return (await metrics.hookJobsCreated.get()).values.reduce((n, v) => n + v.value, 0);
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
});

describe('leader election', () => {
  it('lets only the leader write, and hands over within the lease duration when it dies', async (t) => {
    const group = uniqueName('leader');
    const labels = { 'gatehouse.test/group': group };
    const [node] = await createTestNodes(t, client, group, 1, labels);
    const namespace = await freshNamespace(t, kc);
    await client.request(`${API}/namespaces/${namespace}/prerebootjobs`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'PreRebootJob',
        metadata: { name: 'noout' },
        spec: { nodeSelector: { matchLabels: labels }, template: hookTemplate('Succeeded', '2s') },
      },
    });
    const lease = uniqueName('gate-leader-lease');
    const replica = async (identity: string) => {
      const metrics = new Metrics({ defaultMetrics: false });
      const controller = await startGateController(instance, {
        metrics,
        leaderElection: {
          namespace: 'gatehouse-system',
          name: lease,
          identity,
          leaseDurationMs: LEASE_MS,
          renewDeadlineMs: 2000,
          retryPeriodMs: 300,
        },
      });
      t.after(() => controller.stop());
      return { controller, metrics };
    };
    const a = await replica('replica-a');
    await waitFor('replica a to lead', () => (a.controller.isLeader() ? true : undefined));
    const b = await replica('replica-b');

    const action = await createAction(client, instance, me, { nodeName: node as string });
    deleteActionsAfter(t, client, action.metadata.name);
    const approved = await waitForPhase(client, action.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    assert.ok((await writes(a.metrics)) > 0);
    assert.equal(await jobsCreated(a.metrics), 1);
    assert.equal(b.controller.isLeader(), false);
    assert.equal(await writes(b.metrics), 0, 'the follower wrote nothing');
    assert.equal(await jobsCreated(b.metrics), 0);

    // The leader dies without giving the lease up.
    await a.controller.leader?.abandon();
    const died = Date.now();
    await a.controller.stop();
    await markExecuted(client, action.metadata.name);
    await rebootNode(client, node as string);
    await waitFor('replica b to lead', () => (b.controller.isLeader() ? true : undefined), {
      timeoutMs: 15_000,
    });
    const handover = Date.now() - died;
    assert.ok(handover <= LEASE_MS + 2000, `handed over after ${handover}ms`);
    const done = await waitForPhase(client, action.metadata.name, ['Succeeded', 'Failed']);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    // b's counter goes up when its write returns, which may be just after the test sees it.
    await waitFor('the new leader to count its writes', async () =>
      (await writes(b.metrics)) > 0 ? true : undefined,
    );
    assert.equal(await jobsCreated(b.metrics), 0, 'the new leader created no Job again');
  });
});
