// Safety under the worst fault: the controller process SIGKILLed at random moments
// (mid-reconcile, mid-write, between a hook record and its Job) across 50 actions on
// 10 nodes under a policy of 3. No hook Job is ever created twice, never more than 3
// actions are approved and unfinished, and every action still finishes — because all
// state lives in the API server (invariants 3, 5 and 6).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { after, describe, it } from 'node:test';
import { INSTANCE_LABEL, HOOK_JOB_LABELS as LABELS } from '../../src/api/names.ts';
import type { NodeActionPhase } from '../../src/api/node-action.ts';
import { APPROVED_PHASES } from '../../src/api/phases.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  API,
  createAction,
  createTestNodes,
  deleteActionsAfter,
  deleteAfter,
  hookTemplate,
  markExecuted,
  rebootNode,
  waitForPhase,
  watchActions,
  whoami,
  type ActionObject,
} from '../support/gate.ts';
import { freshNamespace, rest, testKubeConfig, uniqueName } from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('gate-sigkill');
const selector = `${INSTANCE_LABEL}=${instance}`;
const ACTIONS = 50;
const CONCURRENT = 3;
const KILLS = 12;

/** The real controller command, in a process of its own that the test can SIGKILL. */
class ControllerProcess {
  private child: ChildProcess | undefined;
  kills = 0;
  private stopped = false;

  start(): void {
    this.child = spawn(
      process.execPath,
      [
        'src/cli/main.ts', 'controller', '--kubeconfig', process.env.GATEHOUSE_TEST_KUBECONFIG ?? '',
        '--listen-host', '127.0.0.1', '--port', '0', '--instance', instance, '--check-selector', selector,
        '--no-leader-elect', '--log-level', 'warn',
      ], // prettier-ignore
      { stdio: 'ignore' },
    );
  }

  /**
   * Kills and restarts it at random moments (every 2–7 s) until it has been killed
   * `times` times; then lets the last one finish the work.
   */
  async rampage(times: number): Promise<void> {
    while (!this.stopped && this.kills < times) {
      await new Promise((r) => setTimeout(r, 2000 + Math.random() * 5000));
      if (this.isStopped()) break;
      this.child?.kill('SIGKILL');
      this.kills++;
      this.start();
    }
  }

  /** A method, so the compiler does not assume the flag cannot change during the wait. */
  private isStopped(): boolean {
    return this.stopped;
  }

  stop(): void {
    this.stopped = true;
    this.child?.kill('SIGTERM');
  }
}

describe('controller SIGKILLed at random moments', () => {
  const controller = new ControllerProcess();
  after(() => controller.stop());

  it(`${String(ACTIONS)} actions on 10 nodes, policy of ${String(CONCURRENT)}: no Job twice, budget kept, all finish`, async (t) => {
    await installGatehouseAPI(kc);
    const me = await whoami(client);
    const group = uniqueName('kill');
    const labels = { 'gatehouse.test/group': group };
    const nodes = await createTestNodes(t, client, group, 10, labels);
    const namespace = await freshNamespace(t, kc);
    const hook = await client.request<{ metadata: { uid: string } }>(
      `${API}/namespaces/${namespace}/prerebootjobs`,
      {
        method: 'POST',
        body: {
          apiVersion: 'talos.dev/v1alpha1',
          kind: 'PreRebootJob',
          metadata: { name: 'noout' },
          spec: {
            nodeSelector: { matchLabels: labels },
            template: hookTemplate('Succeeded', '1s'),
            placement: 'Anywhere',
          },
        },
      },
    );
    const policy = uniqueName('policy');
    await client.request(`${API}/actionpolicies`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ActionPolicy',
        metadata: { name: policy, labels: { [INSTANCE_LABEL]: instance } },
        spec: { nodeSelector: { matchLabels: labels }, actions: ['Reboot'], maxConcurrent: CONCURRENT },
      },
    });
    deleteAfter(t, client, `${API}/actionpolicies/${policy}`);

    // Every Job the hook ever got, by name: a name seen with two UIDs was created twice.
    const jobs = new Map<string, Set<string>>();
    const jobsAbort = new AbortController();
    t.after(() => jobsAbort.abort());
    void client
      .watch(
        `/apis/batch/v1/namespaces/${namespace}/jobs`,
        { labelSelector: `${LABELS.hookUID}=${hook.metadata.uid}` },
        (event) => {
          const job = event.object as { metadata: { name: string; uid: string } };
          if (event.type === 'ADDED' || event.type === 'MODIFIED') {
            jobs.set(job.metadata.name, (jobs.get(job.metadata.name) ?? new Set()).add(job.metadata.uid));
          }
        },
        jobsAbort.signal,
      )
      .catch(() => undefined);

    const phase = new Map<string, NodeActionPhase | undefined>();
    const violations: string[] = [];
    const executing = new Set<string>();
    let maxApproved = 0;
    const list = await client.request<{ metadata: { resourceVersion: string } }>(`${API}/nodeactions`, {
      query: { labelSelector: selector, limit: 1 },
    });
    const log = watchActions(
      client,
      selector,
      list.metadata.resourceVersion,
      (action: ActionObject, type) => {
        phase.set(action.metadata.name, type === 'DELETED' ? undefined : action.status?.phase);
        const approved = [...phase.values()].filter((p) => p !== undefined && APPROVED_PHASES.has(p)).length;
        maxApproved = Math.max(maxApproved, approved);
        if (approved > CONCURRENT)
          violations.push(`${String(approved)} approved and unfinished at ${action.metadata.name}`);
        // The requester: once approved, it reboots the node and says it did.
        if (action.status?.phase === 'Approved' && !executing.has(action.metadata.name)) {
          executing.add(action.metadata.name);
          setTimeout(
            () => {
              void markExecuted(client, action.metadata.name)
                .then(() => rebootNode(client, action.spec.nodeName))
                .catch((error: unknown) => violations.push(`requester: ${String(error)}`));
            },
            100 + Math.random() * 500,
          );
        }
      },
    );
    t.after(() => log.stop());

    controller.start();
    const rampage = controller.rampage(KILLS);
    const names: string[] = [];
    for (let i = 0; i < ACTIONS; i++) {
      const a = await createAction(
        client,
        instance,
        me,
        { nodeName: nodes[i % nodes.length] as string },
        `${group}-${String(i).padStart(2, '0')}`,
      );
      names.push(a.metadata.name);
      deleteActionsAfter(t, client, a.metadata.name);
    }
    const finished = await Promise.all(
      names.map((n) => waitForPhase(client, n, ['Succeeded', 'Failed', 'Denied'], 540_000)),
    );
    await rampage;
    controller.stop();

    assert.equal(controller.kills, KILLS, `the controller was killed ${String(controller.kills)} times`);
    assert.deepEqual(violations, []);
    assert.ok(
      maxApproved <= CONCURRENT,
      `at most ${String(CONCURRENT)} approved and unfinished; saw ${String(maxApproved)}`,
    );
    assert.deepEqual(
      finished
        .filter((a) => a.status?.phase !== 'Succeeded')
        .map((a) => `${a.metadata.name}: ${a.status?.message ?? ''}`),
      [],
    );
    const twice = [...jobs].filter(([, uids]) => uids.size > 1).map(([name]) => name);
    assert.deepEqual(twice, [], 'no hook Job name was created twice');
    assert.equal(jobs.size, ACTIONS, 'one hook Job per action (each succeeded on its first attempt)');
  });
});
