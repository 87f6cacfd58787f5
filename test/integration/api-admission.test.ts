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
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const admin = rest(kc);
const RUN = uniqueName('api-admission');
const NODE_ACTIONS = `/apis/${API_VERSION}/nodeactions`;

// Users of this run only, so that parallel runs and other files never share grants.
const requester = `requester-${RUN}@example.com`;
const bypasser = `bypasser-${RUN}@example.com`;
const controller = controllerUsername(DEFAULT_NAMESPACE);
/** The controller's ServiceAccount name, but in another namespace: not the controller. */
const impostor = `system:serviceaccount:${RUN}:gatehouse`;

type Spec = Record<string, unknown>;
interface NodeAction {
  metadata: { name: string };
  spec: Spec & { bypass?: Spec };
}

function nodeAction(requestedBy: string, spec: Spec = {}) {
  return {
    apiVersion: API_VERSION,
    kind: 'NodeAction',
    metadata: { name: uniqueName('admission'), labels: { 'gatehouse.dev/test-run': RUN } },
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
  const binding = (name: string, role: string, users: string[]) => ({
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
    subjects: users.map((u) => ({ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: u })),
  });
  await serverSideApply(kc, [
    binding(`${RUN}-requesters`, 'gatehouse:requester', [requester, bypasser, impostor]),
    binding(`${RUN}-bypass`, 'gatehouse:bypass', [bypasser]),
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
  await admin
    .request(NODE_ACTIONS, { method: 'DELETE', query: { labelSelector: `gatehouse.dev/test-run=${RUN}` } })
    .catch(() => undefined);
  for (const name of bindingNames) {
    await admin
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
  }
});

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
    for (const [user, claimed] of [
      [requester, bypasser],
      [bypasser, requester],
    ] as const) {
      const refused = await refusal(createAs(user, nodeAction(claimed)));
      assert.equal(refused.code, 403);
      assert.match(
        refused.message,
        new RegExp(
          `spec\\.requestedBy must be your own user name, ${user.replace(/[.]/g, '\\.')}, not ${claimed.replace(/[.]/g, '\\.')}`,
        ),
      );
    }
    // The cluster admin is held to the same rule.
    const refused = await refusal(
      admin.request(NODE_ACTIONS, { method: 'POST', body: nodeAction(requester) }),
    );
    assert.equal(refused.code, 403);
    assert.match(refused.message, /spec\.requestedBy must be your own user name/);
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
});
