// Workload owners' "not now" against the sandbox: a Pod carrying talos.dev/do-not-disrupt
// holds a Reboot of its node at the health gate until its duration passes, or until the
// cap of the governing ActionPolicy (doNotDisruptMax); a Pod on another node holds
// nothing; the Node's own annotation holds until it is taken off; a bypass of the health
// checks passes it, recorded with the Pod it passed.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { DO_NOT_DISRUPT_CHECK } from '../../src/actions/do-not-disrupt.ts';
import { DO_NOT_DISRUPT_ANNOTATION } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  TEST_NODE_TAINT,
  createAction,
  createPolicy,
  deleteActionsAfter,
  events,
  getAction,
  startGateController,
  testPlace,
  waitForPhase,
  whoami,
  type ActionObject,
  type Place,
} from '../support/gate.ts';
import { rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('dnd');
let controller: Controller | undefined;
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await controller?.stop();
});

/** A Pod bound to the place's node (tolerating its taint) with the annotation's value. */
async function pod(place: Place, name: string, value: string): Promise<void> {
  await client.request(`/api/v1/namespaces/${place.namespace}/pods`, {
    method: 'POST',
    body: {
      metadata: { name, annotations: { [DO_NOT_DISRUPT_ANNOTATION]: value } },
      spec: {
        nodeName: place.node,
        tolerations: [{ key: TEST_NODE_TAINT, operator: 'Exists', effect: 'NoSchedule' }],
        containers: [{ name: 'job', image: 'registry.example/batch' }],
      },
    },
  });
}

async function reboot(t: TestContext, node: string, extra = {}): Promise<ActionObject> {
  const action = await createAction(client, instance, me, { nodeName: node, action: 'Reboot', ...extra });
  deleteActionsAfter(t, client, action.metadata.name);
  return action;
}

/** The action's do-not-disrupt record, once the gate has one that is not healthy. */
async function held(name: string) {
  try {
    return await waitFor(`${name} to be held by a do-not-disrupt`, async () => {
      const a = await getAction(client, name);
      const r = a.status?.checks?.find((c) => c.name === DO_NOT_DISRUPT_CHECK);
      return r && !r.healthy ? { action: a, record: r } : undefined;
    });
  } catch (error) {
    const a = await getAction(client, name);
    throw new Error(`${String(error)}; its status: ${JSON.stringify(a.status)}`, { cause: error });
  }
}

const seconds = (from: string | undefined, to: string | undefined) =>
  (Date.parse(to ?? '') - Date.parse(from ?? '')) / 1000;

describe('do-not-disrupt', () => {
  it('a Pod holds a Reboot of its node until its duration passes; a Pod elsewhere holds nothing', async (t) => {
    const place = await testPlace(t, client, 'dnd-pod');
    const elsewhere = await testPlace(t, client, 'dnd-other');
    await pod(place, 'train-0', '8s');
    await pod(elsewhere, 'backup-0', 'true');

    const other = await reboot(t, place.node);
    const { record, action } = await held(other.metadata.name);
    assert.match(record.message ?? '', new RegExp(`Pod ${place.namespace}/train-0 \\("8s"\\) until`));
    assert.doesNotMatch(record.message ?? '', /backup-0/, 'a Pod on another node');
    assert.equal(action.status?.phase, 'WaitingForHealth');

    const approved = await waitForPhase(client, other.metadata.name, 'Approved', 30_000);
    const waited = seconds(approved.status?.doNotDisruptSince, approved.status?.approvalTime);
    assert.ok(waited >= 8, `held ${String(waited)} s of the Pod's 8s`);
    const reasons = (await events(client, other.metadata.name)).map((e) => e.reason);
    assert.ok(reasons.includes('DoNotDisrupt'), reasons.join(', '));
  });

  it('the ActionPolicy’s doNotDisruptMax ends a "true" hold, with a Warning', async (t) => {
    const place = await testPlace(t, client, 'dnd-cap');
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': place.group } },
      maxConcurrent: 1,
      doNotDisruptMax: '6s',
    });
    await pod(place, 'forever-0', 'true');
    const action = await reboot(t, place.node);
    const { record } = await held(action.metadata.name);
    assert.match(
      record.message ?? '',
      new RegExp(`at most 6.0s \\(doNotDisruptMax of ActionPolicy ${policy}\\)`),
    );
    const approved = await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
    const waited = seconds(approved.status?.doNotDisruptSince, approved.status?.approvalTime);
    assert.ok(waited >= 6 && waited < 20, `held ${String(waited)} s under a 6s cap`);
    const expired = (await events(client, action.metadata.name)).find(
      (e) => e.reason === 'DoNotDisruptExpired',
    );
    assert.equal(expired?.type, 'Warning');
    assert.match(expired.message, new RegExp(`forever-0: the most ActionPolicy ${policy} allows`));
  });

  it('the Node’s own annotation holds until it is taken off', async (t) => {
    const place = await testPlace(t, client, 'dnd-node');
    const annotate = (value: string | null) =>
      client.request(`/api/v1/nodes/${place.node}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { [DO_NOT_DISRUPT_ANNOTATION]: value } } },
      });
    await annotate('true');
    const action = await reboot(t, place.node);
    const { record } = await held(action.metadata.name);
    assert.match(record.message ?? '', new RegExp(`Node ${place.node} \\("true"\\)`));
    await annotate(null);
    const approved = await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
    const r = approved.status?.checks?.find((c) => c.name === DO_NOT_DISRUPT_CHECK);
    assert.equal(r?.healthy, true);
    assert.match(r.message ?? '', /asks not to be disrupted any more/);
  });

  it('a bypass of the health checks passes it, recorded with the Pod it passed', async (t) => {
    const place = await testPlace(t, client, 'dnd-bypass');
    await pod(place, 'db-0', '6h');
    const action = await reboot(t, place.node, {
      bypass: { healthChecks: true, reason: 'kernel CVE, cannot wait' },
    });
    const approved = await waitForPhase(client, action.metadata.name, 'Approved', 30_000);
    const r = approved.status?.checks?.find((c) => c.name === DO_NOT_DISRUPT_CHECK);
    assert.equal(r?.bypassed, true);
    assert.match(r.message ?? '', new RegExp(`Pod ${place.namespace}/db-0 asks not to be disrupted: passed`));
    const bypassed = (await events(client, action.metadata.name)).find(
      (e) => e.reason === 'DoNotDisruptBypassed',
    );
    assert.match(bypassed?.message ?? '', /kernel CVE, cannot wait/);
  });
});
