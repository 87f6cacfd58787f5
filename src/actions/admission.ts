// Admission: which Pending actions may take a slot now. A pure function of every
// action (as freshly listed from the API server), the nodes, the policies and the
// time. Candidates are judged oldest first, each against the slots held before it and
// the ones admitted ahead of it in the same pass, so one pass never admits beyond a
// budget; the reconciler runs one pass at a time (a single work-queue key) and writes
// each admission conditionally on the listed resourceVersion.
import { INSTANCE_LABEL, NODE_ACTION_FINALIZER } from '../api/names.ts';
import type { NodeActionStatus, ObservedNodeAction } from '../api/node-action.ts';
import { holdsSlot, withPhaseEntered } from '../api/phases.ts';
import { setCondition } from '../kube/conditions.ts';
import { evaluatePolicies, type ActionRef, type NodeLabels, type PolicyFacts } from '../policies/evaluate.ts';

export interface AdmissionInput {
  now: Date;
  actions: readonly ObservedNodeAction[];
  /**
   * The actions of other controller instances. Their budgets are theirs, but a node is
   * one node and etcd is one etcd: an action of any instance holding a slot keeps others
   * off its node, and off every other control-plane node if it is on one.
   */
  others?: readonly ObservedNodeAction[];
  /** Which instances' actions of `others` count for the control-plane rule (default: all; see PolicyInput). */
  controlPlaneInstances?: readonly string[];
  nodes: NodeLabels;
  policies: readonly PolicyFacts[];
}

export interface AdmissionUpdate {
  action: ObservedNodeAction;
  status: NodeActionStatus;
}

export interface AdmissionPlan {
  /** Actions to move to WaitingForHealth, in order. */
  admit: AdmissionUpdate[];
  /** Pending actions whose message (why they wait) changed. */
  wait: AdmissionUpdate[];
  /** The slot holders once the admissions are written. */
  holders: ActionRef[];
  /** When to run again even if nothing changes (a window opens); undefined: only on change. */
  requeueAfterMs?: number;
}

/** How often waiting actions are judged again when nothing tells the controller to. */
export const ADMISSION_RESYNC_MS = 60_000;

export function actionRef(action: ObservedNodeAction): ActionRef {
  return { name: action.metadata.name, node: action.spec.nodeName, action: action.spec.action };
}

/** Another controller instance's action, as the one-node and control-plane rules count it. */
function foreignRef(action: ObservedNodeAction): ActionRef {
  return { ...actionRef(action), instance: action.metadata.labels?.[INSTANCE_LABEL] ?? '(default)' };
}

/** A new action, set up by its reconciler (the finalizer) and with no status yet: its first status is the admission pass's. */
export function isNew(action: ObservedNodeAction): boolean {
  return (
    action.status?.phase === undefined &&
    action.metadata.deletionTimestamp === undefined &&
    (action.metadata.finalizers ?? []).includes(NODE_ACTION_FINALIZER)
  );
}

/** Whether the admission pass may consider the action: Pending, set up by its reconciler, not deleted. */
export function isCandidate(action: ObservedNodeAction): boolean {
  return (
    action.status?.phase === 'Pending' &&
    action.metadata.deletionTimestamp === undefined &&
    (action.metadata.finalizers ?? []).includes(NODE_ACTION_FINALIZER)
  );
}

function byAge(a: ObservedNodeAction, b: ObservedNodeAction): number {
  const ta = Date.parse(a.metadata.creationTimestamp ?? '') || 0;
  const tb = Date.parse(b.metadata.creationTimestamp ?? '') || 0;
  return ta - tb || a.metadata.name.localeCompare(b.metadata.name);
}

export function planAdmissions(input: AdmissionInput): AdmissionPlan {
  const { now, nodes, policies } = input;
  const holders = input.actions.filter((a) => holdsSlot(a.status?.phase)).map(actionRef);
  const candidates = input.actions.filter(isCandidate).sort(byAge);
  const admit: AdmissionUpdate[] = [];
  const wait: AdmissionUpdate[] = [];
  let requeueAfterMs: number | undefined;

  const elsewhere = (input.others ?? []).filter((a) => holdsSlot(a.status?.phase)).map(foreignRef);
  for (const action of candidates) {
    // A node that does not exist is the action reconciler's to deny.
    if (!nodes.has(action.spec.nodeName)) continue;
    const ref = actionRef(action);
    const verdict = evaluatePolicies({
      candidate: ref,
      holders,
      elsewhere,
      ...(input.controlPlaneInstances
        ? {
            controlPlaneElsewhere: elsewhere.filter((r) =>
              input.controlPlaneInstances?.includes(r.instance ?? ''),
            ),
          }
        : {}),
      policies,
      nodes,
      now,
    });
    const status = structuredClone(action.status ?? {});
    const governed = verdict.governedBy.length
      ? `ActionPolicy ${verdict.governedBy.join(', ')}`
      : 'the default policy (one action at a time)';
    if (verdict.allowed) {
      holders.push(ref);
      status.conditions = setCondition(
        status.conditions,
        {
          type: 'Admitted',
          status: 'True',
          reason: 'PolicyAllowed',
          message: `allowed by ${governed}`,
          ...(action.metadata.generation !== undefined
            ? { observedGeneration: action.metadata.generation }
            : {}),
        },
        now,
      );
      withPhaseEntered(status, 'WaitingForHealth', now);
      status.message = `allowed by ${governed}; evaluating its health checks`;
      admit.push({ action, status });
      continue;
    }
    const message = `waiting for its policies: ${verdict.reasons.join('; ')}`;
    if (verdict.nextWindowStart) {
      const inMs = Math.max(1000, verdict.nextWindowStart.getTime() - now.getTime());
      requeueAfterMs = Math.min(requeueAfterMs ?? Infinity, inMs);
    }
    requeueAfterMs = Math.min(requeueAfterMs ?? Infinity, ADMISSION_RESYNC_MS);
    if (status.message !== message) {
      status.message = message;
      status.conditions = setCondition(
        status.conditions,
        {
          type: 'Admitted',
          status: 'False',
          reason: 'PolicyWaiting',
          message,
          ...(action.metadata.generation !== undefined
            ? { observedGeneration: action.metadata.generation }
            : {}),
        },
        now,
      );
      wait.push({ action, status });
    }
  }
  return { admit, wait, holders, ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}) };
}
