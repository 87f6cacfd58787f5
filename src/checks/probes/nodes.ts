// nodes: the selected nodes are Ready, with at most maxNotReady exceptions (a node the
// node controller lost touch with has Ready=Unknown, which counts as not Ready).
import type { Static } from 'typebox';
import type { NodesProbe } from '../../api/cluster-health-check.ts';
import { selectorValid } from '../../kube/labels.ts';
import type { Probe, ProbeContext } from '../probe.ts';
import { count, labelQuery, listObjects, objectName, someOf, type KubeObject } from './kube-list.ts';

export type NodesProbeSpec = Static<typeof NodesProbe>;

interface Node extends KubeObject {
  status?: { conditions?: { type: string; status: string; reason?: string; message?: string }[] };
}

export const nodesProbe: Probe<NodesProbeSpec> = async (spec, context) => {
  const labelSelector = labelQuery(spec.selector);
  const maxNotReady = spec.maxNotReady ?? 0;
  const nodes =
    cachedNodes(spec, context) ??
    (await listObjects<Node>(context.rest, '/api/v1/nodes', {
      labelSelector,
      signal: context.signal,
      sharedSince: context.readsSince,
      cached: context.cached !== undefined,
    }));
  const selection = labelSelector === undefined ? '' : ` labelled ${labelSelector}`;
  const allowance = `at most ${maxNotReady} may be not Ready`;
  if (nodes.length === 0) return { healthy: true, message: `no nodes${selection}: none can be not Ready` };

  const notReady: string[] = [];
  for (const node of nodes) {
    const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
    if (ready?.status === 'True') continue;
    const detail = [ready?.reason, ready?.message && shorten(ready.message, 80)].filter(Boolean).join(': ');
    const why = ready ? `Ready=${ready.status}${detail ? ` (${detail})` : ''}` : 'no Ready condition';
    notReady.push(`${objectName(node)} ${why}`);
  }
  notReady.sort();
  const summary = `${nodes.length - notReady.length}/${count(nodes.length, 'node')}${selection} Ready (${allowance})`;
  return {
    healthy: notReady.length <= maxNotReady,
    message: notReady.length ? `${summary}: ${someOf(notReady, 10, ', ')}` : summary,
  };
};

/**
 * A periodic probe's Nodes from the controller's cache, which its watch keeps as current
 * as a read from the API server's watch cache, without a request: undefined (ask the API
 * server) for a gate's fresh evaluation, while the watch is not live, for another
 * cluster's Nodes, and for a selector the API server would refuse (its error is the answer).
 */
function cachedNodes(spec: NodesProbeSpec, context: ProbeContext): Node[] | undefined {
  if (spec.cluster !== undefined || !selectorValid(spec.selector)) return undefined;
  return context.cached?.nodes(spec.selector) as Node[] | undefined;
}

function shorten(text: string, max: number): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
