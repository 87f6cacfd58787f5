// `gatehouse talosctl -- <talosctl args>` against the sandbox: for each node, one at a
// time, the gate (an External NodeAction held by an unhealthy check), then talosctl —
// a stand-in on PATH (test/support/talosctl-stand-in.ts) that makes the same Talos API
// call against the sandbox's Talos simulator, which reboots the simulated node — the
// executed mark, and the node followed back until the action Succeeded. A talosctl that
// fails fails that node, gives its slot back and stops the run.
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import { EXIT } from '../../src/cli/exit.ts';
import type { Controller } from '../../src/controller.ts';
import { CliProcess, NODE, cliEnv, runCli } from '../support/cli.ts';
import { API, deleteActionsAfter, startGateController, type ActionObject } from '../support/gate.ts';
import { installGatehouseAPI, repoRoot } from '../support/install.ts';
import { createTalosNodes } from '../support/talos-nodes.ts';
import {
  rest,
  switchableCheck,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

const kc = testKubeConfig();
const client = rest(kc);
const kubeconfig = process.env.GATEHOUSE_TEST_KUBECONFIG ?? '';
const sandbox = await testSandboxState();
if (!sandbox.talosconfig)
  throw new Error(`the sandbox in ${sandbox.dir} runs no Talos simulator: restart it`);
const talosconfig = sandbox.talosconfig;
const instance = uniqueName('cli-talosctl');
let controller: Controller;
let bin = '';

before(async () => {
  await installGatehouseAPI(kc);
  controller = await startGateController(instance);
  bin = await mkdtemp(join(tmpdir(), 'talosctl-stand-in-'));
  const script = `#!/bin/sh\nexec ${NODE} ${join(repoRoot, 'test', 'support', 'talosctl-stand-in.ts')} "$@"\n`;
  await writeFile(join(bin, 'talosctl'), script);
  await chmod(join(bin, 'talosctl'), 0o755);
});

after(async () => {
  await controller.stop();
  await rm(bin, { recursive: true, force: true });
});

interface NodeObject {
  metadata: { name: string };
  status?: { nodeInfo?: { bootID?: string }; addresses?: { type: string; address: string }[] };
}

async function talosNodes(t: TestContext, count: number) {
  const group = uniqueName('talosctl');
  const check = await switchableCheck(t, kc, group, false, { [INSTANCE_LABEL]: instance });
  const names = await createTalosNodes(t, client, {
    group,
    count,
    taint: 'gatehouse.test/talosctl',
    kubernetesVersion: sandbox.kubernetesVersion,
    talosVersion: 'v1.13.0',
    addressBlock: 50,
  });
  const nodes = await Promise.all(names.map((n) => client.request<NodeObject>(`/api/v1/nodes/${n}`)));
  return {
    check,
    names,
    ips: nodes.map((n) => n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? ''),
    boots: nodes.map((n) => n.status?.nodeInfo?.bootID ?? ''),
  };
}

async function actionsOf(node: string): Promise<ActionObject[]> {
  const list = await client.request<{ items: ActionObject[] }>(`${API}/nodeactions`, {
    query: { labelSelector: `${INSTANCE_LABEL}=${instance}` },
  });
  return list.items.filter((a) => a.spec.nodeName === node);
}

async function invocations(log: string): Promise<string[][]> {
  const text = await readFile(log, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as string[]);
}

function standInEnv(log: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: `${bin}:${process.env.PATH ?? ''}`,
    TALOSCONFIG: talosconfig,
    TALOSCTL_STANDIN_LOG: log,
    ...extra,
  };
}

function wholeSecond(ms: number): number {
  return Math.floor(ms / 1000) * 1000;
}

