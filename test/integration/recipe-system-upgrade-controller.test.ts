// The system-upgrade-controller recipe (examples/integrations/system-upgrade-controller.yaml)
// in the sandbox, which has no SUC and whose kwok nodes run no containers. So, in two
// halves (docs/decisions.md says why):
// - the Job's shape: the Job SUC would make of the Plan for a kwok node (the prepare
//   container as an init container, SUC's env, the Plan's ServiceAccount and
//   tolerations, pinned to the node) is applied, scheduled onto that node and run to
//   completion by the real Job controller and kwok;
// - its command: the prepare container's exact args, $(VAR)s expanded from that Job's
//   env as the kubelet would, run by the CLI as that Pod would run it (the Plan's
//   ServiceAccount token at the standard paths, KUBERNETES_SERVICE_HOST/PORT) — it waits
//   while a check gating Upgrade is unhealthy and exits 0 once it holds; a retried Job
//   finds the same action.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { EXIT } from '../../src/cli/exit.ts';
import { gateName } from '../../src/cli/gate.ts';
import type { Controller } from '../../src/controller.ts';
import { canRunAsPod, podCli } from '../support/cli.ts';
import {
  TEST_NODE_TAINT,
  createTestNodes,
  deleteActionsAfter,
  getAction,
  startGateController,
  waitForPhase,
} from '../support/gate.ts';
import { installGatehouseAPI, readManifests, repoRoot } from '../support/install.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  rest,
  serverSideApply,
  serviceAccountToken,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('suc');
let controller: Controller;

interface Container {
  name?: string;
  image: string;
  args?: string[];
  envs?: { name: string; value?: string; valueFrom?: unknown }[];
}
interface Plan {
  metadata: { name: string; namespace: string };
  spec: {
    version: string;
    serviceAccountName: string;
    tolerations?: unknown[];
    prepare: Container;
    upgrade: Container;
  };
}
type Manifest = { kind?: string; metadata?: { name?: string; namespace?: string } };

const recipe = (await readManifests(
  join(repoRoot, 'examples', 'integrations', 'system-upgrade-controller.yaml'),
)) as Manifest[];
const plan = recipe.find((o) => o.kind === 'Plan') as unknown as Plan;
const rbac = recipe.filter((o) => o.kind !== 'Plan');

before(async () => {
  await installGatehouseAPI(kc);
  controller = await startGateController(instance, { kubeConfig: await controllerKubeConfig(kc) });
  await serverSideApply(kc, rbac);
});

after(async () => {
  await controller.stop();
  await client
    .request('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gatehouse:requester:system-upgrade', {
      method: 'DELETE',
    })
    .catch(() => undefined);
});

const HASH = 'c2fd0b5a9e1d4f3b8a7c6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f';

/** The env SUC gives every container of a Plan's Job (its pkg/upgrade/job), plus the container's own. */
function sucEnv(container: Container) {
  return [
    { name: 'SYSTEM_UPGRADE_NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
    { name: 'SYSTEM_UPGRADE_POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
    { name: 'SYSTEM_UPGRADE_PLAN_NAME', value: plan.metadata.name },
    { name: 'SYSTEM_UPGRADE_PLAN_LATEST_VERSION', value: plan.spec.version },
    { name: 'SYSTEM_UPGRADE_PLAN_LATEST_HASH', value: HASH },
    ...(container.envs ?? []),
  ];
}

/** The Job SUC makes of the Plan for `node`, less what kwok cannot honour (host namespaces). */
function planJob(node: string) {
  const container = (c: Container, name: string) => ({
    name,
    image: c.image,
    args: c.args ?? [],
    env: sucEnv(c),
  });
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: uniqueName(`apply-${plan.metadata.name}-on-${node}`),
      namespace: plan.metadata.namespace,
    },
    spec: {
      backoffLimit: 2,
      template: {
        metadata: { annotations: { 'sandbox.gatehouse.dev/outcome': 'Succeeded' } },
        spec: {
          serviceAccountName: plan.spec.serviceAccountName,
          restartPolicy: 'Never',
          affinity: {
            nodeAffinity: {
              requiredDuringSchedulingIgnoredDuringExecution: {
                nodeSelectorTerms: [
                  { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] },
                ],
              },
            },
          },
          tolerations: [...(plan.spec.tolerations ?? []), { key: TEST_NODE_TAINT, operator: 'Exists' }],
          initContainers: [container(plan.spec.prepare, 'prepare')],
          containers: [container(plan.spec.upgrade, 'upgrade')],
        },
      },
    },
  };
}

