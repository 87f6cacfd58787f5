// Rollouts an SRE can trust, against the sandbox: a plan before anything moves (a dry run
// the controller plans, with the order, skips and a node below the target's minimum host
// version named, through `gatehouse rollout plan`), then the rollout doing what it planned;
// a canary of one whose soak sees a check turn unhealthy halts before the second node;
// a pause before a node holds until promoted, and a promotion by someone without the verb
// is refused by the admission policy.
import assert from 'node:assert/strict';
import { writeFile, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { stringify } from 'yaml';
import {
  INSTANCE_LABEL,
  PROMOTE_ANNOTATION,
  PROMOTED_BY_ANNOTATION,
  PROMOTE_REASON_ANNOTATION,
  ROLLOUT_LABEL,
} from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { KubeApiError } from '../../src/kube/rest.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import { BOOT_DELAY_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { runCli } from '../support/cli.ts';
import { API, startGateController, watchActions, whoami } from '../support/gate.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  bindClusterRole,
  freshNamespace,
  impersonate,
  rest,
  switchableCheck,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { Rollouts, complete, condition, upgradeOf } from '../support/rollouts.ts';
import { createTalosNodes } from '../support/talos-nodes.ts';

const kc = testKubeConfig();
const client = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(`the sandbox in ${sandbox.dir} runs no Talos simulator: restart it`);
const talos = await loadTalosConfig({ path: sandbox.talosconfig });
const kubeconfig = process.env.GATEHOUSE_TEST_KUBECONFIG ?? '';
const kit = new Rollouts(client);
const instance = uniqueName('rollout-plan');
const requester = `${instance}-requester`;
let controller: Controller | undefined;

function nodes(t: TestContext, group: string, count: number, talosVersion = 'v1.13.0') {
  return createTalosNodes(t, client, {
    group,
    count,
    taint: 'gatehouse.test/rollout-plan',
    kubernetesVersion: sandbox.kubernetesVersion,
    talosVersion,
    addressBlock: 60,
    annotations: { [BOOT_DELAY_ANNOTATION]: '1s' },
  });
}

/** The nodes in the order their NodeActions were first seen (the rollout's order). */
async function startedOrder(t: TestContext, rollout: () => string): Promise<() => Promise<string[]>> {
  const list = await client.request<{ metadata: { resourceVersion: string } }>(`${API}/nodeactions?limit=1`);
  const seen: string[] = [];
  const log = watchActions(client, `${INSTANCE_LABEL}=${instance}`, list.metadata.resourceVersion, (a) => {
    if (a.metadata.labels?.[ROLLOUT_LABEL] === rollout() && !seen.includes(a.spec.nodeName))
      seen.push(a.spec.nodeName);
  });
  t.after(() => log.stop());
  return async () => {
    await log.stop();
    return seen;
  };
}

before(async () => {
  await installGatehouseAPI(kc);
  kit.me = await whoami(client);
  await bindClusterRole(undefined, kc, 'gatehouse:requester', { user: requester });
  controller = await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
});

after(async () => {
  await controller?.stop();
});

describe('a rollout planned first', () => {
  it('plans without touching a node, names a node below the minimum host version, and then does as planned', async (t) => {
    const group = uniqueName('plan');
    const old = await nodes(t, group, 8);
    const current = await nodes(t, `${group}-c`, 2, 'v1.13.1');
    // A plan that cannot succeed: one node two minors behind (1.13 needs a host of 1.11.0).
    const behind = uniqueName('behind');
    const [tooOld = '', fine = ''] = await nodes(t, behind, 2);
    await kit.setOsImage(tooOld, 'v1.10.7');
    const dir = await mkdtemp(join(tmpdir(), 'gatehouse-plan-'));
    const file = join(dir, 'rollout.yaml');
    const rolloutFile = (name: string, groups: string[]) =>
      stringify({
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeRollout',
        metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
        spec: upgradeOf(groups),
      });
    const refused = uniqueName('refused');
    t.after(() =>
      client.request(`${API}/noderollouts/${refused}`, { method: 'DELETE' }).catch(() => undefined),
    );
    await writeFile(file, rolloutFile(refused, [behind]));
    const cannot = await runCli(['rollout', 'plan', '-f', file, '--kubeconfig', kubeconfig]);
    assert.equal(cannot.code, 1, cannot.stderr);
    assert.match(cannot.stdout, new RegExp(`${tooOld}: Talos v1\\.10\\.7 is too old`));
    assert.match(cannot.stdout, /it cannot succeed as it stands/);
    assert.doesNotMatch(cannot.stdout, new RegExp(`${fine}.*too old`));

    // A Pod on one of the nodes that its PodDisruptionBudget allows no eviction of, and that
    // nothing recreates: the plan's drain forecast names it.
    const held = old[2] ?? '';
    const namespace = await freshNamespace(t);
    await client.request(`/api/v1/namespaces/${namespace}/pods`, {
      method: 'POST',
      body: {
        metadata: { name: 'db', labels: { app: 'db' } },
        spec: {
          nodeName: held,
          tolerations: [{ key: 'gatehouse.test/rollout-plan', operator: 'Exists', effect: 'NoSchedule' }],
          containers: [{ name: 'main', image: 'registry.example/db' }],
        },
      },
    });
    await client.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`, {
      method: 'POST',
      body: { metadata: { name: 'db' }, spec: { minAvailable: 1, selector: { matchLabels: { app: 'db' } } } },
    });
    await waitFor('the PodDisruptionBudget to allow no disruption', async () => {
      const pdb = await client.request<{ status?: { currentHealthy?: number; disruptionsAllowed?: number } }>(
        `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/db`,
      );
      return pdb.status?.currentHealthy === 1 && pdb.status.disruptionsAllowed === 0 ? true : undefined;
    });

    const name = uniqueName('planned');
    t.after(() => kit.deleteRolloutActions(name));
    t.after(() => client.request(`${API}/noderollouts/${name}`, { method: 'DELETE' }).catch(() => undefined));
    await writeFile(file, rolloutFile(name, [group, `${group}-c`]));
    const planned = await runCli(['rollout', 'plan', '-f', file, '-o', 'json', '--kubeconfig', kubeconfig]);
    assert.equal(planned.code, 0, planned.stderr);
    const plan = JSON.parse(planned.stdout) as {
      feasible: boolean;
      findings?: string[];
      nodes: { node: string; skip?: string; start?: string; drain?: { pods: number; words?: string[] } }[];
    };
    assert.equal(plan.feasible, true);
    const forecast = plan.nodes.find((p) => p.node === held)?.drain;
    assert.equal(forecast?.pods, 1);
    assert.match(
      forecast.words?.[0] ?? '',
      new RegExp(`${namespace}/db: PodDisruptionBudget db allows no disruption, unmanaged`),
    );
    assert.match(
      plan.findings?.join('\n') ?? '',
      new RegExp(`drain forecast: 1 node would meet trouble draining now .*${held}`),
    );
    assert.equal(plan.nodes.filter((p) => p.drain).length, 1, 'only that node');
    // Freed before the start, or its drain would wait for the budget.
    await client.request(`/api/v1/namespaces/${namespace}/pods/db?gracePeriodSeconds=0`, {
      method: 'DELETE',
    });
    assert.deepEqual(
      plan.nodes
        .filter((p) => p.skip !== undefined)
        .map((p) => p.node)
        .sort(),
      [...current].sort(),
    );
    assert.ok(plan.nodes.filter((p) => p.skip === undefined).every((p) => p.start !== undefined));
    assert.equal((await kit.rolloutActions(name)).length, 0, 'a plan touches no node');
    const order = await startedOrder(t, () => name);
    const start = await runCli(['rollout', 'start', name, '--kubeconfig', kubeconfig]);
    assert.equal(start.code, 0, start.stderr);
    const done = await kit.waitForRollout(name, 'to complete', complete);
    assert.deepEqual(
      await order(),
      plan.nodes.filter((p) => p.skip === undefined).map((p) => p.node),
      'the nodes went in the planned order',
    );
    assert.deepEqual(done.status?.counts, {
      pending: 0,
      running: 0,
      succeeded: 8,
      failed: 0,
      skipped: 2,
      vanished: 0,
    });
    assert.equal(old.length, 8);
  });
});

describe('canary, soak and pauses', () => {
  it('a canary of one whose soak sees a check turn unhealthy halts before the second node; promoted, it goes on', async (t) => {
    const group = uniqueName('canary');
    await nodes(t, group, 3);
    const check = await switchableCheck(t, kc, group, true, { [INSTANCE_LABEL]: instance }, ['Upgrade']);
    const name = await kit.createRollout(t, instance, [group], {
      maxParallel: 3,
      canary: { nodes: 1, soak: '10m' },
    });
    const soaking = await kit.waitForRollout(
      name,
      'to soak after its canary',
      (r) => r.status?.gate?.id === 'canary-soak',
    );
    assert.equal(condition(soaking, 'Progressing')?.reason, 'Soaking');
    assert.equal((await kit.rolloutActions(name)).length, 1, 'the canary went alone');
    await check.set(false);
    const halted = await kit.waitForRollout(
      name,
      'to halt on its soak',
      (r) => condition(r, 'Halted')?.reason === 'SoakFailed',
    );
    assert.match(
      condition(halted, 'Halted')?.message ?? '',
      new RegExp(`ClusterHealthCheck ${check.name} is unhealthy`),
    );
    assert.equal((await kit.rolloutActions(name)).length, 1, 'no second node');
    await check.set(true);
    // Healthy again, it stays halted: the soak failed, and only a person says go on.
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(condition(await kit.getRollout(name), 'Halted')?.reason, 'SoakFailed');
    const promoted = await runCli([
      'rollout',
      'promote',
      name,
      '--reason',
      'flap understood: a probe restart',
      '--kubeconfig',
      kubeconfig,
    ]);
    assert.equal(promoted.code, 0, promoted.stderr);
    const done = await kit.waitForRollout(name, 'to complete', complete);
    assert.equal(done.status?.counts?.succeeded, 3);
    assert.equal(done.status.promotions?.[0]?.gate, 'canary-soak');
    assert.equal(done.status.promotions[0].by, kit.me);
  });

  it('pauses before a node until promoted; a promotion without the verb is refused', async (t) => {
    const group = uniqueName('pause');
    const [first = '', second = ''] = await nodes(t, group, 2);
    const name = await kit.createRollout(t, instance, [group], {
      maxParallel: 2,
      pauseBefore: { nodes: [second] },
    });
    const paused = await kit.waitForRollout(
      name,
      'to pause before the second node',
      (r) => r.status?.gate?.id === `pause/${second}`,
    );
    assert.equal(condition(paused, 'Halted')?.reason, 'PausedBefore');
    assert.deepEqual(
      (await kit.rolloutActions(name)).map((a) => a.spec.nodeName),
      [first],
    );
    const asRequester = rest(impersonate(kc, requester));
    const refusal = await asRequester
      .request(`${API}/noderollouts/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: {
          metadata: {
            annotations: {
              [PROMOTE_ANNOTATION]: `pause/${second}`,
              [PROMOTED_BY_ANNOTATION]: requester,
              [PROMOTE_REASON_ANNOTATION]: 'I want it done',
            },
          },
        },
      })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    assert.ok(refusal instanceof KubeApiError, 'refused');
    assert.equal(refusal.code, 403);
    assert.match(refusal.message, /verb promote on noderollouts/);
    const promoted = await runCli([
      'rollout',
      'promote',
      name,
      '--reason',
      'rack 2 looked at',
      '--kubeconfig',
      kubeconfig,
    ]);
    assert.equal(promoted.code, 0, promoted.stderr);
    const done = await kit.waitForRollout(name, 'to complete', complete);
    assert.equal(done.status?.counts?.succeeded, 2);
    assert.deepEqual(done.status.passedGates, [`pause/${second}`]);
  });
});
