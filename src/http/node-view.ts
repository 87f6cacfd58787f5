// What a person following an action wants to know about its node: is it there, is it
// Ready, which boot is it in, is it cordoned or still held from workloads.
import { PREREADY_TAINT } from '../api/names.ts';
import { readAuditRecord } from '../boots/audit.ts';
import type { NodeView } from './schemas.ts';

export interface NodeObject {
  metadata: { name: string; annotations?: Record<string, string> };
  spec?: { unschedulable?: boolean; taints?: { key: string; effect?: string }[] };
  status?: {
    conditions?: { type: string; status: string; message?: string }[];
    nodeInfo?: { bootID?: string; osImage?: string };
  };
}

export function nodeView(name: string, node: NodeObject | undefined): NodeView {
  if (!node) return { name, exists: false, ready: 'Unknown', unschedulable: false, preready: false };
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  const status = ready?.status === 'True' || ready?.status === 'False' ? ready.status : 'Unknown';
  const info = node.status?.nodeInfo;
  const unplanned = readAuditRecord(node.metadata.annotations)?.last;
  return {
    name,
    exists: true,
    ready: status,
    ...(ready?.message ? { readyMessage: ready.message } : {}),
    ...(info?.bootID ? { bootID: info.bootID } : {}),
    ...(info?.osImage ? { osImage: info.osImage } : {}),
    unschedulable: node.spec?.unschedulable === true,
    preready: (node.spec?.taints ?? []).some((t) => t.key === PREREADY_TAINT),
    ...(unplanned ? { unplanned } : {}),
  };
}
