// Boot hooks against the sandbox (real API server, real Job controller, kwok nodes): the
// preready taint, NodePrereadyJobs for the current boot, the taint off only once they
// succeeded, then NodeReadyJobs; for boots an action caused and for boots nobody asked
// for; through a controller restart; and for a hook created again after its boot was done.
//
// The nodes of this file carry talos.dev/controller-instance=<this file's instance>, so
// that only this file's controllers handle their boots; its hooks select only them.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { BootAnnouncement, BootRecord } from '../../src/api/boot-record.ts';
import {
  INSTANCE_LABEL,
  BOOT_ANNOUNCEMENT_ANNOTATION,
  BOOT_RECORD_ANNOTATION,
  HOOK_JOB_LABELS as LABELS,
  PREREADY_TAINT,
} from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { hookJobName } from '../../src/hooks/job.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  createGroupHook,
  API,
  createAction,
  testPlace,
  type Place,
  deleteActionsAfter,
  getAction,
  hookTemplate,
  markExecuted,
  rebootNode,
  startGateController,
  waitForPhase,
  watchActions,
  whoami,
} from '../support/gate.ts';
import { controllerKubeConfig, rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('boots');
let controller: Controller;
let me = '';

/** A node of its own (handled by `owner`'s controllers), and a namespace for its hooks. */
const place = (t: TestContext, owner = instance): Promise<Place> =>
  testPlace(t, client, 'boot', { [INSTANCE_LABEL]: owner });

function createHook(
  p: Place,
  kind: 'NodePrereadyJob' | 'NodeReadyJob',
  name: string,
  spec: Record<string, unknown>,
): Promise<{ uid: string }> {
  return createGroupHook(client, p, kind, name, spec);
}

interface NodeView {
  resourceVersion: string;
  bootID: string;
  ready: boolean;
  tainted: boolean;
  record: BootRecord | undefined;
  announcement: BootAnnouncement | undefined;
}

interface RawNode {
  metadata: { resourceVersion: string; annotations?: Record<string, string> };
  spec?: { taints?: { key: string; effect: string }[] };
  status?: { nodeInfo?: { bootID?: string }; conditions?: { type: string; status: string }[] };
}

function view(node: RawNode): NodeView {
  const annotations = node.metadata.annotations ?? {};
  const record = annotations[BOOT_RECORD_ANNOTATION];
  const announcement = annotations[BOOT_ANNOUNCEMENT_ANNOTATION];
  return {
    resourceVersion: node.metadata.resourceVersion,
    bootID: node.status?.nodeInfo?.bootID ?? '',
    ready: node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    tainted: (node.spec?.taints ?? []).some((t) => t.key === PREREADY_TAINT && t.effect === 'NoSchedule'),
    record: record ? (JSON.parse(record) as BootRecord) : undefined,
    announcement: announcement ? (JSON.parse(announcement) as BootAnnouncement) : undefined,
  };
}

async function nodeView(name: string): Promise<NodeView> {
  return view(await client.request<RawNode>(`/api/v1/nodes/${name}`));
}

function describeView(v: NodeView): string {
  const r = v.record;
  return `boot ${v.bootID} ready=${String(v.ready)} tainted=${String(v.tainted)} record=${
    r
      ? `${r.bootID} preready ${r.preready.phase} (${r.preready.message ?? ''}) ready ${r.ready.phase}`
      : 'none'
  }`;
}

/** Waits until the node's current boot has all its boot hooks done and the taint is off. */
async function bootDone(name: string, timeoutMs = 90_000): Promise<NodeView> {
  return waitFor(
    `the boot hooks of node ${name} to be done`,
    async (observe) => {
      const v = await nodeView(name);
      observe(describeView(v));
      const r = v.record;
      return r?.bootID === v.bootID &&
        r.preready.phase === 'Succeeded' &&
        r.ready.phase === 'Succeeded' &&
        !v.tainted
        ? v
        : undefined;
    },
    { timeoutMs, intervalMs: 250 },
  );
}

/** Every version of one node from `resourceVersion` on, as a watch delivers them. */
function watchNode(
  c: RestClient,
  name: string,
  resourceVersion: string,
): { versions: NodeView[]; errors: string[]; stop: () => Promise<void> } {
  const versions: NodeView[] = [];
  const errors: string[] = [];
  const abort = new AbortController();
  const stopped = () => abort.signal.aborted;
  let rv = resourceVersion;
  const loop = (async () => {
    while (!abort.signal.aborted) {
      try {
        await c.watch(
          '/api/v1/nodes',
          { fieldSelector: `metadata.name=${name}`, resourceVersion: rv, allowWatchBookmarks: true },
          (event) => {
            if (event.type === 'ERROR') {
              errors.push(JSON.stringify(event.object));
              return;
            }
            const node = event.object as unknown as RawNode;
            rv = node.metadata.resourceVersion;
            if (event.type === 'ADDED' || event.type === 'MODIFIED') versions.push(view(node));
          },
          abort.signal,
        );
      } catch {
        if (stopped()) break;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  })();
  return {
    versions,
    errors,
    stop: async () => {
      abort.abort();
      await loop;
    },
  };
}

interface JobView {
  metadata: {
    name: string;
    uid: string;
    labels: Record<string, string>;
    ownerReferences?: { kind: string }[];
  };
  spec: { template: { spec: { containers: { env?: { name: string; value?: string }[] }[] } } };
  status?: { completionTime?: string };
}

async function jobsOf(namespace: string, selector: string): Promise<JobView[]> {
  const list = await client.request<{ items: JobView[] }>(`/apis/batch/v1/namespaces/${namespace}/jobs`, {
    query: { labelSelector: selector },
  });
  return list.items;
}

function env(job: JobView): Record<string, string> {
  return Object.fromEntries(
    job.spec.template.spec.containers[0]?.env?.map((e) => [e.name, e.value ?? '']) ?? [],
  );
}

async function nodeEvents(name: string): Promise<{ reason: string; message: string; type: string }[]> {
  const list = await client.request<{ items: { reason: string; message: string; type: string }[] }>(
    '/api/v1/namespaces/default/events',
    { query: { fieldSelector: `involvedObject.name=${name},involvedObject.kind=Node` } },
  );
  return list.items;
}

const rvOf = (v: { resourceVersion: string }) => BigInt(v.resourceVersion);

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  // With the controller's own ServiceAccount: the shipped RBAC must allow all of this.
  controller = await startGateController(instance, { kubeConfig: await controllerKubeConfig(kc) });
});

after(async () => {
  await stopAll(controller);
});

describe('boot hooks', () => {
  it('a reboot by an action: tainted before approval, the NodePrereadyJob for the new boot, the taint off, then the NodeReadyJob', async (t) => {
    const p = await place(t);
    const prep = await createHook(p, 'NodePrereadyJob', 'prep', {
      template: hookTemplate('Succeeded', '2s'),
    });
    const ready = await createHook(p, 'NodeReadyJob', 'unset-noout', {
      template: hookTemplate('Succeeded', '1s'),
    });
    // A new node is a boot too: its hooks run first.
    const first = await bootDone(p.node);
    const nodeLog = watchNode(client, p.node, first.resourceVersion);
    t.after(() => nodeLog.stop());

    const created = await createAction(client, instance, me, { nodeName: p.node });
    deleteActionsAfter(t, client, created.metadata.name);
    let approvedAt: bigint | undefined;
    const actionLog = watchActions(
      client,
      `${INSTANCE_LABEL}=${instance}`,
      created.metadata.resourceVersion,
      (a) => {
        if (a.metadata.name === created.metadata.name && a.status?.phase === 'Approved' && !approvedAt)
          approvedAt = rvOf(a.metadata);
      },
    );
    t.after(() => actionLog.stop());
    const approved = await waitForPhase(client, created.metadata.name, ['Approved', 'Failed']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    await waitFor('the approval to be seen by the watch', () => approvedAt);

    // The taint and the announcement were on the node before the approval was written.
    const announced = nodeLog.versions.find(
      (v) => v.tainted && v.announcement?.action.uid === created.metadata.uid,
    );
    assert.ok(announced, 'the node was tainted and the boot announced');
    assert.ok(
      approvedAt !== undefined && rvOf(announced) < approvedAt,
      `tainted at ${announced.resourceVersion}, approved at ${String(approvedAt)}`,
    );
    assert.equal(announced.announcement?.bootID, first.bootID);

    await markExecuted(client, created.metadata.name);
    const boot = await rebootNode(client, p.node);
    const done = await waitForPhase(client, created.metadata.name, ['Succeeded', 'Failed']);
    assert.equal(done.status?.phase, 'Succeeded', done.status?.message);
    assert.equal(done.status.bootIDAfter, boot);
    // The action shows the boot's runs, which the boot reconciler made.
    assert.deepEqual(
      done.status.hooks
        ?.filter((h) => h.kind === 'NodePrereadyJob' || h.kind === 'NodeReadyJob')
        .map((h) => [h.name, h.phase]),
      [
        ['prep', 'Succeeded'],
        ['unset-noout', 'Succeeded'],
      ],
    );
    const end = await bootDone(p.node);
    assert.equal(end.record?.bootID, boot);
    assert.equal(
      end.record.action?.uid,
      created.metadata.uid,
      'the boot is recorded as caused by the action',
    );
    assert.equal(end.announcement, undefined, 'the announcement was taken up by the boot');

    // The Job of the new boot: its boot ID, its action, owned by the Node.
    const [job] = await jobsOf(p.namespace, `${LABELS.hookUID}=${prep.uid},${LABELS.bootID}=${boot}`);
    assert.ok(job, 'a NodePrereadyJob Job for the new boot');
    assert.deepEqual(env(job), {
      GATEHOUSE_NODE: p.node,
      GATEHOUSE_ACTION: 'Reboot',
      GATEHOUSE_ACTION_NAME: created.metadata.name,
      GATEHOUSE_BOOT_ID: boot,
    });
    assert.deepEqual(
      job.metadata.ownerReferences?.map((o) => o.kind),
      ['Node'],
    );

    // In order, from every version of the node: tainted from before the approval until
    // the version that records the new boot's NodePrereadyJobs done, which also removes
    // the taint; the NodeReadyJob only after.
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(nodeLog.errors, [], 'the node watch missed no version');
    const versions = nodeLog.versions.filter((v) => rvOf(v) >= rvOf(announced));
    const untaint = versions.findIndex((v) => !v.tainted);
    assert.ok(untaint > 0, 'the taint came off');
    const off = versions[untaint] as NodeView;
    assert.equal(off.bootID, boot);
    assert.equal(off.record?.bootID, boot);
    assert.equal(off.record.preready.phase, 'Succeeded', 'the taint came off with the record of success');
    assert.ok(
      versions.slice(0, untaint).every((v) => v.record?.bootID !== boot || v.record.ready.runs.length === 0),
      'no NodeReadyJob before the taint was off',
    );
    const readyRun = end.record.ready.runs[0];
    assert.equal(readyRun?.uid, ready.uid);
    assert.ok(
      Date.parse(readyRun.startTime ?? '') >= Date.parse(end.record.preready.time ?? ''),
      'the NodeReadyJob started once the NodePrereadyJobs were done',
    );

    // The Jobs of the earlier boot are deleted.
    await waitFor('the Jobs of the first boot to be deleted', async () => {
      const old = await jobsOf(p.namespace, `${LABELS.bootID}=${first.bootID}`);
      return old.length === 0 ? true : undefined;
    });
    const byName = (await getAction(client, created.metadata.name)).status?.phase;
    assert.equal(byName, 'Succeeded');
  });

  it('a failing NodePrereadyJob keeps the taint on and says why; deleting the hook lets the node go', async (t) => {
    const p = await place(t);
    await createHook(p, 'NodePrereadyJob', 'breaks', { template: hookTemplate('Failed', '1s') });
    const failed = await waitFor(
      'the NodePrereadyJob to fail',
      async (observe) => {
        const v = await nodeView(p.node);
        observe(describeView(v));
        return v.record?.preready.phase === 'Failed' ? v : undefined;
      },
      { timeoutMs: 90_000 },
    );
    assert.equal(failed.tainted, true);
    assert.match(failed.record?.preready.message ?? '', /breaks failed: .*BackoffLimitExceeded/);
    const event = await waitFor('a PrereadyHookFailed event', async () =>
      (await nodeEvents(p.node)).find((e) => e.reason === 'PrereadyHookFailed'),
    );
    assert.equal(event.type, 'Warning');
    assert.match(event.message, /breaks failed: .*keeps the talos\.dev\/preready taint/);
    // The hook's own status is written after the node's record: read until it is there.
    const lastRun = await waitFor('the hook to record its failed run', async (observe) => {
      const hook = await client.request<{ status?: { conditions?: { type: string; status: string }[] } }>(
        `${API}/namespaces/${p.namespace}/nodeprereadyjobs/breaks`,
      );
      const condition = hook.status?.conditions?.find((c) => c.type === 'LastRunSucceeded');
      observe(JSON.stringify(hook.status ?? {}));
      return condition;
    });
    assert.equal(lastRun.status, 'False');

    // It stays tainted, and the hook is not run again for this boot.
    await new Promise((r) => setTimeout(r, 4000));
    const later = await nodeView(p.node);
    assert.equal(later.tainted, true);
    assert.equal((await jobsOf(p.namespace, `${LABELS.bootID}=${later.bootID}`)).length, 1);

    await client.request(`${API}/namespaces/${p.namespace}/nodeprereadyjobs/breaks`, { method: 'DELETE' });
    await waitFor('the taint to come off once no NodePrereadyJob selects the node', async () =>
      (await nodeView(p.node)).tainted ? undefined : true,
    );
  });

  it('runs the hooks of a boot no action caused', async (t) => {
    const p = await place(t);
    const prep = await createHook(p, 'NodePrereadyJob', 'prep', {
      template: hookTemplate('Succeeded', '1s'),
    });
    await createHook(p, 'NodeReadyJob', 'after', { template: hookTemplate('Succeeded', '1s') });
    const first = await bootDone(p.node);
    const nodeLog = watchNode(client, p.node, first.resourceVersion);
    t.after(() => nodeLog.stop());

    // A crash: a new boot ID, NotReady, then Ready again.
    const boot = await rebootNode(client, p.node);
    const end = await bootDone(p.node);
    assert.equal(end.record?.bootID, boot);
    assert.equal(end.record.action, undefined);
    assert.deepEqual(nodeLog.errors, []);
    // Nobody announced this boot, so the node shows it untainted until the controller
    // sees it (a moment); from then on it is tainted until its NodePrereadyJobs are done.
    const versions = nodeLog.versions.filter((v) => v.bootID === boot);
    const tainted = versions.findIndex((v) => v.tainted);
    assert.ok(tainted >= 0, 'the node was tainted for the new boot');
    assert.ok(
      versions.slice(0, tainted).every((v) => v.record?.bootID !== boot),
      'tainted as soon as the new boot was recorded',
    );
    const untaint = versions.findIndex((v, i) => i > tainted && !v.tainted);
    assert.equal(versions[untaint]?.record?.preready.phase, 'Succeeded');
    assert.ok(
      versions.slice(tainted, untaint).every((v) => v.record?.preready.phase !== 'Succeeded'),
      'the taint came off with the record of success, not later',
    );
    const [job] = await jobsOf(p.namespace, `${LABELS.hookUID}=${prep.uid},${LABELS.bootID}=${boot}`);
    assert.ok(job);
    assert.deepEqual(env(job), {
      GATEHOUSE_NODE: p.node,
      GATEHOUSE_ACTION: '',
      GATEHOUSE_ACTION_NAME: '',
      GATEHOUSE_BOOT_ID: boot,
    });
    assert.ok(
      (await nodeEvents(p.node)).some((e) => e.reason === 'PrereadyUntainted' && e.message.includes(boot)),
    );
    // Done is at rest: no more writes of the record.
    const writes = nodeLog.versions.length;
    await new Promise((r) => setTimeout(r, 3000));
    assert.deepEqual(
      nodeLog.versions.slice(writes).filter((v) => JSON.stringify(v.record) !== JSON.stringify(end.record)),
      [],
    );
  });

  it("a controller restart between a boot and its NodePrereadyJob's completion keeps the taint on, and no Job is created twice", async (t) => {
    // Controllers of their own for this node, stopped and started at will.
    const owner = `${instance}-restart`;
    const p = await place(t, owner);
    let current: Controller | undefined = await startGateController(owner);
    t.after(() => current?.stop());
    const prep = await createHook(p, 'NodePrereadyJob', 'slow', {
      template: hookTemplate('Succeeded', '1s'),
    });
    await createHook(p, 'NodeReadyJob', 'after', { template: hookTemplate('Succeeded', '1s') });
    const first = await bootDone(p.node);
    // From the next boot on, the NodePrereadyJob takes 20s (an edit does not run a hook
    // again for a boot it is done for).
    await client.request(`${API}/namespaces/${p.namespace}/nodeprereadyjobs/slow`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { template: hookTemplate('Succeeded', '20s') } },
    });
    // Every Job of the hook, by name and UID: a name seen with two UIDs was created twice.
    const jobs = new Map<string, Set<string>>();
    const jobsAbort = new AbortController();
    t.after(() => jobsAbort.abort());
    void client
      .watch(
        `/apis/batch/v1/namespaces/${p.namespace}/jobs`,
        { labelSelector: `${LABELS.hookUID}=${prep.uid}` },
        (event) => {
          const job = event.object as { metadata: { name: string; uid: string } };
          if (event.type === 'ADDED' || event.type === 'MODIFIED')
            jobs.set(job.metadata.name, (jobs.get(job.metadata.name) ?? new Set()).add(job.metadata.uid));
        },
        jobsAbort.signal,
      )
      .catch(() => undefined);
    const nodeLog = watchNode(client, p.node, first.resourceVersion);
    t.after(() => nodeLog.stop());

    const boot = await rebootNode(client, p.node);
    const running = await waitFor(
      'the NodePrereadyJob of the new boot to run',
      async (observe) => {
        const v = await nodeView(p.node);
        observe(describeView(v));
        return v.record?.bootID === boot && v.record.preready.runs[0]?.phase === 'Running' ? v : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    assert.equal(running.tainted, true);
    await current.stop();
    current = undefined;

    // No controller: the taint stays.
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      assert.equal((await nodeView(p.node)).tainted, true, 'tainted while no controller runs');
    }

    // A new controller: the Job still runs, and the taint stays until it is recorded done.
    current = await startGateController(owner);
    for (let i = 0; i < 4; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      const v = await nodeView(p.node);
      if (v.record?.preready.phase === 'Succeeded') break;
      assert.equal(v.tainted, true, `tainted after the restart: ${describeView(v)}`);
    }
    const end = await bootDone(p.node, 120_000);
    assert.equal(end.record?.bootID, boot);
    await new Promise((r) => setTimeout(r, 500));

    // From the reboot on, every version of the node until the record of success was tainted.
    assert.deepEqual(nodeLog.errors, []);
    const versions = nodeLog.versions.filter((v) => v.bootID === boot);
    const untaint = versions.findIndex((v) => !v.tainted);
    assert.ok(untaint >= 0);
    assert.ok(versions.slice(0, untaint).every((v) => v.tainted));
    assert.equal(versions[untaint]?.record?.preready.phase, 'Succeeded');

    // One Job for the hook and this boot, created once, which finished before the taint came off.
    const ofBoot = await jobsOf(p.namespace, `${LABELS.hookUID}=${prep.uid},${LABELS.bootID}=${boot}`);
    assert.equal(ofBoot.length, 1);
    const job = ofBoot[0] as JobView;
    assert.deepEqual(
      end.record.preready.runs.map((r) => [r.jobName, r.attempt, r.phase]),
      [[job.metadata.name, 1, 'Succeeded']],
    );
    assert.ok(
      Date.parse(job.status?.completionTime ?? '') <= Date.parse(end.record.preready.time ?? '') + 1000,
      'the taint came off after the Job finished',
    );
    const twice = [...jobs].filter(([, uids]) => uids.size > 1).map(([name]) => name);
    assert.deepEqual(twice, [], 'no Job was created twice');
  });

  it('runs a hook created again after the boot was done, for the current boot', async (t) => {
    const p = await place(t);
    const old = await createHook(p, 'NodePrereadyJob', 'prep', { template: hookTemplate('Succeeded', '1s') });
    const done = await bootDone(p.node);
    assert.deepEqual(done.record?.preready.hooks, [old.uid]);

    await client.request(`${API}/namespaces/${p.namespace}/nodeprereadyjobs/prep`, { method: 'DELETE' });
    const recreated = await createHook(p, 'NodePrereadyJob', 'prep', {
      template: hookTemplate('Succeeded', '2s'),
    });
    const tainted = await waitFor('the taint to be back for the recreated hook', async (observe) => {
      const v = await nodeView(p.node);
      observe(describeView(v));
      return v.tainted ? v : undefined;
    });
    assert.equal(tainted.bootID, done.bootID, 'the same boot');
    const again = await bootDone(p.node);
    assert.equal(again.bootID, done.bootID);
    assert.deepEqual(again.record?.preready.hooks, [recreated.uid]);
    const jobs = await jobsOf(p.namespace, `${LABELS.bootID}=${done.bootID}`);
    assert.deepEqual(
      jobs.map((j) => j.metadata.labels[LABELS.hookUID]).sort(),
      [old.uid, recreated.uid].sort(),
      'one Job per hook object, each run once for this boot',
    );
  });

  it("a Job squatting a NodePrereadyJob's Job name is not adopted: the taint stays on", async (t) => {
    const p = await place(t);
    const { bootID } = await nodeView(p.node);
    await createHook(p, 'NodePrereadyJob', 'first', { template: hookTemplate('Succeeded', '3s'), order: 1 });
    const guard = await createHook(p, 'NodePrereadyJob', 'guard', {
      template: hookTemplate('Hang'),
      order: 2,
    });
    // A namespace editor creates, before the guard runs, a Job under its name that succeeds.
    const name = hookJobName(
      { node: p.node, bootID },
      { metadata: { name: 'guard', uid: guard.uid } } as HookObject,
      1,
    );
    await client.request(`/apis/batch/v1/namespaces/${p.namespace}/jobs`, {
      method: 'POST',
      body: { apiVersion: 'batch/v1', kind: 'Job', metadata: { name }, ...hookTemplate('Succeeded', '0s') },
    });
    const failed = await waitFor(
      'the preready stage to end',
      async (observe) => {
        const v = await nodeView(p.node);
        observe(describeView(v));
        const phase = v.record?.bootID === bootID ? v.record.preready.phase : undefined;
        return phase === 'Failed' || phase === 'Succeeded' ? v : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    assert.equal(failed.record?.preready.phase, 'Failed', 'the impostor Job passed for the NodePrereadyJob');
    const run = failed.record.preready.runs.find((r) => r.name === 'guard');
    assert.match(
      run?.message ?? '',
      new RegExp(`Job ${p.namespace}/${name} was not created by gatehouse for this run`),
    );
    assert.ok(failed.tainted, 'the preready taint stays on');
    for (const r of failed.record.preready.runs) {
      if (r.startTime && r.completionTime)
        assert.ok(
          Date.parse(r.completionTime) >= Date.parse(r.startTime),
          `${r.name} completed before it started`,
        );
    }
  });
});
