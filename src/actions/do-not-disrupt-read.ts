// The read behind the do-not-disrupt hold (do-not-disrupt.ts): the Pods of a node that
// still run and carry talos.dev/do-not-disrupt. Made for the health gate's decision, of
// their metadata only (a node's Pods may be many and large; only the annotation and the
// name matter), never from a cache of every Pod in the cluster. It is served by the API
// server's watch cache (resourceVersion 0, indexed by node): cheap, and at most a moment
// behind — the hold asks workload owners for a "not now" ahead of time, it is no lock.
import { DO_NOT_DISRUPT_ANNOTATION } from '../api/names.ts';
import type { RestClient } from '../kube/rest.ts';
import type { DoNotDisruptRead } from './do-not-disrupt.ts';

interface PodMetadata {
  metadata: {
    name: string;
    namespace?: string;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
  };
}

const METADATA_ONLY = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json';

export async function readDoNotDisrupt(rest: RestClient, node: string): Promise<DoNotDisruptRead> {
  // An empty PartialObjectMetadataList has `items: null`.
  const list = await rest.request<{ items: PodMetadata[] | null }>('/api/v1/pods', {
    query: {
      fieldSelector: `spec.nodeName=${node},status.phase!=Succeeded,status.phase!=Failed`,
      resourceVersion: '0',
    },
    headers: { Accept: METADATA_ONLY },
  });
  const pods = (list.items ?? []).flatMap((p) => {
    const value = p.metadata.annotations?.[DO_NOT_DISRUPT_ANNOTATION];
    // A Pod being deleted is leaving anyway: it holds nothing.
    if (value === undefined || p.metadata.deletionTimestamp !== undefined) return [];
    return [{ what: `Pod ${p.metadata.namespace ?? ''}/${p.metadata.name}`, value }];
  });
  pods.sort((a, b) => a.what.localeCompare(b.what));
  return { at: new Date(), pods };
}
