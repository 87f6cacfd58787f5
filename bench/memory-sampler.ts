// Preloaded (`node --import`) into the controller the scale benchmark starts: samples the
// process's memory every few milliseconds and, when it exits, writes the breakdown at its
// highest RSS to $GATEHOUSE_BENCH_MEMORY_FILE. /proc's VmHWM gives the peak itself; this
// says what it was made of (V8 heap spaces, external memory, and the native rest: code
// loading, malloc arenas, TLS). Loaded by the benchmark only, never by the Deployment.
import { writeFileSync } from 'node:fs';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';

export interface MemorySample {
  /** Milliseconds since the process started. */
  atMs: number;
  rss: number;
  heapUsed: number;
  /** Physical memory V8 holds for its heap, used or not. */
  heapPhysical: number;
  external: number;
  arrayBuffers: number;
  /** Physical size of each V8 heap space. */
  spaces: Record<string, number>;
}

const file = process.env.GATEHOUSE_BENCH_MEMORY_FILE;

function sample(): MemorySample {
  const usage = process.memoryUsage();
  const spaces: Record<string, number> = {};
  for (const s of getHeapSpaceStatistics()) spaces[s.space_name] = s.physical_space_size;
  return {
    atMs: performance.now(),
    rss: usage.rss,
    heapUsed: usage.heapUsed,
    heapPhysical: getHeapStatistics().total_physical_size,
    external: usage.external,
    arrayBuffers: usage.arrayBuffers,
    spaces,
  };
}

if (file) {
  let peak = sample();
  setInterval(() => {
    // process.memoryUsage.rss() is cheap; the full breakdown only at a new high.
    if (process.memoryUsage.rss() > peak.rss) peak = sample();
  }, 5).unref();
  process.on('exit', () => {
    writeFileSync(file, JSON.stringify({ peak, end: sample() }));
  });
}
