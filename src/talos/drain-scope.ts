// Which Pods a drain evicts and which it leaves in place (drain.ts), in one place, so that
// the drain forecast (src/actions/drain-forecast.ts) judges the Pods the drain will evict
// and no others. Pure.
import { HOOK_JOB_LABELS } from '../api/names.ts';
import { matchesSelector, type LabelSelector } from '../kube/labels.ts';

/** What the rule reads of a Pod. */
export interface ScopedPod {
  metadata: {
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: { kind: string; name: string; controller?: boolean }[];
  };
  status?: { phase?: string };
}

/**
 * Why a drain leaves the Pod where it is; undefined: it evicts it. DaemonSet Pods (their
 * controller would recreate them at once), mirror Pods (the kubelet owns them), finished
 * Pods, gatehouse's own hook Pods (a hook that protects the node must not be evicted by
 * the drain it precedes), and Pods spec.drain.podSelector does not select.
 */
export function whyLeftInPlace(pod: ScopedPod, selector: LabelSelector | undefined): string | undefined {
  if (pod.metadata.annotations?.['kubernetes.io/config.mirror']) return 'mirror pod';
  if (pod.metadata.ownerReferences?.some((o) => o.kind === 'DaemonSet')) return 'DaemonSet pod';
  if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return 'finished';
  if (pod.metadata.labels?.[HOOK_JOB_LABELS.hookUID]) return 'gatehouse hook pod';
  if (selector && !matchesSelector(selector, pod.metadata.labels ?? {})) return 'not selected by podSelector';
  return undefined;
}
