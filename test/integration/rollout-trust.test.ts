// A NodeRollout's trust, against the sandbox with the shipped RBAC and admission policy,
// the controller running as its own ServiceAccount:
//   - a requester cannot widen, re-aim or speed up someone else's bypassed rollout: any
//     change of its spec but pausing needs the verb bypass, and records who granted it
//     (spec.bypass.grantedBy), which the NodeActions it makes then name;
//   - a rollout counts only the NodeActions it made: one that claims it (or holds the
//     name of one of its actions) is an impostor — a Warning naming it, its node held,
//     never counted done.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { BYPASS_GRANTED_BY_ANNOTATION, INSTANCE_LABEL, ROLLOUT_LABEL } from '../../src/api/names.ts';
import type { NodeRollout } from '../../src/api/node-rollout.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createPolicy,
  createTestNodes,
  deleteActionsAfter,
  deleteAfter,
  getAction,
  rebootNode,
  startGateController,
  waitForPhase,
  type ActionObject,
} from '../support/gate.ts';
import {
  controllerKubeConfig,
  impersonate,
  refusal,
  refusalOf,
  rest,
  serverSideApply,
  userBinding,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { controllerUsername } from '../../src/manifests/admission-policy.ts';
import { DEFAULT_NAMESPACE } from '../../src/manifests/controller.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const admin = rest(kc);
const RUN = uniqueName('rollout-trust');
const instance = RUN;
const owner = `owner-${RUN}@example.com`;
/** A second holder of the verb bypass. */
const holder = `holder-${RUN}@example.com`;
/** A requester without the verb. */
const requester = `requester-${RUN}@example.com`;
const as = (user: string) => rest(impersonate(kc, user));
let controller: Controller;

type RolloutObject = NodeRollout & { metadata: { name: string; uid: string } };

before(async () => {
  await installGatehouseAPI(kc);
  await serverSideApply(kc, [
    userBinding(`${RUN}-requesters`, 'gatehouse:requester', [owner, holder, requester]),
    userBinding(`${RUN}-bypass`, 'gatehouse:bypass', [owner, holder]),
  ]);
  // The controller as the Deployment runs it: its own ServiceAccount, which the
  // NodeAction policy lets create actions on a rollout requester's behalf.
  controller = await startGateController(instance, { kubeConfig: await controllerKubeConfig(kc) });
  // RBAC reaches the authorizer asynchronously: wait until the owner may bypass.
  await waitFor('the bypass holder to be allowed to bypass', async () => {
    const review = await as(owner).request<{ status: { allowed: boolean } }>(
      '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews',
      {
        method: 'POST',
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SelfSubjectAccessReview',
          spec: { resourceAttributes: { group: 'talos.dev', resource: 'nodeactions', verb: 'bypass' } },
        },
      },
    );
    return review.status.allowed ? true : undefined;
  });
  // The admission policies reach admission on their own schedule: wait until both refuse
  // what this file shows refused (a rollout's bypass sped up, an action claiming it).
  const warmUp = uniqueName('trust-warm-up');
  const rollout = await as(owner).request<RolloutObject>(`${API}/noderollouts`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NodeRollout',
      metadata: { name: warmUp, labels: { [INSTANCE_LABEL]: `${instance}-none` } },
      spec: {
        action: 'Reboot',
        nodeSelector: { matchLabels: { 'gatehouse.test/group': `${RUN}-no-node` } },
        paused: true,
        bypass: { hooks: true, reason: 'warm-up of the admission policy' },
        requestedBy: owner,
      },
    },
  });
  const refuses = (request: () => Promise<unknown>) => async () => {
    try {
      await request();
      return undefined;
    } catch (error) {
      return refusalOf(error).code === 403 ? true : undefined;
    }
  };
  await waitFor(
    'the rollout policy to refuse a requester speeding up a bypassed rollout',
    refuses(() => patchRollout(requester, warmUp, { maxParallel: 2 })),
  );
  await waitFor(
    'the action policy to refuse an action claiming a rollout',
    refuses(() =>
      as(requester).request(`${API}/nodeactions`, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'NodeAction',
          metadata: {
            name: uniqueName('trust-warm-up'),
            ownerReferences: [
              {
                apiVersion: 'talos.dev/v1alpha1',
                kind: 'NodeRollout',
                name: warmUp,
                uid: rollout.metadata.uid,
              },
            ],
          },
          spec: { nodeName: `${RUN}-no-node`, action: 'Reboot', requestedBy: requester },
        },
      }),
    ),
  );
  await admin.request(`${API}/noderollouts/${warmUp}`, { method: 'DELETE' });
});

