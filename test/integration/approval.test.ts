// A person's approval as a pre-action hook, against the sandbox's admission policy and
// RBAC: an approval hook holds a Reboot (status.approval.pending names it); an answer by
// someone without the verb approve is refused by admission and by the HTTP API, the
// requester's own approval is refused (allowSelfApproval false), one outside the hook's
// approvers is refused; an approver's Approve lets the action go on, recorded with their
// name and reason, and a Refuse over HTTP ends another action Denied with the reason.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import {
  APPROVAL_ANNOTATION,
  APPROVAL_BY_ANNOTATION,
  APPROVAL_FOR_ANNOTATION,
  APPROVAL_REASON_ANNOTATION,
} from '../../src/api/names.ts';
import type { ActionObject } from '../support/gate.ts';
import type { Controller } from '../../src/controller.ts';
import { KubeApiError, type RestClient } from '../../src/kube/rest.ts';
import { runCli } from '../support/cli.ts';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  createAction,
  createGroupHook,
  deleteActionsAfter,
  getAction,
  startGateController,
  testPlace,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  rest,
  serviceAccountToken,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const kubeconfigFile = process.env.GATEHOUSE_TEST_KUBECONFIG ?? '';
const client = rest(kc);
const instance = uniqueName('approval');
const namespace = uniqueName('approvers');
const API = '/apis/talos.dev/v1alpha1/nodeactions';
let controller: Controller | undefined;
let me = '';
const tokens = { approver: '', outsider: '', requester: '' };
const users = { approver: '', outsider: '', requester: '' };
const bindings: string[] = [];

/** A client that authenticates with `token` (a ServiceAccount's), as kubectl would. */
function asToken(token: string): RestClient {
  const copy = new KubeConfig();
  copy.loadFromString(kc.exportConfig());
  const current = copy.getCurrentUser();
  copy.users = copy.users.map((u) => (u.name === current?.name ? { name: u.name, token } : u));
  return rest(copy);
}

function answer(decision: string, by: string, hook: string, why = 'change CHG-1234 approved') {
  return {
    metadata: {
      annotations: {
        [APPROVAL_ANNOTATION]: decision,
        [APPROVAL_BY_ANNOTATION]: by,
        [APPROVAL_REASON_ANNOTATION]: why,
        [APPROVAL_FOR_ANNOTATION]: hook,
      },
    },
  };
}

async function annotate(as: RestClient, name: string, body: unknown): Promise<KubeApiError | undefined> {
  try {
    await as.request(`${API}/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body,
    });
    return undefined;
  } catch (error) {
    if (error instanceof KubeApiError) return error;
    throw error;
  }
}

async function call(
  path: string,
  token: string,
  body: unknown,
): Promise<{ status: number; body: { error?: string } }> {
  const response = await fetch(`${controller?.url ?? ''}${path}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: (text ? JSON.parse(text) : {}) as { error?: string } };
}

/** A node of the test's own with an approval hook on its Reboots; the hook's reference. */
async function approvalPlace(t: TestContext, approval: Record<string, unknown>) {
  const p = await testPlace(t, client, 'approval');
  const hook = uniqueName('needs-a-person');
  await createGroupHook(client, p, 'PreRebootJob', hook, { timeout: '10m', approval });
  return { ...p, hook: `PreRebootJob/${p.namespace}/${hook}` };
}

async function waitingFor(name: string): Promise<ActionObject> {
  return waitFor(`${name} to wait for an approval`, async () => {
    const action = await getAction(client, name);
    return action.status?.approval?.pending ? action : undefined;
  }).catch(async (error: unknown) => {
    const action = await getAction(client, name);
    throw new Error(
      `${String(error)}: ${JSON.stringify({ labels: action.metadata.labels, status: action.status })}`,
    );
  });
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  await client.request('/api/v1/namespaces', {
    method: 'POST',
    body: { metadata: { name: namespace, labels: { 'gatehouse.dev/test': 'true' } } },
  });
  for (const who of Object.keys(tokens) as (keyof typeof tokens)[]) {
    tokens[who] = await serviceAccountToken(kc, namespace, who);
    users[who] = `system:serviceaccount:${namespace}:${who}`;
    bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:requester', { namespace, name: who }));
  }
  bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:approve', { namespace, name: 'approver' }));
  bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:approve', { namespace, name: 'requester' }));
  // As the controller's own ServiceAccount: its HTTP API writes as it, exempt from the rules it checks itself.
  controller = await startGateController(instance, { kubeConfig: await controllerKubeConfig(kc) });
});

