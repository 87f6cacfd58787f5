// The well-known names gatehouse writes on objects and reads back: labels, annotations,
// taints, finalizers and condition types. One module, imported by every reconciler,
// command and test, so that a name is spelt once and never exported from whichever
// reconciler happened to use it first. Resource paths are in paths.ts.
//
// Who can write each one matters: annotations and labels on a Node or a NodeAction are
// writable by anyone allowed to patch it, so every reader treats them as claims (see
// src/boots/record.ts, src/talos/drain.ts and docs/decisions.md).

/** Held by every unfinished NodeAction, so that deleting one cancels it and stops its hook Jobs first. */
export const NODE_ACTION_FINALIZER = 'talos.dev/node-action';

/** The label that assigns a NodeAction (or an ActionPolicy, a Node) to a named controller instance. */
export const INSTANCE_LABEL = 'talos.dev/controller-instance';

/** The label selector of the objects an instance (or the default, unnamed one) handles. */
export function instanceSelector(instance: string | undefined): string {
  return instance ? `${INSTANCE_LABEL}=${instance}` : `!${INSTANCE_LABEL}`;
}

/** Every object instanceSelector(instance) leaves out: those of the other controller instances. */
export function foreignInstanceSelector(instance: string | undefined): string {
  return instance ? `${INSTANCE_LABEL}!=${instance}` : INSTANCE_LABEL;
}

/** The label Kubernetes puts on control-plane nodes. */
export const CONTROL_PLANE_LABEL = 'node-role.kubernetes.io/control-plane';

/** The annotation an External requester sets once it has performed the action. */
export const EXECUTED_ANNOTATION = 'talos.dev/executed';

/**
 * The annotation that releases a Maintenance action held out of service ("true"): set
 * by its requester or a bypass holder (the admission policy), once it is Held.
 */
export const RELEASED_ANNOTATION = 'talos.dev/released';

/**
 * A person's answer to the approval hook an action waits for (status.approval.pending):
 * `Approve` or `Refuse`, with who (`approval-by`, the approver's own name), why
 * (`approval-reason`) and which hook (`approval-for`, Kind/namespace/name). The admission
 * policy lets only a holder of the verb approve whom the pending approval names write them.
 */
export const APPROVAL_ANNOTATION = 'talos.dev/approval';
export const APPROVAL_BY_ANNOTATION = 'talos.dev/approval-by';
export const APPROVAL_REASON_ANNOTATION = 'talos.dev/approval-reason';
export const APPROVAL_FOR_ANNOTATION = 'talos.dev/approval-for';
export const APPROVAL_ANNOTATIONS = [
  APPROVAL_ANNOTATION,
  APPROVAL_BY_ANNOTATION,
  APPROVAL_REASON_ANNOTATION,
  APPROVAL_FOR_ANNOTATION,
] as const;

/**
 * A promotion of a NodeRollout past the gate it waits at (status.gate): `promote` names
 * the gate's id, `promoted-by` the user (their own name), `promote-reason` why. The
 * admission policy lets only a holder of the verb promote on noderollouts write them.
 */
export const PROMOTE_ANNOTATION = 'talos.dev/promote';
export const PROMOTED_BY_ANNOTATION = 'talos.dev/promoted-by';
export const PROMOTE_REASON_ANNOTATION = 'talos.dev/promote-reason';
export const PROMOTE_ANNOTATIONS = [
  PROMOTE_ANNOTATION,
  PROMOTED_BY_ANNOTATION,
  PROMOTE_REASON_ANNOTATION,
] as const;

/** The boot reconciler's record of a node's boot hooks, on the Node (src/boots/record.ts). */
export const BOOT_RECORD_ANNOTATION = 'talos.dev/boot-hooks';
/** An action's announcement of its node's coming boot, on the Node. */
export const BOOT_ANNOUNCEMENT_ANNOTATION = 'talos.dev/next-boot';

/** The taint a node carries until its NodePrereadyJobs succeeded (DESIGN.md). */
export const PREREADY_TAINT = 'talos.dev/preready';

/**
 * The label medik8s's NodeHealthCheck (and its remediators) honour: a node carrying it
 * is not remediated. gatehouse sets it on a node while an action it approved takes the
 * node away, so that a slow boot is not mistaken for a dead node.
 */
export const REMEDIATION_EXCLUDE_LABEL = 'remediation.medik8s.io/exclude-from-remediation';
/** Names the NodeAction that set REMEDIATION_EXCLUDE_LABEL: only its end removes it. */
export const REMEDIATION_PAUSED_BY_ANNOTATION = 'talos.dev/remediation-paused-by';

