// The readiness preset of a NodePrereadyJob: instead of a Job, the node's own state
// decides the run — every critical DaemonSet Pod on the node Ready, every CSI driver the
// hook names registered in the node's CSINode. Pure: the boot reconciler reads the facts
// (src/boots/readiness-read.ts) and planHookStage follows the run with readinessStep().
import type { Readiness } from '../api/hooks.ts';
import { labelMatcher } from '../kube/labels.ts';
import type { HookObject } from './select.ts';

/** A Pod on the node, as far as readiness goes. */
export interface ReadinessPod {
  namespace: string;
  name: string;
  labels: Record<string, string>;
  priorityClassName?: string;
  /** The DaemonSet that controls the Pod; undefined: not a DaemonSet's Pod. */
  daemonSet?: string;
  /** Condition Ready is True (and the Pod is not being deleted). */
  ready: boolean;
}

/** What the readiness preset judges: the node's Pods and its CSINode, read together. */
export interface NodeReadinessFacts {
  pods: readonly ReadinessPod[];
  /** The drivers of the node's CSINode (spec.drivers[].name); undefined: the node has no CSINode. */
  csiDrivers: readonly string[] | undefined;
}

/** While a readiness run waits, the facts are read again this often (the boot reconciler watches no Pods). */
export const READINESS_POLL_MS = 5000;

/**
 * How long a run waits for a first critical Pod to exist on the node: the DaemonSet
 * controller creates a new node's Pods within seconds; after this, none means none to wait for.
 */
export const READINESS_PODS_SETTLE_MS = 30_000;

/** Names listed in a message before "and N more". */
const LISTED = 5;

/** A Pod object as the API returns it, reduced to what readiness reads. */
export interface PodObject {
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    deletionTimestamp?: string;
    ownerReferences?: { kind: string; name: string; controller?: boolean }[];
  };
  spec?: { priorityClassName?: string };
  status?: { conditions?: { type: string; status: string }[] };
}

export function readinessPodOf(pod: PodObject): ReadinessPod {
  const owner = pod.metadata.ownerReferences?.find((o) => o.controller === true);
  const ready =
    pod.metadata.deletionTimestamp === undefined &&
    (pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false);
  return {
    namespace: pod.metadata.namespace ?? '',
    name: pod.metadata.name,
    labels: pod.metadata.labels ?? {},
    ...(pod.spec?.priorityClassName ? { priorityClassName: pod.spec.priorityClassName } : {}),
    ...(owner?.kind === 'DaemonSet' ? { daemonSet: owner.name } : {}),
    ready,
  };
}

/** The critical Pods among the node's: DaemonSet Pods with a listed priority class, or matching the selector. */
export function criticalPods(spec: Readiness['daemonSets'], pods: readonly ReadinessPod[]): ReadinessPod[] {
  if (!spec) return [];
  const classes = new Set(spec.priorityClassNames ?? []);
  const matches = spec.selector ? labelMatcher(spec.selector) : () => false;
  return pods.filter(
    (p) =>
      p.daemonSet !== undefined &&
      ((p.priorityClassName !== undefined && classes.has(p.priorityClassName)) || matches(p.labels)),
  );
}

function listed(names: readonly string[]): string {
  const more = names.length - LISTED;
  return `${names.slice(0, LISTED).join(', ')}${more > 0 ? ` and ${String(more)} more` : ''}`;
}

/** What a readiness run becomes on this pass: done, or waiting (and when to look again). */
export type ReadinessStep =
  { state: 'ready'; message: string } | { state: 'waiting'; message: string; wakeMs: number };

/** What the DaemonSet part says, and whether it holds. */
function daemonSetPart(
  spec: Readiness['daemonSets'],
  facts: NodeReadinessFacts,
  waitedMs: number,
): { holds: boolean; text: string; wakeMs: number } | undefined {
  if (!spec) return undefined;
  const pods = criticalPods(spec, facts.pods);
  if (pods.length === 0) {
    const settling = waitedMs < READINESS_PODS_SETTLE_MS;
    return {
      holds: !settling,
      text: settling
        ? 'no critical DaemonSet Pod on the node yet'
        : 'no critical DaemonSet Pod on the node (none to wait for)',
      wakeMs: READINESS_PODS_SETTLE_MS - waitedMs,
    };
  }
  const notReady = pods.filter((p) => !p.ready).map((p) => `${p.namespace}/${p.name}`);
  return notReady.length
    ? {
        holds: false,
        text: `${listed(notReady)} not Ready (${String(notReady.length)} of ${String(pods.length)} critical DaemonSet Pods)`,
        wakeMs: READINESS_POLL_MS,
      }
    : {
        holds: true,
        text: `${String(pods.length)} critical DaemonSet Pod${pods.length === 1 ? '' : 's'} Ready`,
        wakeMs: READINESS_POLL_MS,
      };
}

/** What the CSI part says, and whether it holds. */
function csiPart(drivers: readonly string[] | undefined, facts: NodeReadinessFacts) {
  if (!drivers) return undefined;
  const registered = new Set(facts.csiDrivers ?? []);
  const missing = drivers.filter((d) => !registered.has(d));
  if (missing.length === 0)
    return {
      holds: true,
      text: `CSI driver${drivers.length === 1 ? '' : 's'} ${listed(drivers)} registered`,
    };
  const where = facts.csiDrivers === undefined ? ' (the node has no CSINode yet)' : '';
  return {
    holds: false,
    text: `CSI driver${missing.length === 1 ? '' : 's'} ${listed(missing)} not registered${where}`,
  };
}

/**
 * Where a readiness run stands, given the node's facts (undefined: not read) and how
 * long the run has waited. The message names what is not ready yet, not-ready parts first.
 *
 * @example
 * readinessStep(hook, { pods, csiDrivers: [] }, 12_000)
 * // { state: 'waiting', message: 'kube-system/cilium-abcde not Ready (1 of 2 critical DaemonSet Pods); CSI driver rook-ceph.rbd.csi.ceph.com not registered', wakeMs: 5000 }
 */
export function readinessStep(
  hook: HookObject,
  facts: NodeReadinessFacts | undefined,
  waitedMs: number,
): ReadinessStep {
  const spec = hook.spec.readiness ?? {};
  if (!facts)
    return {
      state: 'waiting',
      message: "reading the node's Pods and CSINode",
      wakeMs: READINESS_POLL_MS,
    };
  const daemonSets = daemonSetPart(spec.daemonSets, facts, waitedMs);
  const csi = csiPart(spec.csiDrivers, facts);
  const parts = [daemonSets, csi].filter((p) => p !== undefined);
  const pending = parts.filter((p) => !p.holds);
  if (pending.length === 0) return { state: 'ready', message: parts.map((p) => p.text).join('; ') };
  return {
    state: 'waiting',
    message: [...pending, ...parts.filter((p) => p.holds)].map((p) => p.text).join('; '),
    wakeMs: Math.min(
      READINESS_POLL_MS,
      daemonSets && !daemonSets.holds ? daemonSets.wakeMs : READINESS_POLL_MS,
    ),
  };
}

/**
 * Whether the node's readiness facts are needed: a readiness hook among `hooks` has no
 * finished run in `records` (of the current boot). Only then does the boot reconciler read them.
 */
export function wantsReadinessFacts(
  hooks: readonly HookObject[],
  records: readonly { uid?: string; phase: string }[],
): boolean {
  return hooks.some(
    (h) =>
      h.spec.readiness !== undefined &&
      !records.some((r) => r.uid === h.metadata.uid && (r.phase === 'Succeeded' || r.phase === 'Failed')),
  );
}
