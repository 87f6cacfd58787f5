// `sandbox up --with-monitoring`: a sandbox of its own whose Prometheus scrapes the
// controller on the port it was told, and whose processes all stop with the sandbox.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { Controller } from '../../src/controller.ts';
import { silentLogger } from '../../src/log.ts';
import { startSandbox, type Sandbox } from '../../sandbox/cluster.ts';
import { freePorts, isAlive } from '../../sandbox/processes.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { waitFor } from '../support/kube.ts';
import { stopAll } from '../support/teardown.ts';

let dir = '';
let sandbox: Sandbox | undefined;
let controller: Controller | undefined;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-sandbox-monitoring-'));
});

after(async () => {
  await stopAll(controller, sandbox);
  await rm(dir, { recursive: true, force: true });
});

it('runs Prometheus and Alertmanager that scrape the controller, and stops them with the sandbox', async () => {
  const { controllerPort } = await freePorts(['controllerPort']);
  sandbox = await startSandbox({
    dir: join(dir, 'sandbox'),
    nodes: 1,
    talos: false,
    ownerPid: process.pid,
    monitoring: { controllerPort },
  });
  const urls = sandbox.state.monitoring;
  assert.ok(urls, 'the state records where Prometheus and Alertmanager are');
  const kc = sandbox.kubeConfig();
  await installGatehouseAPI(kc);
  controller = await Controller.start({
    kubeConfig: kc,
    log: silentLogger(),
    host: '127.0.0.1',
    port: controllerPort,
    leaderElection: false,
  });
  await controller.waitForSync();

  type Sample = { metric: Record<string, string>; value: [number, string] };
  const query = async (q: string) => {
    const res = await fetch(`${urls.prometheus}/api/v1/query?query=${encodeURIComponent(q)}`);
    return ((await res.json()) as { data: { result: Sample[] } }).data.result;
  };
  const leader = await waitFor(
    "Prometheus to scrape the controller's gatehouse_leader",
    async (observe) => {
      const result = await query('gatehouse_leader');
      observe(JSON.stringify(result));
      return result[0];
    },
    { timeoutMs: 30_000, intervalMs: 250 },
  );
  assert.deepEqual(
    [leader.metric.job, leader.metric.instance, leader.value[1]],
    ['gatehouse', `127.0.0.1:${String(controllerPort)}`, '1'],
  );
  assert.equal((await fetch(`${urls.alertmanager}/-/ready`)).status, 200);

  const processes = sandbox.state.processes.filter((p) => ['prometheus', 'alertmanager'].includes(p.name));
  assert.deepEqual(processes.map((p) => p.name).sort(), ['alertmanager', 'prometheus']);
  await controller.stop();
  controller = undefined;
  await sandbox.stop();
  sandbox = undefined;
  assert.deepEqual(
    processes.filter((p) => isAlive(p.pid)),
    [],
    'sandbox down stops Prometheus and Alertmanager too',
  );
});
