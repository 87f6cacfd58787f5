// A configuration change on trial, confirmed by checks, against the sandbox and the Talos
// simulator (which plays TRY and its revert at the timeout as Talos does): with its check
// healthy inside the window the change is committed (applied again with NO_REBOOT) and
// stays after the window; with its check unhealthy nothing more is called, Talos reverts
// it at the timeout, and the action fails with the check's message.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { MACHINE_CONFIG_TEXT_ANNOTATION, TRY_REVERT_AT_ANNOTATION } from '../../sandbox/talos-simulator.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { deleteAfter, waitForPhase, whoami } from '../support/gate.ts';
import { switchableCheck, uniqueName } from '../support/kube.ts';
import { sleep } from '../../src/wait.ts';
import {
  callsOn,
  client,
  createManagedAction,
  kc,
  managedController,
  managedNodes,
  readNode,
} from '../support/managed.ts';
import { stopAll } from '../support/teardown.ts';

const instance = uniqueName('try-confirm');
let controller: Controller;
let me = '';

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await managedController(instance);
});

after(async () => {
  await stopAll(controller);
});

/** A machine configuration in the controller's namespace; its text. */
async function configSecret(t: TestContext, hostname: string): Promise<{ name: string; text: string }> {
  const name = uniqueName('try-config');
  const text = `version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: ${hostname}\n`;
  await client.request('/api/v1/namespaces/gatehouse-system/secrets', {
    method: 'POST',
    body: { metadata: { name }, stringData: { 'config.yaml': text } },
  });
  deleteAfter(t, client, `/api/v1/namespaces/gatehouse-system/secrets/${name}`);
  return { name, text };
}

/** A TRY of a new hostname on its own 1.14 node, confirmed by a check healthy or not. */
async function tryChange(t: TestContext, healthy: boolean, block: number) {
  const group = uniqueName('try');
  const [node = ''] = await managedNodes(t, group, 1, { talosVersion: 'v1.14.0', addressBlock: block });
  // Gates reboots only: the trial's confirmation names it, the health gate does not wait on it.
  const check = await switchableCheck(t, kc, group, healthy, { [INSTANCE_LABEL]: instance }, ['Reboot']);
  const config = await configSecret(t, `${node}-tried`);
  const name = await createManagedAction(t, instance, me, {
    nodeName: node,
    action: 'ConfigChange',
    configChange: {
      mode: 'Try',
      configSecretRef: { name: config.name },
      confirm: { checks: [check.name], window: '20s' },
    },
  });
  return { node, name, config };
}

describe('TRY confirmed by checks', () => {
  it('commits a change whose check is healthy inside the window, and leaves one whose check is not to Talos’s revert', async (t) => {
    const [kept, reverted] = await Promise.all([tryChange(t, true, 230), tryChange(t, false, 235)]);

    const committed = await waitForPhase(client, kept.name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(committed.status?.phase, 'Succeeded', committed.status?.message);
    assert.equal(committed.status.tryConfirm?.commitResult, 'Acknowledged');
    assert.equal((await callsOn(kept.node)).ApplyConfiguration, 2, 'the TRY, then the commit');

    const failed = await waitForPhase(client, reverted.name, ['Succeeded', 'Failed'], 120_000);
    assert.equal(failed.status?.phase, 'Failed');
    assert.match(
      failed.status.message ?? '',
      /the configuration was not confirmed within its window: switch-.* \(.*switched unhealthy by the test.*\); not committed, so Talos reverted it/,
    );
    assert.equal((await callsOn(reverted.node)).ApplyConfiguration, 1, 'no commit');
    assert.notEqual(
      (await readNode(reverted.node)).metadata.annotations?.[MACHINE_CONFIG_TEXT_ANNOTATION],
      reverted.config.text,
      'Talos reverted the change at the timeout',
    );

    // The committed change outlives its window: no revert comes.
    const until = Date.parse(committed.status.tryConfirm.until);
    await sleep(Math.max(0, until + 3000 - Date.now()));
    const node = await readNode(kept.node);
    assert.equal(node.metadata.annotations?.[MACHINE_CONFIG_TEXT_ANNOTATION], kept.config.text);
    assert.equal(node.metadata.annotations[TRY_REVERT_AT_ANNOTATION], undefined);
  });
});
