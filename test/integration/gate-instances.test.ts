// Two controller instances at once (the instance label exists for canaries and
// migrations), against the sandbox with the shipped RBAC (each controller runs as the
// controller's ServiceAccount): their admissions take turns on one Lease, and each
// counts every instance's slot holders for the rules a node and etcd impose — so,
// requested together through each, two control-plane nodes are never in progress at
// once, nor two actions on one node (invariants 3 and 7), sampled from a watch of every
// version of every action.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { CONTROL_PLANE_LABEL, INSTANCE_LABEL } from '../../src/api/names.ts';
import { SLOT_PHASES } from '../../src/api/phases.ts';
import type { NodeActionPhase } from '../../src/api/node-action.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createTestNodes,
  deleteActionsAfter,
  markExecuted,
  rebootNode,
  startGateController,
  waitForPhase,
  watchActions,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { controllerKubeConfig, rest, testKubeConfig, uniqueName } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const RUN = uniqueName('gate-instances');
const instances = [`${RUN}-a`, `${RUN}-b`] as const;
const TRIALS = 8;
let controllers: Controller[] = [];
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  const kubeConfig = await controllerKubeConfig(kc);
  // As a real cluster has it: one etcd, whatever instance acts on its nodes (here, of the
  // two instances of this file: other files' control-plane nodes are other etcds).
  controllers = await Promise.all(
    instances.map((i) => startGateController(i, { kubeConfig, controlPlaneAcrossInstances: [...instances] })),
  );
});

after(async () => {
  await stopAll(...controllers);
});

/**
 * Watches both instances' actions, every version, and records each moment two of them
 * held slots that must never be held together: on one node, or on two control-plane nodes.
 */
async function watchBoth(t: TestContext, controlPlanes: ReadonlySet<string>) {
  const list = await client.request<{ metadata: { resourceVersion: string } }>(`${API}/nodeactions`, {
    query: { labelSelector: `${INSTANCE_LABEL} in (${instances.join(',')})`, limit: 1 },
  });
  const holding = new Map<string, { node: string; phase: NodeActionPhase }>();
  const violations: string[] = [];
  const log = watchActions(
    client,
    `${INSTANCE_LABEL} in (${instances.join(',')})`,
    list.metadata.resourceVersion,
    (action, type) => {
      const phase = action.status?.phase;
      if (type === 'DELETED' || phase === undefined || !SLOT_PHASES.has(phase))
        holding.delete(action.metadata.name);
      else holding.set(action.metadata.name, { node: action.spec.nodeName, phase });
      const held = [...holding.entries()];
      for (const [name, h] of held)
        for (const [other, o] of held) {
          if (name >= other) continue;
          if (h.node === o.node)
            violations.push(`${name} and ${other} both on ${h.node}: ${h.phase}, ${o.phase}`);
          else if (controlPlanes.has(h.node) && controlPlanes.has(o.node))
            violations.push(
              `control-plane nodes ${h.node} and ${o.node} at once: ${name} ${h.phase}, ${other} ${o.phase}`,
            );
        }
    },
  );
  t.after(() => log.stop());
  return { log, violations };
}

/** Requests the actions at the same moment, each through its instance; finishes each once approved, one at a time. */
async function together(t: TestContext, requests: { instance: string; node: string }[]): Promise<void> {
  const created = await Promise.all(
    requests.map((r, i) =>
      createAction(client, r.instance, me, { nodeName: r.node }, uniqueName(`${r.node}-${String(i)}`)),
    ),
  );
  deleteActionsAfter(t, client, ...created.map((a) => a.metadata.name));
  const left = new Set(created.map((a) => a.metadata.name));
  while (left.size > 0) {
    // Whichever is approved first is performed; the others wait for it.
    // (Succeeded already: both were let through, and the other's reboot finished it —
    // the violation the watch records.)
    const approved = await Promise.any(
      [...left].map((name) =>
        // Long: a real cluster's rule holds ours while another test file's control-plane
        // action (a simulated etcd of its own, 40s boots) is in progress.
        waitForPhase(client, name, ['Approved', 'Succeeded', 'Failed', 'Denied', 'Cancelled'], 300_000),
      ),
    );
    left.delete(approved.metadata.name);
    if (approved.status?.phase === 'Succeeded') continue;
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    await finish(approved);
  }
}

async function finish(action: ActionObject): Promise<void> {
  await markExecuted(client, action.metadata.name);
  await rebootNode(client, action.spec.nodeName);
  const done = await waitForPhase(client, action.metadata.name, ['Succeeded', 'Failed']);
  assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
}

describe('two controller instances at once', () => {
  it('never have two control-plane nodes in progress, requested together through each', async (t) => {
    const group = uniqueName('cp');
    const nodes = await createTestNodes(t, client, group, 3, {
      'gatehouse.test/group': group,
      [CONTROL_PLANE_LABEL]: '',
    });
    const { log, violations } = await watchBoth(t, new Set(nodes));
    for (let trial = 0; trial < TRIALS; trial++) {
      const [a = '', b = ''] = [nodes[trial % 3], nodes[(trial + 1) % 3]];
      await together(t, [
        { instance: instances[0], node: a },
        { instance: instances[1], node: b },
      ]);
    }
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(log.errors, []);
    assert.deepEqual(violations, []);
  });

  it('never have two actions on one node in progress, requested together through each', async (t) => {
    const group = uniqueName('node');
    const [node = ''] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });
    const { log, violations } = await watchBoth(t, new Set());
    for (let trial = 0; trial < TRIALS; trial++) {
      await together(t, [
        { instance: trial % 2 ? instances[1] : instances[0], node },
        { instance: trial % 2 ? instances[0] : instances[1], node },
      ]);
    }
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(log.errors, []);
    assert.deepEqual(violations, []);
  });
});
