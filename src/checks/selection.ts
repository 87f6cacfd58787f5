// Which checks gate a given action on a given node.
import type { ClusterHealthCheckSpec } from '../api/cluster-health-check.ts';
import type { Action } from '../api/common.ts';
import { matchesSelector } from '../kube/labels.ts';

export function checkGates(
  spec: ClusterHealthCheckSpec,
  action: Action,
  nodeLabels: Record<string, string>,
): boolean {
  const actions = spec.actions ?? [];
  if (actions.length > 0 && !actions.includes(action)) return false;
  return matchesSelector(spec.nodeSelector, nodeLabels);
}
