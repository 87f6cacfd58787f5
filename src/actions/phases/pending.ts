// A new action, and Pending: waiting for the admission pass (src/actions/admission.ts),
// which runs when an action enters Pending, when a slot is given back, when policies or
// node labels change, and every minute. Leaving Pending is the one transition decide()
// never makes: it takes a slot of the policies' budgets, judged across actions.
import { BYPASS_GRANTED_BY_ANNOTATION, ROLLOUT_LABEL } from '../../api/names.ts';
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
    // A rollout's action: who granted the bypass for the rollout's spec as it was when
    // the action was made (the admission policy keeps this annotation to the controller).
    const metadata = b.input.action.metadata;
    const grantedBy = metadata.annotations?.[BYPASS_GRANTED_BY_ANNOTATION];
    const rollout = metadata.labels?.[ROLLOUT_LABEL];
    const granted =
      grantedBy !== undefined
        ? ` (bypass granted by ${grantedBy}${rollout !== undefined ? ` on NodeRollout ${rollout}` : ''})`
        : '';
    const message = `${spec.requestedBy} bypasses the ${what} of ${spec.action} on node ${nodeName}${granted}: ${bypass.reason ?? '(no reason given)'}`;
    condition('Bypassed', 'True', 'BypassRequested', message);
    event('Warning', 'Bypassed', message);
  }
  transition('Pending', 'waiting for its policies to allow it');
}

export function pending(b: DecisionBuilder): void {
  if (!b.node) b.end('Denied', `node ${b.nodeName} does not exist`);
}
