// The undo of pre-action hooks against the sandbox (real API server, real Job
// controller): an action cancelled after its PreRebootJob succeeded runs the hook's undo
// Job once and is let go only after it finished — also when the controller is SIGKILLed
// between the cancel and the undo, again and again (src/actions/phases/undo.ts).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL, NODE_ACTION_FINALIZER } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  createAction,
  createGroupHook,
  testPlace,
  type Place,
  deleteActionsAfter,
  events,
  getAction,
  hookTemplate,
  startGateController,
  waitForPhase,
  watchActions,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { KubeApiError } from '../../src/kube/rest.ts';
import { rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('undo');
let controller: Controller;
let me = '';

async function place(t: TestContext): Promise<Place> {
  const { node, namespace, group } = await testPlace(t, client, 'undo');
  await createGroupHook(client, { namespace, group }, 'PreRebootJob', 'noout', {
    template: hookTemplate('Succeeded', '1s'),
    undo: { template: hookTemplate('Succeeded', '3s'), timeout: '2m' },
  });
  return { namespace, node, group };
}

interface JobView {
  metadata: { name: string; uid: string; labels?: Record<string, string> };
  status?: { succeeded?: number };
}

/** Every undo Job of the action seen while it exists: uid by name (two uids = made twice). */
function watchUndoJobs(namespace: string, actionUID: string) {
  const seen = new Map<string, Set<string>>();
  return {
    seen,
    async look(): Promise<JobView[]> {
      const list = await client.request<{ items: JobView[] }>(`/apis/batch/v1/namespaces/${namespace}/jobs`, {
        query: { labelSelector: `talos.dev/action-uid=${actionUID},talos.dev/hook-purpose=undo` },
      });
      for (const j of list.items)
        seen.set(j.metadata.name, (seen.get(j.metadata.name) ?? new Set()).add(j.metadata.uid));
      return list.items;
    },
  };
}

/** Reads the action, or undefined once it is gone. */
async function actionOrGone(name: string): Promise<ActionObject | undefined> {
  try {
    return await getAction(client, name);
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 404) return undefined;
    throw error;
  }
}

/**
 * Follows every version of the action: the last one that still holds the finalizer is
 * what the controller had decided when it let the action go.
 */
function lastHeld(t: TestContext, inst: string, approved: ActionObject): () => ActionObject | undefined {
  let held: ActionObject | undefined;
  const log = watchActions(client, `${INSTANCE_LABEL}=${inst}`, approved.metadata.resourceVersion, (a) => {
    if (
      a.metadata.name === approved.metadata.name &&
      (a.metadata.finalizers ?? []).includes(NODE_ACTION_FINALIZER)
    )
      held = a;
  });
  t.after(() => log.stop());
  return () => held;
}

/** Approved (External: it waits for the requester), after its PreRebootJob succeeded. */
async function approvedAfterHook(t: TestContext, p: Place, inst: string): Promise<ActionObject> {
  const created = await createAction(client, inst, me, { nodeName: p.node });
  deleteActionsAfter(t, client, created.metadata.name);
  const approved = await waitForPhase(client, created.metadata.name, ['Approved', 'Failed'], 60_000);
  assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
  assert.equal(approved.status.hooks?.[0]?.phase, 'Succeeded');
  return approved;
}

const cancel = (name: string) =>
  client.request(`/apis/talos.dev/v1alpha1/nodeactions/${name}`, { method: 'DELETE' });

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await stopAll(controller);
});