describe('gatehouse talosctl', () => {
  it('gates, reboots, marks and follows each node in turn, the next only after the first Succeeded', async (t) => {
    const { check, names, ips, boots } = await talosNodes(t, 2);
    const log = join(bin, `${uniqueName('log')}.jsonl`);
    const run = new CliProcess(
      [
        'talosctl',
        '--kubeconfig',
        kubeconfig,
        '--controller-instance',
        instance,
        '--',
        '-n',
        ips.join(','),
        'reboot',
        '--wait=false',
      ],
      cliEnv(standInEnv(log)),
    );
    t.after(() => run.kill());
    const first = await waitFor('the first node to wait for the check', async () => {
      const [a] = await actionsOf(names[0] ?? '');
      return a?.status?.phase === 'WaitingForHealth' ? a : undefined;
    }).catch((error: unknown) => {
      throw new Error(`${String(error)}; the CLI said: ${run.stderr}`);
    });
    deleteActionsAfter(t, client, first.metadata.name);
    assert.deepEqual(await invocations(log), [], 'talosctl does not run before the approval');
    assert.deepEqual(await actionsOf(names[1] ?? ''), [], 'one node at a time');
    await check.set(true);
    const code = await Promise.race([
      run.exited,
      new Promise<number>((resolve) => setTimeout(() => resolve(-1), 150_000)),
    ]);
    assert.equal(code, EXIT.ok, run.stderr);
    assert.deepEqual(
      await invocations(log),
      ips.map((ip) => ['-n', ip, 'reboot', '--wait=false']),
      'talosctl ran once per node, each with that node alone',
    );
    const actions = await Promise.all(
      names.map(async (n) => {
        const [a] = await actionsOf(n);
        assert.ok(a, `an action for ${n}`);
        return a;
      }),
    );
    deleteActionsAfter(t, client, ...actions.map((a) => a.metadata.name));
    for (const [i, a] of actions.entries()) {
      assert.equal(a.status?.phase, 'Succeeded', a.status?.message);
      assert.equal(a.spec.execution, 'External');
      assert.equal(a.metadata.annotations?.['talos.dev/executed'], 'true');
      assert.equal(a.status.bootIDBefore, boots[i]);
      assert.notEqual(a.status.bootIDAfter, boots[i], 'the node came back with a new boot');
    }
    // creationTimestamp has whole seconds, completionTime milliseconds: compare at the
    // coarser of the two, and the order in which the CLI reported them to the second.
    assert.ok(
      Date.parse(String(actions[1]?.metadata.creationTimestamp)) >=
        wholeSecond(Date.parse(String(actions[0]?.status?.completionTime))),
      'the second node was asked for only once the first had Succeeded',
    );
    const firstDone = run.stderr.indexOf(`✓ ${names[0] ?? ''} Reboot Succeeded`);
    assert.ok(firstDone >= 0, run.stderr);
    assert.ok(
      // As a whole name: the check's name (switch-<group>-<hex>) may begin with it.
      !new RegExp(`(?<![\\w-])${names[1] ?? ''}(?![\\w-])`).test(run.stderr.slice(0, firstDone)),
      `nothing about the second node before the first Succeeded; the CLI said:\n${run.stderr}`,
    );
    assert.match(run.stderr, new RegExp(`✓ ${names[1] ?? ''} Reboot Succeeded`));
  });

  it('stops at a talosctl that fails: that node fails, its action is cancelled, the next is not started', async (t) => {
    const { check, names, ips } = await talosNodes(t, 2);
    await check.set(true);
    const log = join(bin, `${uniqueName('log')}.jsonl`);
    const result = await runCli(
      [
        'talosctl',
        '--kubeconfig',
        kubeconfig,
        '--controller-instance',
        instance,
        '--',
        '--nodes',
        ips.join(','),
        'upgrade',
        '--image',
        'ghcr.io/siderolabs/installer:v1.13.1',
      ],
      standInEnv(log, { TALOSCTL_STANDIN_FAIL: ips[0] ?? '' }),
      150_000,
    );
    assert.equal(result.code, EXIT.failed, result.stderr);
    assert.match(
      result.stderr,
      new RegExp(`${names[0] ?? ''}: talosctl exited 1; the node did not change, so \\S+ was cancelled`),
    );
    assert.match(result.stderr, new RegExp(`stopped: not started on ${ips[1] ?? ''}`));
    assert.equal((await invocations(log)).length, 1);
    await waitFor("the failed node's action to be cancelled", async () =>
      (await actionsOf(names[0] ?? '')).every((a) => a.status?.phase === 'Cancelled') ? true : undefined,
    );
    assert.deepEqual(await actionsOf(names[1] ?? ''), []);
  });

  it('refuses talosctl commands and flags it does not understand, before asking anything', async () => {
    for (const [args, pattern] of [
      [['-n', '10.5.0.2', 'edit', 'machineconfig'], /talosctl edit is not a command gatehouse gates/],
      [['-n', '10.5.0.2', 'reboot', '--frobnicate'], /unknown flag --frobnicate/],
      [['reboot'], /name the nodes with -n/],
    ] as const) {
      const result = await runCli(['talosctl', '--kubeconfig', kubeconfig, '--', ...args]);
      assert.equal(result.code, EXIT.usage, result.stderr);
      assert.match(result.stderr, pattern);
    }
    const unknown = await runCli([
      'talosctl',
      '--kubeconfig',
      kubeconfig,
      '--',
      '-n',
      '192.0.2.77',
      'reboot',
    ]);
    assert.equal(unknown.code, EXIT.usage);
    assert.match(unknown.stderr, /no Node is named 192\.0\.2\.77 or has it as an address/);
  });
});
