// podDisruptionBudgets: every selected PodDisruptionBudget allows at least N
// disruptions now, so draining a node would not be blocked (or break a quorum).
import type { Static } from 'typebox';
import type { PodDisruptionBudgetsProbe } from '../../api/cluster-health-check.ts';
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

export type PodDisruptionBudgetsProbeSpec = Static<typeof PodDisruptionBudgetsProbe>;

interface PodDisruptionBudget extends KubeObject {
  status?: {
    observedGeneration?: number;
    disruptionsAllowed?: number;
    currentHealthy?: number;
    desiredHealthy?: number;
    expectedPods?: number;
  };
}

export const podDisruptionBudgetsProbe: Probe<PodDisruptionBudgetsProbeSpec> = async (spec, context) => {
  const { rest, signal } = context;
  const cached = context.cached !== undefined;
  const scope = await resolveScope(rest, spec, signal, cached);
  const labelSelector = labelQuery(spec.selector);
  const minimum = spec.minDisruptionsAllowed ?? 1;
  const budgets = await listInScope<PodDisruptionBudget>(
    rest,
    '/apis/policy/v1',
    'poddisruptionbudgets',
    scope,
    {
      labelSelector,
      signal,
      sharedSince: context.readsSince,
      cached,
    },
  );

  const selection = `${scope.description}${labelSelector === undefined ? '' : ` labelled ${labelSelector}`}`;
  const wanted = `at least ${count(minimum, 'disruption')}`;
  // Like workloads: nothing selected means nothing a drain could violate.
  if (budgets.length === 0)
    return { healthy: true, message: `no PodDisruptionBudgets ${selection}: nothing to violate` };

  const blocking: string[] = [];
  for (const pdb of budgets) {
    const status = pdb.status ?? {};
    const generation = pdb.metadata?.generation ?? 0;
    if ((status.observedGeneration ?? 0) < generation) {
      blocking.push(`${objectName(pdb)}: the disruption controller has not yet evaluated its latest spec`);
      continue;
    }
    const allowed = status.disruptionsAllowed ?? 0;
    if (allowed < minimum)
      blocking.push(
        `${objectName(pdb)} allows ${allowed} (${status.currentHealthy ?? 0} healthy of ${status.expectedPods ?? 0} pods, ${status.desiredHealthy ?? 0} needed)`,
      );
  }
  if (blocking.length === 0)
    return {
      healthy: true,
      message: `${count(budgets.length, 'PodDisruptionBudget')} ${selection} ${budgets.length === 1 ? 'allows' : 'each allow'} ${wanted}`,
    };
  return {
    healthy: false,
    message: `${blocking.length}/${count(budgets.length, 'PodDisruptionBudget')} ${selection} ${blocking.length === 1 ? 'does' : 'do'} not allow ${wanted}: ${someOf(blocking)}`,
  };
};
