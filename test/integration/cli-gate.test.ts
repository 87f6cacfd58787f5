// `gatehouse gate`: the command other tools' hooks run. Against the sandbox and a real
// controller: it waits while a check that gates the action is unhealthy and opens when
// it holds; a re-run with the same key finds the same action; a key reused for another
// node is refused; --timeout exits 5 and cancels; --done marks the action executed. The
// same with a kubeconfig, through the HTTP API, and as a Pod's ServiceAccount would
// (its token and CA at the standard paths, KUBERNETES_SERVICE_HOST/PORT).
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { EXIT } from '../../src/cli/exit.ts';
import { gateName } from '../../src/cli/gate.ts';
import type { Controller } from '../../src/controller.ts';
import { CliProcess, TerminalSession, canRunAsPod, cliEnv, podCli, runCli } from '../support/cli.ts';
import {
  API,
  createTestNodes,
  deleteActionsAfter,
  getAction,
  rebootNode,
  startGateController,
  waitForActionGone,
  waitForPhase,
} from '../support/gate.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  freshNamespace,
  rest,
  serviceAccountToken,
  switchableCheck,
  testKubeConfig,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const kubeconfig = process.env.GATEHOUSE_TEST_KUBECONFIG ?? '';
const instance = uniqueName('cli-gate');
let controller: Controller;

before(async () => {
  await installGatehouseAPI(kc);
  controller = await startGateController(instance, { kubeConfig: await controllerKubeConfig(kc) });
});

after(async () => {
  await controller.stop();
});

/** A node of the test's own and a check gating Reboot on it, unhealthy until switched. */
async function heldNode(t: TestContext) {
  const group = uniqueName('gate');
  const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
  const [node = ''] = await createTestNodes(t, client, uniqueName('gate'), 1, {
    'gatehouse.test/group': group,
  });
  return { node, check, group };
}

const withKubeconfig = ['--kubeconfig', kubeconfig, '--controller-instance', instance];

async function until(what: string, test: () => boolean, timeoutMs = 60_000): Promise<void> {
  await waitFor(what, () => (test() ? true : undefined), { timeoutMs, intervalMs: 100 });
}

