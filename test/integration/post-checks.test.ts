// Post-checks and rollback end to end against the sandbox and the Talos simulator: a
// rollout's upgrade whose node comes back Ready on the new version but fails the check
// that matters is rolled back — one MachineService.Rollback, the node running the version
// it ran before — and the rollout halts; promoted past it, the next node's upgrade passes
// its post-checks and succeeds.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  INSTANCE_LABEL,
  PROMOTE_ANNOTATION,
  PROMOTED_BY_ANNOTATION,
  PROMOTE_REASON_ANNOTATION,
} from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { BOOT_DELAY_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { createTalosNodes } from '../support/talos-nodes.ts';
import { API, startGateController, whoami, type ActionObject } from '../support/gate.ts';
import {
  rest,
  switchableCheck,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { Rollouts, complete, condition } from '../support/rollouts.ts';

const kc = testKubeConfig();
const client = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(`the sandbox in ${sandbox.dir} runs no Talos simulator: restart it`);
const talos = await loadTalosConfig({ path: sandbox.talosconfig });
const kit = new Rollouts(client);

interface NodeView {
  metadata: { annotations?: Record<string, string> };
  status?: { nodeInfo?: { osImage?: string } };
}
const readNode = (name: string) => client.request<NodeView>(`/api/v1/nodes/${name}`);

before(async () => {
  await installGatehouseAPI(kc);
  kit.me = await whoami(client);
});

describe('post-checks', () => {
  const instance = uniqueName('postchecks');
  let controller: Controller;
  before(async () => {
    controller = await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
  });
  after(() => controller.stop());

  it('rolls back an upgrade whose post-check fails and halts its rollout; promoted, the next node passes them', async (t) => {
    const group = uniqueName('pc');
    const [first = '', second = ''] = await createTalosNodes(t, client, {
      group,
      count: 2,
      taint: 'gatehouse.test/post-checks',
      kubernetesVersion: sandbox.kubernetesVersion,
      talosVersion: 'v1.13.0',
      addressBlock: 54,
      annotations: { [BOOT_DELAY_ANNOTATION]: '1s' },
    });
    // A check that gates no upgrade (only Reboot), unhealthy: only the post-checks see it.
    const csi = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance }, ['Reboot']);
    const name = await kit.createRollout(t, instance, [group], {
      maxParallel: 1,
      // The rolled-back node is a failure the budget counts, promoted or not.
      maxFailures: 1,
      postChecks: { checks: [csi.name], within: '3s' },
      onPostCheckFailure: 'Rollback',
    });

    const halted = await kit.waitForRollout(
      name,
      'to halt on a rollback',
      (r) => condition(r, 'Halted')?.reason === 'RolledBack',
    );
    assert.equal(halted.status?.gate?.id, `rollback/${first}`);
    // It halts as soon as the rollback is decided; the action ends once the node is back.
    const action = halted.status.nodes?.find((n) => n.node === first)?.action ?? '';
    const rolled = await waitFor(`NodeAction ${action} to end`, async () => {
      const a = await client.request<ActionObject>(`${API}/nodeactions/${action}`);
      return a.status?.phase === 'Failed' ? a : undefined;
    });
    assert.equal(rolled.status?.phase, 'Failed');
    assert.equal(rolled.status.rollback?.from, 'Talos (v1.13.1)');
    assert.equal(rolled.status.rollback.to, 'Talos (v1.13.0)');
    assert.equal(rolled.status.rollback.callResult, 'Acknowledged');
    assert.match(
      rolled.status.message ?? '',
      /post-checks not healthy within 3.0s .*rolled back from Talos \(v1\.13\.1\) to Talos \(v1\.13\.0\)/,
    );
    const calls = talosCallCounts((await readNode(first)).metadata.annotations);
    assert.equal(calls.Rollback, 1, 'one MachineService.Rollback');
    assert.equal(
      (await readNode(first)).status?.nodeInfo?.osImage,
      'Talos (v1.13.0)',
      'the previous version runs',
    );
    assert.equal(
      talosCallCounts((await readNode(second)).metadata.annotations).LifecycleUpgrade ?? 0,
      0,
      'halted',
    );

    // The check is fixed; promoted past the rollback, the next node passes its post-checks.
    await csi.set(true);
    await client.request(`${API}/noderollouts/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: {
        metadata: {
          annotations: {
            [PROMOTE_ANNOTATION]: `rollback/${first}`,
            [PROMOTED_BY_ANNOTATION]: kit.me,
            [PROMOTE_REASON_ANNOTATION]: 'the CSI driver was at fault, fixed',
          },
        },
      },
    });
    const done = await kit.waitForRollout(name, 'to complete', complete);
    const next = done.status?.nodes?.find((n) => n.node === second);
    assert.equal(next?.phase, 'Succeeded');
    const passed = await client.request<ActionObject>(`${API}/nodeactions/${next.action ?? ''}`);
    assert.equal(passed.status?.conditions?.find((c) => c.type === 'PostChecksPassed')?.status, 'True');
    assert.equal(passed.status.rollback, undefined);
    assert.equal((await readNode(second)).status?.nodeInfo?.osImage, 'Talos (v1.13.1)');
  });
});
