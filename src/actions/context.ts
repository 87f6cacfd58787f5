// What the parts of the action reconciler share (reconciler.ts wires them): its options,
// the work queue, the writes to NodeActions, the fresh evaluations begun ahead of the gate
// and the Alertmanager silence calls.
import type { ActionPolicy } from '../api/action-policy.ts';
import type { HookKindName, HookSpec } from '../api/hooks.ts';
import type { ActionObject } from '../api/node-action.ts';
import type { CheckRunner } from '../checks/runner.ts';
import type { HookRunner } from '../hooks/runner.ts';
import type { EventRecorder } from '../kube/events.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import type { RestClient } from '../kube/rest.ts';
import type { TurnLease } from '../kube/turn-lease.ts';
import type { WorkQueue } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { PolicyFacts } from '../policies/evaluate.ts';
import type { SilenceLeases } from '../silences/leases.ts';
import type { EtcdCheck } from '../talos/etcd-check.ts';
import type { TalosExecutor } from '../talos/execution.ts';
import type { FreshEvaluations } from './fresh-evaluations.ts';
import type { RetentionPolicy } from './retention.ts';
import type { ActionWrites } from './writes.ts';

export type PolicyObject = ActionPolicy & KubeObject;
export type HookKubeObject = KubeObject & { spec: HookSpec };

export interface ActionReconcilerOptions {
  rest: RestClient;
  log: Logger;
  events: EventRecorder;
  metrics?: Metrics;
  checks: CheckRunner;
  actions: Informer<ActionObject>;
  /**
   * Every other controller instance's actions (the complement of `actions`' selector):
   * with it, the admission pass counts from the caches once they show every slot
   * (admission-read.ts); without it, every pass makes a quorum read.
   */
  foreignActions?: Informer<ActionObject>;
  policies: Informer<PolicyObject>;
  nodes: Informer<KubeObject>;
  hooks: ReadonlyMap<HookKindName, Informer<HookKubeObject>>;
  jobs: Informer<KubeObject>;
  checkInformer: Informer<KubeObject>;
  runner: HookRunner;
  /** The Talos executor (Managed execution); without it, Managed actions are followed like External ones. */
  executor?: TalosExecutor;
  isLeader: () => boolean;
  instance?: string;
  retention?: RetentionPolicy;
  concurrency?: number;
  /** Makes the Alertmanager silence calls; one of its own by default. */
  silences?: SilenceLeases;
  /** Reads etcd for the etcd guard (src/talos/etcd-check.ts); without it, etcd is never checked. */
  etcd?: EtcdCheck;
  /**
   * The turn every controller instance takes to admit and to approve control-plane
   * actions (src/kube/turn-lease.ts, instance-turn.ts). Without it the reconciler acts as
   * if alone.
   */
  turn?: TurnLease;
  /** Whose control-plane actions count for the control-plane rule, of the other instances (default: all; ControllerOptions). */
  controlPlaneAcrossInstances?: readonly string[];
}

export interface ActionContext {
  o: ActionReconcilerOptions & { retention: RetentionPolicy };
  log: Logger;
  queue: WorkQueue;
  writes: ActionWrites;
  fresh: FreshEvaluations;
  silences: SilenceLeases;
}

/** The policies every decision obeys: those not being deleted. */
export function policyFacts(policies: Informer<PolicyObject>): PolicyFacts[] {
  return policies
    .list()
    .filter((p) => !p.metadata.deletionTimestamp)
    .map((p) => ({ name: p.metadata.name, spec: p.spec }));
}

/**
 * Work-queue keys besides actions' names (DNS subdomains, which cannot begin with @): every
 * admission runs in one key, so admissions never race each other; and retention.
 */
export const ADMISSION_KEY = '@admission';
export const RETENTION_KEY = '@retention';
