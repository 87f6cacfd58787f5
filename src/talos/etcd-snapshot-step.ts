// The Talos executor's snapshot step (execution.ts): the etcd snapshot an ActionPolicy
// asks for before a control-plane action is approved (etcd-snapshot.ts), bounded by the
// deadline the decision core gave it, then entered in the policy's catalogue and the
// oldest pruned (etcd-snapshot-catalogue.ts). A snapshot that cannot be catalogued is
// deleted again: gatehouse keeps nothing it does not list.
import type { RestClient } from '../kube/rest.ts';
import { redactURLs } from '../redact.ts';
import { errorMessage } from '../wait.ts';
import type { TalosClient } from './client.ts';
import type { ControlPlaneNode } from './etcd.ts';
import { catalogueAndPrune } from './etcd-snapshot-catalogue.ts';
import { deleteStored } from './etcd-snapshot-store.ts';
import { takeEtcdSnapshot } from './etcd-snapshot.ts';
import type { ExecutionStepFacts } from './facts.ts';

/** What the decision core asked for (the etcdSnapshot effect), with the control-plane Nodes to read etcd through. */
export interface EtcdSnapshotStepRequest {
  /** The ActionPolicy whose spec.etcdSnapshot asked for it: its catalogue. */
  policy: string;
  /** The store's base URL (spec.etcdSnapshot.http.url). */
  url: string;
  keep: number;
  /** The object name under `url`. */
  name: string;
  /** When the wait for the snapshot ends (the first attempt plus etcdSnapshot.timeout). */
  deadline: string;
  controlPlanes: readonly ControlPlaneNode[];
}

export async function etcdSnapshotStep(
  client: TalosClient,
  rest: RestClient,
  action: { name: string; node: string },
  request: EtcdSnapshotStepRequest,
  signal: AbortSignal,
  progress: (line: string) => void,
): Promise<ExecutionStepFacts> {
  const left = Date.parse(request.deadline) - Date.now();
  if (!(left > 0)) throw new Error('the time for the snapshot (etcdSnapshot.timeout) is over');
  const bounded = AbortSignal.any([signal, AbortSignal.timeout(left)]);
  try {
    const taken = await takeEtcdSnapshot(client, {
      controlPlanes: request.controlPlanes,
      target: action.node,
      base: request.url,
      name: request.name,
      signal: bounded,
      progress,
    });
    let pruning: { pruned: string[]; failures: string[] };
    try {
      pruning = await catalogueAndPrune(rest, {
        policy: request.policy,
        keep: request.keep,
        signal: bounded,
        remove: (url) => deleteStored(url, bounded),
        entry: {
          name: taken.name,
          url: taken.url,
          time: new Date().toISOString(),
          node: action.node,
          action: action.name,
          member: taken.member,
          size: taken.size,
          sha256: taken.sha256,
        },
      });
    } catch (error) {
      await deleteStored(new URL(taken.url)).catch(() => undefined);
      throw new Error(
        `stored, but could not be listed in ActionPolicy ${request.policy}'s status.etcdSnapshots, so deleted again: ${errorMessage(error)}`,
        { cause: error },
      );
    }
    const notes = [
      ...(taken.failures.length > 0 ? [`members tried first: ${taken.failures.join('; ')}`] : []),
      ...(pruning.pruned.length > 0 ? [`pruned ${pruning.pruned.join(', ')}`] : []),
      ...(pruning.failures.length > 0 ? [`could not prune ${pruning.failures.join('; ')}`] : []),
    ];
    return {
      state: 'succeeded',
      message: redactURLs(
        `stored ${taken.name} (${String(taken.size)} bytes, sha256 ${taken.sha256}) from etcd member ${taken.member}; etcd's own checksum and the stored size checked${notes.length > 0 ? `; ${notes.join('; ')}` : ''}`,
      ),
      snapshot: {
        name: taken.name,
        url: redactURLs(taken.url),
        member: taken.member,
        size: taken.size,
        sha256: taken.sha256,
        raftIndex: taken.raftIndex,
        pruned: pruning.pruned,
      },
    };
  } catch (error) {
    if (bounded.aborted && !signal.aborted)
      throw new Error(`not taken within etcdSnapshot.timeout: ${redactURLs(errorMessage(error))}`, {
        cause: error,
      });
    throw new Error(redactURLs(errorMessage(error)), { cause: error });
  }
}
