// Draining a node before a disruptive step, as `kubectl drain` does, but never going on
// when a PodDisruptionBudget says no (Talos' own server-side drain logged PDB refusals
// and carried on; Rook's OSD budgets exist precisely to stop that).
//
//   cordon → evict every pod that must go (eviction API: PDBs are honoured by the API
//   server) → retry refusals with backoff → wait for the pods to be gone
//
// Left in place (drain-scope.ts, the rule the drain forecast shares): DaemonSet pods (their
// controller would recreate them at once), mirror pods (the kubelet owns them), finished
// pods, and gatehouse's own hook pods (a hook that protects the node must not be evicted
// by the drain it precedes). On a single-node
// cluster there is nowhere for pods to go: the drain is skipped (tuppr's drain Jobs
// evicted themselves there).
//
// A cordon made for an action is marked with the annotation talos.dev/cordoned-by, so
// that the action lifts only its own cordon: a node an administrator had cordoned
// stays cordoned after the action (as kured does).
import { CORDONED_BY_ANNOTATION } from '../api/names.ts';
import type { DrainBlocker } from '../api/node-action.ts';
import { matchesSelector, type LabelSelector } from '../kube/labels.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { errorMessage, sleep } from '../wait.ts';
import { whyLeftInPlace } from './drain-scope.ts';
import { formatDuration } from '../duration.ts';

export interface DrainOptions {
  rest: RestClient;
  node: string;
  timeoutMs: number;
  /** Between refused evictions of a pod (429: a PDB allows no disruption now). */
  retryMs?: number;
  /** Cordon on behalf of this NodeAction (see CORDONED_BY_ANNOTATION); without it, a plain cordon. */
  owner?: string;
  /** The evicted pods' termination grace period; absent: each pod's own. */
  gracePeriodSeconds?: number;
  /** Evict only the pods this selects (DaemonSet, mirror and hook pods stay whatever it says). */
  podSelector?: LabelSelector;
  signal?: AbortSignal;
  progress?: (message: string) => void;
  /**
   * The pods whose eviction is refused now, longest refused first: called after the first
   * round of evictions and each time the list changes since (a pod refused, let go, its
   * budget allowing more), [] once none is.
   */
  blocked?: (blockers: DrainBlocker[]) => void;
}

export interface DrainResult {
  skipped?: string;
  evicted: string[];
  leftInPlace: string[];
}

interface Pod {
  metadata: {
    name: string;
    namespace: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: { kind: string; name: string }[];
    deletionTimestamp?: string;
  };
  status?: { phase?: string };
}

