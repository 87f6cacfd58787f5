// The unplanned-disruption audit against the sandbox: a reboot made straight at the Talos
// simulator (around the gate) is an UnplannedDisruption Event on the Node, counted in
// gatehouse_unplanned_disruptions_total and alerted on by the chart's rule in a real
// Prometheus; a reboot a NodeAction approved is not; a long NotReady (a shutdown made
// around the gate) is; a node seen for the first time is not.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { AUDIT_ANNOTATION } from '../../src/boots/audit.ts';
import type { Controller } from '../../src/controller.ts';
import type { Monitoring, RuleGroup } from '../../sandbox/monitoring.ts';
import { TalosClient } from '../../src/talos/client.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import {
  API,
  createAction,
  markExecuted,
  startGateController,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import { renderChart } from '../support/helm.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { rest, testKubeConfig, testSandboxState, uniqueName, waitFor } from '../support/kube.ts';
import { startTestMonitoring } from '../support/monitoring.ts';
import { createTalosNodes, type NodeView } from '../support/talos-nodes.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const api = rest(kc);
const instance = uniqueName('audit');
let monitoring: Monitoring | undefined;
let controller: Controller | undefined;
let talos: TalosClient;

before(async () => {
  await installGatehouseAPI(kc);
  const sandbox = await testSandboxState();
  talos = new TalosClient(await loadTalosConfig({ path: sandbox.talosconfig ?? '' }), { timeoutMs: 20_000 });
  monitoring = await startTestMonitoring();
  controller = await startGateController(instance, { audit: { notReadyAfterMs: 3000 } });
  const objects = await renderChart(
    'prometheusRule.enabled=true',
    'prometheusRule.unplannedDisruptionWindow=10m',
  );
  const rule = objects.find((o) => o.kind === 'PrometheusRule') as unknown as {
    spec: { groups: RuleGroup[] };
  };
  await monitoring.setTargets('gatehouse', [new URL(controller.url).host]);
  await monitoring.setRules('chart', rule.spec.groups);
});
after(async () => {
  talos.close();
  await stopAll(controller, monitoring);
});

/** A simulated node of this instance (its label: the audit covers it), audited once before the test acts. */
async function auditedNode(t: TestContext): Promise<{ name: string; ip: string }> {
  const group = uniqueName('audit');
  const [name = ''] = await createTalosNodes(t, api, {
    group,
    count: 1,
    taint: 'gatehouse.test/audit',
    kubernetesVersion: (
      await api.request<{ status: { nodeInfo: { kubeletVersion: string } } }>('/api/v1/nodes/cp-1')
    ).status.nodeInfo.kubeletVersion,
    talosVersion: 'v1.13.0',
    addressBlock: 100,
  });
  await api.request(`/api/v1/nodes/${name}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { metadata: { labels: { [INSTANCE_LABEL]: instance } } },
  });
  const node = await waitFor(`the audit to record ${name}`, async () => {
    const n = await api.request<NodeView>(`/api/v1/nodes/${name}`);
    return n.metadata.annotations?.[AUDIT_ANNOTATION] ? n : undefined;
  });
  return { name, ip: node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? '' };
}

async function disruptions(node: string): Promise<{ reason: string; message: string }[]> {
  const list = await api.request<{ items: { reason: string; message: string }[] }>(
    '/api/v1/namespaces/default/events',
    {
      query: {
        fieldSelector: `involvedObject.kind=Node,involvedObject.name=${node},reason=UnplannedDisruption`,
      },
    },
  );
  return list.items;
}

async function counted(node: string, kind: string): Promise<number> {
  const text = await (await fetch(`${controller?.url ?? ''}/metrics`)).text();
  const line = text
    .split('\n')
    .find(
      (l) =>
        l.startsWith('gatehouse_unplanned_disruptions_total{') &&
        l.includes(`node="${node}"`) &&
        l.includes(`kind="${kind}"`),
    );
  // A series is born with the node's first disruption of that kind.
  return line === undefined ? 0 : Number(line.split(' ').at(-1));
}

describe('the unplanned-disruption audit', () => {
  it('a reboot around the gate: Event, counter and alert; a gated reboot: none', async (t) => {
    const node = await auditedNode(t);
    assert.deepEqual(await disruptions(node.name), [], 'registering a node is not a disruption');
    assert.equal(await counted(node.name, 'boot'), 0);

    // A gated reboot first: an approved External action, then the reboot, then the mark.
    const action = await createAction(api, instance, await whoami(api), {
      nodeName: node.name,
      action: 'Reboot',
    });
    t.after(() =>
      api.request(`${API}/nodeactions/${action.metadata.name}`, { method: 'DELETE' }).catch(() => undefined),
    );
    await waitForPhase(api, action.metadata.name, 'Approved');
    await talos.reboot({ node: node.ip });
    await markExecuted(api, action.metadata.name);
    await waitForPhase(api, action.metadata.name, 'Succeeded');
    assert.deepEqual(await disruptions(node.name), [], 'a reboot gatehouse approved is planned');

    // Then one straight at the node.
    await talos.reboot({ node: node.ip });
    const [event] = await waitFor(
      'the UnplannedDisruption Event',
      async () => {
        const e = await disruptions(node.name);
        return e.length > 0 ? e : undefined;
      },
      { timeoutMs: 30_000 },
    );
    assert.match(event?.message ?? '', /booted .* with no gatehouse action in flight/);
    assert.equal(await counted(node.name, 'boot'), 1);
    const m = monitoring;
    assert.ok(m);
    type Alert = { labels: Record<string, string>; state: string };
    await waitFor(
      'GatehouseUnplannedDisruption to fire for the node',
      async (observe) => {
        const { alerts } = (await m.prometheusApi('/api/v1/alerts')) as { alerts: Alert[] };
        observe(JSON.stringify(alerts.map((a) => [a.labels.alertname, a.labels.node, a.state])));
        return alerts.find(
          (a) =>
            a.labels.alertname === 'GatehouseUnplannedDisruption' &&
            a.labels.node === node.name &&
            a.labels.kind === 'boot' &&
            a.state === 'firing',
        );
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
  });

  it('a shutdown around the gate: reported once the node has been NotReady too long', async (t) => {
    const node = await auditedNode(t);
    await talos.shutdown({ node: node.ip });
    await waitFor(
      'the not-ready disruption',
      async () => ((await counted(node.name, 'not-ready')) === 1 ? true : undefined),
      { timeoutMs: 30_000 },
    );
    const events = await disruptions(node.name);
    assert.equal(events.length, 1);
    assert.match(events[0]?.message ?? '', /NotReady since/);
  });
});