after(async () => {
  await stopAll(controller);
  for (const name of [`${RUN}-requesters`, `${RUN}-bypass`])
    await admin
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
});

async function createRollout(
  t: TestContext,
  user: string,
  spec: Record<string, unknown>,
): Promise<RolloutObject> {
  const name = uniqueName('trust');
  const created = await as(user).request<RolloutObject>(`${API}/noderollouts`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NodeRollout',
      metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
      spec: { action: 'Reboot', execution: 'External', requestedBy: user, ...spec },
    },
  });
  deleteAfter(t, admin, `${API}/noderollouts/${name}`);
  t.after(async () => {
    for (const a of await rolloutActions(name)) deleteActionsAfter(t, admin, a.metadata.name);
  });
  return created;
}

function patchRollout(user: string, name: string, spec: Record<string, unknown>): Promise<RolloutObject> {
  return as(user).request<RolloutObject>(`${API}/noderollouts/${name}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { spec },
  });
}

async function rolloutActions(name: string): Promise<ActionObject[]> {
  const list = await admin.request<{ items: ActionObject[] }>(`${API}/nodeactions`, {
    query: { labelSelector: `${ROLLOUT_LABEL}=${name}` },
  });
  return list.items;
}

async function rolloutEvents(name: string): Promise<{ type: string; reason: string; message: string }[]> {
  const list = await admin.request<{ items: { type: string; reason: string; message: string }[] }>(
    '/api/v1/namespaces/default/events',
    { query: { fieldSelector: `involvedObject.name=${name},involvedObject.kind=NodeRollout` } },
  );
  return list.items;
}

const getRollout = (name: string) => admin.request<RolloutObject>(`${API}/noderollouts/${name}`);

/** Performs an Approved External Reboot as its requester would: marks it, and the node reboots. */
async function perform(user: string, action: string): Promise<void> {
  const approved = await waitForPhase(admin, action, ['Approved', 'Failed', 'Denied']);
  assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
  await as(user).request(`${API}/nodeactions/${action}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { metadata: { annotations: { 'talos.dev/executed': 'true' } } },
  });
  await rebootNode(admin, approved.spec.nodeName);
  const done = await waitForPhase(admin, action, ['Succeeded', 'Failed']);
  assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
}

describe('a bypassed NodeRollout', () => {
  it('cannot be widened, re-aimed or sped up by a requester; a holder who changes it is recorded as its grantor', async (t) => {
    const group = uniqueName('bypassed');
    const [first = '', second = ''] = await createTestNodes(t, admin, group, 2, {
      'gatehouse.test/group': group,
    });
    // Health checks gate both nodes, and the second is unhealthy.
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
    const reason = 'the first node must reboot now: its kernel leaks memory';
    const rollout = await createRollout(t, owner, {
      nodeSelector: { matchLabels: { 'kubernetes.io/hostname': first } },
      paused: true,
      bypass: { healthChecks: true, hooks: true, reason },
    });
    const name = rollout.metadata.name;

    // The attack: take in the second node, run both at once, start it.
    for (const change of [
      { nodeSelector: { matchLabels: { 'gatehouse.test/group': group } } },
      { maxParallel: 2 },
      { paused: false },
      { nodeSelector: { matchLabels: { 'gatehouse.test/group': group } }, maxParallel: 2, paused: false },
    ]) {
      const refused = await refusal(patchRollout(requester, name, change));
      assert.equal(refused.code, 403, JSON.stringify(change));
      assert.match(
        refused.message,
        /spec\.bypass needs the verb bypass on nodeactions\.talos\.dev \(ClusterRole gatehouse:bypass\) to set it, and to change anything but spec\.paused: true in a rollout that bypasses/,
      );
    }
    // Pausing it is anyone's (it only stops it); so is lifting the bypass.
    await patchRollout(requester, name, { paused: true });

    // A holder of the verb may change it, and must say it is the one who does.
    const unnamed = await refusal(patchRollout(holder, name, { maxParallel: 2 }));
    assert.equal(unnamed.code, 403);
    assert.match(
      unnamed.message,
      new RegExp(
        `spec\\.bypass\\.grantedBy must name who changes a NodeRollout that bypasses, ${holder.replace(/\./g, '\\.')}, not ${owner.replace(/\./g, '\\.')} \\(spec\\.requestedBy`,
      ),
    );
    await patchRollout(owner, name, { paused: false });
    const [own] = await waitFor('the rollout to start its one node', async () => {
      const actions = await rolloutActions(name);
      return actions.length > 0 ? actions : undefined;
    });
    assert.equal(own?.spec.nodeName, first);
    assert.equal(own.metadata.annotations?.[BYPASS_GRANTED_BY_ANNOTATION], owner);
    await perform(owner, own.metadata.name);

    // The second node was never touched: no action, whatever the requester tried.
    assert.deepEqual(
      (await rolloutActions(name)).map((a) => a.spec.nodeName),
      [first],
    );

    // Now the holder widens it, on the record.
    await patchRollout(holder, name, {
      nodeSelector: { matchLabels: { 'kubernetes.io/hostname': null, 'gatehouse.test/group': group } },
      bypass: { grantedBy: holder },
    });
    const widened = await waitFor('the rollout to start the second node', async (observe) => {
      observe((await getRollout(name)).status?.message ?? '');
      const actions = await rolloutActions(name);
      return actions.find((a) => a.spec.nodeName === second);
    });
    assert.equal(widened.metadata.annotations?.[BYPASS_GRANTED_BY_ANNOTATION], holder);
    const approved = await waitForPhase(admin, widened.metadata.name, ['Approved', 'Failed']);
    const bypassed = approved.status?.conditions?.find((c) => c.type === 'Bypassed');
    assert.equal(
      bypassed?.message,
      `${owner} bypasses the health checks and pre-action hooks of Reboot on node ${second} (bypass granted by ${holder} on NodeRollout ${name}): ${reason}`,
    );
    await check.set(true);
  });
});

