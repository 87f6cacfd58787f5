// A new action, and Pending: waiting for the admission pass (src/actions/admission.ts),
// which runs when an action enters Pending, when a slot is given back, when policies or
// node labels change, and every minute. Leaving Pending is the one transition decide()
// never makes: it takes a slot of the policies' budgets, judged across actions.
import type { DecisionBuilder } from '../decision.ts';

/** A NodeAction seen for the first time: recorded as requested, and Pending. */
export function requested(b: DecisionBuilder): void {
  const { spec, nodeName, condition, event, transition } = b;
  b.status.startTime = b.now.toISOString();
  const bypass = spec.bypass;
  const execution = spec.execution ?? 'Managed';
  event(
    'Normal',
    'Requested',
    `${spec.requestedBy} requested ${spec.action} of node ${nodeName} (execution ${execution})`,
  );
  if (bypass?.healthChecks || bypass?.hooks) {
    const what = [bypass.healthChecks ? 'health checks' : '', bypass.hooks ? 'pre-action hooks' : '']
      .filter(Boolean)
      .join(' and ');
    const message = `${spec.requestedBy} bypasses the ${what} of ${spec.action} on node ${nodeName}: ${bypass.reason ?? '(no reason given)'}`;
    condition('Bypassed', 'True', 'BypassRequested', message);
    event('Warning', 'Bypassed', message);
  }
  transition('Pending', 'waiting for its policies to allow it');
}

export function pending(b: DecisionBuilder): void {
  if (!b.node) b.end('Denied', `node ${b.nodeName} does not exist`);
}
