// workloads: every selected Deployment, StatefulSet and DaemonSet is fully rolled out
// (its controller has seen the latest spec and every replica runs it) and available.
import type { Static } from 'typebox';
import type { WorkloadsProbe } from '../../api/cluster-health-check.ts';
import type { Probe } from '../probe.ts';
import {
  count,
  labelQuery,
  listInScope,
  objectName,
  resolveScope,
  someOf,
  type KubeObject,
} from './kube-list.ts';

export type WorkloadsProbeSpec = Static<typeof WorkloadsProbe>;
type WorkloadKind = 'Deployment' | 'StatefulSet' | 'DaemonSet';

const RESOURCES: Record<WorkloadKind, string> = {
  Deployment: 'deployments',
  StatefulSet: 'statefulsets',
  DaemonSet: 'daemonsets',
};
const ALL_KINDS: readonly WorkloadKind[] = ['Deployment', 'StatefulSet', 'DaemonSet'];

interface Workload extends KubeObject {
  spec?: {
    replicas?: number;
    updateStrategy?: { type?: string; rollingUpdate?: { partition?: number } };
  };
  status?: {
    observedGeneration?: number;
    replicas?: number;
    updatedReplicas?: number;
    availableReplicas?: number;
    readyReplicas?: number;
    desiredNumberScheduled?: number;
    updatedNumberScheduled?: number;
    numberAvailable?: number;
    conditions?: { type: string; status: string; reason?: string }[];
  };
}

export const workloadsProbe: Probe<WorkloadsProbeSpec> = async (spec, context) => {
  const { rest, signal } = context;
  const cached = context.cached !== undefined;
  const scope = await resolveScope(rest, spec, signal, cached);
  const labelSelector = labelQuery(spec.selector);
  const kinds = spec.kinds?.length ? ALL_KINDS.filter((k) => spec.kinds?.includes(k)) : ALL_KINDS;
  const lists = await Promise.all(
    kinds.map((kind) =>
      listInScope<Workload>(rest, '/apis/apps/v1', RESOURCES[kind], scope, {
        labelSelector,
        signal,
        sharedSince: context.readsSince,
        cached,
      }),
    ),
  );

  const selection = `${scope.description}${labelSelector === undefined ? '' : ` labelled ${labelSelector}`}`;
  const counted: string[] = [];
  const laggards: string[] = [];
  let total = 0;
  kinds.forEach((kind, i) => {
    const items = lists[i] ?? [];
    total += items.length;
    if (items.length) counted.push(count(items.length, kind));
    for (const item of items) {
      const problems = rolloutProblems(kind, item);
      if (problems.length) laggards.push(`${kind} ${objectName(item)}: ${problems.join(', ')}`);
    }
  });

  const kindList = kinds.map((k) => `${k}s`).join(', ');
  if (total === 0) return { healthy: true, message: `no ${kindList} ${selection}: nothing to wait for` };
  if (laggards.length === 0)
    return {
      healthy: true,
      message: `${count(total, 'workload')} ${selection} rolled out and available (${counted.join(', ')})`,
    };
  return {
    healthy: false,
    message: `${laggards.length}/${count(total, 'workload')} ${selection} not rolled out or not available: ${someOf(laggards)}`,
  };
};

/** What keeps a workload from being fully rolled out and available; empty when nothing does. */
export function rolloutProblems(kind: WorkloadKind, workload: Workload): string[] {
  const status = workload.status ?? {};
  const problems: string[] = [];
  const generation = workload.metadata?.generation ?? 0;
  const observed = status.observedGeneration ?? 0;
  if (observed < generation)
    problems.push(`its controller has not yet seen generation ${generation} (it saw ${observed})`);

  let desired: number;
  let needUpdated: number;
  let updated: number;
  let available: number;
  if (kind === 'DaemonSet') {
    desired = status.desiredNumberScheduled ?? 0;
    needUpdated = desired;
    updated = status.updatedNumberScheduled ?? 0;
    available = status.numberAvailable ?? 0;
  } else {
    desired = workload.spec?.replicas ?? 1;
    updated = status.updatedReplicas ?? 0;
    available = status.availableReplicas ?? 0;
    // A partitioned StatefulSet rollout is done when the pods above the partition run it (as kubectl sees it).
    const strategy = workload.spec?.updateStrategy;
    const partition =
      kind === 'StatefulSet' && (strategy?.type ?? 'RollingUpdate') === 'RollingUpdate'
        ? (strategy?.rollingUpdate?.partition ?? 0)
        : 0;
    needUpdated = Math.max(0, desired - partition);
  }
  if (updated < needUpdated) problems.push(`${updated}/${needUpdated} updated`);
  if (kind === 'Deployment') {
    const old = (status.replicas ?? 0) - updated;
    if (old > 0) problems.push(`${count(old, 'old replica')} still running`);
    const progressing = status.conditions?.find((c) => c.type === 'Progressing');
    if (progressing?.reason === 'ProgressDeadlineExceeded') problems.push('progress deadline exceeded');
  }
  if (available < desired) problems.push(`${available}/${desired} available`);
  return problems;
}
