// onDrainTimeout: Quarantine end to end against the sandbox: nodes whose Pods a
// PodDisruptionBudget keeps from being evicted are set aside — cordoned, labelled,
// their actions ended before any Talos call — the rollout completes the rest, then
// tries each once more: one whose budget was lifted meanwhile is rebooted and set
// free, one still blocked stays quarantined for a person. No drain is forced: the
// blocked Pod is still there, and its node got no Reboot call.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CORDONED_BY_ANNOTATION, QUARANTINED_LABEL } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { BOOT_DELAY_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import { rolloutRetryName } from '../../src/rollouts/naming.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { createTalosNodes, GROUP_LABEL } from '../support/talos-nodes.ts';
import { startGateController, whoami } from '../support/gate.ts';
import {
  freshNamespace,
  rest,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { Rollouts, complete } from '../support/rollouts.ts';

const kc = testKubeConfig();
const client = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(`the sandbox in ${sandbox.dir} runs no Talos simulator: restart it`);
const talos = await loadTalosConfig({ path: sandbox.talosconfig });
const TAINT = 'gatehouse.test/quarantine';
const kit = new Rollouts(client);

interface NodeDetail {
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: { unschedulable?: boolean };
}

const readNode = (name: string) => client.request<NodeDetail>(`/api/v1/nodes/${name}`);
const reboots = async (name: string) =>
  talosCallCounts((await readNode(name)).metadata.annotations).Reboot ?? 0;

/** A Pod on `node` that a PodDisruptionBudget allows no eviction of. */
async function pinned(namespace: string, node: string, app: string): Promise<void> {
  await client.request(`/api/v1/namespaces/${namespace}/pods`, {
    method: 'POST',
    body: {
      metadata: { name: app, labels: { app } },
      spec: {
        nodeName: node,
        tolerations: [{ key: TAINT, operator: 'Exists', effect: 'NoSchedule' }],
        containers: [{ name: 'main', image: 'registry.example/db' }],
      },
    },
  });
  await client.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`, {
    method: 'POST',
    body: { metadata: { name: app }, spec: { minAvailable: 1, selector: { matchLabels: { app } } } },
  });
  await waitFor(`PDB ${app} to allow no disruption`, async () => {
    const pdb = await client.request<{ status?: { currentHealthy?: number; disruptionsAllowed?: number } }>(
      `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/${app}`,
    );
    return pdb.status?.currentHealthy === 1 && pdb.status.disruptionsAllowed === 0 ? true : undefined;
  });
}

before(async () => {
  await installGatehouseAPI(kc);
  kit.me = await whoami(client);
});

describe('NodeRollout onDrainTimeout: Quarantine', () => {
  const instance = uniqueName('quarantine');
  let controller: Controller;
  before(async () => {
    controller = await startGateController(instance, { talos: { config: talos, drainRetryMs: 300 } });
  });
  after(() => controller.stop());

  it('sets PDB-blocked nodes aside, completes the rest, retries each once at the end, and never forces one', async (t) => {
    const group = uniqueName('qn');
    const [free1, stuck, freed, free2] = await createTalosNodes(t, client, {
      group,
      count: 4,
      taint: TAINT,
      kubernetesVersion: sandbox.kubernetesVersion,
      talosVersion: 'v1.13.0',
      addressBlock: 52,
      annotations: { [BOOT_DELAY_ANNOTATION]: '1s' },
    });
    assert.ok(free1 && stuck && freed && free2);
    const namespace = await freshNamespace(t);
    await pinned(namespace, stuck, 'db');
    await pinned(namespace, freed, 'cache');

    const name = await kit.createRollout(t, instance, [group], {
      action: 'Reboot',
      upgrade: undefined,
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
      maxParallel: 1,
      maxQuarantined: 2,
      onDrainTimeout: 'Quarantine',
      drain: { timeout: '3s' },
    });

    // The first blocked node is set aside, cordoned for its retry and labelled, and the
    // rollout goes on; then the budget of one of them is lifted.
    const aside = await kit.waitForRollout(
      name,
      `${freed} set aside`,
      (r) => r.status?.nodes?.some((n) => n.node === freed && n.phase === 'Quarantined') === true,
    );
    const record = aside.status?.nodes?.find((n) => n.node === freed);
    assert.match(record?.quarantine?.blockedBy ?? '', /cache blocked by PodDisruptionBudget .*\/cache/);
    const marked = await readNode(freed);
    assert.equal(marked.spec?.unschedulable, true);
    assert.equal(marked.metadata.labels?.[QUARANTINED_LABEL], name);
    assert.equal(marked.metadata.annotations?.[CORDONED_BY_ANNOTATION], rolloutRetryName(name, freed));
    assert.equal(await reboots(freed), 0, 'no Talos call for a node that could not be drained');
    await client.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/cache`, {
      method: 'DELETE',
    });

    const done = await kit.waitForRollout(name, 'to complete', complete);
    const phase = (n: string) => done.status?.nodes?.find((e) => e.node === n);
    assert.equal(phase(free1)?.phase, 'Succeeded');
    assert.equal(phase(free2)?.phase, 'Succeeded');
    // The freed node: tried again at the end, rebooted once, uncordoned, label gone.
    assert.equal(phase(freed)?.phase, 'Succeeded');
    assert.equal(phase(freed)?.action, rolloutRetryName(name, freed));
    assert.equal(await reboots(freed), 1);
    const released = await readNode(freed);
    assert.notEqual(released.spec?.unschedulable, true);
    assert.equal(released.metadata.labels?.[QUARANTINED_LABEL], undefined);
    // The node still blocked: tried once more, left cordoned and labelled, never forced.
    assert.equal(phase(stuck)?.phase, 'Quarantined');
    assert.equal(phase(stuck)?.quarantine?.retried, true);
    assert.equal(done.status?.counts?.quarantined, 1);
    assert.match(done.status.message ?? '', /1 quarantined/);
    assert.equal(await reboots(stuck), 0, 'an undrainable node is never rebooted');
    const left = await readNode(stuck);
    assert.equal(left.spec?.unschedulable, true);
    assert.equal(left.metadata.labels?.[QUARANTINED_LABEL], name);
    const db = await client.request<{ metadata: { deletionTimestamp?: string } }>(
      `/api/v1/namespaces/${namespace}/pods/db`,
    );
    assert.equal(db.metadata.deletionTimestamp, undefined, 'the blocked Pod was never forced out');
    const actions = await kit.rolloutActions(name);
    assert.equal(
      actions.filter((a) => a.spec.nodeName === stuck).length,
      2,
      'its first action and one retry',
    );
  });
});
