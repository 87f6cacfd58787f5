// Whether an action may have disrupted its node: what decides, when an action ends
// unsuccessfully, between putting things back (the undo of its pre-action hooks, lifting
// its cordon) and leaving them for the boot hooks and a person (docs/decisions.md, "Undo").
//
// Every sign counts, and doubt counts as disruption: a Talos call made whose outcome is
// unknown may be rebooting the node right now, and undoing `noout` under a rebooting OSD
// host is the very rebalancing storm the hook was there to prevent.
import { EXECUTED_ANNOTATION } from '../api/names.ts';
import type { NodeActionStatus, ObservedNodeAction } from '../api/node-action.ts';
import { findCondition } from '../kube/conditions.ts';
import type { NodeFacts } from './observations.ts';
import { isExecutedMarked } from './subject.ts';

/**
 * Why the node may have been disrupted by the action, in words; undefined when it
 * certainly was not: no Talos call made (or only one Talos refused before it reached
 * the node), no executed mark, no execution seen, no new boot.
 */
export function disruptionOf(
  action: ObservedNodeAction,
  status: NodeActionStatus,
  node: NodeFacts | undefined,
): string | undefined {
  if (isExecutedMarked(action)) return `the action was marked executed (${EXECUTED_ANNOTATION})`;
  const execution = status.execution;
  if (execution?.callTime !== undefined && execution.callResult !== 'Failed') {
    const call = execution.call ?? 'the Talos call';
    return execution.callResult === 'Acknowledged'
      ? `Talos acknowledged ${call}`
      : `Talos ${call} was made and whether it reached the node is unknown (the node may be rebooting)`;
  }
  if (findCondition(status.conditions, 'Executed')?.status === 'True') return 'the action was executed';
  if (status.bootIDAfter !== undefined) return 'the node came back from the action';
  if (node?.bootID !== undefined && status.bootIDBefore !== undefined && node.bootID !== status.bootIDBefore)
    return `node ${node.name} has a new boot ID`;
  return undefined;
}

/**
 * Whether the action keeps the cordon it made though it ended before touching the node:
 * its drain timed out and spec.drain.onTimeout says KeepCordoned (a NodeRollout under
 * onDrainTimeout: Quarantine hands that cordon on to the node's retry).
 */
export function keepsCordon(action: ObservedNodeAction, status: NodeActionStatus): boolean {
  return (
    action.spec.drain?.onTimeout === 'KeepCordoned' &&
    findCondition(status.conditions, 'Drained')?.reason === 'DrainTimedOut'
  );
}
