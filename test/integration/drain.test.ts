// Draining a node through the eviction API: PDBs are honoured, a budget that allows no
// disruption holds the drain until its timeout and the error names the budget, and
// DaemonSet and gatehouse hook pods are left in place.
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { isReady, talosNode } from '../../sandbox/nodes.ts';
import { HOOK_JOB_LABELS as LABELS } from '../../src/api/names.ts';
import type { DrainBlocker } from '../../src/api/node-action.ts';
import { cordon, DrainError, drainNode } from '../../src/talos/drain.ts';
import {
  freshNamespace,
  rest,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const api = rest(testKubeConfig());
const TAINT = 'gatehouse.test/drain';

interface Pod {
  metadata: { name: string; labels?: Record<string, string> };
  spec: { nodeName?: string };
  status?: { phase?: string };
}

/** Two simulated nodes of this test's own, tainted so that only its pods land there. */
async function ownNodes(t: TestContext, group: string): Promise<[string, string]> {
  const { kubernetesVersion } = await testSandboxState();
  const names = [`${group}-a`, `${group}-b`] as [string, string];
  t.after(() =>
    Promise.all(
      names.map((n) => api.request(`/api/v1/nodes/${n}`, { method: 'DELETE' }).catch(() => undefined)),
    ),
  );
  await Promise.all(
    names.map(async (name, i) => {
      const node = talosNode(
        {
          name,
          role: 'worker',
          internalIP: `10.88.${String(Math.floor(Math.random() * 250))}.${String(i + 2)}`,
        },
        kubernetesVersion,
      );
      node.metadata = {
        name,
        annotations: node.metadata?.annotations,
        labels: { ...node.metadata?.labels, 'gatehouse.test/group': group },
      };
      node.spec = { taints: [{ key: TAINT, effect: 'NoSchedule' }] };
      await api.request('/api/v1/nodes', { method: 'POST', body: node });
    }),
  );
  await Promise.all(
    names.map((name) =>
      waitFor(
        `node ${name} Ready`,
        async () => (isReady(await api.request(`/api/v1/nodes/${name}`)) ? true : undefined),
        {
          timeoutMs: 60_000,
        },
      ),
    ),
  );
  return names;
}

function podSpec(group: string, extra: Record<string, unknown> = {}) {
  return {
    nodeSelector: { 'gatehouse.test/group': group },
    tolerations: [{ key: TAINT, operator: 'Exists', effect: 'NoSchedule' }],
    containers: [{ name: 'main', image: 'registry.example/app' }],
    ...extra,
  };
}

async function podsOn(namespace: string, node: string): Promise<Pod[]> {
  const list = await api.request<{ items: Pod[] }>(`/api/v1/namespaces/${namespace}/pods`, {
    query: { fieldSelector: `spec.nodeName=${node}` },
  });
  return list.items;
}

async function deploy(
  namespace: string,
  group: string,
  name: string,
  replicas: number,
  minAvailable: number,
) {
  await api.request(`/apis/apps/v1/namespaces/${namespace}/deployments`, {
    method: 'POST',
    body: {
      metadata: { name },
      spec: {
        replicas,
        selector: { matchLabels: { app: name } },
        template: { metadata: { labels: { app: name } }, spec: podSpec(group) },
      },
    },
  });
  await api.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`, {
    method: 'POST',
    body: { metadata: { name }, spec: { minAvailable, selector: { matchLabels: { app: name } } } },
  });
  await waitFor(`PDB ${name} to be evaluated with ${String(replicas)} healthy pods`, async () => {
    const pdb = await api.request<{ status?: { currentHealthy?: number; observedGeneration?: number } }>(
      `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/${name}`,
    );
    return pdb.status?.currentHealthy === replicas ? true : undefined;
  });
}

describe('drain', () => {
  it('evicts through PDBs, leaving DaemonSet and hook pods, and cordons the node', async (t) => {
    const namespace = await freshNamespace(t);
    const group = uniqueName('drain');
    const [target, other] = await ownNodes(t, group);
    // Every web pod starts on the target (the other node is cordoned meanwhile); their
    // replacements can only go to the other node.
    await cordon(api, other, true);
    await deploy(namespace, group, 'web', 3, 2);
    await cordon(api, other, false);
    await api.request(`/apis/apps/v1/namespaces/${namespace}/daemonsets`, {
      method: 'POST',
      body: {
        metadata: { name: 'agent' },
        spec: {
          selector: { matchLabels: { app: 'agent' } },
          template: { metadata: { labels: { app: 'agent' } }, spec: podSpec(group) },
        },
      },
    });
    await api.request(`/api/v1/namespaces/${namespace}/pods`, {
      method: 'POST',
      body: {
        metadata: { name: 'hook', labels: { [LABELS.hookUID]: 'uid-1' } },
        spec: podSpec(group, { nodeName: target }),
      },
    });
    await waitFor('pods on the target: web, agent and hook', async () => {
      const pods = await podsOn(namespace, target);
      return pods.some((p) => p.metadata.labels?.app === 'agent') &&
        pods.filter((p) => p.status?.phase === 'Running').length >= 3
        ? true
        : undefined;
    });
    const lines: string[] = [];
    const result = await drainNode({
      rest: api,
      node: target,
      timeoutMs: 90_000,
      retryMs: 500,
      progress: (l) => lines.push(l),
    });
    const node = await api.request<{ spec?: { unschedulable?: boolean } }>(`/api/v1/nodes/${target}`);
    assert.equal(node.spec?.unschedulable, true);
    assert.deepEqual(result.evicted.filter((p) => p.includes('/web-')).length, 3);
    assert.ok(
      result.leftInPlace.some((p) => p.includes('(DaemonSet pod)')),
      result.leftInPlace.join(', '),
    );
    assert.ok(result.leftInPlace.includes(`${namespace}/hook (gatehouse hook pod)`));
    // Whether the budget refused an eviction on the way depends on how fast replacements
    // become ready; the next test proves that a budget holds the drain.
    assert.ok(lines.includes(`drained ${target}: 3 pod(s) evicted`), lines.join('\n'));
    const webLeft = (await podsOn(namespace, target)).filter((p) => p.metadata.labels?.app === 'web');
    assert.equal(webLeft.length, 0);
    const onOther = (await podsOn(namespace, other)).filter((p) => p.metadata.labels?.app === 'web');
    assert.equal(onOther.length, 3);
  });

  it('holds on a PDB that allows no disruption, then fails naming it', async (t) => {
    const namespace = await freshNamespace(t);
    const group = uniqueName('drain-stuck');
    const [target, other] = await ownNodes(t, group);
    await cordon(api, other, true);
    await deploy(namespace, group, 'osd', 2, 2);
    const started = Date.now();
    const reports: DrainBlocker[][] = [];
    const error = await drainNode({
      rest: api,
      node: target,
      timeoutMs: 3000,
      retryMs: 500,
      blocked: (b) => reports.push(b),
    }).catch((e: unknown) => e);
    assert.ok(error instanceof DrainError, String(error));
    assert.ok(Date.now() - started >= 3000);
    // Told once what holds it, not on each of the retries that found the same.
    assert.equal(reports.length, 1, JSON.stringify(reports));
    const pods = await api.request<{ items: { metadata: { name: string } }[] }>(
      `/api/v1/namespaces/${namespace}/pods`,
    );
    assert.deepEqual(
      reports[0]?.map((b) => [b.namespace, b.pod, b.podDisruptionBudget, b.disruptionsAllowed]).sort(),
      pods.items.map((p) => [namespace, p.metadata.name, 'osd', 0]).sort(),
    );
    assert.ok(reports.flat().every((b) => b.message === undefined && Date.parse(b.since) >= started));
    assert.match(
      error.message,
      new RegExp(
        `drain of ${target} timed out after 3.0s with 2 pod\\(s\\) left; evictions refused: ${namespace}/osd-`,
      ),
    );
    assert.match(error.message, /disruption budget osd needs 2 healthy pods/);
  });
});
