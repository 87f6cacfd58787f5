// Whether a Pod could go on a node, by the part of the scheduler's rules the drain forecast
// simulates (drain-forecast.ts): the node is Ready and schedulable, every NoSchedule and
// NoExecute taint on it is tolerated, it satisfies the Pod's nodeSelector and required
// node affinity, and it has room for the Pod's requests of cpu and memory and one more Pod.
//
// Not simulated (docs/concepts.md, "The drain forecast"): pod affinity and anti-affinity,
// topology spread constraints, preferred affinity and PreferNoSchedule (they rank, never
// refuse), volumes (zones, attach limits), extended resources and ephemeral storage,
// host ports, priority and preemption. Pure.
import { parseQuantity } from '../kube/quantity.ts';

/** A node's room: cpu in cores, memory in bytes, Pods in Pods. */
export interface Room {
  cpu: number;
  memory: number;
  pods: number;
}

export interface Taint {
  key: string;
  value?: string;
  effect: string;
}

export interface Toleration {
  key?: string;
  operator?: string;
  value?: string;
  effect?: string;
}

export interface NodeSelectorRequirement {
  key: string;
  operator: string;
  values?: string[];
}

export interface NodeSelectorTerm {
  matchExpressions?: NodeSelectorRequirement[];
  matchFields?: NodeSelectorRequirement[];
}

/** A Pod as the forecast reads it (the fields of a core/v1 Pod it needs). */
export interface PodObject {
  metadata: {
    name: string;
    namespace: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: { kind: string; name: string; controller?: boolean }[];
    deletionTimestamp?: string;
  };
  spec?: {
    nodeName?: string;
    nodeSelector?: Record<string, string>;
    affinity?: {
      nodeAffinity?: {
        requiredDuringSchedulingIgnoredDuringExecution?: { nodeSelectorTerms?: NodeSelectorTerm[] };
      };
    };
    tolerations?: Toleration[];
    containers?: Container[];
    initContainers?: Container[];
    overhead?: Record<string, string>;
  };
  status?: { phase?: string };
}

interface Container {
  restartPolicy?: string;
  resources?: { requests?: Record<string, string> };
}

/** A node the Pods of the drained node could go to, as the Node cache has it. */
export interface CandidateNode {
  name: string;
  labels: Record<string, string>;
  taints: readonly Taint[];
  unschedulable: boolean;
  ready: boolean;
  allocatable: Room;
}

const NONE: Room = { cpu: 0, memory: 0, pods: 0 };

/** `a` and `b` together. */
export const addRoom = (a: Room, b: Room): Room => ({
  cpu: a.cpu + b.cpu,
  memory: a.memory + b.memory,
  pods: a.pods + b.pods,
});
const max = (a: Room, b: Room): Room => ({
  cpu: Math.max(a.cpu, b.cpu),
  memory: Math.max(a.memory, b.memory),
  pods: Math.max(a.pods, b.pods),
});

function containerRequests(c: Container): Room {
  const r = c.resources?.requests ?? {};
  return { cpu: parseQuantity(r.cpu) ?? 0, memory: parseQuantity(r.memory) ?? 0, pods: 0 };
}

/**
 * What the Pod asks of a node, as the scheduler counts it: its containers' requests (with
 * its sidecars, init containers that keep running), or its largest init container's if
 * larger, plus its overhead; and one Pod.
 */
export function podRequests(pod: PodObject): Room {
  const spec = pod.spec ?? {};
  const sidecars = (spec.initContainers ?? []).filter((c) => c.restartPolicy === 'Always');
  const running = [...(spec.containers ?? []), ...sidecars].map(containerRequests).reduce(addRoom, NONE);
  const inits = (spec.initContainers ?? [])
    .filter((c) => c.restartPolicy !== 'Always')
    .map(containerRequests)
    .reduce(max, NONE);
  const overhead = containerRequests({ resources: { requests: spec.overhead ?? {} } });
  return addRoom(addRoom(max(running, inits), overhead), { cpu: 0, memory: 0, pods: 1 });
}

