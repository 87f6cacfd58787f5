// The CLI's machine-readable output against the sandbox, exactly, both ways it can
// reach gatehouse (a kubeconfig, or the HTTP API with a token) — and its exit codes
// for refusals, unreachable clusters and usage errors.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { Controller } from '../../src/controller.ts';
import { silentLogger } from '../../src/log.ts';
import { runCli } from '../support/cli.ts';
import { deleteActionsAfter, whoami } from '../support/gate.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  rest,
  serviceAccountToken,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const kubeconfig = process.env.GATEHOUSE_TEST_KUBECONFIG ?? '';
const instance = uniqueName('cli-json');
const namespace = uniqueName('cli-json');
const API = '/apis/talos.dev/v1alpha1';
const bindings: string[] = [];
const tokens = { viewer: '', nobody: '', requester: '' };
let controller: Controller;
let me = '';

interface Action {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    uid: string;
    resourceVersion: string;
    generation: number;
    creationTimestamp: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    finalizers?: string[];
  };
  spec: Record<string, unknown> & {
    nodeName: string;
    action: string;
    requestedBy: string;
    execution?: string;
  };
  status?: { phase?: string; message?: string };
}

before(async () => {
  await installGatehouseAPI(kc);
  me = await whoami(client);
  await client.request('/api/v1/namespaces', {
    method: 'POST',
    body: { metadata: { name: namespace, labels: { 'gatehouse.dev/test': 'true' } } },
  });
  tokens.viewer = await serviceAccountToken(kc, namespace, 'viewer');
  tokens.nobody = await serviceAccountToken(kc, namespace, 'nobody');
  tokens.requester = await serviceAccountToken(kc, namespace, 'requester');
  bindings.push(
    await bindClusterRole(undefined, kc, 'gatehouse:requester', { namespace, name: 'requester' }),
  );
  bindings.push(await bindClusterRole(undefined, kc, 'gatehouse:view', { namespace, name: 'viewer' }));
  controller = await Controller.start({
    kubeConfig: await controllerKubeConfig(kc),
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
    instance,
    checkSelector: `${INSTANCE_LABEL}=${instance}`,
  });
  await controller.waitForSync();
});

