// NodeRollout end to end against the sandbox: the rollout controller creates one
// NodeAction per node, every gate applies to each (here the ActionPolicy budget), the
// controller performs them through the Talos simulator (Managed), and the rollout
// survives its controller being SIGKILLed at random moments — every node exactly once.
import assert from 'node:assert/strict';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { ControllerProcess } from '../support/controller-process.ts';
import { INSTANCE_LABEL, ROLLOUT_LABEL } from '../../src/api/names.ts';
import { APPROVED_PHASES } from '../../src/api/phases.ts';
import type { Controller } from '../../src/controller.ts';
import { TALOS_FAULT_ANNOTATION, BOOT_DELAY_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { talosCallCounts } from '../../sandbox/talos-simulator.ts';
import { loadTalosConfig, type TalosContext } from '../../src/talos/config.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { createTalosNodes, GROUP_LABEL } from '../support/talos-nodes.ts';
import {
  API,
  createPolicy,
  startGateController,
  watchActions,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { rest, testKubeConfig, testSandboxState, uniqueName, waitFor } from '../support/kube.ts';
import { ROLLOUT_IMAGE, Rollouts, complete, condition, type RolloutObject } from '../support/rollouts.ts';

const kc = testKubeConfig();
const client = rest(kc);
const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(`the sandbox in ${sandbox.dir} runs no Talos simulator: restart it`);
const talosconfig = sandbox.talosconfig;
const talos: TalosContext = await loadTalosConfig({ path: talosconfig });
const TAINT = 'gatehouse.test/rollouts';
const OLD = 'v1.13.0';
const NEW = 'v1.13.1';
let me = '';
const kit = new Rollouts(client);
const createRollout = kit.createRollout.bind(kit);
const getRollout = kit.getRollout.bind(kit);
const rolloutActions = kit.rolloutActions.bind(kit);
const waitForRollout = kit.waitForRollout.bind(kit);

interface NodeView {
  metadata: { name: string; annotations?: Record<string, string> };
  status?: { nodeInfo?: { osImage?: string } };
}
interface NodeDetail extends NodeView {
  spec?: { unschedulable?: boolean };
  status?: {
    nodeInfo?: { osImage?: string; bootID?: string };
    conditions?: { type: string; status: string }[];
  };
}

function nodes(
  t: TestContext,
  group: string,
  count: number,
  extra: { talosVersion?: string; annotations?: Record<string, string> } = {},
) {
  return createTalosNodes(t, client, {
    group,
    count,
    taint: TAINT,
    kubernetesVersion: sandbox.kubernetesVersion,
    talosVersion: extra.talosVersion ?? OLD,
    addressBlock: 50,
    annotations: { [BOOT_DELAY_ANNOTATION]: '1s', ...extra.annotations },
  });
}

async function talosCalls(node: string): Promise<Record<string, number>> {
  return talosCallCounts((await client.request<NodeView>(`/api/v1/nodes/${node}`)).metadata.annotations);
}

async function upgradeCalls(node: string): Promise<number> {
  const calls = await talosCalls(node);
  return (calls.Upgrade ?? 0) + (calls.LifecycleUpgrade ?? 0);
}

async function osImage(node: string): Promise<string | undefined> {
  return (await client.request<NodeView>(`/api/v1/nodes/${node}`)).status?.nodeInfo?.osImage;
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  kit.me = me;
});

describe('NodeRollout', () => {
  const instance = uniqueName('rollouts');
  let controller: Controller;
  before(async () => {
    controller = await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
  });
  after(() => controller.stop());

  it('rolls 10 nodes under a policy of 2: never more than 2 at once, each upgraded once, those at target skipped', async (t) => {
    const old = uniqueName('ro-old');
    const current = uniqueName('ro-cur');
    const upgraded = await nodes(t, old, 8);
    const skipped = await nodes(t, current, 2, { talosVersion: NEW });
    await createPolicy(t, client, instance, {
      nodeSelector: { matchExpressions: [{ key: GROUP_LABEL, operator: 'In', values: [old, current] }] },
      maxConcurrent: 2,
    });
    const list = await client.request<{ metadata: { resourceVersion: string } }>(
      `${API}/nodeactions?limit=1`,
    );
    let name = '';
    let peak = 0;
    const approved = new Map<string, boolean>();
    const log = watchActions(client, INSTANCE_LABEL + '=' + instance, list.metadata.resourceVersion, (a) => {
      if (!a.metadata.labels?.[ROLLOUT_LABEL] || a.metadata.labels[ROLLOUT_LABEL] !== name) return;
      approved.set(a.metadata.name, APPROVED_PHASES.has(a.status?.phase ?? 'Pending'));
      peak = Math.max(peak, [...approved.values()].filter(Boolean).length);
    });
    name = await createRollout(t, instance, [old, current], { maxParallel: 10 });
    const done = await waitForRollout(name, 'to complete', complete);
    await log.stop();
    assert.deepEqual(log.errors, []);
    assert.ok(peak <= 2, `${String(peak)} approved at once under a policy of 2`);
    assert.ok(peak >= 1);
    assert.deepEqual(done.status?.counts, {
      pending: 0,
      running: 0,
      succeeded: 8,
      failed: 0,
      skipped: 2,
      vanished: 0,
    });
    const actions = await rolloutActions(name);
    assert.deepEqual(
      actions.map((a) => a.spec.nodeName).sort(),
      [...upgraded].sort(),
      'one NodeAction per node, none for the skipped',
    );
    for (const a of actions) {
      assert.equal(a.status?.phase, 'Succeeded');
      assert.equal(a.spec.requestedBy, me);
      assert.ok(
        (a.metadata as { ownerReferences?: { uid: string }[] }).ownerReferences?.some(
          (o) => o.uid === done.metadata.uid,
        ),
      );
    }
    for (const n of upgraded) {
      assert.equal(await upgradeCalls(n), 1, `${n} upgraded once`);
      assert.equal(await osImage(n), `Talos (${NEW})`);
    }
    for (const n of skipped) assert.equal(await upgradeCalls(n), 0, `${n} at target, not touched`);
    // Applied again, a finished rollout does nothing.
    const again = await createRollout(t, instance, [old, current]);
    const second = await waitForRollout(again, 'to complete at once', complete, 30_000);
    assert.equal(second.status?.counts?.skipped, 10);
    assert.equal((await rolloutActions(again)).length, 0);
  });

  it('halts at maxFailures, naming the node and why; raising it resumes', async (t) => {
    const group = uniqueName('ro-fail');
    const [bad = '', ...good] = await nodes(t, group, 3);
    await client.request(`/api/v1/nodes/${bad}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [TALOS_FAULT_ANNOTATION]: 'upgrade-error' } } },
    });
    const name = await createRollout(t, instance, [group], { maxParallel: 1 });
    const halted = await waitForRollout(
      name,
      'to halt',
      (r) => condition(r, 'Halted')?.reason === 'FailureBudgetExhausted',
    );
    assert.match(condition(halted, 'Halted')?.message ?? '', new RegExp(`first ${bad}: Failed`));
    // Halted: nothing more starts, however long we look.
    await new Promise((r) => setTimeout(r, 3000));
    assert.deepEqual(
      (await rolloutActions(name)).map((a) => a.spec.nodeName),
      [bad],
    );
    await client.request(`${API}/noderollouts/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { maxFailures: 1 } },
    });
    const done = await waitForRollout(name, 'to complete', complete);
    assert.equal(done.status?.counts?.failed, 1);
    assert.equal(done.status.counts.succeeded, 2);
    for (const n of good) assert.equal(await upgradeCalls(n), 1);
  });

  it('paused starts none; resumed, it finishes', async (t) => {
    const group = uniqueName('ro-pause');
    await nodes(t, group, 2);
    const name = await createRollout(t, instance, [group], { paused: true, maxParallel: 2 });
    const paused = await waitForRollout(
      name,
      'to say it is paused',
      (r) => condition(r, 'Halted')?.reason === 'Paused',
    );
    assert.equal(paused.status?.counts?.pending, 2);
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await rolloutActions(name)).length, 0);
    await client.request(`${API}/noderollouts/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { paused: false } },
    });
    const done = await waitForRollout(name, 'to complete', complete);
    assert.equal(done.status?.counts?.succeeded, 2);
  });

  it('halts before its first node when a node cannot take the upgrade (preflight), naming it; fixed, it goes on', async (t) => {
    const group = uniqueName('ro-pre');
    const [old = '', fine = ''] = await nodes(t, group, 2);
    // One node two minors behind: Talos 1.13 needs a host of 1.11.0 or later.
    await kit.setOsImage(old, 'v1.10.7');
    const name = await createRollout(t, instance, [group], { maxParallel: 2 });
    const blocked = await waitForRollout(
      name,
      'to halt on the preflight',
      (r) => condition(r, 'Halted')?.reason === 'PreflightFailed',
    );
    assert.match(
      condition(blocked, 'Halted')?.message ?? '',
      new RegExp(
        `^preflight: 1 node cannot upgrade to ${NEW.replace(/\./g, '\\.')}: ${old}: Talos v1\\.10\\.7 is too old`,
      ),
    );
    assert.equal((await rolloutActions(name)).length, 0, 'no node started, not even the one that could');
    assert.equal(await upgradeCalls(fine), 0);
    // The node brought to a version Talos accepts: the rollout goes on by itself.
    await kit.setOsImage(old, 'v1.12.5');
    const done = await waitForRollout(name, 'to complete', complete);
    assert.equal(done.status?.counts?.succeeded, 2);
  });

  it('refuses Shutdown and Reset, and a bypass without a reason', async () => {
    for (const action of ['Shutdown', 'Reset']) {
      const error = await client
        .request(`${API}/noderollouts`, {
          method: 'POST',
          body: {
            apiVersion: 'talos.dev/v1alpha1',
            kind: 'NodeRollout',
            metadata: { name: uniqueName('ro-bad') },
            spec: { action, requestedBy: me },
          },
        })
        .then(
          () => undefined,
          (e: unknown) => e as Error,
        );
      assert.match(String(error), /must be Upgrade or Reboot/);
    }
    const error = await client
      .request(`${API}/noderollouts`, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'NodeRollout',
          metadata: { name: uniqueName('ro-bad') },
          spec: { action: 'Reboot', requestedBy: me, bypass: { hooks: true } },
        },
      })
      .then(
        () => undefined,
        (e: unknown) => e as Error,
      );
    assert.match(String(error), /spec.bypass.reason is required/);
    // Quarantine needs the controller's drain; a rollback, a Managed upgrade with post-checks.
    const refusals: [Record<string, unknown>, RegExp][] = [
      [
        { action: 'Reboot', execution: 'External', onDrainTimeout: 'Quarantine' },
        /spec.onDrainTimeout may be/,
      ],
      [
        { action: 'Reboot', postChecks: { checks: ['c'] }, onPostCheckFailure: 'Rollback' },
        /spec.onPostCheckFailure may be Rollback only/,
      ],
      [
        { action: 'Upgrade', upgrade: { image: ROLLOUT_IMAGE }, onPostCheckFailure: 'Rollback' },
        /spec.onPostCheckFailure may be Rollback only/,
      ],
    ];
    for (const [spec, why] of refusals) {
      const refused = await client
        .request(`${API}/noderollouts`, {
          method: 'POST',
          body: {
            apiVersion: 'talos.dev/v1alpha1',
            kind: 'NodeRollout',
            metadata: { name: uniqueName('ro-bad') },
            spec: { ...spec, requestedBy: me },
          },
        })
        .then(
          () => undefined,
          (e: unknown) => e as Error,
        );
      assert.match(String(refused), why);
    }
  });
});

/** An hourly window that opened a minute ago and stays open `minutes` in all. */
function openWindow(minutes: number) {
  const minute = (new Date().getUTCMinutes() + 59) % 60;
  return [{ schedule: `${String(minute)} * * * *`, duration: `${String(minutes)}m`, timeZone: 'UTC' }];
}

/** An hourly window that opens in half an hour. */
function closedWindow() {
  const minute = (new Date().getUTCMinutes() + 30) % 60;
  return [{ schedule: `${String(minute)} * * * *`, duration: '1m', timeZone: 'UTC' }];
}

describe('NodeRollout and maintenance windows', () => {
  const instance = uniqueName('rollouts-win');
  let controller: Controller | undefined;
  after(() => controller?.stop());

  it('refuses to start a node whose history says it cannot finish in what is left of the window', async (t) => {
    const group = uniqueName('ro-fit');
    const [slow = ''] = await nodes(t, group, 1);
    // Synthetic history, in place before the controller starts: two finished upgrades of
    // this node that took 20 minutes each from admission to completion.
    const history: string[] = [];
    for (const daysAgo of [1, 2]) {
      const name = uniqueName('ro-hist');
      await client.request(`${API}/nodeactions`, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'NodeAction',
          metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
          spec: { nodeName: slow, action: 'Upgrade', upgrade: { image: ROLLOUT_IMAGE }, requestedBy: me },
        },
      });
      history.push(name);
      const start = new Date(Date.now() - daysAgo * 86_400_000);
      const end = new Date(start.getTime() + 20 * 60_000);
      const created = await client.request<ActionObject>(`${API}/nodeactions/${name}`);
      await client.request(`${API}/nodeactions/${name}/status`, {
        method: 'PUT',
        body: {
          ...created,
          status: {
            phase: 'Succeeded',
            startTime: start.toISOString(),
            completionTime: end.toISOString(),
            message: 'synthetic history',
          },
        },
      });
    }
    t.after(() =>
      Promise.all(
        history.map((n) =>
          client.request(`${API}/nodeactions/${n}`, { method: 'DELETE' }).catch(() => undefined),
        ),
      ),
    );
    await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
      windows: openWindow(6),
    });
    controller = await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
    const name = await createRollout(t, instance, [group]);
    const waiting = await waitForRollout(
      name,
      'to hold the node back',
      (r) => r.status?.nodes?.[0]?.phase === 'Waiting',
      30_000,
    );
    assert.match(
      waiting.status?.message ?? '',
      new RegExp(`waiting for the next window: ${slow} needs ~20m, [4-6]m left`),
    );
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await rolloutActions(name)).length, 0, 'no NodeAction for a node that cannot finish');
    assert.equal(await upgradeCalls(slow), 0);
  });

  it('stops starting nodes when the window closes, and goes on in the next one', async (t) => {
    controller ??= await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
    const group = uniqueName('ro-win');
    await nodes(t, group, 3);
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
      windows: openWindow(40),
    });
    const name = await createRollout(t, instance, [group]);
    await waitForRollout(name, 'to finish its first node', (r) => (r.status?.counts?.succeeded ?? 0) >= 1);
    // The window closes (the policy's window moves half an hour away).
    const patchWindows = (windows: unknown) =>
      client.request(`${API}/actionpolicies/${policy}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { spec: { windows } },
      });
    await patchWindows(closedWindow());
    // Two ways to be held, depending on whether the next node's NodeAction was created
    // before the controller saw the window close: not started (the rollout waits), or
    // started and held Pending by the policy (its action waits; the rollout starts no more).
    const held = await waitFor(
      `rollout ${name} to be held by the closed window`,
      async (observe) => {
        const r = await getRollout(name);
        if ((r.status?.nodes ?? []).some((n) => n.phase === 'Waiting')) return { by: 'rollout', r } as const;
        const unfinished = (await rolloutActions(name)).filter(
          (a) => a.status?.phase !== 'Succeeded' && a.status?.phase !== 'Failed',
        );
        observe(
          unfinished
            .map((a) => `${a.metadata.name}: ${a.status?.phase ?? ''} ${a.status?.message ?? ''}`)
            .join(' | '),
        );
        return unfinished.length > 0 &&
          unfinished.every(
            (a) =>
              a.status?.phase === 'Pending' && /no maintenance window is open/.test(a.status.message ?? ''),
          )
          ? ({ by: 'action', r } as const)
          : undefined;
      },
      { timeoutMs: 240_000, intervalMs: 500 },
    );
    const started = (await rolloutActions(name)).length;
    assert.ok(started < 3, 'not every node had started');
    if (held.by === 'rollout')
      assert.match(held.r.status?.message ?? '', /waiting for the next window of ActionPolicy/);
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await rolloutActions(name)).length, started, 'no node starts while the window is closed');
    // The next window opens.
    await patchWindows(openWindow(40));
    const done = await waitForRollout(name, 'to complete in the next window', complete);
    assert.equal(done.status?.counts?.succeeded, 3);
  });
});

