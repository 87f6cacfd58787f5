// What the controller keeps of a Node in its cache.
import type { KubeObject } from './informer.ts';
import type { MemberPath } from './list-decoder.ts';

interface NodeStatusLists {
  status?: { images?: unknown; volumesInUse?: unknown; volumesAttached?: unknown };
}

/**
 * What slimNode drops, for the Node informer's lists to leave out before decoding
 * (InformerOptions.omit): a listed Node's images are then never parsed at all.
 */
export const NODE_UNREAD: readonly MemberPath[] = [
  ['status', 'images'],
  ['status', 'volumesInUse'],
  ['status', 'volumesAttached'],
];

/**
 * Drops the parts of a Node's status that grow with its workload and that gatehouse never
 * reads: the container images on it (a kubelet reports up to 50, each with its names and
 * size) and the volumes in use or attached. Everything gatehouse decides on stays —
 * labels, annotations, taints, unschedulable, conditions, nodeInfo (boot ID, OS image) and
 * addresses. On a busy node the images alone are most of the object.
 */
export function slimNode<T extends KubeObject>(node: T): T {
  const status = (node as NodeStatusLists).status;
  if (status) {
    delete status.images;
    delete status.volumesInUse;
    delete status.volumesAttached;
  }
  return node;
}
