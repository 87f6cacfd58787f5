// Bypass is authorised, not trusted: the shipped ValidatingAdmissionPolicy refuses a
// NodeAction that bypasses checks or hooks unless the requester holds the verb bypass
// on nodeactions.talos.dev and gives a reason, and refuses any NodeAction whose
// requestedBy is not the requesting user. The controller's ServiceAccount, which
// authorises its HTTP API callers itself, is exempt from the identity checks only.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { API_VERSION } from '../../src/api/common.ts';
import { controllerUsername } from '../../src/manifests/admission-policy.ts';
import { DEFAULT_NAMESPACE } from '../../src/manifests/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  impersonate,
  refusal,
  refusalOf,
  rest,
  serverSideApply,
  userBinding,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const admin = rest(kc);
const RUN = uniqueName('api-admission');
const NODE_ACTIONS = `/apis/${API_VERSION}/nodeactions`;
const NODE_ROLLOUTS = `/apis/${API_VERSION}/noderollouts`;

// Users of this run only, so that parallel runs and other files never share grants.
const requester = `requester-${RUN}@example.com`;
const bypasser = `bypasser-${RUN}@example.com`;
/** Another requester: may create NodeActions, not touch others'. */
const neighbour = `neighbour-${RUN}@example.com`;
const controller = controllerUsername(DEFAULT_NAMESPACE);
/** The controller's ServiceAccount name, but in another namespace: not the controller. */
const impostor = `system:serviceaccount:${RUN}:gatehouse`;

type Spec = Record<string, unknown>;
interface NodeAction {
  metadata: { name: string; resourceVersion?: string; labels?: Record<string, string> };
  spec: Spec & { bypass?: Spec };
}

function nodeAction(
  requestedBy: string,
  spec: Spec = {},
  extra: { labels?: Record<string, string>; annotations?: Record<string, string> } = {},
) {
  return {
    apiVersion: API_VERSION,
    kind: 'NodeAction',
    metadata: {
      name: uniqueName('admission'),
      labels: { 'gatehouse.dev/test-run': RUN, ...extra.labels },
      ...(extra.annotations ? { annotations: extra.annotations } : {}),
    },
    spec: { nodeName: 'worker-1', action: 'Reboot', requestedBy, ...spec },
  };
}

/** Creates a NodeAction as `user`. */
function createAs(user: string, body: ReturnType<typeof nodeAction>): Promise<NodeAction> {
  return rest(impersonate(kc, user)).request<NodeAction>(NODE_ACTIONS, { method: 'POST', body });
}

const bindingNames = [`${RUN}-requesters`, `${RUN}-bypass`];

before(async () => {
  await installGatehouseAPI(kc);
  await serverSideApply(kc, [
    userBinding(`${RUN}-requesters`, 'gatehouse:requester', [requester, bypasser, impostor, neighbour]),
    userBinding(`${RUN}-bypass`, 'gatehouse:bypass', [bypasser]),
  ]);
  // RBAC and the policy reach the API server's authorizer and admission asynchronously:
  // wait until the bypasser is admitted and the requester's bypass refused.
  await waitFor('the bypasser to be admitted with a reason', () =>
    createAs(bypasser, nodeAction(bypasser, { bypass: { hooks: true, reason: 'warm-up' } })).then(() => true),
  );
  await waitFor('the admission policy to refuse an unauthorised bypass', async () => {
    try {
      await createAs(requester, nodeAction(requester, { bypass: { hooks: true, reason: 'warm-up' } }));
      return undefined;
    } catch (error) {
      return refusalOf(error).code === 403 ? true : undefined;
    }
  });
});

after(async () => {
  for (const path of [NODE_ACTIONS, NODE_ROLLOUTS])
    await admin
      .request(path, { method: 'DELETE', query: { labelSelector: `gatehouse.dev/test-run=${RUN}` } })
      .catch(() => undefined);
  for (const name of bindingNames) {
    await admin
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
  }
});

const escaped = (name: string) => name.replace(/[.]/g, '\\.');

/**
 * The requestedBy rule, which both kinds' policies word alike: a requester and a bypass
 * holder naming each other are refused with the policy's message, and so is the admin.
 */
