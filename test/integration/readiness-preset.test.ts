// The readiness preset of NodePrereadyJob against the sandbox (real API server, real
// DaemonSet controller and scheduler, kwok nodes): no Job, the node's critical DaemonSet
// Pods and CSI drivers decide when the preready taint comes off.
//
// kwok plays the kubelet: it makes a new Pod Running and Ready. What a real kubelet does
// on a boot — report a DaemonSet Pod not Ready while its container restarts, and Ready
// once its readiness probe passes — the test writes itself to the Pod's status, as the
// kubelet would (kwok leaves a Running Pod's status alone). Likewise the CSINode, which
// the kubelet creates at its first start and fills as drivers register.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { BootRecord } from '../../src/api/boot-record.ts';
import { BOOT_RECORD_ANNOTATION, INSTANCE_LABEL, PREREADY_TAINT } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createGroupHook,
  rebootNode,
  startGateController,
  testPlace,
  type Place,
} from '../support/gate.ts';
import { controllerKubeConfig, refusal, rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('readiness');
let controller: Controller;

const DRIVER = 'csi.gatehouse.test';

const place = (t: TestContext): Promise<Place> =>
  testPlace(t, client, 'ready', { [INSTANCE_LABEL]: instance });

interface RawNode {
  metadata: { uid: string; annotations?: Record<string, string> };
  spec?: { taints?: { key: string }[] };
  status?: { nodeInfo?: { bootID?: string } };
}

interface NodeView {
  bootID: string;
  tainted: boolean;
  record: BootRecord | undefined;
}

async function nodeView(name: string): Promise<NodeView> {
  const node = await client.request<RawNode>(`/api/v1/nodes/${name}`);
  const record = node.metadata.annotations?.[BOOT_RECORD_ANNOTATION];
  return {
    bootID: node.status?.nodeInfo?.bootID ?? '',
    tainted: (node.spec?.taints ?? []).some((t) => t.key === PREREADY_TAINT),
    record: record ? (JSON.parse(record) as BootRecord) : undefined,
  };
}

function describeView(v: NodeView): string {
  const run = v.record?.preready.runs[0];
  return `boot ${v.bootID} tainted=${String(v.tainted)} record=${v.record?.bootID ?? 'none'} preready ${
    v.record?.preready.phase ?? '-'
  } run ${run?.phase ?? '-'} (${run?.message ?? ''})`;
}

/** Waits until the node's current boot's readiness run is in `phase` with a message matching `message`. */
async function readinessRun(node: string, phase: string, message: RegExp, timeoutMs = 60_000) {
  return waitFor(
    `node ${node}'s readiness run to be ${phase} (${String(message)})`,
    async (observe) => {
      const v = await nodeView(node);
      observe(describeView(v));
      const run = v.record?.bootID === v.bootID ? v.record.preready.runs[0] : undefined;
      return run?.phase === phase && message.test(run.message ?? '') ? v : undefined;
    },
    { timeoutMs, intervalMs: 250 },
  );
}

/** A system-node-critical DaemonSet whose one Pod runs on the place's node. */
async function criticalDaemonSet(p: Place): Promise<string> {
  const labels = { app: 'cni-stand-in' };
  await client.request(`/apis/apps/v1/namespaces/${p.namespace}/daemonsets`, {
    method: 'POST',
    body: {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: 'cni-stand-in', namespace: p.namespace },
      spec: {
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            priorityClassName: 'system-node-critical',
            nodeSelector: { 'gatehouse.test/group': p.group },
            // As a CNI's: on every node, whatever its taints (the preready taint too).
            tolerations: [{ operator: 'Exists' }],
            containers: [{ name: 'agent', image: 'registry.k8s.io/pause:3.10' }],
          },
        },
      },
    },
  });
  return waitFor(
    `the DaemonSet's Pod on ${p.node} to be Ready`,
    async (observe) => {
      const list = await client.request<{
        items: { metadata: { name: string }; status?: { conditions?: { type: string; status: string }[] } }[];
      }>(`/api/v1/namespaces/${p.namespace}/pods`, { query: { fieldSelector: `spec.nodeName=${p.node}` } });
      const pod = list.items[0];
      observe(JSON.stringify(pod?.status?.conditions ?? null));
      return pod?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')
        ? pod.metadata.name
        : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

/** Writes the Pod's readiness as the kubelet reports a readiness probe's result. */
async function setPodReady(namespace: string, name: string, ready: boolean): Promise<void> {
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
  const status = ready ? 'True' : 'False';
  await client.request(`/api/v1/namespaces/${namespace}/pods/${name}/status`, {
    method: 'PATCH',
    contentType: 'application/strategic-merge-patch+json',
    body: {
      status: {
        conditions: [
          {
            type: 'Ready',
            status,
            lastTransitionTime: now,
            ...(ready ? {} : { reason: 'ContainersNotReady' }),
          },
          {
            type: 'ContainersReady',
            status,
            lastTransitionTime: now,
            ...(ready ? {} : { reason: 'ContainersNotReady' }),
          },
        ],
      },
    },
  });
}

/** The node's CSINode with these drivers, created or replaced as the kubelet keeps it (owned by the Node). */
async function writeCSINode(node: string, drivers: readonly string[]): Promise<void> {
  const { metadata } = await client.request<RawNode>(`/api/v1/nodes/${node}`);
  await client.request(`/apis/storage.k8s.io/v1/csinodes/${node}`, {
    method: 'PATCH',
    contentType: 'application/apply-patch+yaml',
    query: { fieldManager: 'kubelet-stand-in', force: true },
    body: {
      apiVersion: 'storage.k8s.io/v1',
      kind: 'CSINode',
      metadata: {
        name: node,
        ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node, uid: metadata.uid }],
      },
      spec: { drivers: drivers.map((name) => ({ name, nodeID: node })) },
    },
  });
}

