// The floor for every latency gatehouse adds: how long the API server takes to tell a
// watcher about an object that was just created. Gate latency is reported beside it.
import { performance } from 'node:perf_hooks';
import { CoreV1Api, Watch, type KubeConfig } from '@kubernetes/client-node';

export interface RoundTrips {
  samples: number[];
}

/** Creates `count` ConfigMaps one after another, timing each from the create call to its ADDED event. */
export async function measureWatchRoundTrip(
  kc: KubeConfig,
  namespace: string,
  count: number,
  prefix = 'rtt',
): Promise<RoundTrips> {
  const core = kc.makeApiClient(CoreV1Api);
  const pending = new Map<string, (t: number) => void>();
  const watch = new Watch(kc);
  let failure: unknown;
  const req = await watch.watch(
    `/api/v1/namespaces/${namespace}/configmaps`,
    {},
    (phase, obj: { metadata?: { name?: string } }) => {
      const name = obj.metadata?.name;
      if (phase === 'ADDED' && name) pending.get(name)?.(performance.now());
    },
    (err: unknown) => {
      if (err) failure = err;
    },
  );
  try {
    await new Promise((r) => setTimeout(r, 300)); // let the watch open
    const samples: number[] = [];
    for (let i = 0; i < count; i++) {
      if (failure) throw new Error('the watch failed', { cause: failure });
      const name = `${prefix}-${String(i)}`;
      const seen = new Promise<number>((resolve) => pending.set(name, resolve));
      const start = performance.now();
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name } } });
      samples.push((await seen) - start);
      pending.delete(name);
    }
    return { samples };
  } finally {
    req.abort();
  }
}
