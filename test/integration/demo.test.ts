// The README's first command: the demo runs to completion with --exit, on a sandbox of
// its own, and shows what a newcomer should see — the rolling upgrade as a NodeRollout the
// CLI follows, surviving a controller restart, the policy letting one node through at a
// time, the gate waiting for Ceph to recover.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { access, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';

/** Runs the demo with its stdout and stderr (where the CLI's progress goes) in one stream, in order. */
function demo(sandboxDir: string): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['src/cli/main.ts', 'demo', '--exit', '--sandbox-dir', sandboxDir], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 420_000);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

function inOrder(output: string, expected: readonly RegExp[]): void {
  let from = 0;
  for (const pattern of expected) {
    const match = pattern.exec(output.slice(from));
    assert.ok(match, `expected ${String(pattern)} after position ${String(from)} in:\n${output}`);
    from += match.index + match[0].length;
  }
}

it('runs the demo to completion: a NodeRollout the CLI follows, gated by Ceph and a policy, through a controller restart', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-demo-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const { code, output } = await demo(join(dir, 'sandbox'));
  assert.equal(code, 0, output);
  inOrder(output, [
    /\[1\/6\] sandbox/,
    /sandbox up in .*: https:\/\/127\.0\.0\.1:\d+/,
    /\[2\/6\] install gatehouse/,
    /\[3\/6\] start the controller.*\n {2}serving http:\/\/127\.0\.0\.1:\d+ — dashboard http:\/\/127\.0\.0\.1:\d+\//,
    /\[4\/6\] Rook\/Ceph/,
    /ClusterHealthCheck ceph-health-ok/,
    /GET \/v1\/health → 200: all 1 checks healthy/,
    /\[5\/6\] a rolling upgrade to Talos v\d+\.\d+\.\d+/,
    /\$ gatehouse upgrade --kubeconfig \S+ --image ghcr\.io\/siderolabs\/installer:v\S+ --rollout demo-upgrade --concurrency 3 worker-1 worker-2 worker-3/,
    /NodeRollout demo-upgrade created for worker-1, worker-2, worker-3/,
    // The controller is restarted once the first node is done, and a node finishes after it.
    />>> worker-\d is done: the demo stops the controller mid-roll/,
    />>> …and starts a new one \(http:\/\/127\.0\.0\.1:\d+\); the rollout goes on where it was/,
    /✓ worker-\d Upgrade Succeeded/,
    /rollout demo-upgrade: complete \(\w+\)/,
    /the CLI exited 0: every node upgraded/,
    /NodeRollout demo-upgrade made 3 NodeActions, one per node \(worker-1, worker-2, worker-3\), across the controller restart/,
    /\[6\/6\] what happened/,
    /worker-1: Talos \(v\S+\) → Talos \(v\S+\), boot \w+ → \w+/,
    /HEALTH_WARN OSD_DOWN: 1 osds down \(osd\.\d on worker-\d\)/,
    /HEALTH_WARN PG_DEGRADED/,
    /HEALTH_OK/,
    /done in .*\. Where to look:\n {2}dashboard: http:\/\/127\.0\.0\.1:\d+\//,
    /export KUBECONFIG=/,
  ]);
  // The progress lines, as the CLI prints them to a pipe: each node's pre-upgrade hook,
  // its reboot into the new version, its ready hook.
  for (const node of ['worker-1', 'worker-2', 'worker-3']) {
    inOrder(output, [
      new RegExp(`${node}: hook PreUpgradeJob rook-ceph/ceph-set-noout Succeeded`),
      new RegExp(`${node}: node ${node} runs Talos \\(v\\S+\\)`),
      new RegExp(`${node}: hook NodeReadyJob rook-ceph/ceph-unset-noout Succeeded`),
      new RegExp(`✓ ${node} Upgrade Succeeded`),
    ]);
  }
  // Three control-plane members, healthy: the etcd guard would let one go.
  assert.match(output, /GET \/v1\/health\?action=Reboot&node=cp-1 → 200: builtin:etcd: etcd can spare/);
  // The policy held the others back while one node was in progress…
  assert.match(
    output,
    /worker-[23]: (phase Pending: )?waiting for its policies: ActionPolicy workers-one-at-a-time allows 1 at once/,
  );
  // …and the gate waited for Ceph to recover from a node's absence before the next.
  assert.match(output, /worker-[23]: check ceph-health-ok unhealthy: .*HEALTH_WARN/);
  // One node at a time: no node went down while another was still away (down, and not
  // yet booted again). A node may be reported down more than once in one reboot: under
  // load kwok can show it Ready for a moment before the simulator's power-off holds again.
  const away = new Set<string>();
  const booted = new Set<string>();
  for (const m of output.matchAll(/worker-\d: node (worker-\d) (NotReady|booted again)/g)) {
    const node = m[1] ?? '';
    if (m[2] === 'NotReady') {
      assert.deepEqual(
        [...away].filter((n) => n !== node),
        [],
        `${node} went down while others were away`,
      );
      away.add(node);
    } else {
      away.delete(node);
      booted.add(node);
    }
  }
  assert.deepEqual([...booted].sort(), ['worker-1', 'worker-2', 'worker-3']);
  // The demo stops what it started: nothing is left in its sandbox directory.
  await assert.rejects(access(join(dir, 'sandbox', 'state.json')));
});