/** Stays so for a while: the controller re-reads every 5 s, so 7 s covers a read after the change. */
async function staysTainted(node: string, ms = 7000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const v = await nodeView(node);
    assert.ok(v.tainted, `node ${node} lost the preready taint early: ${describeView(v)}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

before(async () => {
  await installGatehouseAPI(kc);
  // With the controller's own ServiceAccount: the shipped RBAC must allow reading Pods and CSINodes.
  controller = await startGateController(instance, { kubeConfig: await controllerKubeConfig(kc) });
});

after(async () => {
  await stopAll(controller);
});

describe('the readiness preset of NodePrereadyJob', () => {
  it('keeps the taint on a rebooted node until its critical DaemonSet Pod is Ready', async (t) => {
    const p = await place(t);
    await writeCSINode(p.node, [DRIVER]);
    const pod = await criticalDaemonSet(p);
    await createGroupHook(client, p, 'NodePrereadyJob', 'critical-components', {
      timeout: '5m',
      readiness: { daemonSets: { priorityClassNames: ['system-node-critical'] }, csiDrivers: [DRIVER] },
    });
    // A new node is a boot too: everything is ready, the taint comes off.
    const first = await readinessRun(p.node, 'Succeeded', /1 critical DaemonSet Pod Ready/);
    await waitFor('the taint to come off after the first boot', async () =>
      (await nodeView(p.node)).tainted ? undefined : true,
    );

    // The kubelet, after the boot, reports the Pod not Ready while its container restarts.
    await setPodReady(p.namespace, pod, false);
    const boot = await rebootNode(client, p.node);
    assert.notEqual(boot, first.bootID);
    const waiting = await readinessRun(p.node, 'Running', new RegExp(`${p.namespace}/${pod} not Ready`));
    assert.equal(waiting.record?.bootID, boot);
    assert.ok(waiting.tainted, 'tainted while the critical Pod is not Ready');
    assert.equal(waiting.record.preready.runs[0]?.jobName, undefined, 'no Job');
    await staysTainted(p.node);

    await setPodReady(p.namespace, pod, true);
    const done = await readinessRun(p.node, 'Succeeded', /1 critical DaemonSet Pod Ready; CSI driver/);
    await waitFor('the taint to come off', async (observe) => {
      const v = await nodeView(p.node);
      observe(describeView(v));
      return !v.tainted && v.record?.preready.phase === 'Succeeded' ? true : undefined;
    });
    assert.equal(done.record?.bootID, boot);

    // Shown like any boot hook: the hook's status has the run, with its message.
    const hook = await client.request<{
      status?: { lastRuns?: { bootID?: string; phase: string; message?: string }[] };
    }>(`${API}/namespaces/${p.namespace}/nodeprereadyjobs/critical-components`);
    const run = hook.status?.lastRuns?.find((r) => r.bootID === boot);
    assert.equal(run?.phase, 'Succeeded');
    assert.match(run.message ?? '', /1 critical DaemonSet Pod Ready/);
  });

  it('a CSINode without the driver keeps the taint; the driver registered lets it go', async (t) => {
    const p = await place(t);
    await criticalDaemonSet(p);
    await createGroupHook(client, p, 'NodePrereadyJob', 'csi', {
      timeout: '5m',
      readiness: { csiDrivers: [DRIVER] },
    });
    await readinessRun(p.node, 'Running', /not registered \(the node has no CSINode yet\)/);
    assert.ok((await nodeView(p.node)).tainted);

    await writeCSINode(p.node, ['other.csi.example.com']);
    await readinessRun(
      p.node,
      'Running',
      new RegExp(`^CSI driver ${DRIVER.replaceAll('.', '\\.')} not registered$`),
    );
    await staysTainted(p.node);

    await writeCSINode(p.node, ['other.csi.example.com', DRIVER]);
    await readinessRun(p.node, 'Succeeded', /registered/);
    await waitFor('the taint to come off', async () => ((await nodeView(p.node)).tainted ? undefined : true));
  });

  it('the API server takes readiness on a NodePrereadyJob only, and alone', async (t) => {
    const p = await place(t);
    const both = await refusal(
      createGroupHook(client, p, 'NodePrereadyJob', 'both', {
        readiness: { csiDrivers: [DRIVER] },
        webhook: { service: { name: 'x' } },
      }),
    );
    assert.match(both.message, /set exactly one of template, webhook or readiness/);
    const empty = await refusal(createGroupHook(client, p, 'NodePrereadyJob', 'empty', { readiness: {} }));
    assert.match(empty.message, /readiness must set daemonSets, csiDrivers or both/);
    // NodeReadyJob has no readiness: the field is pruned, and then nothing runs.
    const ready = await refusal(
      createGroupHook(client, p, 'NodeReadyJob', 'ready', { readiness: { csiDrivers: [DRIVER] } }),
    );
    assert.match(ready.message, /exactly one of template \(a Job\) or webhook/);
  });
});
