// What a step is about (a NodeAction or a NodeRollout), as the notifier keeps it, and
// which NotificationPolicies it goes to. Pure: the node labels come from the caller.
import type { NotificationPolicySpec, NotificationStep } from '../api/notification-policy.ts';
import type { KubeObject } from '../kube/informer.ts';
import { labelMatcher } from '../kube/labels.ts';
import { rolloutEventNode, type SubjectKind } from './steps.ts';

/** The facts of an action or rollout a message carries, taken when its Event is recorded. */
export interface Subject {
  kind: SubjectKind;
  name: string;
  uid?: string;
  /** The action kind (Reboot, Upgrade, ...). */
  action?: string;
  /** A NodeAction's node. */
  node?: string;
  requestedBy?: string;
  execution?: string;
  /** The NodeRollout a NodeAction belongs to. */
  rollout?: string;
  /** The nodes a policy's nodeSelector is matched against: the action's, or any of the rollout's. */
  nodes: readonly string[];
}

interface SubjectObject extends KubeObject {
  spec?: { nodeName?: string; action?: string; requestedBy?: string; execution?: string };
  status?: { phase?: string; nodes?: readonly { node: string }[] };
}

/** The subject of an Event on `object`, for a kind whose Events can be steps. */
export function subjectOf(kind: SubjectKind, object: KubeObject, reason: string, message: string): Subject {
  const o = object as SubjectObject;
  const common = {
    kind,
    name: o.metadata.name,
    ...(o.metadata.uid ? { uid: o.metadata.uid } : {}),
    ...(o.spec?.action ? { action: o.spec.action } : {}),
    ...(o.spec?.requestedBy ? { requestedBy: o.spec.requestedBy } : {}),
    ...(o.spec?.execution ? { execution: o.spec.execution } : {}),
  };
  if (kind === 'NodeAction') {
    const node = o.spec?.nodeName;
    const rollout = o.metadata.labels?.['talos.dev/rollout'];
    return {
      ...common,
      ...(node ? { node } : {}),
      ...(rollout ? { rollout } : {}),
      nodes: node ? [node] : [],
    };
  }
  // A rollout's nodes as its stored status lists them, and the node this Event names
  // (its first pass records Events before a status lists any node).
  const named = rolloutEventNode(reason, message);
  const nodes = new Set((o.status?.nodes ?? []).map((n) => n.node));
  if (named) nodes.add(named);
  return { ...common, ...(named ? { node: named } : {}), nodes: [...nodes] };
}

/**
 * Whether a step of this subject goes to a policy: its kind of subject, action, step,
 * and a node its selector matches (absent: any). `nodeLabels` answers undefined for a
 * node that is gone; such a node matches only a policy without a selector.
 *
 * @example policyWants({ steps: ['Done'], webhook }, subject, 'Done', labels) // true
 */
export function policyWants(
  spec: NotificationPolicySpec,
  subject: Subject,
  step: NotificationStep,
  nodeLabels: (node: string) => Record<string, string> | undefined,
): boolean {
  if (subject.kind === 'NodeRollout' && spec.rollouts === false) return false;
  if (spec.steps?.length && !spec.steps.includes(step)) return false;
  if (spec.actions?.length && !spec.actions.some((a) => a === subject.action)) return false;
  if (!spec.nodeSelector) return true;
  const matches = labelMatcher(spec.nodeSelector);
  return subject.nodes.some((node) => {
    const labels = nodeLabels(node);
    return labels !== undefined && matches(labels);
  });
}
