// What a person sees, end to end: the CLI in a pseudo-terminal (util-linux `script`)
// requests a reboot that waits on a failing health check and then on a pre-reboot hook
// Job, against a controller on the sandbox — the live block names the check and why it
// fails, the hook's Job and state, the node's readiness and boot, and is redrawn in
// place; Ctrl-C cancels the action and exits 130; in a pipe the same story is told in
// plain appended lines, through the node's reboot to Succeeded.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { Controller } from '../../src/controller.ts';
import { silentLogger } from '../../src/log.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import { talosNode } from '../../sandbox/nodes.ts';
import { TerminalSession, runCli, stripTerminal } from '../support/cli.ts';
import { API, createTestNodes, deleteActionsAfter, hookTemplate, rebootNode } from '../support/gate.ts';
import { installGatehouseAPI } from '../support/install.ts';
import {
  bindClusterRole,
  controllerKubeConfig,
  freshNamespace,
  serviceAccountToken,
  rest,
  switchableCheck,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const kubeconfig = process.env.GATEHOUSE_TEST_KUBECONFIG ?? '';
const instance = uniqueName('cli-e2e');
const sandbox = await testSandboxState();
let controller: Controller;

const ESC = String.fromCharCode(27);

before(async () => {
  await installGatehouseAPI(kc);
  controller = await Controller.start({
    kubeConfig: await controllerKubeConfig(kc),
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
    instance,
    checkSelector: `${INSTANCE_LABEL}=${instance}`,
    // Managed actions are performed through the sandbox's Talos simulator.
    ...(sandbox.talosconfig
      ? { talos: { config: await loadTalosConfig({ path: sandbox.talosconfig }), drainRetryMs: 500 } }
      : {}),
  });
  await controller.waitForSync();
});

after(async () => {
  await stopAll(controller);
});

/** Waits until the terminal has shown `pattern` (escape sequences aside). */
async function shown(
  session: TerminalSession,
  pattern: RegExp,
  what: string,
  timeoutMs = 90_000,
): Promise<void> {
  await waitFor(
    what,
    (observe) => {
      const text = session.text();
      observe(text.slice(-1500));
      return pattern.test(text) ? true : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

async function actionOn(node: string): Promise<string> {
  return waitFor(`the NodeAction of ${node}`, async () => {
    const list = await client.request<{
      items: { metadata: { name: string }; spec: { nodeName: string } }[];
    }>(`${API}/nodeactions`, { query: { labelSelector: `talos.dev/controller-instance=${instance}` } });
    return list.items.find((a) => a.spec.nodeName === node)?.metadata.name;
  });
}

/**
 * Simulated Talos nodes of this test's own (the Talos simulator finds them by address),
 * tainted so that no one's pods land there, deleted when the test ends.
 */
async function talosNodes(t: TestContext, group: string, count: number): Promise<string[]> {
  const names = Array.from({ length: count }, (_, i) => `${group}-${String(i + 1)}`);
  t.after(() =>
    Promise.all(
      names.map((n) => client.request(`/api/v1/nodes/${n}`, { method: 'DELETE' }).catch(() => undefined)),
    ),
  );
  const list = await client.request<{ items: { status?: { addresses?: { address: string }[] } }[] }>(
    '/api/v1/nodes',
  );
  const taken = new Set(list.items.flatMap((n) => n.status?.addresses?.map((a) => a.address) ?? []));
  for (const name of names) {
    const address = () =>
      `10.5.${String(160 + Math.floor(Math.random() * 10))}.${String(2 + Math.floor(Math.random() * 250))}`;
    let ip = address();
    while (taken.has(ip)) ip = address();
    taken.add(ip);
    const node = talosNode({ name, role: 'worker', internalIP: ip }, sandbox.kubernetesVersion);
    const metadata = node.metadata ?? {};
    // Not type=kwok: suites that look at the sandbox's own nodes never see these.
    const { type: _sandboxLabel, ...labels } = metadata.labels ?? {};
    metadata.labels = { ...labels, 'gatehouse.test/group': group };
    node.metadata = metadata;
    node.spec = { taints: [{ key: 'gatehouse.test/cli-e2e', effect: 'NoSchedule' }] };
    await client.request('/api/v1/nodes', { method: 'POST', body: node });
  }
  await Promise.all(
    names.map((name) =>
      waitFor(
        `${name} to be Ready`,
        async () => {
          const n = await client.request<{ status?: { conditions?: { type: string; status: string }[] } }>(
            `/api/v1/nodes/${name}`,
          );
          return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')
            ? true
            : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 250 },
      ),
    ),
  );
  return names;
}

describe('the CLI in a terminal', () => {
  it('shows the check it waits on and why, then the hook Job, the node, and stops at Approved with --external', async (t) => {
    const group = uniqueName('e2e');
    const namespace = await freshNamespace(t, kc);
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
    const hook = 'set-noout';
    await client.request(`${API}/namespaces/${namespace}/prerebootjobs`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'PreRebootJob',
        metadata: { name: hook, namespace },
        spec: {
          nodeSelector: { matchLabels: { 'gatehouse.test/group': group } },
          template: hookTemplate('Succeeded', '4s'),
        },
      },
    });
    const [node = ''] = await createTestNodes(t, client, uniqueName('e2e'), 1, {
      'gatehouse.test/group': group,
    });

    const session = new TerminalSession([
      'reboot',
      '--external',
      '--kubeconfig',
      kubeconfig,
      '--controller-instance',
      instance,
      node,
    ]);
    t.after(() => session.kill());
    const name = await actionOn(node);
    deleteActionsAfter(t, client, name);

    // Held at the health gate: which check, and why.
    await shown(session, /waiting for 1 of 1 checks:/, 'the health gate on screen');
    await shown(
      session,
      new RegExp(
        `✗ check ${check.name} \\(probed \\d+s ago\\): 0/1 node labelled gatehouse.test/switch=${check.name}`,
      ),
      'the failing check and why',
    );
    await shown(
      session,
      new RegExp(`node ${node}: Ready · boot [0-9a-f]{8}`),
      "the node's readiness and boot",
    );
    assert.match(session.text(), new RegExp(`▶ ${node} Reboot WaitingForHealth \\d+s \\(${name}\\)`));

    // The check comes good: the hook's Job runs, then the action is approved.
    await check.set(true);
    await shown(
      session,
      new RegExp(`● hook PreRebootJob ${namespace}/${hook} (Pending|Running)( \\d+s)? \\(job [a-z0-9.-]+\\)`),
      'the hook Job running',
    );
    assert.equal(await session.exitCode(), 0, session.text());
    const text = session.text();
    assert.match(text, /✓ 1 checks held/);
    assert.match(text, new RegExp(`✓ ${node} Reboot Approved after \\d+s \\(${name}\\): `));
    assert.match(
      text,
      new RegExp(`NODE\\s+ACTION\\s+NAME\\s+PHASE\n${node}\\s+Reboot\\s+${name}\\s+Approved`),
    );

    // Redrawn in place (cursor up, clear), in colour; the live block never wider than
    // the terminal (a wrapped line would throw the redraw off).
    assert.match(session.screen, new RegExp(`\\r${ESC}\\[\\d+A${ESC}\\[J`));
    assert.ok(session.screen.includes(`${ESC}[31m✗${ESC}[39m`), 'the failing check in red');
    const block = stripTerminal(session.screen)
      .split('\n')
      .filter((line) => line.startsWith('▶') || line.startsWith('  '));
    assert.ok(block.length > 10);
    for (const line of block) assert.ok(Array.from(line).length <= 119, line);

    // The hook ran exactly once and is on the record.
    const action = await client.request<{
      status: { hooks: { name: string; phase: string; jobName: string }[] };
    }>(`${API}/nodeactions/${name}`);
    assert.deepEqual(
      action.status.hooks.map((h) => [h.name, h.phase]),
      [[hook, 'Succeeded']],
    );

    // Now the requester performs the reboot and says so; in a pipe, the CLI tells the
    // rest of the story one plain line at a time.
    const follow = runCli(['actions', 'executed', name, '--kubeconfig', kubeconfig]);
    await waitFor('the executed mark', async () => {
      const a = await client.request<{ metadata: { annotations?: Record<string, string> } }>(
        `${API}/nodeactions/${name}`,
      );
      return a.metadata.annotations?.['talos.dev/executed'] === 'true' ? true : undefined;
    });
    await rebootNode(client, node);
    const result = await follow;
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, `${name} marked executed\n`);
    assert.ok(!result.stderr.includes(ESC), 'no escape sequences into a pipe');
    const lines = result.stderr.trimEnd().split('\n');
    assert.ok(
      lines.every((l) => /^\d\d:\d\d:\d\d /.test(l)),
      result.stderr,
    );
    const story = lines.map((l) => l.slice(9));
    for (const expected of [
      new RegExp(`^${node}: node ${node} booted again \\(boot [0-9a-f]{8}\\)$`),
      `${node}: phase Succeeded`,
      new RegExp(
        `^✓ ${node} Reboot Succeeded after \\d+(s|m\\d\\ds) \\(${name}\\): boot [0-9a-f]{8} → [0-9a-f]{8}$`,
      ),
    ]) {
      assert.ok(
        story.some((l) => (typeof expected === 'string' ? l.startsWith(expected) : expected.test(l))),
        `${String(expected)} not in:\n${story.join('\n')}`,
      );
    }
  });

  it('shows the same through the HTTP API (--server, --token), live from its event stream', async (t) => {
    const group = uniqueName('e2e-http');
    const namespace = await freshNamespace(t, kc);
    const token = await serviceAccountToken(kc, namespace, 'operator');
    await bindClusterRole(t, kc, 'gatehouse:requester', { namespace, name: 'operator' });
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
    const [node = ''] = await createTestNodes(t, client, uniqueName('e2e-http'), 1, {
      'gatehouse.test/group': group,
    });
    const session = new TerminalSession([
      '--server',
      controller.url,
      '--token',
      token,
      'reboot',
      '--external',
      '-o',
      'name',
      node,
    ]);
    t.after(() => session.kill());
    const name = await actionOn(node);
    deleteActionsAfter(t, client, name);
    await shown(
      session,
      new RegExp(`✗ check ${check.name} \\(probed \\d+s ago\\): `),
      'the failing check, from the API',
    );
    await shown(session, new RegExp(`node ${node}: Ready · boot [0-9a-f]{8}`), 'the node, from the API');
    await check.set(true);
    assert.equal(await session.exitCode(), 0, session.text());
    const text = session.text();
    assert.match(text, new RegExp(`▶ ${node} Reboot WaitingForHealth \\d+s \\(${name}\\)`));
    assert.match(text, new RegExp(`✓ ${node} Reboot Approved after \\d+s \\(${name}\\)`));
    assert.match(
      text,
      new RegExp(`\n${name}\n`),
      '-o name prints the action for the script that runs talosctl next',
    );
    const action = await client.request<{ spec: { requestedBy: string } }>(`${API}/nodeactions/${name}`);
    assert.equal(action.spec.requestedBy, `system:serviceaccount:${namespace}:operator`);
  });

  it('cancels the action on Ctrl-C and exits 130', async (t) => {
    const group = uniqueName('e2e-int');
    const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
    const [node = ''] = await createTestNodes(t, client, uniqueName('e2e-int'), 1, {
      'gatehouse.test/group': group,
    });
    const session = new TerminalSession([
      'reboot',
      '--kubeconfig',
      kubeconfig,
      '--controller-instance',
      instance,
      node,
    ]);
    t.after(() => session.kill());
    const name = await actionOn(node);
    deleteActionsAfter(t, client, name);
    await shown(session, new RegExp(`✗ check ${check.name} `), 'the failing check');
    session.type('\x03');
    assert.equal(await session.exitCode(), 130, session.text());
    const text = session.text();
    assert.match(text, new RegExp(`! interrupted: cancelling ${name}`));
    assert.match(text, new RegExp(`– (${node} Reboot Cancelled|${name} was deleted before it finished)`));
    await waitFor(`${name} to be gone`, async () => {
      try {
        await client.request(`${API}/nodeactions/${name}`);
        return undefined;
      } catch {
        return true;
      }
    });
  });
  it(
    'rolls a Managed reboot through two nodes, one at a time, to Succeeded',
    { skip: sandbox.talosconfig ? false : 'the sandbox runs no Talos simulator' },
    async (t) => {
      const group = uniqueName('e2e-roll');
      const nodes = await talosNodes(t, group, 2);
      const session = new TerminalSession([
        'reboot',
        '--kubeconfig',
        kubeconfig,
        '--controller-instance',
        instance,
        ...nodes,
      ]);
      t.after(() => session.kill());
      const code = await session.exitCode(300_000);
      const text = session.text();
      assert.equal(code, 0, text);
      const list = await client.request<{
        items: {
          metadata: { name: string; creationTimestamp: string };
          spec: { nodeName: string };
          status: { phase: string; completionTime: string; bootIDBefore: string; bootIDAfter: string };
        }[];
      }>(`${API}/nodeactions`, { query: { labelSelector: `talos.dev/controller-instance=${instance}` } });
      const actions = nodes.map((node) => list.items.find((a) => a.spec.nodeName === node));
      deleteActionsAfter(t, client, ...actions.map((a) => a?.metadata.name ?? ''));
      for (const [i, node] of nodes.entries()) {
        const action = actions[i];
        assert.ok(action, `no action for ${node}`);
        assert.equal(action.status.phase, 'Succeeded');
        assert.notEqual(action.status.bootIDBefore, action.status.bootIDAfter);
        // The line that stays names the boot the node had and the one it came back with.
        const before = action.status.bootIDBefore.slice(0, 8);
        const after = action.status.bootIDAfter.slice(0, 8);
        assert.match(
          text,
          new RegExp(
            `✓ ${node} Reboot Succeeded after \\d+(s|m\\d\\ds) \\(${action.metadata.name}\\): boot ${before} → ${after}`,
          ),
        );
      }
      assert.match(text, /▶ \S+ Reboot (Executing|WaitingForNode) \d+s/);
      // One at a time: the second was asked for only once the first had finished.
      const [first, second] = actions;
      assert.ok(first && second);
      assert.ok(
        Date.parse(second.metadata.creationTimestamp) >=
          Math.floor(Date.parse(first.status.completionTime) / 1000) * 1000,
        `${second.metadata.creationTimestamp} before ${first.status.completionTime}`,
      );
      assert.match(
        text,
        new RegExp(
          `NODE\\s+ACTION\\s+NAME\\s+PHASE\n${nodes[0] ?? ''}\\s+Reboot\\s+\\S+\\s+Succeeded\n${nodes[1] ?? ''}\\s+Reboot\\s+\\S+\\s+Succeeded`,
        ),
      );
    },
  );
});