describe('NodeRollout and change freezes', () => {
  const instance = uniqueName('rollouts-frz');
  let controller: Controller | undefined;
  after(() => controller?.stop());

  it('a freeze begun while a rollout runs stops new nodes, and the rollout goes on when it ends', async (t) => {
    controller ??= await startGateController(instance, { talos: { config: talos, drainRetryMs: 500 } });
    const group = uniqueName('ro-frz');
    await nodes(t, group, 3);
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
    });
    const name = await createRollout(t, instance, [group]);
    await waitForRollout(name, 'to finish its first node', (r) => (r.status?.counts?.succeeded ?? 0) >= 1);
    // A change freeze of upgrades from now for 30 s.
    const end = new Date(Date.now() + 30_000).toISOString().replace(/\.\d{3}Z$/, 'Z');
    await client.request(`${API}/actionpolicies/${policy}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: {
        spec: {
          freezes: [
            {
              start: new Date(Date.now() - 1000).toISOString(),
              end,
              actions: ['Upgrade'],
              reason: 'demo day',
            },
          ],
        },
      },
    });
    // Held either way: the next node not started by the rollout, or its action Pending.
    await waitFor(
      `rollout ${name} to be held by the freeze`,
      async () => {
        const r = await getRollout(name);
        if (
          (r.status?.nodes ?? []).some((n) => n.phase === 'Waiting' && /frozen until/.test(n.message ?? ''))
        )
          return true;
        const unfinished = (await rolloutActions(name)).filter(
          (a) => a.status?.phase !== 'Succeeded' && a.status?.phase !== 'Failed',
        );
        return unfinished.length > 0 &&
          unfinished.every(
            (a) => a.status?.phase === 'Pending' && /frozen until/.test(a.status.message ?? ''),
          )
          ? true
          : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    const started = (await rolloutActions(name)).length;
    assert.ok(started < 3, 'not every node had started');
    const done = await waitForRollout(name, 'to complete after the freeze', complete);
    assert.equal(done.status?.counts?.succeeded, 3);
    const lastApproved = Math.max(
      ...(await rolloutActions(name)).map((a) =>
        Date.parse(a.status?.phaseHistory?.find((h) => h.phase === 'Approved')?.since ?? ''),
      ),
    );
    assert.ok(
      lastApproved >= Date.parse(end),
      `the last node was approved after the freeze ended (${new Date(lastApproved).toISOString()} ≥ ${end})`,
    );
  });
});

/**
 * What a stalled rollout looks like: its status, each of its NodeActions (phase,
 * conditions, execution record, finalizers, annotations) and each node as the Talos
 * simulator left it (its call counts, power and boot annotations, boot ID, readiness).
 */
async function rolloutPicture(name: string, nodeNames: readonly string[]): Promise<string> {
  const lines: string[] = [];
  const r = await getRollout(name).catch((e: unknown) => e);
  if (r instanceof Error) lines.push(`rollout ${name}: ${r.message}`);
  else {
    const rollout = r as RolloutObject;
    lines.push(`rollout ${name}: ${rollout.status?.message ?? '(no message)'}`);
    lines.push(`  counts ${JSON.stringify(rollout.status?.counts)}`);
    for (const c of rollout.status?.conditions ?? [])
      lines.push(`  condition ${c.type}=${c.status} ${c.reason}: ${c.message}`);
    for (const e of rollout.status?.nodes ?? []) lines.push(`  node ${JSON.stringify(e)}`);
  }
  for (const a of await rolloutActions(name).catch(() => [])) {
    lines.push(
      `action ${a.metadata.name} (${a.spec.nodeName}) ${a.status?.phase ?? '-'} since ${a.status?.phaseTime ?? '?'}: ${a.status?.message ?? ''}`,
    );
    lines.push(
      `  finalizers ${JSON.stringify(a.metadata.finalizers ?? [])} annotations ${JSON.stringify(a.metadata.annotations ?? {})}`,
    );
    lines.push(
      `  execution ${JSON.stringify(a.status?.execution ?? {})} bootIDBefore ${a.status?.bootIDBefore ?? '-'} bootIDAfter ${a.status?.bootIDAfter ?? '-'}`,
    );
    for (const c of a.status?.conditions ?? [])
      lines.push(`  condition ${c.type}=${c.status} ${c.reason}: ${c.message}`);
  }
  for (const n of nodeNames) {
    const node = await client.request<NodeDetail>(`/api/v1/nodes/${n}`).catch(() => undefined);
    if (!node) {
      lines.push(`node ${n}: cannot be read`);
      continue;
    }
    const sandboxAnnotations = Object.fromEntries(
      Object.entries(node.metadata.annotations ?? {}).filter(([k]) => k.startsWith('sandbox.gatehouse.dev/')),
    );
    const ready = node.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? '?';
    lines.push(
      `node ${n}: ${node.status?.nodeInfo?.osImage ?? '?'} boot ${node.status?.nodeInfo?.bootID ?? '?'} Ready=${ready}${node.spec?.unschedulable ? ' cordoned' : ''} ${JSON.stringify(sandboxAnnotations)}`,
    );
  }
  return lines.join('\n');
}

describe('NodeRollout under SIGKILL of its controller', () => {
  it('upgrades each of 10 nodes exactly once, none skipped', async (t) => {
    const instance = uniqueName('rollouts-kill');
    const group = uniqueName('ro-kill');
    const all = await nodes(t, group, 10);
    await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
      maxConcurrent: 3,
    });
    const logDir = await mkdtemp(join(tmpdir(), 'gatehouse-rollout-kill-'));
    const controller = new ControllerProcess(instance, logDir, talosconfig);
    controller.start();
    t.after(() => controller.stop());
    const name = await createRollout(t, instance, [group], { maxParallel: 3 });
    const kills = controller.rampage(async () => complete(await getRollout(name)) || controller.kills >= 10);
    let done: RolloutObject;
    try {
      done = await waitForRollout(name, 'to complete through the kills', complete, 480_000);
    } catch (error) {
      // A stall explains itself: what the rollout, its actions and its nodes show, and
      // what the controller said (every start's log is kept in logDir).
      controller.stop();
      throw new Error(
        `${(error as Error).message} (controller killed ${String(controller.kills)} times)\n${await rolloutPicture(name, all)}\n${await controller.tails()}`,
        { cause: error },
      );
    }
    await kills;
    controller.stop();
    assert.ok(controller.kills >= 1, 'the controller was killed at least once');
    assert.equal(done.status?.counts?.succeeded, 10);
    const actions = await rolloutActions(name);
    assert.deepEqual(
      actions.map((a) => a.spec.nodeName).sort(),
      [...all].sort(),
      'exactly one NodeAction per node',
    );
    // Once: one reboot into the new version. The install before it (LifecycleService.
    // Upgrade, to the boot disk) is repeatable, and is made again by a controller killed
    // between it and the record of the reboot (docs/decisions.md, "Managed execution").
    for (const n of all) {
      const calls = await talosCalls(n);
      const picture = async () => `\n${JSON.stringify(calls)}\n${await rolloutPicture(name, all)}`;
      assert.equal(calls.Reboot ?? 0, 1, `${n} rebooted exactly once${await picture()}`);
      assert.equal(calls.Upgrade ?? 0, 0, `${n}: no legacy upgrade${await picture()}`);
      assert.ok((calls.LifecycleUpgrade ?? 0) >= 1, `${n}: installed${await picture()}`);
      assert.equal(await osImage(n), `Talos (${NEW})`, n);
    }
    t.diagnostic(`controller killed ${String(controller.kills)} times; logs in ${logDir}`);
  });
});
