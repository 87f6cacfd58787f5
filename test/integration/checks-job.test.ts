// Checker Jobs (the `job` probe) against the sandbox's real Job controller, with kwok
// playing the containers: the shipped Ceph ok-to-stop recipe, given a stand-in `ceph`
// (kwok's exit code and termination message), gates an action on its node and says why
// in the action's status; a Job in the way is never taken for the check's; the timeout
// cuts a run; runs of one check and node never overlap.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { V1Job } from '@kubernetes/client-node';
import type { ClusterHealthCheckSpec, ClusterHealthCheckStatus } from '../../src/api/cluster-health-check.ts';
import { CHECKER_JOB_LABELS, INSTANCE_LABEL } from '../../src/api/names.ts';
import { checkerJobName } from '../../src/checks/checker-job.ts';
import { CheckerJobs } from '../../src/checks/checker-jobs.ts';
import { nodeTarget } from '../../src/checks/node-target.ts';
import { runProbe } from '../../src/checks/probes/index.ts';
import type { Controller } from '../../src/controller.ts';
import type { KubeObject } from '../../src/kube/informer.ts';
import { KubeApiError } from '../../src/kube/rest.ts';
import {
  POD_OUTCOME_ANNOTATION,
  POD_RUN_DURATION_ANNOTATION,
  POD_TERMINATION_MESSAGE_ANNOTATION,
} from '../../sandbox/kwok-config.ts';
import {
  API,
  createAction,
  createTestNodes,
  deleteActionsAfter,
  deleteAfter,
  getAction,
  startGateController,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import { runCli } from '../support/cli.ts';
import { installGatehouseAPI, readManifests, repoRoot } from '../support/install.ts';
import { freshNamespace, rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('checker-jobs');
let controller: Controller;
let me = '';

type CheckObject = KubeObject & { spec: ClusterHealthCheckSpec; status?: ClusterHealthCheckStatus };
type JobSpec = NonNullable<ClusterHealthCheckSpec['job']>;

/** The stand-in `ceph`: what kwok makes the checker Job's containers do. */
function standIn(
  job: JobSpec,
  outcome: 'Succeeded' | 'Failed' | 'Hang',
  message: string,
  runs = '3s',
): JobSpec {
  const copy = structuredClone(job);
  const pod = copy.template.spec?.template;
  assert.ok(pod);
  pod.metadata = Object.assign({}, pod.metadata, {
    annotations: {
      ...pod.metadata?.annotations,
      [POD_OUTCOME_ANNOTATION]: outcome,
      [POD_TERMINATION_MESSAGE_ANNOTATION]: message,
      [POD_RUN_DURATION_ANNOTATION]: runs,
    },
  });
  return copy;
}

async function recipe(name: string): Promise<ClusterHealthCheckSpec> {
  const objects = (await readManifests(join(repoRoot, 'examples', 'ceph-ok-to-stop.yaml'))) as CheckObject[];
  const found = objects.find((o) => o.kind === 'ClusterHealthCheck' && o.metadata.name === name);
  assert.ok(found, `examples/ceph-ok-to-stop.yaml has no check ${name}`);
  return found.spec;
}

async function createCheck(t: TestContext, name: string, spec: ClusterHealthCheckSpec): Promise<CheckObject> {
  const created = await client.request<CheckObject>(`${API}/clusterhealthchecks`, {
    method: 'POST',
    body: {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'ClusterHealthCheck',
      metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
      spec,
    },
  });
  deleteAfter(t, client, `${API}/clusterhealthchecks/${name}`);
  return created;
}

/** The ServiceAccount the recipes' Jobs run as, in the test's namespace. */
async function checkerAccount(namespace: string): Promise<void> {
  await client.request(`/api/v1/namespaces/${namespace}/serviceaccounts`, {
    method: 'POST',
    body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'gatehouse-checker' } },
  });
}

