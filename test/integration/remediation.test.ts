// Node remediation paused while an action takes its node away, against the sandbox: the
// medik8s exclusion label goes on after approval and comes off at every end — Succeeded,
// Failed, Cancelled — a label someone else set is never touched, and a controller
// SIGKILLed between putting it on and taking it off takes it off once when it resumes.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { REMEDIATION_EXCLUDE_LABEL, REMEDIATION_PAUSED_BY_ANNOTATION } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { ControllerProcess } from '../support/controller-process.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createPolicy,
  deleteActionsAfter,
  events,
  markExecuted,
  rebootNode,
  startGateController,
  testPlace,
  waitForActionGone,
  waitForPhase,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('remediation');
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

interface NodeObject {
  metadata: { labels?: Record<string, string>; annotations?: Record<string, string> };
}

async function exclusion(node: string): Promise<{ label?: string; by?: string }> {
  const n = await client.request<NodeObject>(`/api/v1/nodes/${node}`);
  const label = n.metadata.labels?.[REMEDIATION_EXCLUDE_LABEL];
  const by = n.metadata.annotations?.[REMEDIATION_PAUSED_BY_ANNOTATION];
  return { ...(label !== undefined ? { label } : {}), ...(by !== undefined ? { by } : {}) };
}

const paused = (node: string, name: string) =>
  waitFor(`the remediation pause of ${name} on ${node}`, async () => {
    const e = await exclusion(node);
    return e.label === 'true' && e.by === name ? true : undefined;
  });

const resumed = (node: string) =>
  waitFor(`the remediation pause to come off ${node}`, async () => {
    const e = await exclusion(node);
    return e.label === undefined && e.by === undefined ? true : undefined;
  });

async function reboot(t: TestContext, node: string, extra = {}, as = instance): Promise<ActionObject> {
  const action = await createAction(client, as, me, { nodeName: node, action: 'Reboot', ...extra });
  deleteActionsAfter(t, client, action.metadata.name);
  return action;
}

describe('remediation paused while an action takes the node away', () => {
  it('is put on after approval and taken off when the action succeeds', async (t) => {
    const place = await testPlace(t, client, 'rem-ok');
    assert.deepEqual(await exclusion(place.node), {});
    const { metadata } = await reboot(t, place.node);
    await waitForPhase(client, metadata.name, 'Approved');
    await paused(place.node, metadata.name);
    assert.equal((await getStatus(metadata.name)).remediationPaused, true);
    await markExecuted(client, metadata.name);
    await rebootNode(client, place.node);
    await waitForPhase(client, metadata.name, 'Succeeded');
    await resumed(place.node);
    const reasons = (await events(client, metadata.name)).map((e) => e.reason);
    assert.ok(
      reasons.includes('RemediationPaused') && reasons.includes('RemediationResumed'),
      reasons.join(', '),
    );
  });

  it('is taken off when the action fails, and when it is cancelled', async (t) => {
    const place = await testPlace(t, client, 'rem-end');
    const failing = await reboot(t, place.node, { deadlines: { approved: '3s' } });
    await paused(place.node, failing.metadata.name);
    await waitForPhase(client, failing.metadata.name, 'Failed');
    await resumed(place.node);

    const cancelled = await reboot(t, place.node);
    await paused(place.node, cancelled.metadata.name);
    await client.request(`${API}/nodeactions/${cancelled.metadata.name}`, { method: 'DELETE' });
    await waitForActionGone(client, cancelled.metadata.name, 'the cancelled action to go');
    assert.deepEqual(await exclusion(place.node), {}, 'off before the finalizer went');
  });

  it('leaves a label someone else set as it is, before and after', async (t) => {
    const place = await testPlace(t, client, 'rem-theirs');
    await client.request(`/api/v1/nodes/${place.node}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { labels: { [REMEDIATION_EXCLUDE_LABEL]: 'true' } } },
    });
    const { metadata } = await reboot(t, place.node);
    await waitForPhase(client, metadata.name, 'Approved');
    await markExecuted(client, metadata.name);
    await rebootNode(client, place.node);
    const done = await waitForPhase(client, metadata.name, 'Succeeded');
    assert.equal(done.status?.remediationPaused, undefined);
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(await exclusion(place.node), { label: 'true' });
  });

  it('is not put on where a governing ActionPolicy says pauseRemediation: false', async (t) => {
    const place = await testPlace(t, client, 'rem-off');
    const policy = await createPolicy(t, client, instance, {
      nodeSelector: { matchLabels: { 'gatehouse.test/group': place.group } },
      pauseRemediation: false,
    });
    // The controller has the policy once it reports on it.
    await waitFor(`ActionPolicy ${policy} to be reported on`, async () => {
      const p = await client.request<{ status?: { matchingNodes?: number } }>(
        `${API}/actionpolicies/${policy}`,
      );
      return p.status?.matchingNodes === 1 ? true : undefined;
    });
    const { metadata } = await reboot(t, place.node);
    await waitForPhase(client, metadata.name, 'Approved');
    await new Promise((r) => setTimeout(r, 1500));
    assert.deepEqual(await exclusion(place.node), {});
    assert.equal((await getStatus(metadata.name)).remediationPaused, undefined);
  });
});

async function getStatus(name: string) {
  return (await client.request<ActionObject>(`${API}/nodeactions/${name}`)).status ?? {};
}

describe('remediation pause under SIGKILL', () => {
  it('a controller killed between putting the pause on and taking it off takes it off once', async (t) => {
    const own = uniqueName('remediation-kill');
    const logs = await mkdtemp(join(tmpdir(), 'gatehouse-remediation-'));
    t.after(() => rm(logs, { recursive: true, force: true }));
    const gate = new ControllerProcess(own, logs);
    t.after(() => gate.stop());
    const place = await testPlace(t, client, 'rem-kill');
    // Every change of the label, as a watch sees it: on, then off, once each.
    const changes: string[] = [];
    const stop = new AbortController();
    t.after(() => stop.abort());
    void client
      .watch(
        '/api/v1/nodes',
        { fieldSelector: `metadata.name=${place.node}` },
        (event) => {
          const label = (event.object as unknown as NodeObject).metadata.labels?.[REMEDIATION_EXCLUDE_LABEL];
          const state = label === undefined ? 'off' : 'on';
          if (changes.at(-1) !== state) changes.push(state);
        },
        stop.signal,
      )
      .catch(() => undefined);

    gate.start();
    const { metadata } = await reboot(t, place.node, {}, own);
    await paused(place.node, metadata.name);
    gate.kill();
    // The node goes through its reboot while no controller runs.
    await markExecuted(client, metadata.name);
    await rebootNode(client, place.node);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await exclusion(place.node)).by, metadata.name, 'still paused while nobody watched');
    gate.start();
    await waitForPhase(client, metadata.name, 'Succeeded', 120_000);
    await resumed(place.node);
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(changes, ['off', 'on', 'off'], await gate.tails());
  });
});
