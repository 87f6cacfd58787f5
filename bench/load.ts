// A small HTTP load generator: `connections` keep-alive connections issuing GETs back to
// back for `durationMs`. Run in a child process so that it does not share a CPU budget
// with the server it measures: `node bench/load.ts URL CONNECTIONS DURATION_MS`.
import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';

export interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  statuses: Record<string, number>;
}

export async function generateLoad(
  url: string,
  connections: number,
  durationMs: number,
): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const deadline = performance.now() + durationMs;
  const result: LoadResult = { requests: 0, errors: 0, seconds: durationMs / 1000, statuses: {} };
  const one = () =>
    new Promise<void>((resolve) => {
      const req = request(url, { agent }, (res) => {
        const code = String(res.statusCode);
        result.statuses[code] = (result.statuses[code] ?? 0) + 1;
        res.resume();
        res.on('end', () => {
          result.requests++;
          resolve();
        });
      });
      req.on('error', () => {
        result.errors++;
        resolve();
      });
      req.end();
    });
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < deadline) await one();
    }),
  );
  agent.destroy();
  return result;
}

if (import.meta.main) {
  const [url, connections, duration] = process.argv.slice(2);
  if (!url) throw new Error('usage: node bench/load.ts URL [CONNECTIONS] [DURATION_MS]');
  const result = await generateLoad(url, Number(connections ?? 32), Number(duration ?? 5000));
  process.stdout.write(JSON.stringify(result));
}
