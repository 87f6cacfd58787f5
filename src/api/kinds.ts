// Every kind of the talos.dev/v1alpha1 API, in the order they are generated and listed.
import { actionPolicyKind } from './action-policy.ts';
import { clusterHealthCheckKind } from './cluster-health-check.ts';
import type { KindDefinition } from './common.ts';
import { hookKinds } from './hooks.ts';
import { nodeActionKind } from './node-action.ts';
import { nodeRolloutKind } from './node-rollout.ts';
import { notificationPolicyKind } from './notification-policy.ts';

export const KINDS: readonly KindDefinition[] = [
  clusterHealthCheckKind,
  ...hookKinds,
  nodeActionKind,
  actionPolicyKind,
  nodeRolloutKind,
  notificationPolicyKind,
];
