// What decide() is given: everything the controller observed about one action, made
// plain data by the reconciler (action-pass.ts), so the decision is a pure function of it.
import type { BootAnnouncement, BootRecord } from '../api/boot-record.ts';
import type { ClusterHealthCheckSpec } from '../api/cluster-health-check.ts';
import {
  CORDONED_BY_ANNOTATION,
  DO_NOT_DISRUPT_ANNOTATION,
  REMEDIATION_EXCLUDE_LABEL,
  REMEDIATION_PAUSED_BY_ANNOTATION,
} from '../api/names.ts';
import type { ObservedNodeAction } from '../api/node-action.ts';
import { readBootAnnotations } from '../boots/record.ts';
import type { CheckState } from '../checks/state.ts';
import type { DoNotDisruptCap } from './do-not-disrupt.ts';
import type { DrainForecastRead } from './drain-forecast.ts';
import type { NodeNeighbours } from './neighbours.ts';
import type { JobFacts } from '../hooks/job.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { WebhookFacts } from '../hooks/plan.ts';
import type { HookObject } from '../hooks/select.ts';
import type { EtcdCheckState } from '../talos/etcd-health.ts';
import type { ExecutionFacts } from '../talos/facts.ts';
import type { ConfigRead } from '../talos/config-disruption-read.ts';
import type { EtcdSnapshotPolicy } from '../api/action-policy.ts';

/** What the action needs to know about its node. */
export interface NodeFacts {
  name: string;
  labels: Record<string, string>;
  bootID: string | undefined;
  ready: boolean;
  /** status.nodeInfo.osImage, e.g. "Talos (v1.13.0)": the Talos version (Managed execution). */
  osImage?: string;
  /** The NodeAction whose cordon the node carries (talos.dev/cordoned-by), if any. */
  cordonedBy?: string;
  /** The node is cordoned (spec.unschedulable), by whoever. */
  unschedulable?: true;
  /** The medik8s exclusion label is on the node (REMEDIATION_EXCLUDE_LABEL), whoever set it. */
  remediationExcluded?: true;
  /** The action that set the exclusion label (REMEDIATION_PAUSED_BY_ANNOTATION), when gatehouse did. */
  remediationPausedBy?: string;
  /** The node carries the preready taint (talos.dev/preready). */
  prereadyTaint?: boolean;
  /** The value of the node's own talos.dev/do-not-disrupt annotation, if any. */
  doNotDisrupt?: string;
  /** An action's announcement of the node's coming boot (annotation talos.dev/next-boot). */
  announcement?: BootAnnouncement;
  /** The boot reconciler's record of the node's current boot (annotation talos.dev/boot-hooks). */
  boot?: BootRecord;
}

interface NodeObject extends KubeObject {
  status?: {
    nodeInfo?: { bootID?: string; osImage?: string };
    conditions?: { type: string; status: string }[];
  };
}

/** What the action needs to know about its node, from the Node as the cache has it. */
export function nodeFacts(node: KubeObject | undefined): NodeFacts | undefined {
  if (!node) return undefined;
  const n = node as NodeObject;
  const cordonedBy = n.metadata.annotations?.[CORDONED_BY_ANNOTATION];
  const pausedBy = n.metadata.annotations?.[REMEDIATION_PAUSED_BY_ANNOTATION];
  const boot = readBootAnnotations(n);
  const dnd = n.metadata.annotations?.[DO_NOT_DISRUPT_ANNOTATION];
  return {
    name: n.metadata.name,
    labels: n.metadata.labels ?? {},
    bootID: n.status?.nodeInfo?.bootID || undefined,
    ready: n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    ...(n.status?.nodeInfo?.osImage ? { osImage: n.status.nodeInfo.osImage } : {}),
    ...(cordonedBy ? { cordonedBy } : {}),
    ...((n as { spec?: { unschedulable?: boolean } }).spec?.unschedulable === true
      ? { unschedulable: true as const }
      : {}),
    ...(n.metadata.labels?.[REMEDIATION_EXCLUDE_LABEL] !== undefined
      ? { remediationExcluded: true as const }
      : {}),
    ...(pausedBy ? { remediationPausedBy: pausedBy } : {}),
    ...(boot.prereadyTaint ? { prereadyTaint: true } : {}),
    ...(dnd !== undefined ? { doNotDisrupt: dnd } : {}),
    ...(boot.announcement ? { announcement: boot.announcement } : {}),
    ...(boot.record ? { boot: boot.record } : {}),
  };
}