async function checkJobs(namespace: string, uid: string): Promise<V1Job[]> {
  const list = await client.request<{ items: V1Job[] }>(`/apis/batch/v1/namespaces/${namespace}/jobs`, {
    query: { labelSelector: `${CHECKER_JOB_LABELS.checkUID}=${uid}` },
  });
  return list.items;
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  controller = await startGateController(instance);
});

after(async () => {
  await controller.stop();
});

describe('checker Jobs', () => {
  it("the Ceph ok-to-stop recipe's verdict and message gate the action, and show in its status", async (t) => {
    const group = uniqueName('osd');
    const [node] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });
    assert.ok(node);
    const namespace = await freshNamespace(t, kc);
    await checkerAccount(namespace);
    const shipped = await recipe('ceph-osd-ok-to-stop');
    assert.ok(shipped.job);
    const name = uniqueName('ok-to-stop');
    const held = 'ok-to-stop: 2 PGs would become inactive';
    const check = await createCheck(t, name, {
      ...shipped,
      nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
      job: { ...standIn(shipped.job, 'Failed', `Error EBUSY\n${held}`), namespace },
    });

    const action = await createAction(client, instance, me, { nodeName: node, action: 'Reboot' });
    deleteActionsAfter(t, client, action.metadata.name);
    const jobName = checkerJobName(
      { name, uid: check.metadata.uid ?? '', generation: check.metadata.generation ?? 1 },
      node,
    );
    // While the Job runs, the gate says what it waits for.
    const evaluating = await waitFor(
      'the action to say it waits on the checker Job',
      async (observe) => {
        const a = await getAction(client, action.metadata.name);
        const c = a.status?.conditions?.find((x) => x.type === 'HealthChecksPassed');
        observe(`${a.status?.phase ?? ''}: ${c?.reason ?? ''} ${c?.message ?? ''}`);
        return c?.reason === 'Evaluating' ? c : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    assert.equal(evaluating.message, `running checker Job ${namespace}/${jobName} (check ${name})`);

    const job = await client.request<V1Job>(`/apis/batch/v1/namespaces/${namespace}/jobs/${jobName}`);
    const container = job.spec?.template.spec?.containers[0];
    assert.match(container?.command?.join(' ') ?? '', /ceph osd ok-to-stop \$osds/);
    const env = new Map(container?.env?.map((e) => [e.name, e.value]));
    assert.equal(env.get('GATEHOUSE_NODE'), node);
    assert.match(env.get('GATEHOUSE_NODE_IP') ?? '', /^10\.77\./);
    assert.equal(job.spec?.backoffLimit, 0);
    assert.equal(job.spec.activeDeadlineSeconds, 120);
    assert.deepEqual(
      job.metadata?.ownerReferences?.map((o) => o.uid),
      [check.metadata.uid],
    );

    const waiting = await waitFor(
      `the action on ${node} to be held by the checker Job's verdict`,
      async (observe) => {
        const a = await getAction(client, action.metadata.name);
        observe(`${a.status?.phase ?? ''}: ${a.status?.message ?? ''}`);
        return a.status?.phase === 'WaitingForHealth' && a.status.checks?.[0]?.healthy === false
          ? a
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    assert.deepEqual(
      waiting.status?.checks?.map((c) => [c.name, c.healthy, c.message]),
      [[name, false, held]],
    );
    assert.match(
      waiting.status.message ?? '',
      new RegExp(`waiting for health checks: ${name} \\(${held}\\)`),
    );
    // Per node in the check's own status, as the dashboard and the CLI show it.
    const status = await waitFor('the per-node summary', async () => {
      const c = await client.request<CheckObject>(`${API}/clusterhealthchecks/${name}`);
      return c.status?.nodes?.unsafeNodes?.length ? c.status.nodes : undefined;
    });
    assert.deepEqual(
      status.unsafeNodes?.map((n) => [n.name, n.message]),
      [[node, held]],
    );
    // The CLI says it per node: `check NAME --node X`, `check NAME`, and `status`.
    const cli = [
      '--kubeconfig',
      process.env.GATEHOUSE_TEST_KUBECONFIG ?? '',
      '--controller-instance',
      instance,
    ];
    const perNode = `${node}: ${name}: ${held}`;
    const forNode = await runCli(['check', name, '--node', node, ...cli], { NO_COLOR: '1' });
    assert.equal(forNode.code, 1, forNode.stderr);
    assert.ok(forNode.stdout.startsWith(`${node}: ${name}: Unhealthy (job probe`), forNode.stdout);
    assert.ok(forNode.stdout.includes(`\n  ${held}\n`), forNode.stdout);
    const summary = await runCli(['check', name, ...cli], { NO_COLOR: '1' });
    assert.ok(summary.stdout.includes(`  ${perNode}\n`), summary.stdout);
    const overview = await runCli(['status', ...cli], { NO_COLOR: '1' });
    assert.equal(overview.code, 0, overview.stderr);
    assert.ok(overview.stdout.includes(`  ${perNode}\n`), overview.stdout);

    // Ceph agrees now: a new generation of the check, and the action goes.
    const ok = 'OSDs 3 4 ok to stop';
    await client.request(`${API}/clusterhealthchecks/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { spec: { job: { ...standIn(shipped.job, 'Succeeded', ok, '1s'), namespace } } },
    });
    const approved = await waitForPhase(client, action.metadata.name, ['Approved', 'Failed', 'Denied']);
    assert.equal(approved.status?.phase, 'Approved', approved.status?.message);
    assert.deepEqual(
      approved.status.checks?.map((c) => [c.name, c.healthy, c.message]),
      [[name, true, ok]],
    );
    // The last result's Job stays; the earlier generation's went.
    const left = await waitFor('one checker Job left for the check and node', async (observe) => {
      const jobs = await checkJobs(namespace, check.metadata.uid ?? '');
      observe(jobs.map((j) => j.metadata?.name ?? '').join(', '));
      return jobs.length === 1 ? jobs : undefined;
    });
    assert.equal(left[0]?.metadata?.labels?.[CHECKER_JOB_LABELS.checkGeneration], '2');
  });

  it('a Job in the way is never taken for the check: a foreign one fails the run, a claimant is replaced', async (t) => {
    const namespace = await freshNamespace(t, kc);
    const group = uniqueName('nobody');
    const [node] = await createTestNodes(t, client, group, 1, { 'gatehouse.test/group': group });
    assert.ok(node);
    const target = nodeTarget(await client.request<KubeObject>(`/api/v1/nodes/${node}`));
    const name = uniqueName('forged');
    const template = (outcome: 'Succeeded' | 'Failed' | 'Hang', message: string): JobSpec =>
      standIn(
        {
          namespace,
          template: {
            spec: {
              template: {
                spec: {
                  restartPolicy: 'Never',
                  containers: [{ name: 'c', image: 'busybox', command: ['check'] }],
                },
              },
            },
          },
        },
        outcome,
        message,
        '2s',
      );
    // Selects no node: the controller never runs it; this test runs its probe.
    const spec: ClusterHealthCheckSpec = {
      scope: 'Node',
      timeout: '1m',
      nodeSelector: { matchLabels: { 'gatehouse.test/none': 'true' } },
      job: template('Failed', 'the real verdict'),
    };
    const check = await createCheck(t, name, spec);
    const identity = { name, uid: check.metadata.uid ?? '', generation: check.metadata.generation ?? 1 };
    const jobs = new CheckerJobs(client, 200);
    const probe = (s: ClusterHealthCheckSpec, signal = AbortSignal.timeout(60_000)) =>
      runProbe(s, {
        rest: client,
        signal,
        serviceResolution: 'endpoints',
        namespace: 'gatehouse-system',
        node: target,
        check: { ...identity, timeoutMs: 60_000 },
        jobs,
      });
    const jobName = checkerJobName(identity, node);
    const jobPath = `/apis/batch/v1/namespaces/${namespace}/jobs`;
    const forged = (labels: Record<string, string>, owned: boolean) => ({
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: {
        name: jobName,
        labels,
        ...(owned
          ? {
              ownerReferences: [
                { apiVersion: 'talos.dev/v1alpha1', kind: 'ClusterHealthCheck', name, uid: identity.uid },
              ],
            }
          : {}),
      },
      spec: {
        backoffLimit: 0,
        template: {
          metadata: {
            annotations: {
              [POD_OUTCOME_ANNOTATION]: 'Succeeded',
              [POD_TERMINATION_MESSAGE_ANNOTATION]: 'forged ok',
            },
          },
          spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox', command: ['true'] }] },
        },
      },
    });

    // Someone else's Job under the name: the run fails naming it, and it is left alone.
    await client.request(jobPath, { method: 'POST', body: forged({}, false) });
    await assert.rejects(
      probe(spec),
      /did not create for check .* holds the checker Job's name \(its label app\.kubernetes\.io\/managed-by is missing/,
    );
    const foreign = await client.request<V1Job>(`${jobPath}/${jobName}`);
    assert.equal(foreign.metadata?.labels?.[CHECKER_JOB_LABELS.checkUID], undefined);

    // One claiming to be the check's (labels, owner): replaced; the verdict is our Job's.
    await client.request(`${jobPath}/${jobName}`, {
      method: 'DELETE',
      body: { propagationPolicy: 'Background' },
    });
    // Gone means 404: a Job being deleted (its finalizers not yet removed) still holds the
    // name, and any other error says nothing about it.
    await waitFor('the foreign Job to go', async (observe) => {
      try {
        const job = await client.request<V1Job>(`${jobPath}/${jobName}`);
        observe(
          `deleting since ${job.metadata?.deletionTimestamp?.toString() ?? '?'}, finalizers ${job.metadata?.finalizers?.join(', ') ?? 'none'}`,
        );
        return undefined;
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 404) return true;
        throw error;
      }
    });
    const claims = {
      [CHECKER_JOB_LABELS.managedBy]: 'gatehouse',
      [CHECKER_JOB_LABELS.checkUID]: identity.uid,
      [CHECKER_JOB_LABELS.checkGeneration]: String(identity.generation),
    };
    const claimant = await client.request<V1Job>(jobPath, { method: 'POST', body: forged(claims, true) });
    const verdict = await probe(spec);
    assert.deepEqual(verdict, { healthy: false, message: 'the real verdict' });
    const ours = await client.request<V1Job>(`${jobPath}/${jobName}`);
    assert.notEqual(ours.metadata?.uid, claimant.metadata?.uid);

    // Two runs asked at once never overlap: at most one live Job at any moment.
    let most = 0;
    const sampling = { on: true };
    const sampler = (async () => {
      while (sampling.on) {
        const live = (await checkJobs(namespace, identity.uid)).filter((j) => !j.metadata?.deletionTimestamp);
        most = Math.max(most, live.length);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const both = await Promise.all([probe(spec), probe(spec)]);
    sampling.on = false;
    await sampler;
    assert.deepEqual(
      both.map((r) => r.message),
      ['the real verdict', 'the real verdict'],
    );
    assert.equal(most, 1);

    // The timeout cuts a run that hangs, and its Job goes.
    const hang = { ...spec, job: template('Hang', '') };
    await assert.rejects(probe(hang, AbortSignal.timeout(4000)));
    await waitFor('the cut Job to be deleted', async (observe) => {
      const live = (await checkJobs(namespace, identity.uid)).filter((j) => !j.metadata?.deletionTimestamp);
      observe(live.map((j) => j.metadata?.name ?? '').join(', '));
      return live.length === 0 ? true : undefined;
    });
  });
});
