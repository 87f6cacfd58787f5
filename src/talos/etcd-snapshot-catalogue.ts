// The catalogue of the snapshots gatehouse stored for an ActionPolicy (its
// status.etcdSnapshots, newest first), and the pruning to its last `keep`. An HTTP store
// has no standard listing, so gatehouse remembers what it wrote, on the object that asked
// for it: a snapshot is added as soon as it is stored and checked, those beyond `keep` are
// deleted, and only then taken off the list — a deletion lost to a crash or refused by the
// store is made again after the next snapshot (a DELETE of what is gone counts as done).
// Every write is conditional on the resourceVersion read.
import type { ActionPolicy, EtcdSnapshotEntry } from '../api/action-policy.ts';
import { ACTION_POLICIES_PATH } from '../api/paths.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { redactURLs } from '../redact.ts';
import { errorMessage } from '../wait.ts';

/**
 * The catalogue once `added` is in it: newest first, without an earlier entry of the same
 * URL; `beyond`: the entries past the newest `keep`, to delete.
 */
export function catalogueWith(
  entries: readonly EtcdSnapshotEntry[],
  added: EtcdSnapshotEntry,
  keep: number,
): { entries: EtcdSnapshotEntry[]; beyond: EtcdSnapshotEntry[] } {
  const all = [added, ...entries.filter((e) => e.url !== added.url)].sort(
    (a, b) => Date.parse(b.time) - Date.parse(a.time),
  );
  return { entries: all, beyond: all.slice(keep) };
}

/** Rewrites the policy's catalogue from what it holds now, conditionally; a conflict reads again. */
async function rewrite(
  rest: RestClient,
  policy: string,
  change: (entries: EtcdSnapshotEntry[]) => EtcdSnapshotEntry[],
  signal?: AbortSignal,
): Promise<EtcdSnapshotEntry[]> {
  const path = `${ACTION_POLICIES_PATH}/${encodeURIComponent(policy)}`;
  for (let attempt = 0; attempt < 8; attempt++) {
    const live = await rest.request<ActionPolicy>(path, signal ? { signal } : {});
    const entries = change(live.status?.etcdSnapshots ?? []);
    try {
      await rest.request(`${path}/status`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: {
          metadata: { resourceVersion: live.metadata.resourceVersion },
          status: { etcdSnapshots: entries },
        },
        ...(signal ? { signal } : {}),
      });
      return entries;
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 409)) throw error;
    }
  }
  throw new Error(`ActionPolicy ${policy} kept changing: its status.etcdSnapshots could not be written`);
}

/** Adds a stored snapshot to the policy's catalogue, then deletes those past `keep` and drops them from it. */
export async function catalogueAndPrune(
  rest: RestClient,
  request: {
    policy: string;
    entry: EtcdSnapshotEntry;
    keep: number;
    remove: (url: URL) => Promise<void>;
    signal?: AbortSignal;
  },
): Promise<{ pruned: string[]; failures: string[] }> {
  const { policy, entry, keep, signal } = request;
  let beyond: EtcdSnapshotEntry[] = [];
  await rewrite(
    rest,
    policy,
    (entries) => {
      const next = catalogueWith(entries, entry, keep);
      beyond = next.beyond;
      return next.entries;
    },
    signal,
  );
  const pruned: string[] = [];
  const failed = new Map<string, string>();
  for (const old of beyond) {
    try {
      await request.remove(new URL(old.url));
      pruned.push(old.name);
    } catch (error) {
      failed.set(old.url, redactURLs(errorMessage(error)).slice(0, 1024));
    }
  }
  if (beyond.length > 0) {
    const gone = new Set(beyond.filter((e) => !failed.has(e.url)).map((e) => e.url));
    await rewrite(
      rest,
      policy,
      (entries) =>
        entries
          .filter((e) => !gone.has(e.url))
          .map((e) => {
            const why = failed.get(e.url);
            const { pruneError: _old, ...rest } = e;
            return why === undefined ? rest : { ...rest, pruneError: why };
          }),
      signal,
    );
  }
  return {
    pruned,
    failures: [...failed].map(([url, why]) => `${redactURLs(url)}: ${why}`),
  };
}
