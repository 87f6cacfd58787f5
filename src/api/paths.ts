// The API server paths of gatehouse's kinds, derived from each kind's definition (the
// same one the CRDs are generated from), so a path cannot drift from its CRD.
import { actionPolicyKind } from './action-policy.ts';
import { clusterHealthCheckKind } from './cluster-health-check.ts';
import { API_VERSION, type KindDefinition } from './common.ts';
import { nodeActionKind } from './node-action.ts';
import { hookKinds } from './hooks.ts';
import { nodeRolloutKind } from './node-rollout.ts';
import { notificationPolicyKind } from './notification-policy.ts';

/** The collection path of a kind: all of a cluster-scoped kind, or one namespace's of a namespaced one. */
export function collectionPath(kind: KindDefinition, namespace?: string): string {
  return namespace !== undefined && kind.scope === 'Namespaced'
    ? `/apis/${API_VERSION}/namespaces/${namespace}/${kind.plural}`
    : `/apis/${API_VERSION}/${kind.plural}`;
}

/** The path of one object of a kind. */
export function objectPath(kind: KindDefinition, name: string, namespace?: string): string {
  return `${collectionPath(kind, namespace)}/${name}`;
}

export const NODE_ACTIONS_PATH = collectionPath(nodeActionKind);
export const ACTION_POLICIES_PATH = collectionPath(actionPolicyKind);
export const CHECKS_PATH = collectionPath(clusterHealthCheckKind);
export const NODE_ROLLOUTS_PATH = collectionPath(nodeRolloutKind);
export const NOTIFICATION_POLICIES_PATH = collectionPath(notificationPolicyKind);

/** The path of one ClusterHealthCheck's status. */
export function checkStatusPath(name: string): string {
  return `${objectPath(clusterHealthCheckKind, name)}/status`;
}

/** Each hook kind's definition by its kind name (PreRebootJob, …), for its paths. */
export const HOOK_KIND_DEFINITIONS: ReadonlyMap<string, KindDefinition> = new Map(
  hookKinds.map((k) => [k.kind, k]),
);