interface NodeObject {
  metadata: { name: string; labels?: Record<string, string> };
  spec?: { taints?: Taint[]; unschedulable?: boolean };
  status?: { allocatable?: Record<string, string>; conditions?: { type: string; status: string }[] };
}

/** The node as a place Pods could go, from the Node object (slimNode keeps what this reads). */
export function candidateNode(node: NodeObject): CandidateNode {
  const a = node.status?.allocatable ?? {};
  return {
    name: node.metadata.name,
    labels: node.metadata.labels ?? {},
    taints: node.spec?.taints ?? [],
    unschedulable: node.spec?.unschedulable === true,
    ready: node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    allocatable: {
      cpu: parseQuantity(a.cpu) ?? 0,
      memory: parseQuantity(a.memory) ?? 0,
      pods: parseQuantity(a.pods) ?? 0,
    },
  };
}

function tolerates(t: Toleration, taint: Taint): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (!t.key) return t.operator === 'Exists';
  if (t.key !== taint.key) return false;
  return t.operator === 'Exists' || (t.value ?? '') === (taint.value ?? '');
}

function requirementHolds(r: NodeSelectorRequirement, value: string | undefined): boolean {
  const values = r.values ?? [];
  switch (r.operator) {
    case 'In':
      return value !== undefined && values.includes(value);
    case 'NotIn':
      return value === undefined || !values.includes(value);
    case 'Exists':
      return value !== undefined;
    case 'DoesNotExist':
      return value === undefined;
    case 'Gt':
    case 'Lt': {
      const n = Number.parseInt(value ?? '', 10);
      const bound = Number.parseInt(values[0] ?? '', 10);
      if (Number.isNaN(n) || Number.isNaN(bound)) return false;
      return r.operator === 'Gt' ? n > bound : n < bound;
    }
    default:
      return false; // an operator the API server would not have let in
  }
}

/** A required node affinity term: its expressions on labels and its fields (metadata.name) all hold. */
function termHolds(term: NodeSelectorTerm, node: CandidateNode): boolean {
  const expressions = term.matchExpressions ?? [];
  const fields = term.matchFields ?? [];
  // An empty term selects no node (as the API documents).
  if (expressions.length === 0 && fields.length === 0) return false;
  return (
    expressions.every((r) => requirementHolds(r, node.labels[r.key])) &&
    fields.every((r) => requirementHolds(r, r.key === 'metadata.name' ? node.name : undefined))
  );
}

/** Why the node can never take the Pod, whatever runs on it: the scheduler's filters but room. */
export function whyNotPlaced(pod: PodObject, needs: Room, node: CandidateNode): string | undefined {
  if (!node.ready) return 'not Ready';
  if (node.unschedulable) return 'cordoned';
  const tolerations = pod.spec?.tolerations ?? [];
  const untolerated = node.taints.find(
    (taint) =>
      (taint.effect === 'NoSchedule' || taint.effect === 'NoExecute') &&
      !tolerations.some((t) => tolerates(t, taint)),
  );
  if (untolerated)
    return `taint ${untolerated.key}${untolerated.value ? `=${untolerated.value}` : ''}:${untolerated.effect} not tolerated`;
  const selector = Object.entries(pod.spec?.nodeSelector ?? {});
  const terms =
    pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (
    selector.some(([k, v]) => node.labels[k] !== v) ||
    (terms !== undefined && !terms.some((t) => termHolds(t, node)))
  )
    return 'node selector or required affinity does not match';
  const short = shortOf(needs, node.allocatable);
  return short ? `allocatable ${short} too small` : undefined;
}

/** The first resource `free` has too little of for `needs`, by name; undefined: it has room. */
export function shortOf(needs: Room, free: Room): string | undefined {
  if (needs.cpu > free.cpu) return 'cpu';
  if (needs.memory > free.memory) return 'memory';
  if (needs.pods > free.pods) return 'pods';
  return undefined;
}

/** `a` less `b`. */
export function lessRoom(a: Room, b: Room): Room {
  return { cpu: a.cpu - b.cpu, memory: a.memory - b.memory, pods: a.pods - b.pods };
}