describe('gatehouse gate', () => {
  it('waits on an unhealthy check, opens when it holds; a re-run finds the same action; --done marks it', async (t) => {
    const { node, check } = await heldNode(t);
    const key = `plan-upgrade-${node}`;
    const name = gateName(key);
    deleteActionsAfter(t, client, name);
    const first = new CliProcess(['gate', node, '--action', 'Reboot', '--key', key, ...withKubeconfig]);
    t.after(() => first.kill());
    await waitForPhase(client, name, 'WaitingForHealth');
    await until('the piped progress to name the failing check', () =>
      first.stderr.includes(`${node}: check ${check.name} unhealthy`),
    );
    assert.doesNotMatch(first.stderr, new RegExp(String.fromCharCode(27)), 'no escape sequences in a pipe');

    // A second run with the same key (a restarted hook container) waits on the same action.
    const second = new CliProcess(['gate', node, '--action', 'Reboot', '--key', key, ...withKubeconfig]);
    t.after(() => second.kill());
    await until('the second run to follow the action', () =>
      second.stderr.includes('phase WaitingForHealth'),
    );
    const actions = await client.request<{ items: { metadata: { name: string } }[] }>(`${API}/nodeactions`, {
      query: { labelSelector: `${INSTANCE_LABEL}=${instance}` },
    });
    assert.deepEqual(
      actions.items.map((a) => a.metadata.name).filter((n) => n.includes(node)),
      [name],
      'one action for the key',
    );
    assert.equal(first.stdout, '', 'nothing on stdout before the approval');

    await check.set(true);
    assert.equal(await first.exited, EXIT.ok, first.stderr);
    assert.equal(await second.exited, EXIT.ok, second.stderr);
    assert.equal(first.stdout, `${name}\n`, 'the name, for the script that acts next');
    assert.equal(second.stdout, `${name}\n`);
    assert.match(first.stderr, new RegExp(`${node}: check ${check.name} healthy`));
    assert.match(first.stderr, new RegExp(`${node}: phase Approved`));
    const action = await getAction(client, name);
    assert.equal(action.spec.execution, 'External');
    assert.equal(action.metadata.annotations?.['talos.dev/idempotency-key'], key);

    // After the approval, a re-run opens at once, on the same action.
    const third = await runCli(['gate', node, '--action', 'Reboot', '--key', key, ...withKubeconfig]);
    assert.equal(third.code, EXIT.ok, third.stderr);
    assert.equal(third.stdout, `${name}\n`);

    // The same key for another action is an error that says so; nothing is created.
    const other = await runCli(['gate', node, '--action', 'Shutdown', '--key', key, ...withKubeconfig]);
    assert.equal(other.code, EXIT.failed, other.stderr);
    assert.match(
      other.stderr,
      new RegExp(
        `--key ${key} already names NodeAction ${name} \\(External Reboot of node ${node}\\), not this Shutdown of node ${node}: use another --key`,
      ),
    );

    const done = await runCli(['gate', '--done', name, ...withKubeconfig]);
    assert.equal(done.code, EXIT.ok, done.stderr);
    assert.equal(done.stdout, `${name} marked executed\n`);
    assert.equal((await getAction(client, name)).metadata.annotations?.['talos.dev/executed'], 'true');
    await waitForPhase(client, name, 'WaitingForNode');
    await rebootNode(client, node);
    await waitForPhase(client, name, 'Succeeded');
    const rerun = await runCli(['gate', node, '--action', 'Reboot', '--key', key, ...withKubeconfig]);
    assert.equal(rerun.code, EXIT.ok, `a re-run after the end still finds it done: ${rerun.stderr}`);
  });

  it('exits 5 at --timeout and cancels the action it asked for; exits 1 with the reason when Denied', async (t) => {
    const { node } = await heldNode(t);
    const key = uniqueName('timeout');
    const started = Date.now();
    const result = await runCli([
      'gate',
      node,
      '--action',
      'Reboot',
      '--key',
      key,
      '--timeout',
      '3s',
      ...withKubeconfig,
    ]);
    const took = Date.now() - started;
    assert.equal(result.code, EXIT.timedOut, result.stderr);
    assert.match(
      result.stderr,
      new RegExp(
        `gatehouse: NodeAction ${gateName(key)} was not approved within 3s \\(still WaitingForHealth.*\\); cancelled NodeAction ${gateName(key)}\n$`,
      ),
    );
    assert.ok(took >= 3000, `it waited the 3s (${String(took)}ms)`);
    await waitForActionGone(client, gateName(key), 'the timed-out action to be cancelled');

    const missing = await runCli(['gate', 'no-such-node', '--action', 'Reboot', ...withKubeconfig]);
    assert.equal(missing.code, EXIT.usage, missing.stderr);
    assert.match(missing.stderr, /node no-such-node does not exist/);

    const noImage = await runCli(['gate', node, '--action', 'Upgrade', ...withKubeconfig]);
    assert.equal(noImage.code, EXIT.usage);
    assert.match(noImage.stderr, /--action Upgrade needs --image/);
  });

  it('shows live progress on a terminal', async (t) => {
    const { node, check } = await heldNode(t);
    const key = uniqueName('tty');
    deleteActionsAfter(t, client, gateName(key));
    const session = new TerminalSession([
      'gate',
      node,
      '--action',
      'Reboot',
      '--key',
      key,
      ...withKubeconfig,
    ]);
    t.after(() => session.kill());
    await waitFor(
      'the live block with the failing check',
      (observe) => {
        observe(session.text().slice(-800));
        return new RegExp(`▶ ${node} Reboot WaitingForHealth[^\n]*\n[^\n]*waiting for 1 of 1 checks`).test(
          session.text(),
        )
          ? true
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    assert.match(session.screen, new RegExp(`${String.fromCharCode(27)}\\[`), 'redrawn in place');
    await check.set(true);
    assert.equal(await session.exitCode(), EXIT.ok, session.text());
    assert.match(session.text(), new RegExp(`✓ ${node} Reboot Approved after \\d+s \\(${gateName(key)}\\)`));
  });

  it('works through the HTTP API with a ServiceAccount token, the key as Idempotency-Key', async (t) => {
    const { node, check } = await heldNode(t);
    const namespace = await freshNamespace(t, kc);
    const token = await serviceAccountToken(kc, namespace, 'upgrader');
    await bindClusterRole(t, kc, 'gatehouse:requester', { namespace, name: 'upgrader' });
    const key = uniqueName('http');
    const args = ['gate', node, '--action', 'Reboot', '--key', key, '--server', controller.url];
    const env = cliEnv({ GATEHOUSE_TOKEN: token });
    const first = new CliProcess(args, env);
    t.after(() => first.kill());
    await until('the action to wait on the check', () =>
      first.stderr.includes(`check ${check.name} unhealthy`),
    );
    await check.set(true);
    assert.equal(await first.exited, EXIT.ok, first.stderr);
    const name = first.stdout.trim();
    deleteActionsAfter(t, client, name);
    const action = await getAction(client, name);
    assert.equal(action.spec.requestedBy, `system:serviceaccount:${namespace}:upgrader`);
    assert.equal(action.metadata.annotations?.['talos.dev/requested-via'], 'http-api');

    const again = await runCli(args, { GATEHOUSE_TOKEN: token });
    assert.equal(again.code, EXIT.ok, again.stderr);
    assert.equal(again.stdout.trim(), name, 'the same action for the same key');
    const other = await runCli(
      ['gate', node, '--action', 'Shutdown', '--key', key, '--server', controller.url],
      {
        GATEHOUSE_TOKEN: token,
      },
    );
    assert.equal(other.code, EXIT.failed, other.stderr);
    assert.match(other.stderr, /Idempotency-Key was already used/);

    const done = await runCli(['gate', '--done', name, '--server', controller.url], {
      GATEHOUSE_TOKEN: token,
    });
    assert.equal(done.code, EXIT.ok, done.stderr);
    assert.equal((await getAction(client, name)).metadata.annotations?.['talos.dev/executed'], 'true');
  });

  it("works as a Pod's ServiceAccount: the token and CA at the standard paths", async (t) => {
    const possible = canRunAsPod();
    if (!possible.ok) {
      t.skip(possible.why);
      return;
    }
    const { node, check } = await heldNode(t);
    const namespace = await freshNamespace(t, kc);
    const token = await serviceAccountToken(kc, namespace, 'suc');
    await bindClusterRole(t, kc, 'gatehouse:requester', { namespace, name: 'suc' });
    // --controller-instance hands the action to the test's controller, which takes the verb
    // bypass (admission policy); a Pod of a real install names no instance and needs only requester.
    await bindClusterRole(t, kc, 'gatehouse:bypass', { namespace, name: 'suc' });
    const dir = await mkdtemp(join(tmpdir(), 'gate-sa-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const cluster = kc.getCurrentCluster();
    assert.ok(cluster?.caData, 'the sandbox kubeconfig carries its CA');
    const key = uniqueName('in-cluster');
    const gate = await podCli(
      ['gate', node, '--action', 'Reboot', '--key', key, '--controller-instance', instance],
      { token, ca: Buffer.from(cluster.caData, 'base64'), namespace, server: new URL(cluster.server) },
      dir,
    );
    t.after(() => gate.kill());
    deleteActionsAfter(t, client, gateName(key));
    await waitForPhase(client, gateName(key), 'WaitingForHealth').catch((error: unknown) => {
      throw new Error(`${String(error)}; the CLI said: ${gate.stderr}`);
    });
    await check.set(true);
    assert.equal(await gate.exited, EXIT.ok, gate.stderr);
    const action = await getAction(client, gateName(key));
    assert.equal(action.spec.requestedBy, `system:serviceaccount:${namespace}:suc`);
  });
});
