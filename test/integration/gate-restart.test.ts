// Nothing is lost across controller restarts: all state is in the API server, so a new
// controller continues every action where the last one left it, and never creates a
// hook Job a second time. And finished actions are garbage-collected after retention.
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createTestNodes,
  deleteActionsAfter,
  getAction,
  waitForActionGone,
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
const instance = uniqueName('gate-restart');
let me = '';

async function jobNames(namespace: string, actionUid: string): Promise<string[]> {
  const list = await client.request<{ items: { metadata: { name: string } }[] }>(
    `/apis/batch/v1/namespaces/${namespace}/jobs`,
    { query: { labelSelector: `talos.dev/action-uid=${actionUid}` } },
  );
  return list.items.map((j) => j.metadata.name).sort();
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
});

describe('controller restarts', () => {
  it('continue every action where it was, creating no hook Job twice; finished actions are collected', async (t) => {
    const group = uniqueName('restart');
    const labels = { 'gatehouse.test/group': group };
    const [node] = await createTestNodes(t, client, group, 1, labels);
    const namespace = await freshNamespace(t, kc);
    for (const [kind, name, duration] of [
      ['prerebootjobs', 'slow-noout', '4s'],
      ['nodereadyjobs', 'unset-noout', '3s'],
    ] as const) {
      await client.request(`${API}/namespaces/${namespace}/${kind}`, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: kind === 'prerebootjobs' ? 'PreRebootJob' : 'NodeReadyJob',
          metadata: { name },
          spec: { nodeSelector: { matchLabels: labels }, template: hookTemplate('Succeeded', duration) },
        },
      });
    }
    let controller: Controller | undefined = await startGateController(instance);
    t.after(() => controller?.stop());
    const action = await createAction(client, instance, me, { nodeName: node as string });
    deleteActionsAfter(t, client, action.metadata.name);

    // Stopped while its pre-hook Job runs.
    await waitFor(
      'the pre-hook Job to run',
      async (observe) => {
        const a = await getAction(client, action.metadata.name);
        observe(`${a.status?.phase ?? ''}: ${a.status?.message ?? ''}`);
        return a.status?.hooks?.[0]?.phase === 'Running' ? true : undefined;
      },
      { timeoutMs: 90_000 },
    );
    await controller.stop();
    controller = undefined;
    const during = await jobNames(namespace, action.metadata.uid);
    assert.equal(during.length, 1);

    // A new controller takes over: the same Job, then approval.
    controller = await startGateController(instance);
    const approved = await waitForPhase(client, action.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    assert.deepEqual(
      await jobNames(namespace, action.metadata.uid),
      during,
      'the running Job was adopted, not created again',
    );

    // Stopped while the requester acts and the node reboots.
    await controller.stop();
    controller = undefined;
    await markExecuted(client, action.metadata.name);
    const boot = await rebootNode(client, node as string);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(
      (await getAction(client, action.metadata.name)).status?.phase,
      'Approved',
      'nobody acted meanwhile',
    );

    // The next controller follows the node to the end, and keeps finished actions only so long.
    controller = await startGateController(instance, { retention: { retentionMs: 3000, keepPerNode: 0 } });
    const done = await waitForPhase(client, action.metadata.name, ['Succeeded', 'Failed']);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.bootIDAfter, boot);
    const jobs = await jobNames(namespace, action.metadata.uid);
    assert.equal(jobs.length, 2, `one Job per hook: ${jobs.join(', ')}`);
    assert.deepEqual(
      done.status.hooks?.map((h) => [h.name, h.attempt, h.phase]),
      [
        ['slow-noout', 1, 'Succeeded'],
        ['unset-noout', 1, 'Succeeded'],
      ],
    );

    await waitForActionGone(
      client,
      action.metadata.name,
      'the finished action to be garbage-collected',
      30_000,
    );
  });
});