describe("a rollout's own NodeActions", () => {
  it('refuses a rollout mark on a NodeAction from a requester', async (t) => {
    const group = uniqueName('mark');
    const [node = ''] = await createTestNodes(t, admin, group, 1, { 'gatehouse.test/group': group });
    const rollout = await createRollout(t, owner, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      paused: true,
    });
    // A harmless ConfigChange that claims someone's rollout, to be marked executed and counted as the node's reboot.
    const claim = (metadata: Record<string, unknown>) =>
      as(requester).request<ActionObject>(`${API}/nodeactions`, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'NodeAction',
          // No instance label (a requester may not choose one): no controller here acts on it.
          metadata: { name: uniqueName('claim'), ...metadata },
          spec: {
            nodeName: node,
            action: 'ConfigChange',
            configChange: { mode: 'NoReboot' },
            execution: 'External',
            requestedBy: requester,
          },
        },
      });
    const ownerReferences = [
      {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeRollout',
        name: rollout.metadata.name,
        uid: rollout.metadata.uid,
        controller: true,
      },
    ];
    let refused = await refusal(claim({ ownerReferences }));
    assert.equal(refused.code, 403);
    assert.match(
      refused.message,
      /an ownerReference to a NodeRollout is set by the gatehouse controller alone \(or whoever may update noderollouts\/status\), on the NodeActions the rollout makes/,
    );
    refused = await refusal(claim({ labels: { [ROLLOUT_LABEL]: rollout.metadata.name } }));
    assert.equal(refused.code, 403);
    assert.match(
      refused.message,
      /the label talos\.dev\/rollout, the annotation talos\.dev\/bypass-granted-by and an ownerReference to a NodeRollout are set by the gatehouse controller alone \(or whoever may update noderollouts\/status\)/,
    );
    // Nor added later to an action of its own.
    const plain = await claim({});
    deleteActionsAfter(t, admin, plain.metadata.name);
    refused = await refusal(
      as(requester).request(`${API}/nodeactions/${plain.metadata.name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { ownerReferences } },
      }),
    );
    assert.equal(refused.code, 403);
  });

  it('an action that claims the rollout, or holds its action name, is an impostor: a Warning, the node held, never done', async (t) => {
    const group = uniqueName('impostor');
    const [claimed = '', squatted = '', plain = ''] = await createTestNodes(t, admin, group, 3, {
      'gatehouse.test/group': group,
    });
    // Room for the impostors and the rollout's own actions at once (the default is one).
    await createPolicy(t, admin, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      maxConcurrent: 3,
    });
    const rollout = await createRollout(t, owner, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      maxParallel: 3,
      paused: true,
    });
    const name = rollout.metadata.name;
    // What only an admin without the policy could make (the controller's own identity
    // stands in for one here, the policy exempting it): an action claiming the rollout,
    // done by a mark alone.
    const forger = as(controllerUsername(DEFAULT_NAMESPACE));
    const forged = await forger.request<ActionObject>(`${API}/nodeactions`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeAction',
        metadata: {
          name: uniqueName('harmless'),
          labels: { [INSTANCE_LABEL]: instance, [ROLLOUT_LABEL]: name },
          ownerReferences: [
            {
              apiVersion: 'talos.dev/v1alpha1',
              kind: 'NodeRollout',
              name,
              uid: rollout.metadata.uid,
              controller: true,
            },
          ],
        },
        spec: {
          nodeName: claimed,
          action: 'ConfigChange',
          configChange: { mode: 'NoReboot' },
          execution: 'External',
          requestedBy: requester,
        },
      },
    });
    deleteActionsAfter(t, admin, forged.metadata.name);
    await waitForPhase(admin, forged.metadata.name, 'Approved');
    await as(requester).request(`${API}/nodeactions/${forged.metadata.name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { 'talos.dev/executed': 'true' } } },
    });
    await waitForPhase(admin, forged.metadata.name, 'Succeeded');
    // And an action of the requester's own under the name the rollout gives its action for a node.
    const squatter = await as(requester).request<ActionObject>(`${API}/nodeactions`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeAction',
        // Without an instance label (a requester may not choose one): no controller here acts on it.
        metadata: { name: `${name}-${squatted}` },
        spec: {
          nodeName: squatted,
          action: 'ConfigChange',
          configChange: { mode: 'NoReboot' },
          execution: 'External',
          requestedBy: requester,
        },
      },
    });
    deleteActionsAfter(t, admin, squatter.metadata.name);

    await patchRollout(owner, name, { paused: false });
    const ownAction = await waitFor('the rollout to start the plain node', async () =>
      (await rolloutActions(name)).find((a) => a.spec.nodeName === plain),
    );
    await perform(owner, ownAction.metadata.name);
    const held = await waitFor('the rollout to hold both nodes, naming the impostors', async (observe) => {
      const r = await getRollout(name);
      observe(JSON.stringify(r.status?.nodes));
      const nodes = r.status?.nodes ?? [];
      const done = nodes.find((n) => n.node === plain)?.phase === 'Succeeded';
      const waiting = [claimed, squatted].every((n) => nodes.find((e) => e.node === n)?.phase === 'Waiting');
      return done && waiting ? r : undefined;
    });
    const entry = (node: string) => held.status?.nodes?.find((n) => n.node === node);
    assert.match(
      entry(claimed)?.message ?? '',
      new RegExp(
        `^NodeAction ${forged.metadata.name} is not one this rollout made \\(its name is not ${name}-${claimed}; it is a ConfigChange, not a Reboot; it was requested by ${requester.replace(/\./g, '\\.')}, not ${owner.replace(/\./g, '\\.')}\\)`,
      ),
    );
    assert.equal(entry(claimed)?.action, undefined, 'the forged action is not the node’s action');
    assert.match(
      entry(squatted)?.message ?? '',
      new RegExp(`^NodeAction ${name}-${squatted} is not one this rollout made`),
    );
    assert.equal(held.status?.conditions?.find((c) => c.type === 'Complete')?.status, 'False');
    assert.equal(held.status.counts?.succeeded, 1);
    const warnings = await waitFor('a Warning naming each impostor', async () => {
      const events = (await rolloutEvents(name)).filter((e) => e.reason === 'ImpostorAction');
      return events.length >= 2 ? events : undefined;
    });
    assert.ok(warnings.every((e) => e.type === 'Warning'));
    assert.deepEqual(
      warnings.map((e) => /^NodeAction (\S+)/.exec(e.message)?.[1]).sort(),
      [forged.metadata.name, `${name}-${squatted}`].sort(),
    );

    // Once they are gone, the rollout makes and counts its own actions for both nodes.
    for (const a of [forged, squatter])
      await admin.request(`${API}/nodeactions/${a.metadata.name}`, { method: 'DELETE' });
    for (const node of [claimed, squatted]) {
      const own = await waitFor(`the rollout's own action for ${node}`, async () =>
        (await rolloutActions(name)).find(
          (a) =>
            a.spec.nodeName === node && a.metadata.name === `${name}-${node}` && a.spec.action === 'Reboot',
        ),
      );
      await perform(owner, own.metadata.name);
    }
    await waitFor('the rollout to complete', async () => {
      const r = await getRollout(name);
      return r.status?.conditions?.find((c) => c.type === 'Complete')?.status === 'True' ? r : undefined;
    });
    assert.equal((await getAction(admin, `${name}-${claimed}`)).spec.action, 'Reboot');
  });
});
