// ActionPolicies against the sandbox: 20 actions over 10 nodes under maxConcurrent 3
// never have more than 3 approved and unfinished (sampled from a watch of every
// version); maintenance windows hold actions; two control-plane nodes never go at once.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { NodeActionPhase } from '../../src/api/node-action.ts';
import { APPROVED_PHASES, SLOT_PHASES } from '../../src/api/phases.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createPolicy,
  createTestNodes,
  deleteActionsAfter,
  getAction,
  hookTemplate,
  markExecuted,
  rebootNode,
  startGateController,
  waitForPhase,
  watchActions,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { freshNamespace, rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('gate-policy');
const selector = `${INSTANCE_LABEL}=${instance}`;
let controller: Controller;
let me = '';

async function currentResourceVersion(): Promise<string> {
  const list = await client.request<{ metadata: { resourceVersion: string } }>(`${API}/nodeactions`, {
    query: { labelSelector: selector, limit: 1 },
  });
  return list.metadata.resourceVersion;
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await stopAll(controller);
});

describe('ActionPolicy', () => {
  it('20 actions over 10 nodes under maxConcurrent 3: never more than 3 approved and unfinished', async (t) => {
    const group = uniqueName('pol');
    const labels = { 'gatehouse.test/group': group };
    const nodes = await createTestNodes(t, client, group, 10, labels);
    const namespace = await freshNamespace(t, kc);
    await client.request(`${API}/namespaces/${namespace}/prerebootjobs`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'PreRebootJob',
        metadata: { name: 'drain-osds' },
        spec: {
          nodeSelector: { matchLabels: labels },
          template: hookTemplate('Succeeded', '1s'),
          placement: 'Anywhere',
        },
      },
    });
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: labels },
      actions: ['Reboot'],
      maxConcurrent: 3,
    });

    // Sample every version of every action, as the API server serves them.
    const phase = new Map<string, NodeActionPhase | undefined>();
    let maxApproved = 0;
    let maxSlots = 0;
    const violations: string[] = [];
    const executing = new Set<string>();
    const requester = (action: ActionObject) => {
      // The requester: once approved, it reboots the node (after a short, varying while) and says so.
      if (action.status?.phase !== 'Approved' || executing.has(action.metadata.name)) return;
      executing.add(action.metadata.name);
      setTimeout(
        () => {
          void markExecuted(client, action.metadata.name)
            .then(() => rebootNode(client, action.spec.nodeName))
            .catch((error: unknown) => violations.push(`requester: ${String(error)}`));
        },
        200 + Math.floor(Math.random() * 1200),
      );
    };
    const log = watchActions(client, selector, await currentResourceVersion(), (action, type) => {
      phase.set(action.metadata.name, type === 'DELETED' ? undefined : action.status?.phase);
      const approved = [...phase.values()].filter((p) => p !== undefined && APPROVED_PHASES.has(p)).length;
      const slots = [...phase.values()].filter((p) => p !== undefined && SLOT_PHASES.has(p)).length;
      maxApproved = Math.max(maxApproved, approved);
      maxSlots = Math.max(maxSlots, slots);
      if (approved > 3) violations.push(`${approved} approved and unfinished after ${action.metadata.name}`);
      requester(action);
    });
    t.after(() => log.stop());

    const names: string[] = [];
    for (let i = 0; i < 20; i++) {
      const a = await createAction(
        client,
        instance,
        me,
        { nodeName: nodes[i % 10] as string },
        `${group}-a${String(i).padStart(2, '0')}`,
      );
      names.push(a.metadata.name);
      deleteActionsAfter(t, client, a.metadata.name);
    }
    const policyStatus = await waitFor('the policy status to show the budget in use', async () => {
      const p = await client.request<{
        status?: { matchingNodes?: number; allowedConcurrent?: number; activeActions?: number };
      }>(`${API}/actionpolicies/${policy}`);
      return p.status?.activeActions === 3 ? p.status : undefined;
    });
    assert.equal(policyStatus.matchingNodes, 10);
    assert.equal(policyStatus.allowedConcurrent, 3);

    const finished = await Promise.all(
      names.map((n) => waitForPhase(client, n, ['Succeeded', 'Failed', 'Denied'], 300_000)),
    );
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(log.errors, []);
    assert.deepEqual(violations, []);
    assert.deepEqual(
      finished
        .filter((a) => a.status?.phase !== 'Succeeded')
        .map((a) => `${a.metadata.name}: ${a.status?.message ?? ''}`),
      [],
    );
    assert.ok(maxApproved <= 3, `at most 3 approved and unfinished; saw ${maxApproved}`);
    assert.ok(maxSlots <= 3, `at most 3 holding slots (pre-hooks included); saw ${maxSlots}`);
    assert.equal(maxSlots, 3, 'the budget was used: three at once');
    // The passes above counted slots from the caches once these showed every slot
    // (src/actions/admission-read.ts): the budget held on that path too.
    const reads = await controller.metrics.admissionReads.get();
    const fromCache = reads.values.find((v) => v.labels.source === 'cache')?.value ?? 0;
    assert.ok(fromCache > 0, 'some admission passes counted from the caches');
    // Two actions per node, never at once: each node's second action started after its first finished.
    for (let i = 0; i < 10; i++) {
      const [first, second] = [finished[i], finished[i + 10]].sort(
        (a, b) => Date.parse(a?.status?.approvalTime ?? '') - Date.parse(b?.status?.approvalTime ?? ''),
      );
      assert.ok(
        Date.parse(first?.status?.completionTime ?? '') <=
          Date.parse(
            second?.status?.conditions?.find((c) => c.type === 'Admitted')?.lastTransitionTime ?? '',
          ),
        `on ${nodes[i] ?? ''} the second action was admitted after the first finished`,
      );
    }
  });

  it('holds actions outside maintenance windows and admits them when one opens', async (t) => {
    const group = uniqueName('win');
    const labels = { 'gatehouse.test/group': group };
    const [node] = await createTestNodes(t, client, group, 1, labels);
    // One minute a year, in a time zone 14 hours ahead of UTC, at an hour that is not now there.
    const hour = new Date().getUTCHours();
    const closed = `0 ${(hour + 12) % 24} 1 1 *`;
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: labels },
      maxConcurrent: 5,
      windows: [{ schedule: closed, duration: '1m', timeZone: 'Pacific/Kiritimati' }],
    });
    const action = await createAction(client, instance, me, { nodeName: node as string });
    deleteActionsAfter(t, client, action.metadata.name);
    const held = await waitFor('the action to wait for a window', async (observe) => {
      const a = await getAction(client, action.metadata.name);
      observe(a.status?.message ?? '');
      return a.status?.phase === 'Pending' && /no maintenance window is open/.test(a.status.message ?? '')
        ? a
        : undefined;
    });
    assert.match(
      held.status?.message ?? '',
      new RegExp(`ActionPolicy ${policy}: no maintenance window is open \\(the next opens at `),
    );
    const status = await waitFor('the policy status to report the closed window', async () => {
      const p = await client.request<{ status?: { windowOpen?: boolean; nextWindowStart?: string } }>(
        `${API}/actionpolicies/${policy}`,
      );
      return p.status?.windowOpen === false ? p.status : undefined;
    });
    assert.ok(Date.parse(status.nextWindowStart ?? '') > Date.now());
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await getAction(client, action.metadata.name)).status?.phase, 'Pending');

    // Every minute, for an hour: open now.
    await client.request(`${API}/actionpolicies/${policy}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { windows: [{ schedule: '* * * * *', duration: '1h', timeZone: 'Europe/Berlin' }] } },
    });
    const approved = await waitForPhase(client, action.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
  });

  it('reports a window that never opens as InvalidWindow, naming its schedule, and the action under it says so', async (t) => {
    const group = uniqueName('never');
    const labels = { 'gatehouse.test/group': group };
    const [node] = await createTestNodes(t, client, group, 1, labels);
    // 31 February: croner finds no date; the policy must not look like one that merely waits.
    const schedule = '0 3 31 2 *';
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: labels },
      maxConcurrent: 5,
      windows: [{ schedule, duration: '1h', timeZone: 'Europe/Berlin' }],
    });
    const invalid = await waitFor('the policy to be Valid False', async () => {
      const p = await client.request<{
        status?: { conditions?: { type: string; status: string; reason: string; message: string }[] };
      }>(`${API}/actionpolicies/${policy}`);
      const valid = p.status?.conditions?.find((c) => c.type === 'Valid');
      return valid?.status === 'False' ? valid : undefined;
    });
    assert.equal(invalid.reason, 'InvalidWindow');
    assert.match(
      invalid.message,
      /^windows that never open: windows\[0\]: schedule "0 3 31 2 \*" never opens: no date matches it/,
    );
    const action = await createAction(client, instance, me, { nodeName: node as string });
    deleteActionsAfter(t, client, action.metadata.name);
    const held = await waitFor('the action to say its window never opens', async (observe) => {
      const a = await getAction(client, action.metadata.name);
      observe(a.status?.message ?? '');
      return /never opens/.test(a.status?.message ?? '') ? a : undefined;
    });
    assert.equal(held.status?.phase, 'Pending');
    assert.match(
      held.status.message ?? '',
      new RegExp(
        `ActionPolicy ${policy}: no maintenance window is open, and none ever will: windows\\[0\\]: schedule "0 3 31 2 \\*" never opens`,
      ),
    );
  });

  it('holds actions through a change freeze, whatever the windows, and lets them go when it ends; a freeze of upgrades lets a reboot through', async (t) => {
    const group = uniqueName('freeze');
    const labels = { 'gatehouse.test/group': group };
    const [a, b] = await createTestNodes(t, client, group, 2, labels);
    const now = Date.now();
    const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
    const end = iso(now + 20_000);
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: labels },
      maxConcurrent: 5,
      // A window open all week, which the freeze overrides.
      windows: [{ schedule: '0 0 * * *', duration: '168h' }],
      freezes: [
        { start: iso(now - 60_000), end, reason: 'release day' },
        { start: iso(now - 60_000), end: iso(now + 3_600_000), actions: ['Upgrade'] },
      ],
    });
    const reported = await waitFor('the policy to report the freeze', async () => {
      const p = await client.request<{ status?: { frozenUntil?: string } }>(
        `${API}/actionpolicies/${policy}`,
      );
      return p.status?.frozenUntil;
    });
    assert.ok(reported > end, `the longer freeze (of upgrades) is reported: ${reported}`);
    const reboot = await createAction(client, instance, me, { nodeName: a as string });
    const upgrade = await createAction(client, instance, me, {
      nodeName: b as string,
      action: 'Upgrade',
      upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
    });
    deleteActionsAfter(t, client, reboot.metadata.name, upgrade.metadata.name);
    const held = await waitFor('the reboot to be held by the freeze', async () => {
      const x = await getAction(client, reboot.metadata.name);
      return /frozen until/.test(x.status?.message ?? '') ? x : undefined;
    });
    assert.equal(held.status?.phase, 'Pending');
    assert.match(
      held.status.message ?? '',
      new RegExp(
        `ActionPolicy ${policy}: frozen until ${end.replace('Z', '')}.*\\(release day\\), whatever the windows`,
      ),
    );
    const approved = await waitForPhase(client, reboot.metadata.name, ['Approved', 'Failed'], 60_000);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    assert.ok(Date.now() >= Date.parse(end), 'approved only once the freeze ended');
    const stillHeld = await getAction(client, upgrade.metadata.name);
    assert.equal(stillHeld.status?.phase, 'Pending');
    assert.match(stillHeld.status.message ?? '', /frozen until/);
  });

  it('per-kind limits: one upgrade at a time while reboots use the rest of the budget', async (t) => {
    const group = uniqueName('perkind');
    const labels = { 'gatehouse.test/group': group };
    const [n1, n2, n3] = (await createTestNodes(t, client, group, 3, labels)) as [string, string, string];
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: labels },
      maxConcurrent: 3,
      perAction: [{ actions: ['Upgrade'], maxConcurrent: 1 }],
    });
    const upgrade = (node: string) =>
      createAction(client, instance, me, {
        nodeName: node,
        action: 'Upgrade',
        upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
      });
    const first = await upgrade(n1);
    deleteActionsAfter(t, client, first.metadata.name);
    const approved = await waitForPhase(client, first.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    const second = await upgrade(n2);
    const reboot = await createAction(client, instance, me, { nodeName: n3 });
    deleteActionsAfter(t, client, second.metadata.name, reboot.metadata.name);
    const rebootApproved = await waitForPhase(client, reboot.metadata.name, ['Approved', 'Failed']);
    assert.equal(rebootApproved.status?.phase, 'Approved', rebootApproved.status?.message);
    const held = await waitFor('the second upgrade to be held by the upgrade budget', async () => {
      const x = await getAction(client, second.metadata.name);
      return /allows 1 Upgrade at once/.test(x.status?.message ?? '') ? x : undefined;
    });
    assert.equal(held.status?.phase, 'Pending');
    assert.match(
      held.status.message ?? '',
      new RegExp(
        `ActionPolicy ${policy} allows 1 Upgrade at once and 1 is in progress \\(${first.metadata.name} on ${n1}\\)`,
      ),
    );
  });

  it('never has two control-plane nodes in progress at once, whatever a policy allows', async (t) => {
    const group = uniqueName('cp');
    const labels = { 'gatehouse.test/group': group, 'node-role.kubernetes.io/control-plane': '' };
    const nodes = await createTestNodes(t, client, group, 2, labels);
    await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      maxConcurrent: 2,
    });
    const a = await createAction(client, instance, me, { nodeName: nodes[0] as string });
    const b = await createAction(client, instance, me, { nodeName: nodes[1] as string });
    deleteActionsAfter(t, client, a.metadata.name, b.metadata.name);
    const first = await waitFor('one of them to be approved', async () => {
      const both = await Promise.all([
        getAction(client, a.metadata.name),
        getAction(client, b.metadata.name),
      ]);
      return both.find((x) => x.status?.phase === 'Approved');
    });
    const other = first.metadata.name === a.metadata.name ? b : a;
    await new Promise((r) => setTimeout(r, 2000));
    const waiting = await getAction(client, other.metadata.name);
    assert.equal(waiting.status?.phase, 'Pending');
    assert.match(waiting.status.message ?? '', /never two control-plane nodes at once/);
    await markExecuted(client, first.metadata.name);
    await rebootNode(client, first.spec.nodeName);
    await waitForPhase(client, first.metadata.name, 'Succeeded');
    const next = await waitForPhase(client, other.metadata.name, ['Approved', 'Failed']);
    assert.equal(next.status?.phase, 'Approved');
  });

  it('an action of another controller instance still holds its node', async (t) => {
    const group = uniqueName('foreign');
    const [node = ''] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });
    // An Approved action on the node, handed to an instance that is not running.
    const foreign = await createAction(client, `${instance}-elsewhere`, me, { nodeName: node });
    deleteActionsAfter(t, client, foreign.metadata.name);
    await client.request(`${API}/nodeactions/${foreign.metadata.name}/status`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { status: { phase: 'Approved' } },
    });
    const ours = await createAction(client, instance, me, { nodeName: node });
    deleteActionsAfter(t, client, ours.metadata.name);
    const waiting = await waitFor('our action to be told why it waits', async () => {
      const a = await getAction(client, ours.metadata.name);
      assert.equal(a.status?.phase ?? 'Pending', 'Pending', `admitted beside ${foreign.metadata.name}`);
      return /controller instance/.test(a.status?.message ?? '') ? a : undefined;
    });
    assert.match(
      waiting.status?.message ?? '',
      new RegExp(
        `another action on ${node} is in progress: ${foreign.metadata.name} on ${node} \\(controller instance ${instance}-elsewhere\\)`,
      ),
    );
    // Once that one ends, ours goes.
    await client.request(`${API}/nodeactions/${foreign.metadata.name}/status`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { status: { phase: 'Cancelled' } },
    });
    const admitted = await waitForPhase(client, ours.metadata.name, ['Approved', 'Failed', 'Denied']);
    assert.equal(admitted.status?.phase, 'Approved', admitted.status?.message);
  });
});