after(async () => {
  await stopAll(controller);
  for (const name of bindings) {
    await client
      .request(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`, { method: 'DELETE' })
      .catch(() => undefined);
  }
  await client.request(`/api/v1/namespaces/${namespace}`, { method: 'DELETE' }).catch(() => undefined);
});

const viaKube = () => ['--kubeconfig', kubeconfig, '--controller-instance', instance];
const viaHttp = (token = tokens.viewer) => ['--server', controller.url, '--token', token];

async function deniedActions(t: TestContext): Promise<Action[]> {
  const names: string[] = [];
  for (const [node, action] of [
    ['no-such-node-cli-a', 'Reboot'],
    ['no-such-node-cli-b', 'Shutdown'],
  ] as const) {
    const created = await client.request<Action>(`${API}/nodeactions`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeAction',
        metadata: { generateName: `${node}-`, labels: { [INSTANCE_LABEL]: instance } },
        spec: { nodeName: node, action, execution: 'External', requestedBy: me },
      },
    });
    names.push(created.metadata.name);
    // Distinct creation times, so that "oldest first" has one answer.
    await new Promise((r) => setTimeout(r, 1100));
  }
  deleteActionsAfter(t, client, ...names);
  return Promise.all(
    names.map((name) =>
      waitFor(`${name} to be Denied and let go of its finalizer`, async () => {
        const a = await client.request<Action>(`${API}/nodeactions/${name}`);
        return a.status?.phase === 'Denied' && !a.metadata.finalizers?.length ? a : undefined;
      }),
    ),
  );
}

describe('-o json, exactly', () => {
  it('actions list prints each action with fixed fields, the same through either way in', async (t) => {
    const actions = await deniedActions(t);
    const expected = `${JSON.stringify(
      {
        items: actions.map((a) => ({
          name: a.metadata.name,
          node: a.spec.nodeName,
          action: a.spec.action,
          phase: 'Denied',
          execution: 'External',
          requestedBy: me,
          createdAt: a.metadata.creationTimestamp,
          message: a.status?.message ?? '',
        })),
      },
      null,
      2,
    )}\n`;
    assert.match(expected, /"message": "node no-such-node-cli-a does not exist/);
    const kube = await runCli(['actions', 'list', ...viaKube(), '-o', 'json']);
    assert.equal(kube.stderr, '');
    assert.equal(kube.code, 0);
    assert.equal(kube.stdout, expected);
    const http = await runCli([...viaHttp(), 'actions', 'list', '-o', 'json']);
    assert.equal(http.code, 0, http.stderr);
    assert.equal(http.stdout, expected);
    const names = await runCli([
      'actions',
      'list',
      ...viaKube(),
      '--node',
      'no-such-node-cli-b',
      '-o',
      'name',
    ]);
    assert.equal(names.stdout, `${actions[1]?.metadata.name ?? ''}\n`);
  });

  it('actions describe prints the object itself, without the server’s bookkeeping', async (t) => {
    const [action] = await deniedActions(t);
    assert.ok(action);
    const stored = await client.request<Action & { metadata: { managedFields?: unknown } }>(
      `${API}/nodeactions/${action.metadata.name}`,
    );
    const { metadata } = stored;
    const expected = {
      apiVersion: 'talos.dev/v1alpha1',
      kind: 'NodeAction',
      metadata: {
        name: metadata.name,
        uid: metadata.uid,
        resourceVersion: metadata.resourceVersion,
        generation: metadata.generation,
        creationTimestamp: metadata.creationTimestamp,
        labels: { [INSTANCE_LABEL]: instance },
      },
      spec: stored.spec,
      status: stored.status,
    };
    for (const args of [viaKube(), viaHttp()]) {
      const result = await runCli(['actions', 'describe', action.metadata.name, ...args, '-o', 'json']);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout, `${JSON.stringify(expected, null, 2)}\n`);
    }
    const text = await runCli(['actions', 'describe', action.metadata.name, ...viaKube()]);
    assert.match(
      text.stdout,
      new RegExp(`^Name: +${action.metadata.name}\nNode: +no-such-node-cli-a\nAction: +Reboot\n`),
    );
    assert.match(text.stdout, /\nPhase: +Denied\n/);
    assert.doesNotMatch(text.stdout, new RegExp(String.fromCharCode(27)), 'no colour into a pipe');
  });

  it('check prints the check’s state: as recorded with a kubeconfig, freshly probed through the API', async (t) => {
    const name = uniqueName('cli-check');
    t.after(() =>
      client.request(`${API}/clusterhealthchecks/${name}`, { method: 'DELETE' }).catch(() => undefined),
    );
    await client.request(`${API}/clusterhealthchecks`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ClusterHealthCheck',
        metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
        // No node matches: healthy, and (probed hourly) its status stays put while we compare.
        spec: { interval: '1h', nodes: { selector: { matchLabels: { 'gatehouse.test/none': name } } } },
      },
    });
    const check = await waitFor(`${name} to be probed`, async () => {
      const c = await client.request<{ status?: Record<string, unknown> & { lastProbeTime?: string } }>(
        `${API}/clusterhealthchecks/${name}`,
      );
      return c.status?.lastProbeTime ? c.status : undefined;
    });
    const kube = await runCli(['check', name, ...viaKube(), '-o', 'json']);
    assert.equal(kube.code, 0, kube.stderr);
    assert.equal(
      kube.stdout,
      `${JSON.stringify(
        {
          name,
          healthy: true,
          state: 'Healthy',
          reason: 'ProbeSucceeded',
          message: check.message,
          probe: 'nodes',
          consecutiveSuccesses: check.consecutiveSuccesses,
          consecutiveFailures: 0,
          lastProbeTime: check.lastProbeTime,
          lastTransitionTime: check.lastTransitionTime,
          fresh: false,
        },
        null,
        2,
      )}\n`,
    );
    const http = await runCli([...viaHttp(), 'check', name, '-o', 'json']);
    assert.equal(http.code, 0, http.stderr);
    const fresh = JSON.parse(http.stdout) as Record<string, unknown>;
    assert.deepEqual(Object.keys(fresh), Object.keys(JSON.parse(kube.stdout) as object));
    assert.equal(fresh.fresh, true);
    assert.ok(String(fresh.lastProbeTime) > String(check.lastProbeTime), 'probed for this command');
    const text = await runCli(['check', name, ...viaKube()]);
    assert.match(text.stdout, new RegExp(`^${name}: Healthy \\(nodes probe, ProbeSucceeded\\)\n`));
    assert.match(
      text.stdout,
      /as the controller last recorded it \(recorded \d+s ago; probed every 1h, and an unchanged result is recorded at most once a minute; --server asks for a fresh probe\)/,
    );
  });

  it('status includes our objects, each entry with exactly its fixed fields', async (t) => {
    const [action] = await deniedActions(t);
    assert.ok(action);
    const policy = uniqueName('cli-policy');
    t.after(() =>
      client.request(`${API}/actionpolicies/${policy}`, { method: 'DELETE' }).catch(() => undefined),
    );
    await client.request(`${API}/actionpolicies`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ActionPolicy',
        metadata: { name: policy },
        spec: { maxConcurrent: '25%', nodeSelector: { matchLabels: { 'gatehouse.test/none': policy } } },
      },
    });
    for (const args of [viaKube(), viaHttp()]) {
      const result = await runCli(['status', ...args, '-o', 'json']);
      assert.equal(result.code, 0, result.stderr);
      const doc = JSON.parse(result.stdout) as Record<string, { name: string }[]>;
      assert.deepEqual(Object.keys(doc), ['checks', 'policies', 'actions']);
      const entry: unknown = doc.actions?.find((a) => a.name === action.metadata.name);
      assert.deepEqual(entry, {
        name: action.metadata.name,
        node: 'no-such-node-cli-a',
        action: 'Reboot',
        phase: 'Denied',
        execution: 'External',
        requestedBy: me,
        createdAt: action.metadata.creationTimestamp,
        message: action.status?.message,
      });
      const ours = doc.policies?.find((p) => p.name === policy) as Record<string, unknown> | undefined;
      assert.deepEqual(Object.keys(ours ?? {}), [
        'name',
        'maxConcurrent',
        'matchingNodes',
        'activeActions',
        'windowOpen',
        'nextWindowStart',
      ]);
      assert.equal(ours?.maxConcurrent, '25%');
    }
    const yaml = await runCli(['status', ...viaKube(), '-o', 'yaml']);
    assert.match(yaml.stdout, /^checks:/m);
    assert.match(yaml.stdout, new RegExp(`- name: ${action.metadata.name}\n`));
  });
});

describe('exit codes', () => {
  it('2 for usage errors, before anything is asked of the cluster', async () => {
    const skip = await runCli(['reboot', ...viaKube(), '--skip-hooks', 'worker-1']);
    assert.equal(skip.code, 2);
    assert.equal(
      skip.stderr,
      'gatehouse: --skip-checks and --skip-hooks need --reason "<why>": the bypass is recorded with it\n',
    );
    const unknown = await runCli(['reboot', '--frobnicate', 'worker-1']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown option '--frobnicate'/);
    assert.equal((await runCli(['upgrade', ...viaKube(), 'worker-1'])).code, 2, '--image is required');
    const noNode = await runCli(['reboot', ...viaKube(), 'no-such-node-at-all']);
    assert.equal(noNode.code, 2);
    assert.equal(noNode.stderr, 'gatehouse: node no-such-node-at-all does not exist\n');
    // The same exit code through the HTTP API, where the action is Denied for it.
    const noNodeHttp = await runCli([
      ...viaHttp(tokens.requester),
      'reboot',
      '--external',
      'no-such-node-at-all-http',
    ]);
    assert.equal(noNodeHttp.code, 2, noNodeHttp.stderr);
    // Refused by the API server's schema rules: a request the user must fix.
    const image = await runCli(['upgrade', ...viaKube(), '--image', 'not an image', 'cp-1']);
    assert.equal(image.code, 2);
    assert.match(image.stderr, /spec\.upgrade\.image: Invalid value: "not an image"/);
    assert.equal((await runCli(['status', '--server', 'ftp://x', '--token', 't'])).code, 2);
    assert.equal((await runCli(['status', '--server', controller.url])).code, 2, 'no token');
  });

  it('4 when the cluster or the API cannot be reached or does not take the credentials', async () => {
    const down = await runCli(['status', '--server', 'http://127.0.0.1:9', '--token', 'x']);
    assert.equal(down.code, 4);
    assert.match(down.stderr, /cannot reach the gatehouse API http:\/\/127\.0\.0\.1:9/);
    const badToken = await runCli(['status', '--server', controller.url, '--token', 'not-a-token']);
    assert.equal(badToken.code, 4);
    assert.match(badToken.stderr, /did not accept the bearer token.*\(check --token\)/);
    const missing = await runCli(['status', '--kubeconfig', join(tmpdir(), 'no-such-kubeconfig')]);
    assert.equal(missing.code, 4);
    const nowhere = join(tmpdir(), `${uniqueName('kubeconfig')}.yaml`);
    await writeFile(
      nowhere,
      'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
    );
    const unreachable = await runCli(['status', '--kubeconfig', nowhere]);
    assert.equal(unreachable.code, 4);
    assert.match(unreachable.stderr, /the cluster is unreachable/);
  });

  it('1 when refused, or when the thing asked about is not there or not healthy', async () => {
    const forbidden = await runCli([...viaHttp(tokens.nobody), 'actions', 'list']);
    assert.equal(forbidden.code, 1);
    assert.match(forbidden.stderr, /may not list nodeactions\.talos\.dev/);
    const missing = await runCli(['actions', 'describe', 'no-such-action', ...viaKube()]);
    assert.equal(missing.code, 1);
    assert.equal(missing.stderr, 'gatehouse: NodeAction no-such-action does not exist\n');
    assert.equal((await runCli(['check', 'no-such-check', ...viaKube()])).code, 1);
  });
});
