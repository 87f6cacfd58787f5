// The Cluster API mode's core: a pure function of one Machine of the management
// cluster, its Node in this (the workload) cluster, and the NodeAction gatehouse made for
// it. It says what to do to the Machine (add gatehouse's pre-drain hook, or remove it),
// which NodeAction to create, and what to record (the MachineHeld condition on the
// action, an Event on the Machine); the reconciler (reconciler.ts) observes and applies.
//
// The rule (docs/decisions.md, "Cluster API: gatehouse's pre-drain hook"):
// - a Machine not being deleted gets the hook, with gatehouse's owner value;
// - a Machine being deleted whose hook is gatehouse's is held until an External Reset
//   NodeAction of its Node is Approved (checks healthy, PreResetJobs done); a Machine with
//   no Node (no status.nodeRef) or whose Node is gone is let go at once;
// - a failed, denied or cancelled action keeps holding it, and says so;
// - a Machine without gatehouse's hook (none, or another owner's value) is never touched.
// And beside it, the remediation pause (src/actions/remediation.ts): the Machine of a node
// that an approved, unfinished action of gatehouse's takes away carries Cluster API's
// skip-remediation annotation, marked as that action's; the mark comes off with it when no
// such action is left, and an annotation someone else put on is left alone.
import { MACHINE_HOOK_OWNER, MACHINE_PRE_DRAIN_HOOK } from '../api/names.ts';
import type { NodeActionPhase } from '../api/node-action.ts';
import { APPROVED_OR_SUCCEEDED } from '../api/phases.ts';
import type { EventSpec } from '../kube/event-spec.ts';

export interface MachineFacts {
  namespace: string;
  name: string;
  uid: string;
  /** metadata.deletionTimestamp is set. */
  deleting: boolean;
  /** The value of the annotation MACHINE_PRE_DRAIN_HOOK, when the Machine has it. */
  hook?: string;
  /** status.nodeRef.name: the Machine's Node in the workload cluster, once it joined. */
  nodeName?: string;
  /** The Machine carries MACHINE_SKIP_REMEDIATION_ANNOTATION, whoever put it on. */
  skipRemediation?: true;
  /** The action named by REMEDIATION_PAUSED_BY_ANNOTATION: gatehouse put the skip on for it. */
  pausedBy?: string;
}

/** The NodeAction named after the Machine (machineActionName), when it exists. */
export interface MachineActionFacts {
  name: string;
  /**
   * Made by gatehouse for this Machine: labelled with its UID, a Reset of its Node,
   * requested by this controller. Any other object of that name is not used.
   */
  ours: boolean;
  phase?: NodeActionPhase;
  message?: string;
  /** Its MachineHeld condition, as stored. */
  held?: HeldCondition;
}

/** The reasons of the MachineHeld condition (docs/troubleshooting.md). */
export type MachineHeldReason =
  | 'WaitingForApproval'
  | 'ActionFailed'
  | 'ActionDenied'
  | 'ActionCancelled'
  | 'Approved'
  | 'NoNode'
  | 'NodeGone';

export interface HeldCondition {
  status: 'True' | 'False';
  reason: string;
  message: string;
}

export interface MachineInput {
  machine: MachineFacts;
  /**
   * The Machine's Node: present, or gone (confirmed by the API server, not just missing
   * from a cache). Undefined when the Machine names no Node.
   */
  node?: 'present' | 'gone';
  action?: MachineActionFacts;
  /** The action of gatehouse's that keeps remediation off the Machine's node now, if any. */
  pausing?: string;
}

export interface MachinePlan {
  /** Add gatehouse's hook to the Machine (on the resourceVersion observed). */
  annotate?: true;
  /** Create the External Reset NodeAction of this name for this node. */
  create?: { name: string; node: string };
  /** The MachineHeld condition the action should carry; written when it differs. */
  held?: HeldCondition;
  /** Remove gatehouse's hook from the Machine: Cluster API may drain and delete it. */
  release?: true;
  /** What to tell on the Machine (recorded once per change of message). */
  event?: EventSpec;
  /**
   * Put the skip-remediation annotation on, marked for action `by`; or take off the one
   * marked for `by` (conditional on the mark, on the version observed).
   */
  remediation?: { op: 'pause' | 'resume'; by: string };
}

/** The phases from which the action is approved: the Machine may go. */
const APPROVED_OR_LATER: ReadonlySet<NodeActionPhase> = APPROVED_OR_SUCCEEDED;
/** The phases that end an action unapproved: the Machine stays held, and why says so. */
const ENDED_UNAPPROVED: Partial<Record<NodeActionPhase, MachineHeldReason>> = {
  Failed: 'ActionFailed',
  Denied: 'ActionDenied',
  Cancelled: 'ActionCancelled',
};