export interface NodeObject {
  metadata: {
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec?: { unschedulable?: boolean };
}

/** A drain that timed out: pods are left that could not be evicted in time. */
export class DrainError extends Error {
  override readonly name = 'DrainError';
}

/** The refusal in words, with the causes the API server lists (which name the budget). */
function refusalText(error: KubeApiError): string {
  const details = error.status.details as { causes?: { message?: string }[] } | undefined;
  const causes = (details?.causes ?? []).map((c) => c.message).filter((m): m is string => Boolean(m));
  return [error.serverMessage || error.message, ...causes].join(' ');
}

const podName = (p: Pod) => `${p.metadata.namespace}/${p.metadata.name}`;

interface Budget {
  metadata: { name: string; namespace: string };
  spec?: { selector?: LabelSelector };
  status?: { disruptionsAllowed?: number };
}

/** A budget that selects a pod, and what it allows now. */
interface BudgetHold {
  name: string;
  disruptionsAllowed: number;
}

/**
 * The PodDisruptionBudgets that select the pod: what a refused eviction waits for. The
 * API server's 429 names the budget only in prose; reading them says which one, and how
 * far it is from allowing the eviction. Best effort: without read access to budgets, none.
 */
async function blockingBudgets(rest: RestClient, pod: Pod, signal?: AbortSignal): Promise<BudgetHold[]> {
  try {
    const list = await rest.request<{ items: Budget[] }>(
      `/apis/policy/v1/namespaces/${pod.metadata.namespace}/poddisruptionbudgets`,
      signal ? { signal } : {},
    );
    const labels = pod.metadata.labels ?? {};
    return list.items
      .filter((b) => b.spec?.selector && matchesSelector(b.spec.selector, labels))
      .map((b) => ({ name: b.metadata.name, disruptionsAllowed: b.status?.disruptionsAllowed ?? 0 }));
  } catch {
    return [];
  }
}

/** "PodDisruptionBudget ns/name (0 disruptions allowed)" */
function budgetWords(namespace: string, budget: BudgetHold): string {
  const allowed = budget.disruptionsAllowed;
  return `PodDisruptionBudget ${namespace}/${budget.name} (${String(allowed)} disruption${allowed === 1 ? '' : 's'} allowed)`;
}

/** A refused eviction, as the drain keeps it between rounds. */
interface Refusal {
  blocker: DrainBlocker;
  /** The refusal in words, for the progress and the timeout's error. */
  why: string;
}

/** The refusal of one pod's eviction, as a blocker (first refused at `since`). */
function blockerOf(pod: Pod, since: string, budgets: BudgetHold[], refusal: string): DrainBlocker {
  const budget = budgets[0];
  return {
    namespace: pod.metadata.namespace,
    pod: pod.metadata.name,
    ...(budget
      ? { podDisruptionBudget: budget.name, disruptionsAllowed: budget.disruptionsAllowed }
      : { message: refusal.slice(0, 512) }),
    since,
  };
}

/** Longest refused first, then by name: a stable order, so an unchanged list compares equal. */
function orderBlockers(blockers: readonly DrainBlocker[]): DrainBlocker[] {
  return [...blockers].sort(
    (a, b) =>
      a.since.localeCompare(b.since) || a.namespace.localeCompare(b.namespace) || a.pod.localeCompare(b.pod),
  );
}

export async function cordon(rest: RestClient, node: string, unschedulable: boolean): Promise<void> {
  await rest.request(`/api/v1/nodes/${node}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { spec: { unschedulable } },
  });
}

/** Sets the cordon and its mark, conditionally on the version read (a conflict is read again). */
async function setCordon(
  rest: RestClient,
  node: string,
  read: NodeObject,
  unschedulable: boolean,
  owner: string | null,
): Promise<void> {
  await rest.request(`/api/v1/nodes/${node}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: {
      metadata: {
        resourceVersion: read.metadata.resourceVersion,
        annotations: { [CORDONED_BY_ANNOTATION]: owner },
      },
      spec: { unschedulable },
    },
  });
}

/** Reads the Node and works on what was read; a conflict (written meanwhile) reads it again. */
export async function withNode<T>(
  rest: RestClient,
  node: string,
  work: (read: NodeObject) => Promise<T>,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const read = await rest.request<NodeObject>(`/api/v1/nodes/${node}`);
    try {
      return await work(read);
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 409) || attempt >= 5) throw error;
    }
  }
}

/**
 * Cordons the node for the NodeAction `owner`. A node already cordoned by someone else
 * (no talos.dev/cordoned-by) is left as it is and stays theirs; one cordoned by an
 * earlier gatehouse action (which failed, leaving it cordoned) is taken over.
 * Returns whether the cordon is now the owner's.
 */
export async function cordonFor(rest: RestClient, node: string, owner: string): Promise<boolean> {
  return withNode(rest, node, async (read) => {
    const by = read.metadata.annotations?.[CORDONED_BY_ANNOTATION];
    if (read.spec?.unschedulable && by === undefined) return false;
    if (read.spec?.unschedulable && by === owner) return true;
    await setCordon(rest, node, read, true, owner);
    return true;
  });
}

/** Lifts the cordon `owner` made; anyone else's stays. Returns whether it lifted one. */
export async function uncordonFor(rest: RestClient, node: string, owner: string): Promise<boolean> {
  return withNode(rest, node, async (read) => {
    if (read.metadata.annotations?.[CORDONED_BY_ANNOTATION] !== owner) return false;
    await setCordon(rest, node, read, false, null);
    return true;
  });
}

async function podsOn(rest: RestClient, node: string, signal?: AbortSignal): Promise<Pod[]> {
  const list = await rest.request<{ items: Pod[] }>('/api/v1/pods', {
    query: { fieldSelector: `spec.nodeName=${node}` },
    ...(signal ? { signal } : {}),
  });
  return list.items;
}

