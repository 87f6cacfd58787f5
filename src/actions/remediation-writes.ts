// Setting and taking off an action's remediation pause on its Node (remediation.ts),
// conditional on the version read: the exclusion label and the mark naming the action go
// on and come off together, and a label someone else set is left as it is.
import { REMEDIATION_EXCLUDE_LABEL, REMEDIATION_PAUSED_BY_ANNOTATION } from '../api/names.ts';
import type { RestClient } from '../kube/rest.ts';
import { withNode, type NodeObject } from '../talos/drain.ts';

function mark(rest: RestClient, node: string, read: NodeObject, owner: string | null): Promise<unknown> {
  return rest.request(`/api/v1/nodes/${node}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: {
      metadata: {
        resourceVersion: read.metadata.resourceVersion,
        labels: { [REMEDIATION_EXCLUDE_LABEL]: owner === null ? null : 'true' },
        annotations: { [REMEDIATION_PAUSED_BY_ANNOTATION]: owner },
      },
    },
  });
}

/** Puts the pause on for `owner`, unless the node is excluded already. Returns whether it did. */
export function pauseRemediationFor(rest: RestClient, node: string, owner: string): Promise<boolean> {
  return withNode(rest, node, async (read) => {
    if (read.metadata.labels?.[REMEDIATION_EXCLUDE_LABEL] !== undefined) return false;
    await mark(rest, node, read, owner);
    return true;
  });
}

/** Takes off the pause `owner` put on; anyone else's stays. Returns whether it took one off. */
export function resumeRemediationFor(rest: RestClient, node: string, owner: string): Promise<boolean> {
  return withNode(rest, node, async (read) => {
    if (read.metadata.annotations?.[REMEDIATION_PAUSED_BY_ANNOTATION] !== owner) return false;
    await mark(rest, node, read, null);
    return true;
  });
}
