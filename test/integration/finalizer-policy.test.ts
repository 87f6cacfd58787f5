// The optional MutatingAdmissionPolicy (deploy/finalizer-policy.yaml) puts the
// controller's finalizer on a NodeAction as it is created, so the controller's first
// write is the action's status. Its binding here selects this file's objects only (the
// shipped one selects every NodeAction of the default controller instance): other files
// rely on the controller adding the finalizer itself, and on deleting actions no
// controller runs for.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { API_VERSION } from '../../src/api/common.ts';
import { INSTANCE_LABEL, NODE_ACTION_FINALIZER } from '../../src/api/names.ts';
import { FINALIZER_POLICY_NAME, finalizerPolicyObjects } from '../../src/manifests/finalizer-policy.ts';
import { servesMutatingAdmissionPolicy } from '../../src/manifests/install.ts';
import {
  createTestNodes,
  deleteActionsAfter,
  startGateController,
  waitForPhase,
  watchActions,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { rest, serverSideApply, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const RUN = uniqueName('finalizer-policy');
const NODE_ACTIONS = `/apis/${API_VERSION}/nodeactions`;
const BINDING = `${FINALIZER_POLICY_NAME}-${RUN}`;
let me = '';
const BINDING_PATH = '/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings';

interface Created {
  metadata: { name: string; finalizers?: string[] };
}

function create(metadata: { labels?: Record<string, string>; finalizers?: string[] } = {}): Promise<Created> {
  return client.request<Created>(NODE_ACTIONS, {
    method: 'POST',
    body: {
      apiVersion: API_VERSION,
      kind: 'NodeAction',
      metadata: {
        name: uniqueName('finalizer'),
        ...metadata,
        labels: { 'gatehouse.dev/test-run': RUN, ...metadata.labels },
      },
      // A node no controller here acts on: these actions only show what admission wrote.
      spec: { nodeName: `${RUN}-nowhere`, action: 'Reboot', requestedBy: me },
    },
  });
}

/** Deletes the actions, taking off the finalizer the policy put on (no controller runs for them). */
async function remove(names: string[]): Promise<void> {
  for (const name of names) {
    await client
      .request(`${NODE_ACTIONS}/${name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { finalizers: null } },
      })
      .catch(() => undefined);
    await client.request(`${NODE_ACTIONS}/${name}`, { method: 'DELETE' }).catch(() => undefined);
  }
}

describe('the finalizer policy (MutatingAdmissionPolicy)', { concurrency: false }, () => {
  const made: string[] = [];
  let served = false;

  before(async () => {
    await installGatehouseAPI(kc);
    me = await whoami(client);
    served = await servesMutatingAdmissionPolicy(client);
    if (!served) return;
    const [policy, binding] = finalizerPolicyObjects() as [Record<string, unknown>, Record<string, unknown>];
    await serverSideApply(kc, [
      policy,
      {
        ...binding,
        metadata: { name: BINDING },
        spec: {
          policyName: FINALIZER_POLICY_NAME,
          matchResources: { objectSelector: { matchLabels: { 'gatehouse.dev/test-run': RUN } } },
        },
      },
    ] as never);
    // Admission policies reach the API server's admission chain asynchronously.
    await waitFor(
      'the finalizer policy to act on a new NodeAction',
      async () => {
        const probe = await create();
        made.push(probe.metadata.name);
        return probe.metadata.finalizers?.includes(NODE_ACTION_FINALIZER) ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  });

  after(async () => {
    await remove(made);
    await client.request(`${BINDING_PATH}/${BINDING}`, { method: 'DELETE' }).catch(() => undefined);
    // The policy itself is the shipped one, shared: without a binding it does nothing.
  });

  it('is served by the sandbox API server (Kubernetes 1.36)', () => {
    assert.ok(served, 'admissionregistration.k8s.io/v1 serves mutatingadmissionpolicies');
  });

  it('adds the finalizer at creation, once, beside finalizers already asked for', async () => {
    const plain = await create();
    made.push(plain.metadata.name);
    assert.deepEqual(plain.metadata.finalizers, [NODE_ACTION_FINALIZER]);

    const withOther = await create({ finalizers: ['example.com/keep'] });
    made.push(withOther.metadata.name);
    assert.deepEqual(withOther.metadata.finalizers, ['example.com/keep', NODE_ACTION_FINALIZER]);

    const already = await create({ finalizers: [NODE_ACTION_FINALIZER] });
    made.push(already.metadata.name);
    assert.deepEqual(already.metadata.finalizers, [NODE_ACTION_FINALIZER]);
  });

  it('leaves alone the actions of a named controller instance, which may not be running', async () => {
    const named = await create({ labels: { [INSTANCE_LABEL]: `${RUN}-elsewhere` } });
    made.push(named.metadata.name);
    assert.equal(named.metadata.finalizers, undefined);
  });
});

describe('an action that has the finalizer from its creation', () => {
  it('is approved with its status as the first thing the controller writes', async (t) => {
    const instance = uniqueName('finalizer-gate');
    const [node] = await createTestNodes(t, client, instance, 1, {});
    const controller = await startGateController(instance);
    t.after(() => controller.stop());
    const list = await client.request<{ metadata: { resourceVersion: string } }>(NODE_ACTIONS);
    const versions: ActionObject[] = [];
    const log = watchActions(client, `${INSTANCE_LABEL}=${instance}`, list.metadata.resourceVersion, (a) =>
      versions.push(a),
    );
    t.after(() => log.stop());
    const me = await whoami(client);
    const action = await client.request<ActionObject>(NODE_ACTIONS, {
      method: 'POST',
      body: {
        apiVersion: API_VERSION,
        kind: 'NodeAction',
        // What the policy makes of a request: the finalizer there from the start.
        metadata: {
          name: uniqueName('finalized'),
          labels: { [INSTANCE_LABEL]: instance },
          finalizers: [NODE_ACTION_FINALIZER],
        },
        spec: { nodeName: node, action: 'Reboot', execution: 'External', requestedBy: me },
      },
    });
    deleteActionsAfter(t, client, action.metadata.name);
    await waitForPhase(client, action.metadata.name, 'Approved');
    await waitFor('the watch to show the approval', () =>
      versions.some((v) => v.status?.phase === 'Approved') ? true : undefined,
    );
    const mine = versions.filter((v) => v.metadata.name === action.metadata.name);
    // Created, then changed: every change after the creation carries a status.
    assert.ok(mine.length >= 2, `saw ${String(mine.length)} versions`);
    for (const v of mine.slice(1))
      assert.ok(v.status?.phase, `version ${v.metadata.resourceVersion} changed something before any status`);
    assert.deepEqual(mine.at(-1)?.metadata.finalizers, [NODE_ACTION_FINALIZER]);
  });
});
