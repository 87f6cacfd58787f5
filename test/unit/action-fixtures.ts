// Builders for the decision core's inputs, shared by the unit and property tests of
// actions, hooks and policies.
import type { ClusterHealthCheckSpec } from '../../src/api/cluster-health-check.ts';
import type { Action } from '../../src/api/common.ts';
import type { HookKindName, HookSpec } from '../../src/api/hooks.ts';
import { NODE_ACTION_FINALIZER as FINALIZER } from '../../src/api/names.ts';
import type { NodeActionSpec, NodeActionStatus, ObservedNodeAction } from '../../src/api/node-action.ts';
import { type ActionInput, type CheckFacts, type NodeFacts } from '../../src/actions/decide.ts';
import type { DrainForecastRead } from '../../src/actions/drain-forecast.ts';
import { ACTION_KIND_NAMES } from '../../src/actions/kinds/index.ts';
import type { CheckState } from '../../src/checks/state.ts';
import type { JobFacts } from '../../src/hooks/job.ts';
import type { HookObject } from '../../src/hooks/select.ts';

export const T0 = new Date('2026-03-02T10:00:00.000Z');

export function at(seconds: number): Date {
  return new Date(T0.getTime() + seconds * 1000);
}

export function action(
  spec: Partial<NodeActionSpec> = {},
  status?: NodeActionStatus,
  metadata: Partial<ObservedNodeAction['metadata']> = {},
): ObservedNodeAction {
  return {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'NodeAction',
    metadata: {
      name: 'reboot-w1',
      uid: 'uid-action-1',
      generation: 1,
      resourceVersion: '1',
      creationTimestamp: T0.toISOString(),
      finalizers: [FINALIZER],
      ...metadata,
    },
    spec: { nodeName: 'w1', action: 'Reboot', execution: 'External', requestedBy: 'alice', ...spec },
    ...(status ? { status } : {}),
  };
}

/**
 * A node's facts. Its remediation is paused already (remediationExcluded), as it is once
 * an approved action's first pass has put the pause on: the tests of everything else see
 * no pause effect; remediation's own tests (actions-remediation.test.ts) start without it.
 */
export function node(name = 'w1', options: Partial<NodeFacts> = {}): NodeFacts {
  return {
    name,
    labels: { 'kubernetes.io/hostname': name },
    bootID: 'boot-1',
    ready: true,
    remediationExcluded: true,
    ...options,
  };
}

let uidCounter = 0;
export function hook(
  kind: HookKindName,
  name: string,
  spec: Partial<HookSpec> = {},
  namespace = 'rook-ceph',
): HookObject {
  uidCounter++;
  return {
    kind,
    metadata: { name, namespace, uid: `uid-${name}-${uidCounter}` },
    spec: {
      template: {
        spec: {
          template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox' }] } },
        },
      },
      ...spec,
    },
  };
}

export function webhookHook(kind: HookKindName, name: string, spec: Partial<HookSpec> = {}): HookObject {
  const h = hook(kind, name, spec);
  delete h.spec.template;
  h.spec.webhook = { service: { name: 'hooks', port: 8443 }, path: '/noout' };
  return h;
}

export function state(healthy: boolean | undefined, message = healthy ? 'ok' : 'bad'): CheckState {
  return {
    healthy,
    reason: healthy === undefined ? 'NotProbed' : healthy ? 'ProbeSucceeded' : 'ProbeFailed',
    message,
    consecutiveSuccesses: healthy ? 1 : 0,
    consecutiveFailures: healthy === false ? 1 : 0,
    ...(healthy !== undefined ? { lastProbeTime: T0 } : {}),
  };
}

export function check(
  name: string,
  healthy: boolean | undefined,
  spec: Partial<ClusterHealthCheckSpec> = {},
): CheckFacts {
  return { name, spec: { nodes: {}, ...spec }, state: state(healthy) };
}

export function job(phase: JobFacts['phase'], extra: Partial<JobFacts> = {}): JobFacts {
  return { phase, message: `job ${phase}`, deleting: false, ...extra };
}

/** A drain forecast that found nothing to evict: nothing to record against, nothing to hold. */
export const EMPTY_FORECAST: DrainForecastRead = {
  at: T0,
  result: { evicted: 0, leftInPlace: 0, verdicts: [], otherNodes: 1, nodesRead: 0 },
};

/**
 * A decision's input. Workload owners' do-not-disrupt is off (doNotDisruptCap 0s, as a
 * policy can say) and the node's neighbours were read and found nobody, so that the tests
 * of everything else see no neighbour read at the gate; the neighbours' own tests
 * (actions-do-not-disrupt.test.ts, actions-maintainers.test.ts) set their own. Likewise
 * the drain forecast was made and found no Pod (actions-drain-forecast.test.ts sets its own).
 */
export function input(partial: Partial<ActionInput> = {}): ActionInput {
  return {
    now: T0,
    action: action(),
    node: node(),
    checks: [],
    hooks: [],
    jobs: new Map(),
    webhooks: new Map(),
    doNotDisruptCap: { ms: 0, by: 'ActionPolicy fixture' },
    neighbours: { at: T0, pods: [], maintenances: [] },
    drainForecast: EMPTY_FORECAST,
    ...partial,
  };
}

/** The status of an action as the admission pass leaves it. */
export function admitted(now = T0, extra: NodeActionStatus = {}): NodeActionStatus {
  return { phase: 'WaitingForHealth', startTime: now.toISOString(), phaseTime: now.toISOString(), ...extra };
}

/** Every action kind, from the descriptors: a new kind is in every property test at once. */
export const ACTIONS_FOR_TESTS: readonly Action[] = ACTION_KIND_NAMES;