/**
 * A workload owner's "not now" (issue 27): on a Pod, or on a Node, "true" or a duration
 * ("6h"). An action that would take the node away waits for it at its health gate, for
 * at most the duration and at most its ActionPolicies' doNotDisruptMax
 * (src/actions/do-not-disrupt.ts). Anyone who can edit the Pod can set it: it only delays.
 */
export const DO_NOT_DISRUPT_ANNOTATION = 'talos.dev/do-not-disrupt';

/**
 * The holder gatehouse writes in the per-node Lease medik8s operators share
 * (medik8s-leases/node-<node>) while an action of its takes the node away, and the
 * annotation on that Lease naming the action (src/actions/medik8s-lease.ts).
 */
export const MEDIK8S_LEASE_HOLDER = 'gatehouse';
export const LEASE_HELD_FOR_ANNOTATION = 'talos.dev/held-for';

/** Marks a cordon made for an action, naming it: only that action's end lifts it (src/talos/drain.ts). */
export const CORDONED_BY_ANNOTATION = 'talos.dev/cordoned-by';

/** The Idempotency-Key a NodeAction was created with (as sent). */
export const IDEMPOTENCY_KEY_ANNOTATION = 'talos.dev/idempotency-key';
/** A digest of (caller, key): how a retried request finds what its first attempt created. */
export const IDEMPOTENCY_LABEL = 'talos.dev/idempotency-key-hash';
/** A digest of the request's spec: a key reused with another request is refused. */
export const FINGERPRINT_ANNOTATION = 'talos.dev/request-fingerprint';
/** How the NodeAction came to be; the HTTP API writes http-api. */
export const REQUESTED_VIA_ANNOTATION = 'talos.dev/requested-via';

/**
 * On every NodeAction a NodeRollout created: the rollout's name (src/rollouts/naming.ts),
 * for selectors and humans. Only the controller may set it (the admission policy), and
 * the rollout counts an action as its own only when it is what the rollout would have
 * made (src/rollouts/membership.ts): this label, its ownerReference, its derived name,
 * its action and target, its requester.
 */
export const ROLLOUT_LABEL = 'talos.dev/rollout';

/**
 * On a Node a NodeRollout set aside because it could not be drained (onDrainTimeout:
 * Quarantine): the rollout's label value (naming.ts). Written by the controller for
 * people and selectors; nothing in gatehouse decides from it (the rollout's status is
 * its memory), so anyone who can label Nodes writing it changes nothing.
 */
export const QUARANTINED_LABEL = 'talos.dev/quarantined';

/**
 * On a NodeAction a bypassing NodeRollout created: who granted the bypass (the rollout's
 * spec.bypass.grantedBy, else its requestedBy), for the action's Bypassed record. Only
 * the controller may set it.
 */
export const BYPASS_GRANTED_BY_ANNOTATION = 'talos.dev/bypass-granted-by';

/**
 * The metadata gatehouse reads from a NodeAction besides the executed mark: fixed at
 * creation by the admission policy, since a requester may edit its own action's
 * metadata and must not move it to another controller (out of the budget), take over
 * another request's idempotency key, or make its action pass for a rollout's.
 */
export const IMMUTABLE_ACTION_LABELS = [INSTANCE_LABEL, IDEMPOTENCY_LABEL, ROLLOUT_LABEL] as const;
export const IMMUTABLE_ACTION_ANNOTATIONS = [
  IDEMPOTENCY_KEY_ANNOTATION,
  FINGERPRINT_ANNOTATION,
  REQUESTED_VIA_ANNOTATION,
  BYPASS_GRANTED_BY_ANNOTATION,
] as const;

/**
 * The metadata of a NodeAction that only the controller may set when it is created: a
 * rollout's mark, which makes the action count for the rollout (with a NodeRollout
 * ownerReference, which the policy keeps to the controller too).
 */
export const CONTROLLER_ONLY_ACTION_LABELS = [ROLLOUT_LABEL] as const;
export const CONTROLLER_ONLY_ACTION_ANNOTATIONS = [BYPASS_GRANTED_BY_ANNOTATION] as const;

/** The condition types of a NodeRollout's status. */
export const ROLLOUT_CONDITIONS = ['Progressing', 'Halted', 'Complete'] as const;
export type RolloutConditionType = (typeof ROLLOUT_CONDITIONS)[number];

