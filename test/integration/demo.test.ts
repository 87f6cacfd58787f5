// The README's first command: the demo runs to completion with --exit, on a sandbox of
// its own, and says what a newcomer should see.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);

it('runs the demo to completion and shows the gate closing and opening', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'gatehouse-demo-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const { stdout } = await run(
    process.execPath,
    ['src/cli/main.ts', 'demo', '--exit', '--sandbox-dir', join(dir, 'sandbox')],
    {
      timeout: 300_000,
    },
  );
  const expected = [
    /\[1\/5\] sandbox/,
    /sandbox up in .*: https:\/\/127\.0\.0\.1:\d+/,
    /\[2\/5\] install gatehouse/,
    /\[3\/5\] start the controller\n {2}serving http:\/\/127\.0\.0\.1:\d+/,
    /ceph-health-ok: Healthy — 1\/1 CephCluster object/,
    /GET \/v1\/health → 200: all 1 checks healthy/,
    /probe 1: Healthy — .*HEALTH_WARN' \(failure 1\/2 before unhealthy\)/,
    /probe 2: Unhealthy — .*rook-ceph\/rook-ceph has status\.ceph\.health == 'HEALTH_WARN'/,
    /GET \/v1\/health → 503: 1 of 1 checks not healthy: ceph-health-ok/,
    /probe 3: Healthy/,
    /export KUBECONFIG=/,
  ];
  let from = 0;
  for (const pattern of expected) {
    const match = pattern.exec(stdout.slice(from));
    assert.ok(match, `expected ${String(pattern)} after position ${String(from)} in:\n${stdout}`);
    from += match.index + match[0].length;
  }
  // The demo stops what it started: nothing is left in its sandbox directory.
  await assert.rejects(
    import('node:fs/promises').then((fs) => fs.access(join(dir, 'sandbox', 'state.json'))),
  );
});