after(async () => {
  await controller?.stop();
  for (const name of bindings)
    await client
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
  await client.request(`/api/v1/namespaces/${namespace}`, { method: 'DELETE' }).catch(() => undefined);
});

describe('an approval hook', () => {
  it('holds the action until an approver approves it; the verb, the requester and the hook are judged at admission', async (t) => {
    const p = await approvalPlace(t, { message: 'storage on-call decides' });
    const action = await createAction(client, instance, me, { nodeName: p.node, execution: 'External' });
    deleteActionsAfter(t, client, action.metadata.name);
    const waiting = await waitingFor(action.metadata.name);
    assert.equal(waiting.status?.phase, 'RunningPreHooks');
    assert.equal(waiting.status.approval?.pending?.hook, p.hook);
    assert.equal(waiting.status.approval.pending.allowSelfApproval, false);
    assert.match(
      waiting.status.message ?? '',
      /waiting for approval by a holder of the verb approve \(storage on-call decides/,
    );

    // RBAC and the policy reach admission asynchronously: the first refusal is waited for.
    const outsider = asToken(tokens.outsider);
    const refused = await waitFor('admission to refuse an answer without the verb approve', async () => {
      const error = await annotate(outsider, action.metadata.name, answer('Approve', users.outsider, p.hook));
      return error?.code === 403 ? error : undefined;
    });
    assert.match(refused.message, /verb approve on nodeactions\.talos\.dev/);
    // An answer brought along at creation answers nothing: refused, whoever brings it.
    const preApproved = await client
      .request(API, {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'NodeAction',
          metadata: {
            name: uniqueName('pre-approved'),
            labels: { [INSTANCE_LABEL]: instance },
            ...answer('Approve', me, p.hook).metadata,
          },
          spec: { action: 'Reboot', execution: 'External', requestedBy: me, nodeName: p.node },
        },
      })
      .then(
        (created: unknown) => created,
        (error: unknown) => error,
      );
    if (!(preApproved instanceof KubeApiError))
      deleteActionsAfter(t, client, (preApproved as ActionObject).metadata.name);
    assert.ok(preApproved instanceof KubeApiError);
    assert.match(preApproved.message, /waits for no approval now/);

    const self = await annotate(client, action.metadata.name, answer('Approve', me, p.hook));
    assert.equal(self?.code, 403);
    assert.match(self.message, /requested NodeAction .* and may not approve it/);

    const approver = asToken(tokens.approver);
    const forged = await annotate(approver, action.metadata.name, answer('Approve', users.outsider, p.hook));
    assert.equal(forged?.code, 403, 'approval-by must be the approver themself');
    const wrongHook = await annotate(
      approver,
      action.metadata.name,
      answer('Approve', users.approver, 'PreRebootJob/x/y'),
    );
    assert.match(wrongHook?.message ?? '', /waits for the approval of PreRebootJob\//);
    const noReason = await annotate(
      approver,
      action.metadata.name,
      answer('Approve', users.approver, p.hook, '  '),
    );
    assert.match(noReason?.message ?? '', /with a reason/);
    assert.equal((await getAction(client, action.metadata.name)).status?.phase, 'RunningPreHooks');

    assert.equal(
      await annotate(approver, action.metadata.name, answer('Approve', users.approver, p.hook)),
      undefined,
    );
    const approved = await waitForPhase(client, action.metadata.name, 'Approved');
    const [decision] = approved.status?.approval?.decisions ?? [];
    assert.deepEqual(
      { hook: decision?.hook, decision: decision?.decision, by: decision?.by, reason: decision?.reason },
      { hook: p.hook, decision: 'Approved', by: users.approver, reason: 'change CHG-1234 approved' },
    );
    assert.equal(approved.status?.approval?.pending, undefined);
    const run = approved.status?.hooks?.find((r) => r.kind === 'PreRebootJob');
    assert.equal(run?.phase, 'Succeeded');
    assert.match(run.message ?? '', new RegExp(`approved by ${users.approver}: change CHG-1234 approved`));
  });

  it('over HTTP: refuses an answer without the verb and a self-approval; an approver’s refusal ends the action Denied', async (t) => {
    const p = await approvalPlace(t, {});
    const created = await call('/v1/actions', tokens.requester, {
      spec: { nodeName: p.node, action: 'Reboot', execution: 'External' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const name = (created.body as unknown as ActionObject).metadata.name;
    deleteActionsAfter(t, client, name);
    await waitingFor(name);
    // Not the verb approve: refused before anything is written.
    const outsider = await call(`/v1/actions/${name}/approve`, tokens.outsider, {
      reason: 'looks fine to me',
    });
    assert.equal(outsider.status, 403, JSON.stringify(outsider.body));
    // The requester holds the verb, but this is their own action.
    const self = await call(`/v1/actions/${name}/approve`, tokens.requester, { reason: 'my own, trust me' });
    assert.equal(self.status, 403);
    assert.match(self.body.error ?? '', /may not approve it/);
    const noWords = await call(`/v1/actions/${name}/approve`, tokens.approver, { reason: '!!' });
    assert.equal(noWords.status, 422);
    assert.equal((await getAction(client, name)).status?.phase, 'RunningPreHooks');

    const refusal = await call(`/v1/actions/${name}/approve`, tokens.approver, {
      decision: 'Refuse',
      reason: 'not during the quarter close',
    });
    assert.equal(refusal.status, 200, JSON.stringify(refusal.body));
    const denied = await waitForPhase(client, name, 'Denied');
    assert.match(denied.status?.message ?? '', /refused by .*approver: not during the quarter close/);
    assert.equal(denied.status?.approval?.decisions?.[0]?.decision, 'Refused');
    // Nothing waits any more: a late answer has nothing to answer.
    const late = await call(`/v1/actions/${name}/approve`, tokens.approver, { reason: 'changed my mind' });
    assert.equal(late.status, 409);
  });

  it('takes only the approvers it names, and the requester where allowSelfApproval says so', async (t) => {
    const p = await approvalPlace(t, {
      approvers: { users: [users.requester], groups: ['storage-oncall'] },
      allowSelfApproval: true,
    });
    const created = await call('/v1/actions', tokens.requester, {
      spec: { nodeName: p.node, action: 'Reboot', execution: 'External' },
    });
    const name = (created.body as unknown as ActionObject).metadata.name;
    deleteActionsAfter(t, client, name);
    const waiting = await waitingFor(name);
    assert.deepEqual(waiting.status?.approval?.pending?.users, [users.requester]);
    const approver = asToken(tokens.approver);
    const notNamed = await annotate(approver, name, answer('Approve', users.approver, p.hook));
    assert.equal(notNamed?.code, 403);
    assert.match(notNamed.message, /is not among the approvers of/);
    const overHttp = await call(`/v1/actions/${name}/approve`, tokens.approver, {
      reason: 'looks fine to me',
    });
    assert.equal(overHttp.status, 403);
    const own = await call(`/v1/actions/${name}/approve`, tokens.requester, {
      reason: 'allowed for this hook',
    });
    assert.equal(own.status, 200, JSON.stringify(own.body));
    const approved = await waitForPhase(client, name, 'Approved');
    assert.equal(approved.status?.approval?.decisions?.[0]?.by, users.requester);
  });

  it('is answered with gatehouse approve, through the HTTP API or straight to the API server', async (t) => {
    const p = await approvalPlace(t, {});
    const action = await createAction(client, instance, me, { nodeName: p.node, execution: 'External' });
    deleteActionsAfter(t, client, action.metadata.name);
    await waitingFor(action.metadata.name);
    // The requester, straight to the API server: their own action, refused with the rule.
    const own = await runCli([
      'approve',
      action.metadata.name,
      '--reason',
      'my own action',
      '--kubeconfig',
      kubeconfigFile,
    ]);
    assert.notEqual(own.code, 0);
    assert.match(own.stderr, /may not approve it/);
    const unsaid = await runCli([
      'approve',
      action.metadata.name,
      '--reason',
      '--',
      '--kubeconfig',
      kubeconfigFile,
    ]);
    assert.equal(unsaid.code, 2, unsaid.stderr);
    const approved = await runCli([
      'approve',
      action.metadata.name,
      '--reason',
      'CHG-77 approved',
      '--server',
      controller?.url ?? '',
      '--token',
      tokens.approver,
    ]);
    assert.equal(approved.code, 0, approved.stderr);
    assert.match(approved.stdout, new RegExp(`${action.metadata.name}: approved \\(${p.hook}\\)`));
    const done = await waitForPhase(client, action.metadata.name, 'Approved');
    assert.equal(done.status?.approval?.decisions?.[0]?.reason, 'CHG-77 approved');
  });
});