async function assertOwnRequester(
  createAs: (user: string, claimed: string) => Promise<unknown>,
  asAdmin: () => Promise<unknown>,
): Promise<void> {
  for (const [user, claimed] of [
    [requester, bypasser],
    [bypasser, requester],
  ] as const) {
    const refused = await refusal(createAs(user, claimed));
    assert.equal(refused.code, 403);
    assert.match(
      refused.message,
      new RegExp(`spec\\.requestedBy must be your own user name, ${escaped(user)}, not ${escaped(claimed)}`),
    );
  }
  const refused = await refusal(asAdmin());
  assert.equal(refused.code, 403);
  assert.match(refused.message, /spec\.requestedBy must be your own user name/);
}

describe('NodeAction admission', () => {
  it('admits a plain request by its own requester (so refusals below are the policy, not RBAC)', async () => {
    const created = await createAs(requester, nodeAction(requester));
    assert.equal(created.spec.requestedBy, requester);
  });

  it('refuses a bypass of health checks by a user without the verb bypass', async () => {
    const refused = await refusal(
      createAs(
        requester,
        nodeAction(requester, { bypass: { healthChecks: true, reason: 'Ceph is known-degraded' } }),
      ),
    );
    assert.equal(refused.code, 403);
    assert.match(
      refused.message,
      new RegExp(
        `spec\\.bypass needs the verb bypass on nodeactions\\.talos\\.dev \\(ClusterRole gatehouse:bypass\\), which ${requester.replace(/[.]/g, '\\.')} does not hold`,
      ),
    );
  });

  it('refuses a bypass of hooks by a user without the verb bypass', async () => {
    const refused = await refusal(
      createAs(requester, nodeAction(requester, { bypass: { hooks: true, reason: 'noout by hand' } })),
    );
    assert.equal(refused.code, 403);
    assert.match(refused.message, /spec\.bypass needs the verb bypass/);
  });

  it('admits a NodeAction that names bypass but bypasses nothing, without the verb', async () => {
    const created = await createAs(
      requester,
      nodeAction(requester, { bypass: { healthChecks: false, hooks: false } }),
    );
    assert.equal(created.spec.bypass?.healthChecks, false);
  });

  it('refuses a bypass without a reason, even from a user holding the verb', async () => {
    for (const bypass of [
      { healthChecks: true },
      { hooks: true, reason: '' },
      { hooks: true, reason: '   ' },
    ]) {
      const refused = await refusal(createAs(bypasser, nodeAction(bypasser, { bypass })));
      assert.equal(refused.code, 422, JSON.stringify(bypass));
      assert.match(refused.message, /spec\.bypass\.reason is required when bypassing health checks or hooks/);
    }
  });

  it('admits a bypass with a reason from a user holding gatehouse:bypass', async () => {
    const bypass = {
      healthChecks: true,
      hooks: true,
      reason: 'Ceph is rebuilding after a disk swap; node must reboot now',
    };
    const created = await createAs(bypasser, nodeAction(bypasser, { bypass }));
    assert.deepEqual(created.spec.bypass, bypass);
    assert.equal(created.spec.requestedBy, bypasser);
  });

  it('refuses a NodeAction whose requestedBy names another user', async () => {
    // The cluster admin is held to the same rule.
    await assertOwnRequester(
      (user, claimed) => createAs(user, nodeAction(claimed)),
      () => admin.request(NODE_ACTIONS, { method: 'POST', body: nodeAction(requester) }),
    );
  });

  it("lets the controller's ServiceAccount create on behalf of the callers it authorised, but not without a reason", async () => {
    const created = await createAs(
      controller,
      nodeAction(bypasser, { bypass: { hooks: true, reason: 'approved through the HTTP API' } }),
    );
    assert.equal(created.spec.requestedBy, bypasser);
    const refused = await refusal(createAs(controller, nodeAction(bypasser, { bypass: { hooks: true } })));
    assert.equal(refused.code, 422);
    assert.match(refused.message, /spec\.bypass\.reason is required/);
    // A ServiceAccount of the same name in another namespace is not the controller.
    const impersonated = await refusal(createAs(impostor, nodeAction(bypasser)));
    assert.equal(impersonated.code, 403);
    assert.match(impersonated.message, /spec\.requestedBy must be your own user name/);
  });

  it('refuses a bypass reason without visible text, in the API server', async () => {
    for (const reason of ['\u200b', '\u200b\u200b\u200b', '\u2060\u00a0', '-- ..', '42']) {
      const refused = await refusal(
        createAs(bypasser, nodeAction(bypasser, { bypass: { hooks: true, reason } })),
      );
      assert.equal(refused.code, 422, JSON.stringify(reason));
      assert.match(
        refused.message,
        /spec\.bypass\.reason must say why in words \(at least three letters\)/,
        JSON.stringify(reason),
      );
    }
    const created = await createAs(
      bypasser,
      nodeAction(bypasser, { bypass: { hooks: true, reason: 'OSD 12 ok' } }),
    );
    assert.equal(created.spec.bypass?.reason, 'OSD 12 ok');
  });
});

