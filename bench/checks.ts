// Checks at scale: 1,000 ClusterHealthChecks probing a local HTTP target every 10 s,
// run by the real controller against the sandbox's API server. Reports the controller's
// CPU share of one core and how late periodic probes start (scheduling lag).
// Then GET /v1/health under load, as a ratio against a bare node:http server that
// answers a fixed JSON body, both measured here with the same load generator.
import { execFile, spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import type { KubeConfig } from '@kubernetes/client-node';
import { Controller } from '../src/controller.ts';
import { RestClient } from '../src/kube/rest.ts';
import { silentLogger } from '../src/log.ts';
import { sleep, waitFor } from '../src/wait.ts';
import type { LoadResult } from './load.ts';
import { ms, percentile, report } from './stats.ts';
import { record } from './summary.ts';

const run = promisify(execFile);

/** A local probe target in a process of its own, so its CPU is not counted as ours. */
async function startTarget(): Promise<{ url: string; stop: () => void }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      "require('http').createServer((q,s)=>{s.setHeader('content-type','application/json');s.end('{\"status\":\"ok\"}')}).listen(0,'127.0.0.1',function(){console.log(this.address().port)})",
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<string>((resolve) =>
    child.stdout.once('data', (d: Buffer) => resolve(d.toString().trim())),
  );
  return { url: `http://127.0.0.1:${port}/healthz`, stop: () => child.kill() };
}

async function load(url: string, connections: number, durationMs: number): Promise<LoadResult> {
  const { stdout } = await run(process.execPath, [
    new URL('./load.ts', import.meta.url).pathname,
    url,
    String(connections),
    String(durationMs),
  ]);
  return JSON.parse(stdout) as LoadResult;
}

export async function checksBench(
  kc: KubeConfig,
  options: { checks: number; measureMs: number },
): Promise<void> {
  const api = new RestClient(kc);
  const target = await startTarget();
  const controller = await Controller.start({
    kubeConfig: kc,
    log: silentLogger(),
    host: '127.0.0.1',
    port: 0,
    leaderElection: false,
  });
  try {
    await controller.waitForSync();
    const created = performance.now();
    const names = Array.from({ length: options.checks }, (_, i) => `bench-${String(i).padStart(4, '0')}`);
    for (let i = 0; i < names.length; i += 50) {
      await Promise.all(
        names.slice(i, i + 50).map((name) =>
          api.request('/apis/talos.dev/v1alpha1/clusterhealthchecks', {
            method: 'POST',
            body: {
              apiVersion: 'talos.dev/v1alpha1',
              kind: 'ClusterHealthCheck',
              metadata: { name },
              spec: {
                interval: '10s',
                timeout: '2s',
                httpGet: { url: target.url, bodyExpression: "body.status == 'ok'" },
              },
            },
          }),
        ),
      );
    }
    await waitFor(
      `${String(options.checks)} checks healthy`,
      () =>
        controller.checks.views().filter((v) => v.state.healthy).length >= options.checks ? true : undefined,
      { timeoutMs: 120_000, intervalMs: 250 },
    );
    const settled = performance.now() - created;
    // Measure steady state: periodic probes only.
    controller.checks.recordLag = true;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await sleep(options.measureMs);
    const cpu = process.cpuUsage(cpu0);
    const wall = performance.now() - t0;
    controller.checks.recordLag = false;
    const lag = controller.checks.lagSamples;
    const probes = lag.length;
    report(
      `checks: ${String(options.checks)} ClusterHealthChecks, httpGet + CEL on the body every 10s, measured over ${ms(wall)}`,
      [
        ['created → all healthy', ms(settled)],
        ['probes in the window', `${String(probes)} (${(probes / (wall / 1000)).toFixed(1)}/s)`],
        [
          'controller CPU, share of one core',
          `${(((cpu.user + cpu.system) / 1000 / wall) * 100).toFixed(1)}%`,
        ],
        ['scheduling lag p50', ms(percentile(lag, 50))],
        ['scheduling lag p99', ms(percentile(lag, 99))],
        ['scheduling lag max', ms(Math.max(...lag))],
      ],
    );

    // GET /v1/health throughput against a bare server answering a fixed body.
    const body = await (await fetch(`${controller.url}/v1/health`)).text();
    const bare = createServer((_, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(body);
    });
    await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
    const bareUrl = `http://127.0.0.1:${String((bare.address() as AddressInfo).port)}/`;
    const health = await load(`${controller.url}/v1/health`, 32, 5000);
    const baseline = await load(bareUrl, 32, 5000);
    bare.close();
    const rps = (r: LoadResult) => r.requests / r.seconds;
    report(
      `GET /v1/health (${String(options.checks)} checks, ${String(Math.round(body.length / 1024))} KiB body; 32 connections, 5s each)`,
      [
        [
          'gatehouse /v1/health',
          `${rps(health).toFixed(0)} req/s (${JSON.stringify(health.statuses)}, ${String(health.errors)} errors)`,
        ],
        ['bare node:http, same body', `${rps(baseline).toFixed(0)} req/s`],
        ['ratio', `${(rps(health) / rps(baseline)).toFixed(2)}× the bare server`],
      ],
    );
    record(
      `/v1/health, ${String(options.checks)} checks: req/s against a bare node:http server`,
      `${(rps(health) / rps(baseline)).toFixed(2)}×`,
      '≥ 0.7×',
    );
  } finally {
    await controller.stop();
    target.stop();
    await Promise.all(
      controller.checks
        .views()
        .map((v) =>
          api
            .request(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${v.name}`, { method: 'DELETE' })
            .catch(() => undefined),
        ),
    );
  }
}