/** The labels of the hook Jobs gatehouse creates (src/hooks/job.ts). */
export const HOOK_JOB_LABELS = {
  managedBy: 'app.kubernetes.io/managed-by',
  hookKind: 'talos.dev/hook-kind',
  hook: 'talos.dev/hook',
  hookUID: 'talos.dev/hook-uid',
  node: 'talos.dev/node',
  action: 'talos.dev/action',
  actionUID: 'talos.dev/action-uid',
  bootID: 'talos.dev/boot-id',
  attempt: 'talos.dev/attempt',
  /** Set to undo on the Job that undoes a pre-action hook (src/actions/undo.ts); absent on a hook's own run. */
  purpose: 'talos.dev/hook-purpose',
} as const;

/** The annotations of the hook Jobs gatehouse creates: the full names a label value may be too short for. */
export const HOOK_JOB_ANNOTATIONS = {
  hook: 'talos.dev/hook',
  node: 'talos.dev/node',
  action: 'talos.dev/action',
  /** The hash of the Job as gatehouse built it (jobHash), also kept in the run's record. */
  templateHash: 'talos.dev/template-hash',
} as const;

/** The label selector of every hook Job gatehouse creates. */
export const HOOK_JOB_SELECTOR = HOOK_JOB_LABELS.hookUID;

/** The condition types of a NodeAction's status, in the order an action meets them. */
export const NODE_ACTION_CONDITIONS = [
  'Bypassed',
  'HealthChecksPassed',
  'PreHooksSucceeded',
  'Approved',
  'DrainBlocked',
  'Drained',
  'Executed',
  'Released',
  'NodeReturned',
  'PostHooksSucceeded',
  'PostChecksPassed',
  'RolledBack',
  'Silenced',
  'Undone',
] as const;
export type NodeActionConditionType = (typeof NODE_ACTION_CONDITIONS)[number];

/** The Alertmanager silences' condition on a NodeAction (src/silences/plan.ts). */
export const SILENCED_CONDITION: NodeActionConditionType = 'Silenced';

/** An ActionPolicy's one condition: whether it can be applied (its windows open at all). */
export const POLICY_VALID_CONDITION = 'Valid';

/** The labels of the checker Jobs of `job` probes (src/checks/checker-job.ts). */
export const CHECKER_JOB_LABELS = {
  managedBy: HOOK_JOB_LABELS.managedBy,
  check: 'talos.dev/check',
  checkUID: 'talos.dev/check-uid',
  checkGeneration: 'talos.dev/check-generation',
  node: HOOK_JOB_LABELS.node,
} as const;

/** The annotations of checker Jobs: the full names a label value may be too short for. */
export const CHECKER_JOB_ANNOTATIONS = {
  check: 'talos.dev/check',
  node: HOOK_JOB_ANNOTATIONS.node,
} as const;

/** The label the Job controller puts on a Job's pods (batch/v1, Kubernetes 1.27+). */
export const JOB_CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid';

/**
 * Cluster API's pre-drain hook on a Machine that gatehouse owns in its management-cluster
 * mode (src/cluster-api): while it is there, Cluster API does not drain nor delete the
 * Machine's Node. gatehouse adds it to the Machines it gates and removes it once the
 * Machine's Reset NodeAction is Approved (docs/decisions.md).
 */
export const MACHINE_PRE_DRAIN_HOOK = 'pre-drain.delete.hook.machine.cluster.x-k8s.io/gatehouse';
/**
 * The value gatehouse writes in its hook: the hook's owner, as Cluster API asks of hook
 * annotations. A hook of that name with any other value is not gatehouse's, and is left alone.
 */
export const MACHINE_HOOK_OWNER = 'talos.dev/gatehouse';
/**
 * Cluster API's annotation that keeps a MachineHealthCheck from remediating a Machine
 * (its presence counts). gatehouse puts it on the Machine of a node an approved action
 * takes away, marked with REMEDIATION_PAUSED_BY_ANNOTATION, and takes off only its own.
 */
export const MACHINE_SKIP_REMEDIATION_ANNOTATION = 'cluster.x-k8s.io/skip-remediation';
/** The label Cluster API puts on each Machine, naming its Cluster. */
export const CLUSTER_NAME_LABEL = 'cluster.x-k8s.io/cluster-name';
/**
 * On a NodeAction gatehouse made for a Machine's deletion: the Machine's UID (its name is
 * derived from it, src/cluster-api/decide.ts) and, in an annotation, `namespace/name`.
 */
export const MACHINE_UID_LABEL = 'talos.dev/machine-uid';
export const MACHINE_ANNOTATION = 'talos.dev/machine';
/**
 * The condition gatehouse writes on a Machine's NodeAction: True while it holds the
 * Machine (and why), False once it let the Machine go. The action reconciler keeps it:
 * it decides on a copy of the stored status (src/actions/decision.ts).
 */
export const MACHINE_HELD_CONDITION = 'MachineHeld';
