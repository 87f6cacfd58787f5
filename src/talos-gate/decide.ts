// The gate's decision for one gated call to one node, as a pure function of the call and
// the node's NodeActions (invariant 10): a call is forwarded only on an Approved,
// not yet executed, External action of the same caller, node and action; the claim that
// goes with it (the executed mark, written conditionally on the version read) makes it
// forwarded at most once. Otherwise the gate finds the action the call waits for, or
// creates it.
import { EXECUTED_ANNOTATION, REQUESTED_VIA_ANNOTATION } from '../api/names.ts';
import type { NodeActionPhase, ObservedNodeAction } from '../api/node-action.ts';
import { isTerminal } from '../api/phases.ts';
import type { ActionAsk } from './classify.ts';

/** Set by the gate on an Upgrade action once its install (LifecycleService.Upgrade) was forwarded. */
export const GATE_INSTALLED_ANNOTATION = 'talos.dev/gate-installed';
/** The Talos call a gate-made action is for, in words (never its request's content). */
export const GATE_CALL_ANNOTATION = 'talos.dev/talos-call';
/** REQUESTED_VIA_ANNOTATION's value on the actions the gate creates. */
export const REQUESTED_VIA_GATE = 'talos-gate';

export interface GatedCall {
  /** The Kubernetes user the caller's certificate names. */
  caller: string;
  /** The Kubernetes Node the call is for. */
  node: string;
  ask: ActionAsk;
  step: 'disrupt' | 'install';
}

export type GateDecision =
  /** Forward the call now; first claim the action with `claim` (conditional on its resourceVersion). */
  | { kind: 'forward'; action: ObservedNodeAction; claim: Record<string, string> }
  /** The call waits for this action. */
  | { kind: 'wait'; action: ObservedNodeAction }
  /** No action of this caller asks for this: create one. */
  | { kind: 'create' };

const same = (a: unknown, b: unknown) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

/** Whether the action's parameters are the call's (absent fields at their defaults). */
export function parametersMatch(action: ObservedNodeAction, ask: ActionAsk): boolean {
  const spec = action.spec;
  if (spec.action !== ask.action) return false;
  switch (ask.action) {
    case 'Reboot':
      return (spec.reboot?.mode ?? 'Default') === (ask.reboot?.mode ?? 'Default');
    case 'Upgrade':
      return (
        spec.upgrade?.image === ask.upgrade?.image &&
        (spec.upgrade?.stage ?? false) === (ask.upgrade?.stage ?? false)
      );
    case 'Reset':
      return (
        (spec.reset?.graceful ?? true) === (ask.reset?.graceful ?? true) &&
        (spec.reset?.wipeMode ?? 'All') === (ask.reset?.wipeMode ?? 'All')
      );
    case 'ConfigChange':
      return (spec.configChange?.mode ?? 'Auto') === (ask.configChange?.mode ?? 'Auto');
    default:
      return same(undefined, undefined);
  }
}

const executed = (a: ObservedNodeAction) => a.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true';
const installed = (a: ObservedNodeAction) =>
  a.metadata.annotations?.[GATE_INSTALLED_ANNOTATION] !== undefined;
const phaseOf = (a: ObservedNodeAction): NodeActionPhase | undefined => a.status?.phase;

/** The caller's unfinished, unexecuted External actions on the node, oldest first. */
function candidates(call: GatedCall, actions: readonly ObservedNodeAction[]): ObservedNodeAction[] {
  return actions
    .filter(
      (a) =>
        a.spec.nodeName === call.node &&
        a.spec.execution === 'External' &&
        a.spec.requestedBy === call.caller &&
        a.metadata.deletionTimestamp === undefined &&
        !isTerminal(phaseOf(a)) &&
        !executed(a),
    )
    .sort((a, b) => (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''));
}

/**
 * What to do with a gated call, given the node's NodeActions.
 *
 * A Reboot also completes an Approved Upgrade of the caller whose install the gate
 * forwarded (talosctl 1.13+: Pull, LifecycleService.Upgrade, drain, Reboot): one
 * Upgrade action, never a Reboot of its own.
 *
 * @example decideGatedCall({caller: 'jane', node: 'w1', ask: {action: 'Reboot'}, step: 'disrupt'}, [])
 *   // {kind: 'create'}
 */
export function decideGatedCall(call: GatedCall, actions: readonly ObservedNodeAction[]): GateDecision {
  const mine = candidates(call, actions);
  if (call.ask.action === 'Reboot' && call.step === 'disrupt') {
    const upgrade = mine.find(
      (a) => a.spec.action === 'Upgrade' && installed(a) && phaseOf(a) === 'Approved',
    );
    if (upgrade) return { kind: 'forward', action: upgrade, claim: { [EXECUTED_ANNOTATION]: 'true' } };
  }
  const match = mine.find((a) => parametersMatch(a, call.ask));
  if (!match) return { kind: 'create' };
  if (phaseOf(match) !== 'Approved') return { kind: 'wait', action: match };
  if (call.step === 'install')
    // The install changes the boot disk only: repeatable while the action is Approved
    // (a failed install is tried again); the Reboot that follows is the call claimed once.
    return { kind: 'forward', action: match, claim: { [GATE_INSTALLED_ANNOTATION]: 'true' } };
  return { kind: 'forward', action: match, claim: { [EXECUTED_ANNOTATION]: 'true' } };
}

/** Whether a NodeAction was made by the gate. */
export function madeByGate(action: ObservedNodeAction): boolean {
  return action.metadata.annotations?.[REQUESTED_VIA_ANNOTATION] === REQUESTED_VIA_GATE;
}
