// POST /v1/actions/{name}/release: a Maintenance held out of service is released (its
// node's work is done); the controller then runs the node's NodeReadyJobs and lifts its
// cordon. The CLI's direct backend applies the same rules; the admission policy enforces
// who may (the requester or a bypass holder) and when (only while Held).
import type { ActionObject } from '../../api/node-action.ts';
import { RELEASED_ANNOTATION } from '../../api/names.ts';
import { isTerminal } from '../../api/phases.ts';
import type { Reply, Request } from '../router.ts';
import type { ActionsContext } from './context.ts';
import { isReleaseMarked } from '../../actions/subject.ts';
import { setRequesterMark, type RequesterMark } from './mark.ts';
import { phaseOf } from './view.ts';

/** The merge patch that releases an action, conditional on the version judged Held. */
export function releaseMark(action: ActionObject): Record<string, unknown> {
  return {
    metadata: {
      resourceVersion: action.metadata.resourceVersion,
      annotations: { [RELEASED_ANNOTATION]: 'true' },
    },
  };
}

/** Why an action cannot be released now, or undefined if it can: only while Held. */
export function releaseRefusal(action: ActionObject): string | undefined {
  const name = action.metadata.name;
  const phase = phaseOf(action);
  if (isTerminal(phase))
    return `NodeAction ${name} has already ended (${phase}): there is nothing to release`;
  if (action.metadata.deletionTimestamp)
    return `NodeAction ${name} is being cancelled: it cannot be released`;
  if (phase !== 'Held') {
    return `NodeAction ${name} (${action.spec.action}) is not held (phase ${phase}): only a Maintenance, once its node is drained and Held, is released`;
  }
  return undefined;
}

/** The release, as the HTTP API and the CLI's direct backend set it. */
export const RELEASE: RequesterMark = {
  doing: (name) => `release NodeAction ${name}`,
  // Released already (the action may have gone on since, even ended): harmless again.
  past: isReleaseMarked,
  refusal: releaseRefusal,
  marked: () => false,
  patch: releaseMark,
};

export function releaseAction(c: ActionsContext, req: Request): Promise<Reply> {
  return setRequesterMark(c, req, RELEASE);
}
