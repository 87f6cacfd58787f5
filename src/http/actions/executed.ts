// POST /v1/actions/{name}/executed: someone performed an External action (e.g. ran
// `talosctl reboot` once it was Approved) and says so; the controller then watches for
// the node's new boot. The CLI's direct backend applies the same rules.
import type { ActionObject } from '../../api/node-action.ts';
import { EXECUTED_ANNOTATION } from '../../api/names.ts';
import { PHASES, isTerminal } from '../../api/phases.ts';
import type { Reply, Request } from '../router.ts';
import type { ActionsContext } from './context.ts';
import { isExecutedMarked } from '../../actions/subject.ts';
import { setRequesterMark, type RequesterMark } from './mark.ts';
import { phaseOf } from './view.ts';

/**
 * Whether the controller has already seen an External action performed (the node went
 * down or came back with a new boot): marking it executed then changes nothing, and
 * succeeds, so that `talosctl reboot` (which waits for the node) followed by the mark
 * works however quickly gatehouse noticed.
 */
export function performanceObserved(action: ActionObject): boolean {
  const phase = phaseOf(action);
  return (action.spec.execution ?? 'Managed') === 'External' && PHASES[phase].performed;
}

/** The merge patch that marks an action executed, conditional on the version judged Approved. */
export function executedMark(action: ActionObject): Record<string, unknown> {
  return {
    metadata: {
      resourceVersion: action.metadata.resourceVersion,
      annotations: { [EXECUTED_ANNOTATION]: 'true' },
    },
  };
}

/**
 * Why an action cannot be marked executed now, or undefined if it can: only an
 * External action, only once Approved and before it ended.
 */
export function executedRefusal(action: ActionObject): string | undefined {
  const name = action.metadata.name;
  if ((action.spec.execution ?? 'Managed') !== 'External') {
    return `NodeAction ${name} has Managed execution: the controller performs it, so there is nothing to mark executed`;
  }
  const phase = phaseOf(action);
  if (isTerminal(phase))
    return `NodeAction ${name} has already ended (${phase}): it cannot be marked executed`;
  if (action.metadata.deletionTimestamp) {
    return `NodeAction ${name} is being cancelled: it cannot be marked executed`;
  }
  if (phase !== 'Approved') {
    return `NodeAction ${name} is not approved yet (phase ${phase}): perform the action only once it is Approved, then mark it executed`;
  }
  return undefined;
}

/** The executed mark, as the HTTP API and the CLI's direct backend set it. */
export const EXECUTED: RequesterMark = {
  doing: (name) => `mark NodeAction ${name} executed`,
  past: performanceObserved,
  refusal: executedRefusal,
  marked: isExecutedMarked,
  patch: executedMark,
};

export function markExecuted(c: ActionsContext, req: Request): Promise<Reply> {
  return setRequesterMark(c, req, EXECUTED);
}