/** The governing ActionPolicy whose etcdSnapshot an action follows: the first by name that has one (etcd-snapshot.ts). */
export interface ChosenSnapshotPolicy {
  policy: string;
  spec: EtcdSnapshotPolicy;
}

export interface CheckFacts {
  name: string;
  spec: ClusterHealthCheckSpec;
  /** The latest state the controller has (not fresh). */
  state: CheckState;
}

/** A fresh evaluation of checks, made for this decision (CheckRunner.evaluateNow). */
export interface FreshChecks {
  at: Date;
  states: ReadonlyMap<string, CheckState | undefined>;
}

export interface ActionInput {
  now: Date;
  action: ObservedNodeAction;
  /** Undefined: the Node does not exist. */
  node: NodeFacts | undefined;
  checks: readonly CheckFacts[];
  fresh?: FreshChecks;
  /**
   * The etcd guard's read, made for this decision when it asked (ActionDecision.readEtcd):
   * whether etcd can spare the action's control-plane node now (src/actions/etcd-guard.ts).
   */
  etcd?: EtcdCheckState;
  /**
   * Who else has a say about the node, read for the health gate when it asked
   * (ActionDecision.readNeighbours): its Pods carrying talos.dev/do-not-disrupt
   * (do-not-disrupt.ts) and the NodeMaintenances of other maintainers (maintainers.ts).
   */
  neighbours?: NodeNeighbours;
  /**
   * The drain forecast of the node, made for the health gate of an action that drains it
   * when it asked (ActionDecision.readDrainForecast; drain-forecast.ts).
   */
  drainForecast?: DrainForecastRead;
  /**
   * A ConfigChange's configurations — the node's running one and the new one — read for
   * its disruption class when the decision asked (ActionDecision.readConfigs;
   * phases/config-disruption.ts).
   */
  configs?: ConfigRead;
  /** The governing ActionPolicy whose etcdSnapshot the action follows, if any (etcd-snapshot.ts). */
  etcdSnapshot?: ChosenSnapshotPolicy;
  /** The governing ActionPolicy that says drainForecast: Block, if any (absent: Warn). */
  drainForecastBlock?: string;
  /** The governing ActionPolicies' doNotDisruptMax (absent: the default, 24h). */
  doNotDisruptCap?: DoNotDisruptCap;
  /** The governing ActionPolicy that turns the remediation pause off (pauseRemediation: false), if any. */
  remediationPauseOff?: string;
  /** Every governing ActionPolicy says allowForeignCordon (maintainers.ts). */
  allowForeignCordon?: true;
  /**
   * The gate's fresh evaluation is still under way on checker Jobs (job probes): which
   * check waits on which Job ("NS/NAME"; absent while it is being created).
   */
  evaluating?: readonly { check: string; job?: string }[];
  hooks: readonly HookObject[];
  jobs: ReadonlyMap<string, JobFacts>;
  webhooks: ReadonlyMap<string, WebhookFacts>;
  /**
   * The executor's knowledge of this action's steps. Undefined: this controller performs
   * nothing (it runs without actions' execution), and Managed actions are followed like
   * External ones.
   */
  execution?: ExecutionFacts;
  /**
   * The executor has no Talos credentials (no talosconfig, or none usable yet): it can
   * cordon and drain (a Maintenance), but Managed actions that call Talos are followed
   * like External ones.
   */
  noTalos?: true;
}
