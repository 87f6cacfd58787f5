// An etcd snapshot before a control-plane action (ActionPolicy spec.etcdSnapshot):
// MachineService.EtcdSnapshot streamed from a healthy member to the HTTP store
// (etcd-snapshot-store.ts), checked on the way.
//
// What is checked: etcd ends a snapshot with the SHA-256 of the database before it (its
// maintenance Snapshot call sends it as a last chunk, and `etcdutl snapshot restore`
// checks it), so the stream checks itself; the last 32 bytes are held back from the store
// until that hash matches, and a stream that does not match is cut off before its end —
// the store never completes it. The SHA-256 and size of the whole file are computed while
// streaming and recorded; the store's HEAD must then report that size. What is not known:
// the MVCC revision the snapshot holds (the Talos API tells none; `etcdutl snapshot
// status` on the file does) — the member's applied raft index read just before stands
// for it, as a lower bound.
import { createHash, type Hash } from 'node:crypto';
import { errorMessage } from '../wait.ts';
import type { EtcdMemberStatusInfo, TalosClient } from './client.ts';
import { readEtcd, type ControlPlaneNode } from './etcd.ts';
import type { EtcdObservation } from './etcd-health.ts';
import type { EtcdSnapshotFacts } from './facts.ts';
import { SnapshotStoreError, SnapshotUpload, storedSize } from './etcd-snapshot-store.ts';

/** The length of the SHA-256 etcd appends to a snapshot. */
const TRAILER = 32;

/** A member a snapshot may be streamed from, with what its status said just before. */
export interface SnapshotSource {
  node: ControlPlaneNode;
  raftIndex: bigint;
}

/**
 * The members to ask for a snapshot, best first: healthy voting members (status read,
 * no errors, not a learner) on a node with an address — those other than `target` (the
 * node about to be disrupted) first, followers before the leader (a snapshot reads the
 * whole database: the leader has enough to do), then by name; `target`'s own member
 * last, asked only when no other one can be. Empty: none is healthy, with `why`.
 */
export function snapshotSources(
  observation: EtcdObservation,
  controlPlanes: readonly ControlPlaneNode[],
  target: string,
): { sources: SnapshotSource[]; why: string[] } {
  const addresses = new Map(controlPlanes.map((n) => [n.name, n]));
  const why: string[] = [];
  const healthy: (SnapshotSource & { leads: boolean })[] = [];
  for (const m of observation.members) {
    const name = m.hostname || `member ${m.id.toString(16)}`;
    const s: EtcdMemberStatusInfo | { error: string } | undefined = observation.statuses.get(m.id);
    const node = addresses.get(m.hostname);
    if (m.isLearner) why.push(`${name} is a learner`);
    else if (!node) why.push(`${name} is on no control-plane Node with an InternalIP`);
    else if (!s) why.push(`${name}: its status was not read`);
    else if ('error' in s) why.push(`${name} is unreachable: ${s.error}`);
    else if (s.errors.length > 0) why.push(`${name} is unhealthy: ${s.errors.join('; ')}`);
    else if (s.isLearner) why.push(`${name} is a learner`);
    else healthy.push({ node, raftIndex: s.raftAppliedIndex, leads: s.leader === m.id });
  }
  const rank = (s: { node: ControlPlaneNode; leads: boolean }) =>
    (s.node.name === target ? 2 : 0) + (s.leads ? 1 : 0);
  healthy.sort((a, b) => rank(a) - rank(b) || a.node.name.localeCompare(b.node.name));
  return { sources: healthy.map(({ node, raftIndex }) => ({ node, raftIndex })), why };
}

/**
 * What a snapshot stream is checked with, chunk by chunk: the SHA-256 and size of the
 * whole, and the SHA-256 of all but the last 32 bytes (held back: `tail`), which etcd's
 * trailer must equal.
 */
export class SnapshotDigest {
  size = 0;
  private readonly whole: Hash = createHash('sha256');
  private readonly body: Hash = createHash('sha256');
  private tail: Buffer = Buffer.alloc(0);

