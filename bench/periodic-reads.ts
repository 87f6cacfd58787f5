// What one periodic `nodes` probe costs, read each of the three ways it could be, against
// the scale benchmark's Nodes: the consistent LIST a gate's fresh evaluation sends (and
// every probe sent before), a LIST the watch cache answers at any version
// (resourceVersion=0), and the controller's own Node cache. Measured one probe at a time:
// the probe's time, the requests the API server served, and the CPU kube-apiserver and
// etcd spent, per probe. (docs/decisions.md, "Requests per probe".)
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../sandbox/cluster.ts';
import type { CachedReads, ProbeContext } from '../src/checks/probe.ts';
import { runProbe } from '../src/checks/probes/index.ts';
import { Informer, type KubeObject } from '../src/kube/informer.ts';
import { slimNode } from '../src/kube/nodes.ts';
import type { RestClient } from '../src/kube/rest.ts';
import { silentLogger } from '../src/log.ts';
import { waitFor } from '../src/wait.ts';
import { served, serverCounters, total } from './api-requests.ts';
import { nodeName } from './scale-objects.ts';
import { serverCpuMs } from './scale-start.ts';
import { ms, percentile } from './stats.ts';

export async function periodicReadCosts(
  sandbox: Sandbox,
  api: RestClient,
  nodes: number,
  samples = 300,
): Promise<[string, string][]> {
  const informer = new Informer<KubeObject>({
    rest: api,
    path: '/api/v1/nodes',
    log: silentLogger(),
    transform: slimNode,
  });
  informer.start();
  try {
    await informer.waitForSync();
    // (An informer without `live`, of code older than the cached reads, is taken as live.)
    await waitFor('the Node watch to open', () =>
      (informer as { live?: boolean }).live !== false ? true : undefined,
    );
    const ways: [string, CachedReads | undefined][] = [
      ['consistent LIST (a gate’s fresh read)', undefined],
      ['LIST from the watch cache (resourceVersion=0)', { nodes: () => undefined }],
      ['the controller’s Node cache', { nodes: () => informer.list() }],
    ];
    const rows: [string, string][] = [];
    for (const [name, cached] of ways) {
      const times: number[] = [];
      const counters = await serverCounters(api);
      const cpu = await serverCpuMs(sandbox);
      for (let i = 0; i < samples; i++) {
        const context: ProbeContext = {
          rest: api,
          signal: AbortSignal.timeout(5000),
          serviceResolution: 'dns',
          namespace: 'default',
          ...(cached ? { cached } : {}),
        };
        const t0 = performance.now();
        await runProbe(
          {
            nodes: { selector: { matchLabels: { 'kubernetes.io/hostname': nodeName((i * 7919) % nodes) } } },
          },
          context,
        );
        times.push(performance.now() - t0);
      }
      const cpuMs = (await serverCpuMs(sandbox)) - cpu;
      const requests = total(served(counters, await serverCounters(api)).requests);
      rows.push([
        `a periodic nodes probe, ${name}`,
        `p50 ${ms(percentile(times, 50))}, p99 ${ms(percentile(times, 99))}; ${(requests / samples).toFixed(2)} requests and ${(cpuMs / samples).toFixed(1)} ms of kube-apiserver + etcd CPU per probe`,
      ]);
    }
    return rows;
  } finally {
    await informer.stop();
  }
}
