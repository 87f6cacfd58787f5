// Approved and Executing. A Managed action this controller performs goes Approved →
// Executing and is carried out step by step (executing.ts); any other approved action
// is performed by its requester, and the node is followed until it shows the action
// happened (the executed mark, a new boot, the node down or gone).
import { EXECUTED_ANNOTATION } from '../../api/names.ts';
import { findCondition } from '../../kube/conditions.ts';
import { COMPLETIONS, waitingMessage } from '../completions.ts';
import type { DecisionBuilder } from '../decision.ts';
import { completionOf, kindOf } from '../kinds/index.ts';
import { isExecutedMarked, performsHere } from '../subject.ts';
import { execute } from './executing.ts';

/**
 * Whether this controller performs the action: Managed, by a controller that can perform
 * its kind (performsHere), and not approved by a controller that could not (whose
 * requester was told to perform it: doing it here too could do it twice).
 */
function executesHere(b: DecisionBuilder): boolean {
  const { spec, input, status } = b;
  if ((spec.execution ?? 'Managed') !== 'Managed' || !performsHere(kindOf(spec), input)) return false;
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
  const message = `executing ${kindOf(b.spec).words.managed}`;
  b.status.executionTime = b.now.toISOString();
  b.condition('Executed', 'Unknown', 'Executing', message);
  b.transition('Executing', message);
}

/**
 * External execution, or Managed without an executor (see approval.ts): the requester
 * performs the action, and the node is followed.
 */
function follow(b: DecisionBuilder): void {
  const { action, spec, node, nodeName, status, condition, transition } = b;
  const marked = isExecutedMarked(action);
  const completion = completionOf(spec, undefined, node?.osImage);
  // What shows that the action happened even without the mark.
  const seen = COMPLETIONS[completion].seen(node, nodeName, status);
  if (!marked && seen === undefined) return;
  status.executionTime = b.now.toISOString();
  const how = marked ? `marked executed (${EXECUTED_ANNOTATION})` : `${seen ?? ''} before the executed mark`;
  condition('Executed', 'True', marked ? 'MarkedExecuted' : 'NodeChanged', how);
  transition(COMPLETIONS[completion].waitsIn, `${how}; ${waitingMessage(completion)}`);
}
