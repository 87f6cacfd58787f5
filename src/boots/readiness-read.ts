// Reads what the readiness preset judges (src/hooks/readiness.ts) for one node: its Pods
// and its CSINode. Only while a readiness hook of the node waits, and from the API
// server's watch cache (resourceVersion=0): the controller keeps no Pod informer, whose
// memory would grow with every Pod of the cluster, for a question asked of one node for a
// few seconds per boot (docs/decisions.md, "The readiness preset: a NodePrereadyJob
// shape, read while it waits").
import { isConflict } from '../kube/reconciler.ts';
import type { RestClient } from '../kube/rest.ts';
import { readinessPodOf, type NodeReadinessFacts, type PodObject } from '../hooks/readiness.ts';

/** A read this recent is used again: the passes an update burst brings ask the API server once. */
const READ_TTL_MS = 1000;

interface CSINodeObject {
  spec?: { drivers?: { name: string }[] | null };
}

export class NodeReadinessReader {
  private readonly rest: RestClient;
  private readonly reads = new Map<string, { at: number; facts: NodeReadinessFacts }>();

  constructor(rest: RestClient) {
    this.rest = rest;
  }

  /** The node's Pods (every phase: a Failed DaemonSet Pod is one not Ready) and the drivers of its CSINode. */
  async read(node: string): Promise<NodeReadinessFacts> {
    const cached = this.reads.get(node);
    if (cached && performance.now() - cached.at < READ_TTL_MS) return cached.facts;
    const [pods, csiDrivers] = await Promise.all([this.pods(node), this.csiDrivers(node)]);
    const facts: NodeReadinessFacts = { pods, csiDrivers };
    this.reads.set(node, { at: performance.now(), facts });
    return facts;
  }

  /** Drops what was read of a node (it is done waiting, or gone). */
  forget(node: string): void {
    this.reads.delete(node);
  }

  private async pods(node: string) {
    const list = await this.rest.request<{ items: PodObject[] | null }>('/api/v1/pods', {
      query: { fieldSelector: `spec.nodeName=${node}`, resourceVersion: '0' },
    });
    return (list.items ?? []).map(readinessPodOf);
  }

  private async csiDrivers(node: string): Promise<string[] | undefined> {
    try {
      const csiNode = await this.rest.request<CSINodeObject>(
        `/apis/storage.k8s.io/v1/csinodes/${encodeURIComponent(node)}`,
        { query: { resourceVersion: '0' } },
      );
      return (csiNode.spec?.drivers ?? []).map((d) => d.name);
    } catch (error) {
      // The kubelet creates it at its first start: a node without one has no driver yet.
      if (isConflict(error, [404])) return undefined;
      throw error;
    }
  }
}