describe('the executed mark and the metadata fixed at creation', () => {
  /** Patches an action's metadata as `user`. */
  function patchAs(user: string, name: string, metadata: Record<string, unknown>): Promise<NodeAction> {
    return rest(impersonate(kc, user)).request<NodeAction>(`${NODE_ACTIONS}/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata },
    });
  }
  const mark = { annotations: { 'talos.dev/executed': 'true' } };
  /** Writes the phase as the controller would (the admin writes status here: no controller runs). */
  async function setPhase(name: string, phase: string): Promise<void> {
    await admin.request(`${NODE_ACTIONS}/${name}/status`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { status: { phase } },
    });
  }

  it('lets only the requester or a bypass holder mark an Approved External action executed', async () => {
    const external = await createAs(requester, nodeAction(requester, { execution: 'External' }));
    const name = external.metadata.name;
    // Before approval: nobody, not even the requester.
    await setPhase(name, 'WaitingForHealth');
    let refused = await refusal(patchAs(requester, name, mark));
    assert.equal(refused.code, 422);
    assert.match(
      refused.message,
      /talos\.dev\/executed may only be set once the action is Approved; NodeAction \S+ is WaitingForHealth/,
    );
    await setPhase(name, 'Approved');
    // Another requester may not.
    refused = await refusal(patchAs(neighbour, name, mark));
    assert.equal(refused.code, 403);
    assert.match(
      refused.message,
      new RegExp(
        `only the requester of NodeAction ${name} \\(${requester.replace(/[.]/g, '\\.')}\\) or a holder of the verb bypass`,
      ),
    );
    // Its requester may; so may a bypass holder (changing it back, here).
    const marked = await patchAs(requester, name, mark);
    assert.equal(
      (marked as { metadata: { annotations?: Record<string, string> } }).metadata.annotations?.[
        'talos.dev/executed'
      ],
      'true',
    );
    await patchAs(bypasser, name, { annotations: { 'talos.dev/executed': null } });
  });

  it('refuses the mark on a Managed action, and on a new action, from anyone', async () => {
    const managed = await createAs(requester, nodeAction(requester));
    await setPhase(managed.metadata.name, 'Approved');
    for (const user of [requester, bypasser]) {
      const refused = await refusal(patchAs(user, managed.metadata.name, mark));
      assert.equal(refused.code, 422, user);
      assert.match(refused.message, /talos\.dev\/executed is only for External actions/);
    }
    const premarked = nodeAction(
      requester,
      { execution: 'External' },
      { annotations: { 'talos.dev/executed': 'true' } },
    );
    const refused = await refusal(createAs(requester, premarked));
    assert.equal(refused.code, 422);
    assert.match(refused.message, /may only be set once the action is Approved/);
  });

  it('refuses a change of the controller-instance label or the idempotency metadata, from anyone', async () => {
    // Choosing an instance (another budget) needs the verb bypass.
    const chosen = await refusal(
      createAs(
        requester,
        nodeAction(requester, {}, { labels: { 'talos.dev/controller-instance': 'canary' } }),
      ),
    );
    assert.equal(chosen.code, 403);
    assert.match(
      chosen.message,
      /hands a NodeAction to another controller instance, with its own budget: it needs the verb bypass/,
    );
    const created = await createAs(
      bypasser,
      nodeAction(bypasser, {}, { labels: { 'talos.dev/controller-instance': 'canary' } }),
    );
    const name = created.metadata.name;
    for (const [user, metadata] of [
      [requester, { labels: { 'talos.dev/controller-instance': 'elsewhere' } }],
      [requester, { labels: { 'talos.dev/controller-instance': null } }],
      [bypasser, { labels: { 'talos.dev/idempotency-key-hash': 'abc' } }],
      [requester, { annotations: { 'talos.dev/request-fingerprint': 'sha256:x' } }],
    ] as const) {
      const refused = await refusal(patchAs(user, name, metadata));
      assert.equal(refused.code, 403, JSON.stringify(metadata));
      assert.match(refused.message, /are fixed when a NodeAction is created/);
    }
    const adminRefused = await refusal(
      admin.request(`${NODE_ACTIONS}/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { labels: { 'talos.dev/controller-instance': 'elsewhere' } } },
      }),
    );
    assert.equal(adminRefused.code, 403);
    // Other labels stay the requester's to change.
    const relabelled = await patchAs(bypasser, name, { labels: { team: 'storage' } });
    assert.equal(relabelled.metadata.labels?.['talos.dev/controller-instance'], 'canary');
  });
});