  /** Takes a chunk; returns the bytes that are now certainly not the trailer (safe to pass on). */
  update(chunk: Uint8Array): Buffer {
    this.size += chunk.byteLength;
    this.whole.update(chunk);
    const joined = Buffer.concat([this.tail, chunk]);
    const cut = Math.max(0, joined.length - TRAILER);
    const ready = joined.subarray(0, cut);
    this.body.update(ready);
    this.tail = Buffer.from(joined.subarray(cut));
    return ready;
  }

  /** At the end: the held-back trailer and the file's SHA-256, or why the stream is no snapshot. */
  finish(): { trailer: Buffer; sha256: string } | { error: string } {
    if (this.tail.length < TRAILER)
      return { error: `the stream ended after ${String(this.size)} bytes: too short to be an etcd snapshot` };
    const expected = this.body.digest();
    if (!expected.equals(this.tail))
      return {
        error: `the stream's last 32 bytes are not the SHA-256 of the ${String(this.size - TRAILER)} before them: the snapshot is damaged or incomplete`,
      };
    return { trailer: this.tail, sha256: this.whole.digest('hex') };
  }
}

/** A snapshot stored (what the step then reports, but what it pruned), and the members tried before. */
export type EtcdSnapshotTaken = Omit<EtcdSnapshotFacts, 'pruned'> & {
  /** The members tried first and why they gave nothing, if any. */
  failures: string[];
};

/** A failure of the source (Talos, etcd): another member may do. */
class SourceError extends Error {}

/** Streams one member's snapshot into one PUT, checked; the upload is cut off on any failure. */
async function streamOne(
  client: TalosClient,
  source: SnapshotSource,
  url: URL,
  signal: AbortSignal,
): Promise<{ size: number; sha256: string }> {
  const upload = new SnapshotUpload(url, signal);
  const digest = new SnapshotDigest();
  try {
    try {
      await client.etcdSnapshot({
        node: source.node.address,
        signal,
        onChunk: async (bytes) => {
          const ready = digest.update(bytes);
          if (ready.length > 0) await upload.write(ready);
        },
      });
    } catch (error) {
      if (error instanceof SnapshotStoreError) throw error;
      throw new SourceError(`${source.node.name}: ${errorMessage(error)}`, { cause: error });
    }
    const done = digest.finish();
    if ('error' in done) throw new SourceError(`${source.node.name}: ${done.error}`);
    await upload.finish(done.trailer);
    return { size: digest.size, sha256: done.sha256 };
  } catch (error) {
    upload.abort();
    throw error;
  }
}

/**
 * Takes a snapshot for an action on node `target`: reads etcd (etcd.ts), streams from the
 * best healthy member (snapshotSources; on a failure of the source, the next), stores it
 * at `base` + `name`, and checks the stored size. Throws what failed: a store that refuses
 * ends it at once (another member would meet the same store).
 */
export async function takeEtcdSnapshot(
  client: TalosClient,
  request: {
    controlPlanes: readonly ControlPlaneNode[];
    target: string;
    base: string;
    name: string;
    signal: AbortSignal;
    progress?: (line: string) => void;
  },
): Promise<EtcdSnapshotTaken> {
  const { signal, target } = request;
  const read = await readEtcd(client, [...request.controlPlanes], target, { signal });
  const { sources, why } = snapshotSources(read.observation, request.controlPlanes, target);
  if (sources.length === 0)
    throw new Error(
      `no healthy etcd member to take a snapshot from (${why.join('; ') || 'etcd lists none'})`,
    );
  const url = new URL(request.name, request.base);
  const failures: string[] = [];
  for (const source of sources) {
    request.progress?.(`streaming the snapshot of etcd member ${source.node.name}`);
    try {
      const { size, sha256 } = await streamOne(client, source, url, signal);
      const stored = await storedSize(url, signal);
      if (stored !== size)
        throw new SnapshotStoreError(
          `the store holds ${String(stored)} bytes of the ${String(size)} sent (HEAD Content-Length)`,
        );
      return {
        name: request.name,
        url: url.href,
        member: source.node.name,
        size,
        sha256,
        raftIndex: Number(source.raftIndex),
        failures,
      };
    } catch (error) {
      if (!(error instanceof SourceError) || signal.aborted) throw error;
      failures.push(error.message);
    }
  }
  throw new Error(`no etcd member gave a whole snapshot: ${failures.join('; ')}`);
}
