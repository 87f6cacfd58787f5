// Writing to a Node what the boot code decided: the boot record, the announcement, the
// preready taint. One JSON merge patch, conditional on the resourceVersion the decision
// was made on: the taint list is replaced whole, so a write based on a stale view must
// fail (409) rather than undo someone else's change, and the record and the taint change
// together or not at all.
import type { BootAnnouncement, BootRecord } from '../api/boot-record.ts';
import { BOOT_ANNOUNCEMENT_ANNOTATION, BOOT_RECORD_ANNOTATION } from '../api/names.ts';
import type { RestClient } from '../kube/rest.ts';
import { hasPrereadyTaint, withPrereadyTaint, type BootNodeObject } from './record.ts';

export interface NodeWrite {
  record?: BootRecord;
  announcement?: BootAnnouncement;
  removeAnnouncement?: boolean;
  /** Whether the node must carry the preready taint; undefined leaves the taints alone. */
  taint?: boolean;
}

/** The merge patch for a write, or undefined when it changes nothing. */
export function nodePatch(node: BootNodeObject, write: NodeWrite): Record<string, unknown> | undefined {
  const annotations: Record<string, string | null> = {};
  if (write.record) annotations[BOOT_RECORD_ANNOTATION] = JSON.stringify(write.record);
  if (write.announcement) annotations[BOOT_ANNOUNCEMENT_ANNOTATION] = JSON.stringify(write.announcement);
  else if (
    write.removeAnnouncement &&
    node.metadata.annotations?.[BOOT_ANNOUNCEMENT_ANNOTATION] !== undefined
  )
    annotations[BOOT_ANNOUNCEMENT_ANNOTATION] = null;
  const current = node.metadata.annotations ?? {};
  const annotationsChange = Object.entries(annotations).some(([k, v]) => (current[k] ?? null) !== v);
  const taintChange = write.taint !== undefined && write.taint !== hasPrereadyTaint(node.spec?.taints);
  if (!annotationsChange && !taintChange) return undefined;
  const taints = taintChange ? withPrereadyTaint(node.spec?.taints, write.taint === true) : undefined;
  return {
    metadata: {
      // The precondition: the patch applies to the version decided upon, or not at all.
      resourceVersion: node.metadata.resourceVersion,
      ...(annotationsChange ? { annotations } : {}),
    },
    ...(taints ? { spec: { taints: taints.length ? taints : null } } : {}),
  };
}

/** Writes the change; a conflict (409) or a vanished node (404) throws KubeApiError for the caller. */
export async function writeNode(
  rest: RestClient,
  node: BootNodeObject,
  write: NodeWrite,
): Promise<BootNodeObject | undefined> {
  const patch = nodePatch(node, write);
  if (!patch) return undefined;
  return rest.request<BootNodeObject>(`/api/v1/nodes/${node.metadata.name}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: patch,
  });
}