describe('NodeRollout admission', () => {
  // The rollout's NodeActions are created by the controller (exempt) with the rollout's
  // requestedBy and bypass: the rollout is where the requester is held to the rules.
  interface NodeRollout {
    metadata: { name: string; labels?: Record<string, string> };
    spec: Spec & { bypass?: Spec; paused?: boolean };
  }
  function nodeRollout(requestedBy: string, spec: Spec = {}, labels: Record<string, string> = {}) {
    return {
      apiVersion: API_VERSION,
      kind: 'NodeRollout',
      metadata: { name: uniqueName('admission-roll'), labels: { 'gatehouse.dev/test-run': RUN, ...labels } },
      spec: {
        action: 'Reboot',
        // No node carries this label: a controller that picks the rollout up has nothing to do.
        nodeSelector: { matchLabels: { 'gatehouse.dev/test-run': `${RUN}-no-node` } },
        requestedBy,
        ...spec,
      },
    };
  }
  function createRolloutAs(user: string, body: ReturnType<typeof nodeRollout>): Promise<NodeRollout> {
    return rest(impersonate(kc, user)).request<NodeRollout>(NODE_ROLLOUTS, { method: 'POST', body });
  }
  function patchRolloutAs(user: string, name: string, body: Record<string, unknown>): Promise<NodeRollout> {
    return rest(impersonate(kc, user)).request<NodeRollout>(`${NODE_ROLLOUTS}/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body,
    });
  }
  const noVerb = (user: string) =>
    new RegExp(
      `spec\\.bypass needs the verb bypass on nodeactions\\.talos\\.dev \\(ClusterRole gatehouse:bypass\\) to set it, and to change anything but spec\\.paused: true in a rollout that bypasses, which ${user.replace(/[.]/g, '\\.')} does not hold`,
    );
  const noReason =
    /spec\.bypass\.reason is required when bypassing health checks or hooks: say why, it is recorded in the status and an Event of every NodeAction of the rollout/;
  const reason = 'Ceph is rebuilding after a disk swap; the nodes must reboot now';

  before(async () => {
    // The rollout policy reaches admission on its own schedule, like the action's: wait
    // until it refuses a rollout that breaks two of its rules (so that it is in force
    // whichever one rule a check of these tests takes away).
    await waitFor('the admission policy to refuse a dishonest rollout', async () => {
      try {
        await createRolloutAs(
          requester,
          nodeRollout(bypasser, { bypass: { hooks: true, reason: 'warm-up' } }),
        );
        return undefined;
      } catch (error) {
        return refusalOf(error).code === 403 ? true : undefined;
      }
    });
  });

  it('admits a plain rollout by its own requester, and edits of it that bypass nothing', async () => {
    const created = await createRolloutAs(requester, nodeRollout(requester));
    assert.equal(created.spec.requestedBy, requester);
    const paused = await patchRolloutAs(requester, created.metadata.name, { spec: { paused: true } });
    assert.equal(paused.spec.paused, true);
    const named = await patchRolloutAs(requester, created.metadata.name, {
      spec: { bypass: { healthChecks: false, hooks: false } },
    });
    assert.equal(named.spec.bypass?.hooks, false);
  });

  it('refuses a rollout whose requestedBy names another user, from anyone', async () => {
    await assertOwnRequester(
      (user, claimed) => createRolloutAs(user, nodeRollout(claimed)),
      () => admin.request(NODE_ROLLOUTS, { method: 'POST', body: nodeRollout(requester) }),
    );
  });

  it('refuses a bypass without the verb bypass, and admits it with the verb and a reason', async () => {
    for (const bypass of [
      { healthChecks: true, reason },
      { hooks: true, reason },
    ]) {
      const refused = await refusal(createRolloutAs(requester, nodeRollout(requester, { bypass })));
      assert.equal(refused.code, 403, JSON.stringify(bypass));
      assert.match(refused.message, noVerb(requester));
    }
    const bypass = { healthChecks: true, hooks: true, reason };
    const created = await createRolloutAs(bypasser, nodeRollout(bypasser, { bypass }));
    assert.deepEqual(created.spec.bypass, bypass);
  });

  it('refuses a bypass without a reason, even from a user holding the verb', async () => {
    for (const bypass of [
      { healthChecks: true },
      { hooks: true, reason: '' },
      { hooks: true, reason: '   ' },
    ]) {
      const refused = await refusal(createRolloutAs(bypasser, nodeRollout(bypasser, { bypass })));
      assert.equal(refused.code, 422, JSON.stringify(bypass));
      assert.match(refused.message, noReason);
    }
  });

  it('refuses a bypass set or changed later without the verb, and lets a holder change it', async () => {
    // Set on a rollout that had none.
    const plain = await createRolloutAs(requester, nodeRollout(requester));
    let refused = await refusal(
      patchRolloutAs(requester, plain.metadata.name, { spec: { bypass: { hooks: true, reason } } }),
    );
    assert.equal(refused.code, 403);
    assert.match(refused.message, noVerb(requester));
    // Set to bypass on a rollout whose bypass bypassed nothing.
    const named = await createRolloutAs(
      requester,
      nodeRollout(requester, { bypass: { healthChecks: false, hooks: false } }),
    );
    refused = await refusal(
      patchRolloutAs(requester, named.metadata.name, { spec: { bypass: { healthChecks: true, reason } } }),
    );
    assert.equal(refused.code, 403);
    assert.match(refused.message, noVerb(requester));
    // A holder's bypass: another requester may pause the rollout (its bypass unchanged),
    // not change what it bypasses or why.
    const held = await createRolloutAs(bypasser, nodeRollout(bypasser, { bypass: { hooks: true, reason } }));
    const name = held.metadata.name;
    const paused = await patchRolloutAs(requester, name, { spec: { paused: true } });
    assert.equal(paused.spec.paused, true);
    for (const bypass of [{ healthChecks: true }, { reason: 'a reason of my own, not the holder’s' }]) {
      refused = await refusal(patchRolloutAs(requester, name, { spec: { bypass } }));
      assert.equal(refused.code, 403, JSON.stringify(bypass));
      assert.match(refused.message, noVerb(requester));
    }
    // The holder may change it, with a reason; not take the reason away.
    const widened = await patchRolloutAs(bypasser, name, { spec: { bypass: { healthChecks: true } } });
    assert.equal(widened.spec.bypass?.healthChecks, true);
    refused = await refusal(patchRolloutAs(bypasser, name, { spec: { bypass: { reason: ' ' } } }));
    assert.equal(refused.code, 422);
    assert.match(refused.message, noReason);
    // Anyone may stop bypassing.
    const lifted = await patchRolloutAs(requester, name, {
      spec: { bypass: { healthChecks: false, hooks: false } },
    });
    assert.equal(lifted.spec.bypass?.hooks, false);
  });

  it('refuses the controller-instance label set or changed without the verb bypass', async () => {
    const instanceLabel = 'talos.dev/controller-instance';
    const hands =
      /the label talos\.dev\/controller-instance hands a NodeRollout \(and its NodeActions\) to another controller instance, with its own budget: it needs the verb bypass/;
    const chosen = await refusal(
      createRolloutAs(requester, nodeRollout(requester, {}, { [instanceLabel]: 'canary' })),
    );
    assert.equal(chosen.code, 403);
    assert.match(chosen.message, hands);
    const created = await createRolloutAs(bypasser, nodeRollout(bypasser, {}, { [instanceLabel]: 'canary' }));
    const name = created.metadata.name;
    for (const value of ['elsewhere', null]) {
      const refused = await refusal(
        patchRolloutAs(requester, name, { metadata: { labels: { [instanceLabel]: value } } }),
      );
      assert.equal(refused.code, 403, String(value));
      assert.match(refused.message, hands);
    }
    // Other labels stay anyone's to change; a holder may move it.
    const relabelled = await patchRolloutAs(requester, name, { metadata: { labels: { team: 'storage' } } });
    assert.equal(relabelled.metadata.labels?.[instanceLabel], 'canary');
    const moved = await patchRolloutAs(bypasser, name, {
      metadata: { labels: { [instanceLabel]: 'elsewhere' } },
    });
    assert.equal(moved.metadata.labels?.[instanceLabel], 'elsewhere');
  });
});
