// Approved and Executing. A Managed action this controller executes goes Approved →
// Executing and is carried out step by step (executing.ts); any other approved action
// is performed by its requester, and the node is followed until it shows the action
// happened (the executed mark, a new boot, the node down or gone).
import { EXECUTED_ANNOTATION } from '../../api/names.ts';
import { findCondition } from '../../kube/conditions.ts';
import type { DecisionBuilder } from '../decision.ts';
import { ACTION_DESCRIPTORS, completionOf, waitingMessage } from '../descriptors.ts';
import { isExecutedMarked } from '../subject.ts';
import { execute } from './executing.ts';

/**
 * Whether this controller performs the action: Managed, with a Talos executor, with
 * Talos steps for its kind, and not approved by a controller without an executor (whose
 * requester was told to perform it: doing it here too could do it twice).
 */
function executesHere(b: DecisionBuilder): boolean {
  const { spec, input, status } = b;
  if ((spec.execution ?? 'Managed') !== 'Managed' || !input.execution) return false;
  if (!ACTION_DESCRIPTORS[spec.action].talos) return false;
  return findCondition(status.conditions, 'Executed')?.reason !== 'ExecutorNotInstalled';
}

export function approved(b: DecisionBuilder): void {
  if (executesHere(b) && !isExecutedMarked(b.action)) {
    beginExecution(b);
    return;
  }
  follow(b);
}

export function executing(b: DecisionBuilder): void {
  if (executesHere(b)) {
    execute(b);
    return;
  }
  follow(b);
}

function beginExecution(b: DecisionBuilder): void {
  if (!b.node) {
    b.end('Failed', `node ${b.nodeName} no longer exists; nothing was done to it`);
    return;
  }
  b.status.executionTime = b.now.toISOString();
  b.condition('Executed', 'Unknown', 'Executing', 'executing through the Talos API');
  b.transition('Executing', 'executing through the Talos API');
}

/**
 * External execution, or Managed without an executor (see approval.ts): the requester
 * performs the action, and the node is followed.
 */
function follow(b: DecisionBuilder): void {
  const { action, spec, node, nodeName, status, condition, transition } = b;
  const marked = isExecutedMarked(action);
  const completion = completionOf(spec, undefined, node?.osImage);
  const rebooted =
    node !== undefined && status.bootIDBefore !== undefined && node.bootID !== status.bootIDBefore;
  // What shows that the action happened even without the mark. NotReady alone does
  // not for a reboot (a node can blip); it does for a shutdown.
  const seen = !node
    ? `node ${nodeName} is gone`
    : rebooted
      ? `node ${nodeName} has a new boot ID`
      : completion === 'down' && !node.ready
        ? `node ${nodeName} is NotReady`
        : undefined;
  const started = marked || ((completion === 'reboot' || completion === 'down') && seen !== undefined);
  if (!started) return;
  status.executionTime = b.now.toISOString();
  const how = marked ? `marked executed (${EXECUTED_ANNOTATION})` : `${seen ?? ''} before the executed mark`;
  condition('Executed', 'True', marked ? 'MarkedExecuted' : 'NodeChanged', how);
  transition('WaitingForNode', `${how}; ${waitingMessage(completion)}`);
}
