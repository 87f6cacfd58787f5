// The REST client's cost per request: a GET over its kept-alive TLS connection, against
// the same GET on a new TLS connection each time (what client-node's own agent does),
// measured in the same run against the same API server.
import { request, type RequestOptions } from 'node:https';
import { performance } from 'node:perf_hooks';
import type { KubeConfig } from '@kubernetes/client-node';
import { RestClient } from '../src/kube/rest.ts';
import { ms, percentile, report } from './stats.ts';

const PATH = '/api/v1/namespaces/default';

/** One GET with client-node's own request options: its agent closes the connection after. */
async function getOnNewConnection(kc: KubeConfig, server: string): Promise<void> {
  const options: RequestOptions = { method: 'GET', headers: { Accept: 'application/json' } };
  await kc.applyToHTTPSOptions(options);
  await new Promise<void>((resolve, reject) => {
    const r = request(new URL(server + PATH), options, (res) => {
      res.resume();
      res.on('end', resolve);
    });
    r.on('error', reject);
    r.end();
  });
}

async function sample(n: number, one: () => Promise<unknown>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await one();
    samples.push(performance.now() - t0);
  }
  return samples;
}

export async function restBench(kc: KubeConfig, samples: number): Promise<void> {
  const server = kc.getCurrentCluster()?.server ?? '';
  const api = new RestClient(kc);
  // Warm both paths, then interleave rounds so that neither gets a quieter moment.
  await sample(20, () => api.request(PATH));
  await sample(20, () => getOnNewConnection(kc, server));
  const kept: number[] = [];
  const fresh: number[] = [];
  for (let round = 0; round < 10; round++) {
    kept.push(...(await sample(samples / 10, () => api.request(PATH))));
    fresh.push(...(await sample(samples / 10, () => getOnNewConnection(kc, server))));
  }
  report(`REST GET round trip (${String(samples)} samples each, sequential, interleaved)`, [
    ['kept-alive connection (RestClient) p50', ms(percentile(kept, 50))],
    ['kept-alive connection (RestClient) p99', ms(percentile(kept, 99))],
    ['baseline: new TLS connection per request p50', ms(percentile(fresh, 50))],
    ['baseline: new TLS connection per request p99', ms(percentile(fresh, 99))],
    ['baseline p50 / kept-alive p50', `${(percentile(fresh, 50) / percentile(kept, 50)).toFixed(1)}×`],
  ]);
}