/** $(VAR) expansion as the kubelet does it for args; an unknown $(VAR) stays as written. */
function expand(args: readonly string[], env: Record<string, string>): string[] {
  return args.map((a) =>
    a.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, name: string) => env[name] ?? whole),
  );
}

describe('the system-upgrade-controller recipe', () => {
  it("gives a Job SUC's scheduler and kwok run on the node, whose prepare command waits on the gate", async (t) => {
    const possible = canRunAsPod();
    if (!possible.ok) {
      t.skip(possible.why);
      return;
    }
    const group = uniqueName('suc');
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance }, ['Upgrade']);
    const [node = ''] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });

    // The shape: the API server takes the Job, the scheduler puts its pod on the node,
    // the Job controller sees it complete.
    const job = planJob(node);
    const jobs = `/apis/batch/v1/namespaces/${job.metadata.namespace}/jobs`;
    await client.request(jobs, { method: 'POST', body: job });
    t.after(() =>
      client
        .request(`${jobs}/${job.metadata.name}`, {
          method: 'DELETE',
          query: { propagationPolicy: 'Background' },
        })
        .catch(() => undefined),
    );
    const pod = await waitFor('the Job pod on the node', async () => {
      const pods = await client.request<{
        items: { spec: { nodeName?: string; serviceAccountName?: string } }[];
      }>(`/api/v1/namespaces/${job.metadata.namespace}/pods`, {
        query: { labelSelector: `job-name=${job.metadata.name}` },
      });
      return pods.items.find((p) => p.spec.nodeName);
    });
    assert.equal(pod.spec.nodeName, node);
    assert.equal(pod.spec.serviceAccountName, 'system-upgrade');
    await waitFor('the Job to complete', async () => {
      const j = await client.request<{ status?: { succeeded?: number } }>(`${jobs}/${job.metadata.name}`);
      return (j.status?.succeeded ?? 0) > 0 ? true : undefined;
    });

    // The command: the prepare container's args as the kubelet would expand them.
    const env = {
      SYSTEM_UPGRADE_NODE_NAME: node,
      SYSTEM_UPGRADE_PLAN_NAME: plan.metadata.name,
      SYSTEM_UPGRADE_PLAN_LATEST_VERSION: plan.spec.version,
      SYSTEM_UPGRADE_PLAN_LATEST_HASH: HASH,
    };
    const args = expand(job.spec.template.spec.initContainers[0]?.args ?? [], env);
    assert.equal(args[0], 'gate');
    const key = `${plan.metadata.name}-${HASH}-${node}`;
    const name = gateName(key);
    deleteActionsAfter(t, client, name);
    const cluster = kc.getCurrentCluster();
    assert.ok(cluster?.caData);
    const identity = {
      token: await serviceAccountToken(kc, 'system-upgrade', 'system-upgrade'),
      ca: Buffer.from(cluster.caData, 'base64'),
      namespace: 'system-upgrade',
      server: new URL(cluster.server),
    };
    const dir = await mkdtemp(join(tmpdir(), 'suc-pod-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    // Which controller answers: the test's own (a real install has one). Handing an action
    // to a named instance takes the verb bypass (admission policy); a real install's
    // requester names none, so this grant belongs to the test bed, not to the recipe.
    const podEnv = { ...env, GATEHOUSE_CONTROLLER_INSTANCE: instance };
    await bindClusterRole(t, kc, 'gatehouse:bypass', { namespace: 'system-upgrade', name: 'system-upgrade' });
    const prepare = await podCli(args, identity, dir, podEnv);
    t.after(() => prepare.kill());
    await waitForPhase(client, name, 'WaitingForHealth');
    await waitFor('the prepare log to name the failing check', () =>
      prepare.stderr.includes(`check ${check.name} unhealthy`) ? true : undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 2000));
    assert.equal(prepare.stdout, '', 'still waiting while the check fails');
    await check.set(true);
    assert.equal(await prepare.exited, EXIT.ok, prepare.stderr);
    const action = await getAction(client, name);
    assert.equal(action.spec.action, 'Upgrade');
    assert.equal(action.spec.execution, 'External');
    assert.equal(action.spec.upgrade?.image, `ghcr.io/siderolabs/installer:${plan.spec.version}`);
    assert.equal(action.spec.requestedBy, 'system:serviceaccount:system-upgrade:system-upgrade');

    // SUC retries a Job whose pod died (the node rebooted under it): the same action.
    const retried = await podCli(args, identity, dir, podEnv);
    assert.equal(await retried.exited, EXIT.ok, retried.stderr);
    assert.equal(retried.stdout, `${name}\n`);
  });
});