describe('undo of pre-action hooks', () => {
  it('cancelled after its PreRebootJob succeeded: the undo Job runs once, and the action goes only after it', async (t) => {
    const p = await place(t);
    const approved = await approvedAfterHook(t, p, instance);
    const name = approved.metadata.name;
    const jobs = watchUndoJobs(p.namespace, approved.metadata.uid);
    const held = lastHeld(t, instance, approved);
    await cancel(name);
    await waitFor(
      'the cancelled action to be let go',
      async () => {
        await jobs.look();
        return (await actionOrGone(name)) ? undefined : true;
      },
      { timeoutMs: 90_000, intervalMs: 100 },
    );
    await new Promise((r) => setTimeout(r, 500)); // the watch's last events
    const last = held();
    assert.ok(last, 'the action was seen after the cancel');
    assert.equal(last.status?.phase, 'Cancelled');
    assert.equal(last.status.undo?.nodeDisrupted, false);
    // The last status it had before its finalizer went: the undo finished, and succeeded.
    assert.equal(last.status.undo.runs?.[0]?.phase, 'Succeeded', JSON.stringify(last.status.undo));
    assert.equal(last.status.conditions?.find((c) => c.type === 'Undone')?.status, 'True');
    assert.equal(jobs.seen.size, 1, `undo Jobs: ${JSON.stringify([...jobs.seen])}`);
    assert.deepEqual(
      [...jobs.seen.values()].map((uids) => uids.size),
      [1],
    );
    const reasons = (await events(client, name)).map((e) => e.reason);
    for (const reason of ['Cancelled', 'Undoing', 'Undone'])
      assert.ok(reasons.includes(reason), `no ${reason} Event among ${reasons.join(', ')}`);
  });
});

/** The real controller command in a process of its own, to SIGKILL. */
class ControllerProcess {
  private child: ChildProcess | undefined;
  private readonly inst: string;

  constructor(inst: string) {
    this.inst = inst;
  }

  start(): void {
    this.child = spawn(
      process.execPath,
      [
        'src/cli/main.ts', 'controller', '--kubeconfig', process.env.GATEHOUSE_TEST_KUBECONFIG ?? '',
        '--listen-host', '127.0.0.1', '--port', '0', '--instance', this.inst,
        '--check-selector', `${INSTANCE_LABEL}=${this.inst}`, '--no-leader-elect', '--log-level', 'warn',
      ], // prettier-ignore
      { stdio: 'ignore' },
    );
  }

  kill(): void {
    this.child?.kill('SIGKILL');
  }
}

describe('undo across SIGKILLs', () => {
  it('a controller SIGKILLed between the cancel and the undo never makes a second undo Job', async (t) => {
    const own = uniqueName('undo-kill');
    const proc = new ControllerProcess(own);
    t.after(() => proc.kill());
    proc.start();
    const p = await place(t);
    const approved = await approvedAfterHook(t, p, own);
    const name = approved.metadata.name;
    const jobs = watchUndoJobs(p.namespace, approved.metadata.uid);
    const held = lastHeld(t, own, approved);
    // Killed before it sees the cancel; the next one is killed as soon as the end is
    // recorded (the undo run recorded, its Job perhaps not yet created), and again once
    // the Job exists.
    proc.kill();
    await cancel(name);
    proc.start();
    await waitFor(
      'the cancel and the undo run to be recorded',
      async () => ((await getAction(client, name)).status?.undo?.runs?.length ? true : undefined),
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    proc.kill();
    proc.start();
    await waitFor('the undo Job', async () => ((await jobs.look()).length ? true : undefined), {
      timeoutMs: 60_000,
      intervalMs: 20,
    });
    proc.kill();
    proc.start();
    await waitFor(
      'the cancelled action to be let go',
      async () => {
        await jobs.look();
        return (await actionOrGone(name)) ? undefined : true;
      },
      { timeoutMs: 120_000, intervalMs: 100 },
    );
    await new Promise((r) => setTimeout(r, 500)); // the watch's last events
    const last = held();
    assert.equal(last?.status?.phase, 'Cancelled');
    assert.equal(last.status.undo?.runs?.[0]?.phase, 'Succeeded', JSON.stringify(last.status.undo));
    assert.equal(jobs.seen.size, 1, `undo Jobs: ${JSON.stringify([...jobs.seen])}`);
    assert.deepEqual(
      [...jobs.seen.values()].map((uids) => uids.size),
      [1],
      'one Job, created once',
    );
  });
});