export async function drainNode(options: DrainOptions): Promise<DrainResult> {
  const { rest, node, signal } = options;
  const progress = options.progress ?? (() => undefined);
  const retryMs = options.retryMs ?? 5000;
  const nodes = await rest.request<{ items: unknown[] }>('/api/v1/nodes', { query: { limit: 2 } });
  if (nodes.items.length < 2) {
    progress(`not draining ${node}: it is the only node, there is nowhere for its pods to go`);
    return { skipped: 'single-node cluster', evicted: [], leftInPlace: [] };
  }
  if (options.owner === undefined) {
    await cordon(rest, node, true);
    progress(`cordoned ${node}`);
  } else if (await cordonFor(rest, node, options.owner)) {
    progress(`cordoned ${node}`);
  } else {
    progress(`${node} was already cordoned (not by gatehouse): it stays cordoned after the action`);
  }

  const started = Date.now();
  const deadline = started + options.timeoutMs;
  const evicted = new Set<string>();
  const refusals = new Map<string, Refusal>();
  let reported: string | undefined;
  const report = () => {
    const blockers = orderBlockers([...refusals.values()].map((r) => r.blocker));
    const json = JSON.stringify(blockers);
    if (json === reported) return;
    reported = json;
    options.blocked?.(blockers);
  };
  let leftInPlace: string[];
  for (;;) {
    signal?.throwIfAborted();
    const pods = await podsOn(rest, node, signal);
    const why = (p: Pod) => whyLeftInPlace(p, options.podSelector);
    leftInPlace = pods.filter((p) => why(p) !== undefined).map((p) => `${podName(p)} (${why(p) ?? ''})`);
    const remaining = pods.filter((p) => why(p) === undefined);
    // A refused pod that is gone (deleted by its owner, or evicted at last) holds nothing.
    const present = new Set(remaining.map(podName));
    for (const name of refusals.keys()) if (!present.has(name)) refusals.delete(name);
    if (remaining.length === 0) break;
    if (Date.now() >= deadline) {
      const blocked = [...refusals.entries()].map(([pod, r]) => `${pod}: ${r.why}`);
      throw new DrainError(
        `drain of ${node} timed out after ${formatDuration(options.timeoutMs)} with ${String(remaining.length)} pod(s) left` +
          (blocked.length
            ? `; evictions refused: ${blocked.join('; ')}`
            : `: ${remaining.map(podName).join(', ')}`),
      );
    }
    for (const pod of remaining.filter((p) => !p.metadata.deletionTimestamp)) {
      const name = podName(pod);
      try {
        await rest.request(
          `/api/v1/namespaces/${pod.metadata.namespace}/pods/${pod.metadata.name}/eviction`,
          {
            method: 'POST',
            body: {
              apiVersion: 'policy/v1',
              kind: 'Eviction',
              metadata: { name: pod.metadata.name, namespace: pod.metadata.namespace },
              ...(options.gracePeriodSeconds !== undefined
                ? { deleteOptions: { gracePeriodSeconds: options.gracePeriodSeconds } }
                : {}),
            },
            ...(signal ? { signal } : {}),
          },
        );
        evicted.add(name);
        refusals.delete(name);
        progress(`evicted ${name}`);
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 404) continue; // already gone
        // 429: a PodDisruptionBudget allows no disruption now; the causes the API server
        // lists name it. Anything else is retried too, and reported if it persists.
        const refusal = error instanceof KubeApiError ? refusalText(error) : errorMessage(error);
        const budgets =
          error instanceof KubeApiError && error.code === 429 ? await blockingBudgets(rest, pod, signal) : [];
        const words = budgets.length
          ? `blocked by ${budgets.map((b) => budgetWords(pod.metadata.namespace, b)).join(', ')}: ${refusal}`
          : refusal;
        const earlier = refusals.get(name);
        if (earlier?.why !== words) progress(`eviction of ${name} refused, will retry: ${words}`);
        const since = earlier?.blocker.since ?? new Date().toISOString();
        refusals.set(name, { blocker: blockerOf(pod, since, budgets, refusal), why: words });
      }
    }
    report();
    if (refusals.size > 0) {
      // What the drain waits for, refreshed each round (at most 5 pods named).
      const blocked = [...refusals.entries()].slice(0, 5).map(([pod, r]) => `${pod} ${r.why}`);
      const more = refusals.size > 5 ? `; and ${String(refusals.size - 5)} more` : '';
      progress(`waiting ${formatDuration(Date.now() - started)}: ${blocked.join('; ')}${more}`);
    }
    await sleep(Math.min(refusals.size > 0 ? retryMs : 250, Math.max(0, deadline - Date.now())), signal);
  }
  progress(`drained ${node}: ${String(evicted.size)} pod(s) evicted`);
  return { evicted: [...evicted], leftInPlace };
}