/**
 * The NodeAction gatehouse makes for a Machine: named after its UID, so that a restarted
 * controller finds the one it made and never makes a second.
 *
 * @example machineActionName('0b6c…') === 'machine-0b6c…'
 */
export function machineActionName(uid: string): string {
  return `machine-${uid}`;
}

function release(reason: MachineHeldReason, message: string, action?: MachineActionFacts): MachinePlan {
  return {
    release: true,
    ...(action?.ours ? { held: { status: 'False', reason, message } } : {}),
    event: { type: 'Normal', reason: 'MachineReleased', message },
  };
}

function hold(type: 'Normal' | 'Warning', reason: MachineHeldReason, message: string): MachinePlan {
  return {
    held: { status: 'True', reason, message },
    event: { type, reason: 'MachineHeld', message },
  };
}

/** What to do for one Machine now: its deletion's gate, and its remediation pause. */
export function decideMachine(input: MachineInput): MachinePlan {
  const remediation = remediationOf(input.machine, input.pausing);
  return { ...gate(input), ...(remediation ? { remediation } : {}) };
}

/** The remediation pause the Machine should carry: only gatehouse's own is ever touched. */
function remediationOf(machine: MachineFacts, pausing: string | undefined): MachinePlan['remediation'] {
  const ours = machine.pausedBy;
  if (ours !== undefined && ours !== pausing) return { op: 'resume', by: ours };
  if (pausing !== undefined && ours === undefined && !machine.skipRemediation)
    return { op: 'pause', by: pausing };
  return undefined;
}

/** Whether the Machine's deletion is held on gatehouse's pre-drain hook, or let go. */
function gate(input: MachineInput): MachinePlan {
  const { machine, node, action } = input;
  if (!machine.deleting) return machine.hook === undefined ? { annotate: true } : {};
  // Deleting: only a Machine carrying gatehouse's own hook is gatehouse's to hold or let go.
  if (machine.hook !== MACHINE_HOOK_OWNER) return {};
  const what = `Machine ${machine.namespace}/${machine.name}`;
  if (machine.nodeName === undefined)
    return release(
      'NoNode',
      `released ${what}: it has no Node (status.nodeRef is not set), so there is nothing to gate`,
    );
  if (node === 'gone')
    return release(
      'NodeGone',
      `released ${what}: its Node ${machine.nodeName} is gone from the workload cluster`,
      action,
    );
  // Not known either way (the reconciler always asks): decide nothing on a guess.
  if (node !== 'present') return {};
  const name = machineActionName(machine.uid);
  if (!action)
    return {
      create: { name, node: machine.nodeName },
      event: {
        type: 'Normal',
        reason: 'MachineHeld',
        message: `holding the deletion of ${what} (hook ${MACHINE_PRE_DRAIN_HOOK}): created NodeAction ${name} to Reset node ${machine.nodeName}; the hook is removed once it is Approved`,
      },
    };
  if (!action.ours)
    return {
      event: {
        type: 'Warning',
        reason: 'MachineHeld',
        message: `holding the deletion of ${what}: NodeAction ${name} exists but was not made by gatehouse for this Machine; delete it so that gatehouse makes its own, or remove the annotation ${MACHINE_PRE_DRAIN_HOOK} to let the Machine go ungated`,
      },
    };
  const phase = action.phase ?? 'Pending';
  const said = action.message ? `: ${action.message}` : '';
  if (APPROVED_OR_LATER.has(phase))
    return release(
      'Approved',
      `released ${what}: NodeAction ${action.name} is ${phase}${said}; Cluster API may drain and delete it`,
      action,
    );
  const ended = ENDED_UNAPPROVED[phase];
  if (ended)
    return hold(
      'Warning',
      ended,
      `holding the deletion of ${what}: NodeAction ${action.name} ended ${phase}${said}. gatehouse never lets a Machine go on a failed gate: delete the NodeAction to try again, or remove the annotation ${MACHINE_PRE_DRAIN_HOOK} to let the Machine go ungated`,
    );
  return hold(
    'Normal',
    'WaitingForApproval',
    `holding the deletion of ${what} until NodeAction ${action.name} is Approved; it is ${phase}${said}`,
  );
}

/** Whether the stored MachineHeld condition already says what the plan wants it to. */
export function heldUpToDate(stored: HeldCondition | undefined, wanted: HeldCondition): boolean {
  return (
    stored !== undefined &&
    stored.status === wanted.status &&
    stored.reason === wanted.reason &&
    stored.message === wanted.message
  );
}
