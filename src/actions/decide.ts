// The NodeAction state machine, as a pure function of what the controller observes:
// the action, its node, the checks, the hooks, the hook Jobs and webhook calls, and the
// time. It returns the next status and the effects that carry it out; the reconciler
// (reconciler.ts) only gathers the observations and applies the decision.
//
//   Pending ─(admission: policies allow it; admission.ts)→ WaitingForHealth ─(fresh
//   checks all healthy)→ RunningPreHooks ─(every matching pre-hook succeeded)→ Approved
//   ─(executed mark, or the node changes)→ WaitingForNode ─(new boot, Ready)→
//   RunningPostHooks ─(the boot reconciler's record: the node's boot hooks done)→ Succeeded
//   (Managed, with the Talos executor: Approved → Executing ─(prepare, drain, install,
//   then the Talos call, recorded before it is made)→ WaitingForNode; see execute())
//   and Failed (a deadline, a failed hook, a vanished node), Denied (no such node),
//   Cancelled (deleted before it finished).
//
// Leaving Pending is the one transition this function never makes: it takes a slot of
// the policies' budgets, and budgets are judged across actions, one admission at a
// time (admission.ts). Everything else about one action is decided here.
import type { BootAnnouncement, BootRecord } from '../api/boot-record.ts';
import type { ClusterHealthCheckSpec } from '../api/cluster-health-check.ts';
import {
  EXECUTED_ANNOTATION,
  type ExecutionRecord,
  type NodeActionPhase,
  type NodeActionSpec,
  type NodeActionStatus,
} from '../api/node-action.ts';
import { checkGates } from '../checks/selection.ts';
import type { CheckState } from '../checks/state.ts';
import { parseDuration } from '../duration.ts';
import type { HookSubject, JobFacts } from '../hooks/job.ts';
import {
  bypassedRecords,
  clip,
  isFinished,
  jobKey,
  planHookStage,
  stopRuns,
  type HookEffect,
  type HookRunRecord,
  type WebhookFacts,
} from '../hooks/plan.ts';
import { selectHooks, type HookObject } from '../hooks/select.ts';
import { bootOutcome, isBootHookKind } from '../boots/record.ts';
import { planTalosAction, type TalosPlan } from '../talos/executor.ts';
import {
  compareTalosVersions,
  formatTalosVersion,
  installerVersion,
  talosVersionFromOsImage,
} from '../talos/version.ts';
import { errorMessage, formatDuration } from '../wait.ts';
import { findCondition, setCondition } from './conditions.ts';
import type { SilenceEffect } from './silences.ts';
import {
  PHASE_DEADLINES,
  PRE_HOOK_KIND,
  completionOf,
  drainsBeforeCall,
  holdsSlot,
  isTerminal,
} from './phases.ts';

/** Held by every unfinished action, so that deleting one cancels it and stops its hook Jobs first. */
export const FINALIZER = 'talos.dev/node-action';

/** How often a held health gate asks for a fresh evaluation again (check status changes also wake it). */
export const HEALTH_RETRY_MS = 5000;

export interface ObservedNodeAction {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    uid: string;
    generation?: number;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    finalizers?: string[];
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec: NodeActionSpec;
  status?: NodeActionStatus;
}

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
  /** The node carries the preready taint (talos.dev/preready). */
  prereadyTaint?: boolean;
  /** An action's announcement of the node's coming boot (annotation talos.dev/next-boot). */
  announcement?: BootAnnouncement;
  /** The boot reconciler's record of the node's current boot (annotation talos.dev/boot-hooks). */
  boot?: BootRecord;
}

/** The steps of a Managed action the Talos executor makes (src/talos/executor.ts). */
export type ExecutionStep = 'prepare' | 'drain' | 'install' | 'call';

/** What the Talos executor knows of one step of an action; in memory, so lost with the process. */
export interface ExecutionStepFacts {
  state: 'running' | 'succeeded' | 'failed';
  /** Progress while it runs; its result, or its error, once it is over. */
  message: string;
  /** A failed call: whether it may still have reached Talos (no answer in time, cancelled). */
  mayHaveReached?: boolean;
  /** A call Talos acknowledged: whether the node reboots or goes down because of it. */
  disrupts?: boolean;
}

export type ExecutionFacts = Partial<Record<ExecutionStep, ExecutionStepFacts>>;

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
  hooks: readonly HookObject[];
  jobs: ReadonlyMap<string, JobFacts>;
  webhooks: ReadonlyMap<string, WebhookFacts>;
  /**
   * The Talos executor's knowledge of this action's steps. Undefined: this controller has
   * no Talos executor (no talosconfig), and Managed actions are followed like External ones.
   */
  execution?: ExecutionFacts;
}

export type ActionEffect =
  | HookEffect
  | { type: 'event'; eventType: 'Normal' | 'Warning'; reason: string; message: string }
  /** Run the admission pass: an action waits for a slot, or gave one back. */
  | { type: 'admission' }
  /**
   * Announce the action's coming boot on its node (talos.dev/next-boot) and, with
   * `taint`, put the preready taint on: before approval (src/boots).
   */
  | { type: 'announceBoot'; announcement: BootAnnouncement; taint: boolean }
  /** Cordon the node for this action and drain it as spec.drain says (repeatable). */
  | { type: 'drain' }
  /** A repeatable Talos step of a Managed action (src/talos/executor.ts). */
  | { type: 'talos'; step: 'prepare' | 'install' }
  /**
   * The disruptive Talos call, made at most once: only while the action's status, read
   * afresh, still records this `callTime` (written before this effect is carried out).
   */
  | { type: 'talos'; step: 'call'; call: string; callTime: string }
  /** Lift the cordon this action made (talos.dev/cordoned-by). */
  | { type: 'uncordon' }
  /** Stop the executor's steps of this action that still run. */
  | { type: 'stopExecution'; reason: string }
  /** Hold (create or renew) or release an Alertmanager silence (silences.ts). */
  | SilenceEffect;

export interface ActionDecision {
  status: NodeActionStatus;
  addFinalizer: boolean;
  removeFinalizer: boolean;
  /** Evaluate these checks afresh and decide again with the results (`fresh`). */
  evaluateChecks?: string[];
  effects: ActionEffect[];
  requeueAfterMs?: number;
}

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

export function isExecutedMarked(action: ObservedNodeAction): boolean {
  return action.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true';
}

export function actionParameters(spec: NodeActionSpec): Record<string, unknown> {
  const { upgrade, reboot, reset, configChange } = spec;
  return {
    ...(upgrade ? { upgrade } : {}),
    ...(reboot ? { reboot } : {}),
    ...(reset ? { reset } : {}),
    ...(configChange ? { configChange } : {}),
  };
}

/** Who the action's hook runs are for, about the given boot of its node. */
export function hookSubject(action: ObservedNodeAction, bootID: string | undefined): HookSubject {
  return {
    node: action.spec.nodeName,
    ...(bootID ? { bootID } : {}),
    action: {
      name: action.metadata.name,
      uid: action.metadata.uid,
      action: action.spec.action,
      parameters: actionParameters(action.spec),
      ...(action.spec.upgrade ? { targetImage: action.spec.upgrade.image } : {}),
    },
    owner: {
      apiVersion: action.apiVersion ?? 'talos.dev/v1alpha1',
      kind: 'NodeAction',
      name: action.metadata.name,
      uid: action.metadata.uid,
      controller: true,
      blockOwnerDeletion: true,
    },
  };
}

export function phaseDeadlineMs(spec: NodeActionSpec, phase: NodeActionPhase): number | undefined {
  const deadline = PHASE_DEADLINES[phase];
  if (!deadline) return undefined;
  const value = (spec.deadlines as Record<string, string | undefined> | undefined)?.[deadline.field];
  return parseDuration(value ?? deadline.default);
}

/** Hook Jobs of the action's records that still run (not finished, not being deleted). */
function liveJobs(records: readonly HookRunRecord[], jobs: ReadonlyMap<string, JobFacts>): HookRunRecord[] {
  return records.filter((r) => {
    if (r.jobName === undefined) return false;
    const facts = jobs.get(jobKey(r.namespace, r.jobName));
    return facts !== undefined && !facts.deleting && facts.phase !== 'Succeeded' && facts.phase !== 'Failed';
  });
}

function checkResult(name: string, state: CheckState | undefined, at: Date, bypassed: boolean): CheckResult {
  const healthy = state?.healthy === true;
  const message =
    state === undefined
      ? 'unknown: the check no longer exists'
      : state.healthy === undefined
        ? `unknown: ${state.message}`
        : state.message;
  return {
    name,
    healthy,
    ...(bypassed ? { bypassed: true } : {}),
    probeTime: (state?.lastProbeTime ?? at).toISOString(),
    message: message.slice(0, 4096),
  };
}

function describeChecks(results: readonly CheckResult[]): string {
  const failing = results.filter((r) => !r.healthy);
  const shown = failing.slice(0, 5).map((r) => `${r.name} (${r.message})`);
  return `${shown.join('; ')}${failing.length > 5 ? `; and ${failing.length - 5} more` : ''}`;
}

export function decide(input: ActionInput): ActionDecision {
  const { action, now, node } = input;
  const spec = action.spec;
  const nodeName = spec.nodeName;
  const generation = action.metadata.generation;
  const status: NodeActionStatus = structuredClone(action.status ?? {});
  const effects: ActionEffect[] = [];
  let requeueAfterMs: number | undefined;
  let evaluateChecks: string[] | undefined;
  const wakeIn = (ms: number | undefined) => {
    if (ms === undefined) return;
    const m = Math.max(0, Math.ceil(ms));
    requeueAfterMs = requeueAfterMs === undefined ? m : Math.min(requeueAfterMs, m);
  };
  const hasFinalizer = (action.metadata.finalizers ?? []).includes(FINALIZER);
  const decision = (extra: Partial<ActionDecision> = {}): ActionDecision => ({
    status,
    addFinalizer: false,
    removeFinalizer: false,
    effects,
    ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}),
    ...(evaluateChecks ? { evaluateChecks } : {}),
    ...extra,
  });
  const condition = (type: string, value: 'True' | 'False' | 'Unknown', reason: string, message: string) => {
    status.conditions = setCondition(
      status.conditions,
      {
        type,
        status: value,
        reason,
        message,
        ...(generation !== undefined ? { observedGeneration: generation } : {}),
      },
      now,
    );
  };
  const event = (eventType: 'Normal' | 'Warning', reason: string, message: string) =>
    effects.push({ type: 'event', eventType, reason, message });

  const transition = (next: NodeActionPhase, message: string) => {
    const previous = status.phase;
    status.phase = next;
    status.phaseTime = now.toISOString();
    status.message = message;
    if (isTerminal(next)) status.completionTime = now.toISOString();
    event(
      next === 'Failed' || next === 'Denied' || next === 'Cancelled' ? 'Warning' : 'Normal',
      next,
      `${spec.action} of node ${nodeName}: ${message}`,
    );
    // A slot given back, or an action that now waits for one: the admission pass runs.
    if (holdsSlot(previous) !== holdsSlot(next) || next === 'Pending') effects.push({ type: 'admission' });
  };
  const records = () => status.hooks ?? [];
  /** The runs of the action's own (pre-action) hooks, without the boot's shown beside them. */
  const ownRecords = () => records().filter((r) => !isBootHookKind(r.kind));
  const subjectFor = (bootID: string | undefined) => hookSubject(action, bootID);
  /** Ends the action unsuccessfully, stopping every unfinished hook run. */
  const end = (phase: 'Failed' | 'Denied' | 'Cancelled', why: string) => {
    // Like kubectl drain, a failed or cancelled action leaves its cordon: the node's state
    // needs a look before workloads come back.
    const message =
      node?.cordonedBy === action.metadata.name
        ? `${why}; node ${nodeName} stays cordoned (kubectl uncordon ${nodeName} once it is fine)`
        : why;
    // Boot hook runs shown here are the boot's (src/boots), which goes on without the action.
    const stopped = stopRuns(
      ownRecords(),
      subjectFor(node?.bootID ?? status.bootIDBefore),
      now,
      `stopped: the action ${phase === 'Cancelled' ? 'was cancelled' : 'failed'}`,
    );
    if (stopped.records.length)
      status.hooks = [...stopped.records, ...records().filter((r) => isBootHookKind(r.kind))];
    effects.push(...stopped.effects);
    transition(phase, message);
  };
  /** Jobs to stop once the action is over (a delete lost to a crash is issued again). */
  const cleanUp = () => {
    const running = Object.entries(input.execution ?? {}).filter(([, f]) => f.state === 'running');
    if (running.length > 0)
      effects.push({
        type: 'stopExecution',
        reason: `the action is ${status.phase ?? 'over'}`,
      });
    const live = liveJobs(ownRecords(), input.jobs);
    const deleting = new Set(
      effects.flatMap((e) => (e.type === 'deleteJob' ? [jobKey(e.namespace, e.name)] : [])),
    );
    for (const r of live) {
      if (isFinished(r) && r.jobName && !deleting.has(jobKey(r.namespace, r.jobName))) {
        effects.push({
          type: 'deleteJob',
          namespace: r.namespace,
          name: r.jobName,
          reason: 'the action is over',
        });
      }
    }
    if (live.length) wakeIn(2000);
    return live.length === 0;
  };

  // Deleted: cancel what is unfinished, stop its Jobs, then let it go.
  if (action.metadata.deletionTimestamp) {
    if (!isTerminal(status.phase))
      end('Cancelled', `deleted before it finished (it was ${status.phase ?? 'new'})`);
    const clean = cleanUp();
    return decision({ removeFinalizer: hasFinalizer && clean });
  }
  if (isTerminal(status.phase)) {
    const clean = cleanUp();
    return decision({ removeFinalizer: hasFinalizer && clean });
  }
  if (!hasFinalizer) return decision({ addFinalizer: true });

  if (status.phase === undefined) {
    status.startTime = now.toISOString();
    const bypass = spec.bypass;
    const execution = spec.execution ?? 'Managed';
    event(
      'Normal',
      'Requested',
      `${spec.requestedBy} requested ${spec.action} of node ${nodeName} (execution ${execution})`,
    );
    if (bypass?.healthChecks || bypass?.hooks) {
      const what = [bypass.healthChecks ? 'health checks' : '', bypass.hooks ? 'pre-action hooks' : '']
        .filter(Boolean)
        .join(' and ');
      const message = `${spec.requestedBy} bypasses the ${what} of ${spec.action} on node ${nodeName}: ${bypass.reason ?? '(no reason given)'}`;
      condition('Bypassed', 'True', 'BypassRequested', message);
      event('Warning', 'Bypassed', message);
    }
    transition('Pending', 'waiting for its policies to allow it');
  }
  status.observedGeneration = generation;

  for (let steps = 0; steps < 12; steps++) {
    const phase = status.phase as NodeActionPhase;
    if (isTerminal(phase)) break;
    const deadlineMs = phaseDeadlineMs(spec, phase);
    const since = Date.parse(status.phaseTime ?? status.startTime ?? now.toISOString());
    if (deadlineMs !== undefined && now.getTime() - since >= deadlineMs) {
      const d = PHASE_DEADLINES[phase];
      end(
        'Failed',
        `${d?.what ?? phase} for longer than deadlines.${d?.field ?? phase} (${formatDuration(deadlineMs)}): ${status.message ?? ''}`,
      );
      break;
    }
    if (deadlineMs !== undefined) wakeIn(since + deadlineMs - now.getTime());
    step(phase);
    // Approved is always written as it is: a requester waits to see it before acting.
    if (status.phase === phase || status.phase === 'Approved' || evaluateChecks) break;
  }
  // The CRD bounds messages; a long one (a Job the API server refused, with every field
  // error) must not make the status unwritable.
  if (status.message !== undefined) status.message = clip(status.message, 32768);
  if (isTerminal(status.phase)) return decision({ removeFinalizer: cleanUp() });
  return decision();

  function step(phase: NodeActionPhase): void {
    switch (phase) {
      case 'Pending':
        // Waiting for the admission pass, which runs when an action enters Pending, when a
        // slot is given back, when policies or node labels change, and every minute.
        if (!node) end('Denied', `node ${nodeName} does not exist`);
        return;

      case 'WaitingForHealth': {
        if (!node) {
          end('Failed', `node ${nodeName} no longer exists`);
          return;
        }
        const gating = input.checks
          .filter((c) => checkGates(c.spec, spec.action, node.labels))
          .sort((a, b) => a.name.localeCompare(b.name));
        if (spec.bypass?.healthChecks) {
          status.checks = gating.map((c) => checkResult(c.name, c.state, now, true));
          condition(
            'HealthChecksPassed',
            'True',
            'Bypassed',
            `health checks bypassed by ${spec.requestedBy}: ${spec.bypass.reason ?? ''}`,
          );
          transition('RunningPreHooks', 'health checks bypassed; running pre-action hooks');
          return;
        }
        if (gating.length === 0) {
          status.checks = [];
          condition(
            'HealthChecksPassed',
            'True',
            'NoChecks',
            `no health check gates ${spec.action} on ${nodeName}`,
          );
          transition(
            'RunningPreHooks',
            `no health check gates ${spec.action} on ${nodeName}; running pre-action hooks`,
          );
          return;
        }
        const fresh = input.fresh;
        if (!fresh) {
          // Held on a recent evaluation: probe again after HEALTH_RETRY_MS, or at once when
          // a check's latest state differs from what the action was judged on. (Without
          // this, each write of the held status would bring a new evaluation at once.)
          const recorded = new Map((status.checks ?? []).map((c) => [c.name, c]));
          const judgedAt = Math.max(...[...recorded.values()].map((c) => Date.parse(c.probeTime ?? '') || 0));
          const unchanged =
            recorded.size === gating.length &&
            gating.every((c) => recorded.get(c.name)?.healthy === (c.state.healthy === true));
          const age = now.getTime() - judgedAt;
          if (recorded.size > 0 && unchanged && age < HEALTH_RETRY_MS) {
            wakeIn(HEALTH_RETRY_MS - age);
            return;
          }
          evaluateChecks = gating.map((c) => c.name);
          return;
        }
        // Fail closed: a check the fresh evaluation did not cover counts as unknown.
        const results = gating.map((c) => checkResult(c.name, fresh.states.get(c.name), fresh.at, false));
        status.checks = results;
        if (results.every((r) => r.healthy)) {
          const message = `${results.length} health check${results.length === 1 ? '' : 's'} healthy`;
          condition('HealthChecksPassed', 'True', 'Healthy', message);
          transition('RunningPreHooks', `${message}; running pre-action hooks`);
          return;
        }
        const failing = describeChecks(results);
        condition('HealthChecksPassed', 'False', 'Waiting', `waiting for ${failing}`);
        status.message = `waiting for health checks: ${failing}`;
        wakeIn(HEALTH_RETRY_MS);
        return;
      }

      case 'RunningPreHooks': {
        if (!node) {
          end('Failed', `node ${nodeName} no longer exists`);
          return;
        }
        const hooks = selectHooks(input.hooks, PRE_HOOK_KIND[spec.action], node.labels);
        if (spec.bypass?.hooks) {
          const reason = `bypassed by ${spec.requestedBy}: ${spec.bypass.reason ?? ''}`;
          const recorded = new Set(records().map((r) => r.uid));
          status.hooks = [
            ...records(),
            ...bypassedRecords(
              hooks.filter((h) => !recorded.has(h.metadata.uid)),
              now,
              reason,
            ),
          ];
          condition('PreHooksSucceeded', 'True', 'Bypassed', `pre-action hooks ${reason}`);
          approve(node);
          return;
        }
        const plan = planHookStage({
          now,
          subject: subjectFor(node.bootID),
          hooks,
          records: records(),
          jobs: input.jobs,
          webhooks: input.webhooks,
        });
        status.hooks = plan.records;
        effects.push(...plan.effects);
        wakeIn(plan.requeueAfterMs);
        if (plan.outcome === 'Succeeded') {
          condition('PreHooksSucceeded', 'True', 'Succeeded', plan.message);
          approve(node);
        } else if (plan.outcome === 'Failed') {
          condition('PreHooksSucceeded', 'False', 'HookFailed', plan.message);
          end('Failed', `pre-action hook failed: ${plan.message}`);
        } else {
          condition('PreHooksSucceeded', 'Unknown', 'Running', plan.message);
          status.message = `pre-action hooks: ${plan.message}`;
        }
        return;
      }

      case 'Approved':
      case 'Executing': {
        const marked = isExecutedMarked(action);
        if (executesHere() && (phase === 'Executing' || !marked)) {
          if (phase === 'Approved') beginExecution();
          else execute();
          return;
        }
        // External execution, or Managed without an executor (see approve()): the
        // requester performs the action, and the node is followed.
        const completion = completionOf(spec);
        const rebooted =
          node !== undefined && status.bootIDBefore !== undefined && node.bootID !== status.bootIDBefore;
        // What shows that the action happened even without the mark. NotReady alone does
        // not for a reboot (a node can blip); it does for a shutdown.
        const seen = !node
          ? `node ${nodeName} is gone`
          : rebooted
            ? `node ${nodeName} has a new boot ID`
            : completion === 'down' && !node.ready
              ? `node ${nodeName} is NotReady`
              : undefined;
        const started =
          marked ||
          ((completion === 'reboot' || completion === 'down') && seen !== undefined) ||
          (completion === 'removed' && !node);
        if (!started) return;
        status.executionTime = now.toISOString();
        const how = marked
          ? `marked executed (${EXECUTED_ANNOTATION})`
          : `${seen ?? ''} before the executed mark`;
        condition('Executed', 'True', marked ? 'MarkedExecuted' : 'NodeChanged', how);
        transition('WaitingForNode', `${how}; ${waitingMessage(completion)}`);
        return;
      }

      case 'WaitingForNode': {
        const completion = completionOf(spec, status.execution);
        const rebooted = node !== undefined && node.bootID !== status.bootIDBefore;
        switch (completion) {
          case 'reboot':
            if (node && rebooted && node.ready) {
              const wrongVersion = upgradeMissed(node);
              if (wrongVersion) {
                end('Failed', wrongVersion);
                return;
              }
              status.bootIDAfter = node.bootID;
              const message = `node ${nodeName} is back and Ready with boot ID ${node.bootID ?? '?'}`;
              condition('NodeReturned', 'True', 'Rebooted', message);
              transition('RunningPostHooks', `${message}; running its boot hooks`);
            } else {
              status.message = !node
                ? `node ${nodeName} is gone; waiting for it to register again`
                : rebooted
                  ? `node ${nodeName} rebooted (boot ID ${node.bootID ?? '?'}); waiting for it to be Ready`
                  : `waiting for node ${nodeName} to reboot (boot ID still ${status.bootIDBefore ?? '?'})`;
            }
            return;
          case 'down':
            if (!node || !node.ready || rebooted) {
              if (node?.bootID) status.bootIDAfter = node.bootID;
              transition(
                'Succeeded',
                !node
                  ? `node ${nodeName} is gone`
                  : rebooted && node.ready
                    ? `node ${nodeName} was shut down and is back`
                    : `node ${nodeName} is down`,
              );
            } else {
              status.message = `waiting for node ${nodeName} to go down`;
            }
            return;
          case 'removed':
            if (!node) transition('Succeeded', `node ${nodeName} was removed from the cluster`);
            else status.message = `waiting for node ${nodeName} to be removed from the cluster`;
            return;
          case 'mark':
            if (node?.ready) {
              status.bootIDAfter = node.bootID;
              condition('NodeReturned', 'True', 'Ready', `node ${nodeName} is Ready`);
              succeed(`configuration change done; node ${nodeName} is Ready`);
            } else {
              status.message = `waiting for node ${nodeName} to be Ready`;
            }
            return;
        }
        return;
      }

      case 'RunningPostHooks': {
        if (!node) {
          end('Failed', `node ${nodeName} disappeared while its boot hooks ran`);
          return;
        }
        // The boot reconciler (src/boots) runs the boot hooks of every boot, and records
        // them on the node by boot ID; the action waits for the record of the boot it
        // caused, and shows that boot's runs beside its own.
        const bootID = status.bootIDAfter;
        const outcome = bootOutcome(
          node.boot,
          bootID,
          selectHooks(input.hooks, 'NodePrereadyJob', node.labels),
          selectHooks(input.hooks, 'NodeReadyJob', node.labels),
        );
        if (outcome.state !== 'Succeeded' && node.bootID !== bootID) {
          end(
            'Failed',
            `node ${nodeName} booted again (boot ID ${node.bootID ?? '?'}) before the boot hooks of boot ${bootID ?? '?'} were done`,
          );
          return;
        }
        if (outcome.state !== 'Waiting') status.hooks = [...ownRecords(), ...outcome.runs];
        if (outcome.state === 'Failed') {
          condition('PostHooksSucceeded', 'False', 'HookFailed', outcome.message);
          end('Failed', `boot hook failed: ${outcome.message}`);
        } else if (outcome.state === 'Succeeded') {
          condition('PostHooksSucceeded', 'True', 'Succeeded', outcome.message);
          succeed(`node ${nodeName} is back with boot ID ${bootID ?? '?'}; ${outcome.message}`);
        } else {
          condition('PostHooksSucceeded', 'Unknown', outcome.state, outcome.message);
          status.message = `boot hooks: ${outcome.message}`;
        }
        return;
      }

      default:
        return;
    }
  }

  /**
   * Before an action that makes its node boot is approved, the coming boot is announced
   * on the node — with the preready taint when a NodePrereadyJob selects it — so that the
   * node comes back tainted and the boot reconciler knows whose boot it is (src/boots).
   * The approval waits until the node, as observed, shows both: the taint is on before
   * the approval can be seen.
   */
  function bootAnnounced(n: NodeFacts): boolean {
    const completion = completionOf(spec);
    if (completion !== 'reboot' && completion !== 'down') return true;
    const prepare = selectHooks(input.hooks, 'NodePrereadyJob', n.labels).length;
    const ready = selectHooks(input.hooks, 'NodeReadyJob', n.labels).length;
    if (prepare + ready === 0) return true;
    const taint = prepare > 0;
    const a = n.announcement;
    if (
      a?.action.uid === action.metadata.uid &&
      a.bootID === (n.bootID ?? '') &&
      (!taint || n.prereadyTaint === true)
    )
      return true;
    effects.push({
      type: 'announceBoot',
      taint,
      announcement: {
        action: {
          name: action.metadata.name,
          uid: action.metadata.uid,
          action: spec.action,
          parameters: actionParameters(spec),
          ...(spec.upgrade ? { targetImage: spec.upgrade.image } : {}),
        },
        bootID: n.bootID ?? '',
        time: now.toISOString(),
      },
    });
    status.message = taint
      ? `putting the preready taint on node ${nodeName} before approval, so that it comes back tainted until its NodePrereadyJobs succeed`
      : `announcing the coming boot of node ${nodeName} to its boot hooks before approval`;
    wakeIn(2000);
    return false;
  }

  function approve(n: NodeFacts): void {
    if (!bootAnnounced(n)) return;
    status.approvalTime = now.toISOString();
    status.bootIDBefore = n.bootID;
    const execution = spec.execution ?? 'Managed';
    if (execution === 'Managed' && input.execution) {
      condition('Approved', 'True', 'Approved', `approved at boot ID ${n.bootID ?? '?'}`);
      transition('Approved', 'approved; the controller performs it through the Talos API');
      return;
    }
    const verb =
      spec.action === 'ConfigChange' ? 'apply the configuration change to' : `perform the ${spec.action} of`;
    const instruction = `${verb} node ${nodeName}, then set the annotation ${EXECUTED_ANNOTATION}: "true"`;
    if (execution === 'Managed') {
      condition(
        'Executed',
        'False',
        'ExecutorNotInstalled',
        `Managed execution needs the Talos executor, which this controller does not have yet: ${instruction}, or delete this action to cancel it`,
      );
    }
    condition('Approved', 'True', 'Approved', `approved at boot ID ${n.bootID ?? '?'}`);
    transition(
      'Approved',
      execution === 'Managed'
        ? `approved; the Talos executor is not installed, so ${instruction}`
        : `approved: ${instruction}`,
    );
  }

  /**
   * Whether this controller performs the action: Managed, with a Talos executor, and not
   * approved by a controller without one (whose requester was told to perform it: doing
   * it here too could do it twice).
   */
  function executesHere(): boolean {
    if ((spec.execution ?? 'Managed') !== 'Managed' || !input.execution) return false;
    return findCondition(status.conditions, 'Executed')?.reason !== 'ExecutorNotInstalled';
  }

  /** Ends a finished action, lifting its own cordon first (not after Shutdown or Reset: see callers). */
  function succeed(message: string): void {
    if (node?.cordonedBy === action.metadata.name) {
      effects.push({ type: 'uncordon' });
      status.message = `${message}; uncordoning node ${nodeName}`;
      wakeIn(2000);
      return;
    }
    transition('Succeeded', message);
  }

  /** A Managed upgrade whose node came back running another version than the installer's. */
  function upgradeMissed(n: NodeFacts): string | undefined {
    if (spec.action !== 'Upgrade' || status.execution?.callTime === undefined) return undefined;
    const wanted = installerVersion(spec.upgrade?.image ?? '');
    const running = talosVersionFromOsImage(n.osImage);
    if (!wanted || !running || compareTalosVersions(wanted, running) === 0) return undefined;
    return `node ${nodeName} came back running Talos ${formatTalosVersion(running)}, not ${formatTalosVersion(wanted)}: the upgrade did not take (Talos boots the previous version when the new one fails)`;
  }

  function beginExecution(): void {
    if (!node) {
      end('Failed', `node ${nodeName} no longer exists; nothing was done to it`);
      return;
    }
    status.executionTime = now.toISOString();
    condition('Executed', 'Unknown', 'Executing', 'executing through the Talos API');
    transition('Executing', 'executing through the Talos API');
  }

  /**
   * Managed execution, one step per pass, each from what is recorded in the status and
   * what the executor knows in memory:
   *
   *   prepare (repeatable) → drain (repeatable; recorded as drainTime) → install
   *   (repeatable) → the Talos call: callTime is written before the call is made, and
   *   once it is written the call is never made again — a controller that finds it
   *   without knowing the call's outcome waits for the node instead.
   *
   * The repeatable steps run again in a process that has no result of them (after a
   * restart), so a controller that died between installing an upgrade and rebooting
   * into it installs again and reboots, instead of waiting for a reboot nobody makes.
   */
  function execute(): void {
    const facts = input.execution ?? {};
    const recorded: ExecutionRecord = status.execution ?? {};
    if (recorded.callTime !== undefined) {
      afterCall(recorded, facts.call);
      return;
    }
    if (facts.call) {
      // This process made the call, but the status it decides on does not show the
      // record written before it: a stale view. Its own write will bring a newer one.
      wakeIn(1000);
      return;
    }
    if (!node) {
      end('Failed', `node ${nodeName} disappeared before it was acted on; nothing was done to it`);
      return;
    }
    let plan: TalosPlan;
    try {
      plan = planTalosAction(spec, node.osImage);
    } catch (error) {
      const message = errorMessage(error);
      condition('Executed', 'False', 'CannotPlan', message);
      end('Failed', message);
      return;
    }
    if (plan.prepare !== undefined && !repeatable('prepare', plan.prepare, 'Preparing')) return;
    if (recorded.drainTime === undefined) {
      if (!drainsBeforeCall(spec)) {
        const why =
          spec.drain?.enabled === false
            ? 'not drained: spec.drain.enabled is false'
            : `not drained: a ConfigChange in mode ${spec.configChange?.mode ?? 'Auto'} does not reboot the node`;
        status.execution = { ...recorded, drainTime: now.toISOString() };
        condition('Drained', 'True', spec.drain?.enabled === false ? 'Disabled' : 'NotNeeded', why);
      } else {
        const op = facts.drain;
        if (!op) {
          const message = `cordoning and draining node ${nodeName} (timeout ${spec.drain?.timeout ?? '10m'})`;
          effects.push({ type: 'drain' });
          condition('Drained', 'Unknown', 'Draining', message);
          event('Normal', 'Draining', message);
          status.message = message;
          return;
        }
        if (op.state === 'running') {
          condition('Drained', 'Unknown', 'Draining', op.message);
          status.message = `draining node ${nodeName}: ${op.message}`;
          return;
        }
        if (op.state === 'failed') {
          condition('Drained', 'False', 'DrainFailed', op.message);
          end('Failed', `the drain failed: ${op.message}`);
          return;
        }
        status.execution = { ...recorded, drainTime: now.toISOString() };
        condition('Drained', 'True', 'Drained', op.message);
        event('Normal', 'Drained', op.message);
      }
    }
    if (plan.install !== undefined && !repeatable('install', plan.install, 'Installing')) return;
    // The call: recorded first (the reconciler writes this status before carrying out
    // the effect, and the effect checks the record afresh), then made.
    const callTime = now.toISOString();
    const message = `calling Talos ${plan.call} on node ${nodeName}`;
    status.execution = { ...(status.execution ?? {}), call: plan.call, callTime };
    condition('Executed', 'Unknown', 'Calling', message);
    event('Normal', 'TalosCall', message);
    status.message = message;
    effects.push({ type: 'talos', step: 'call', call: plan.call, callTime });
  }

  /** A repeatable step: true once this process has made it. */
  function repeatable(step: 'prepare' | 'install', what: string, reason: string): boolean {
    const op = input.execution?.[step];
    if (!op) {
      effects.push({ type: 'talos', step });
      event('Normal', reason, `${what} on node ${nodeName}`);
      status.message = `${what} on node ${nodeName}`;
      return false;
    }
    if (op.state === 'running') {
      status.message = `${what} on node ${nodeName}: ${op.message}`;
      return false;
    }
    if (op.state === 'failed') {
      condition('Executed', 'False', 'TalosError', op.message);
      end('Failed', `could not ${what}: ${op.message}`);
      return false;
    }
    return true;
  }

  /** Executing, with the call recorded: what came of it decides, and it is never made again. */
  function afterCall(recorded: ExecutionRecord, op: ExecutionStepFacts | undefined): void {
    const call = recorded.call ?? 'the Talos call';
    if (op?.state === 'running') {
      status.message = `calling Talos ${call} on node ${nodeName}: ${op.message}`;
      return;
    }
    if (op?.state === 'succeeded') {
      status.execution = { ...recorded, callResult: 'Acknowledged', reboots: op.disrupts ?? true };
      condition('Executed', 'True', 'Acknowledged', `Talos acknowledged ${call}: ${op.message}`);
      event('Normal', 'TalosCallAcknowledged', `Talos acknowledged ${call}: ${op.message}`);
      transition(
        'WaitingForNode',
        `Talos acknowledged ${call} (${op.message}); ${waitingMessage(completionOf(spec, status.execution))}`,
      );
      return;
    }
    if (op?.state === 'failed' && !op.mayHaveReached) {
      status.execution = { ...recorded, callResult: 'Failed' };
      condition('Executed', 'False', 'TalosError', op.message);
      end('Failed', `Talos ${call} failed: ${op.message}`);
      return;
    }
    // Made, perhaps: by a process that is gone, or without an answer. Never again.
    const why = op
      ? `no answer from Talos: ${op.message}`
      : 'the controller restarted (or another replica took over) while it was being made';
    status.execution = { ...recorded, callResult: 'Unknown' };
    const completion = completionOf(spec, status.execution);
    const message = `whether Talos ${call} reached node ${nodeName} is unknown (${why}); it is not made twice`;
    condition('Executed', 'Unknown', 'OutcomeUnknown', message);
    event('Warning', 'TalosCallOutcomeUnknown', message);
    if (completion === 'mark') {
      // Nothing about the node would show a change applied live.
      end(
        'Failed',
        `${message}: check the node's configuration (talosctl get machineconfig -n ${nodeName}) and request the change again if it is not there`,
      );
      return;
    }
    transition('WaitingForNode', `${message}; ${waitingMessage(completion)}`);
  }
}

function waitingMessage(completion: ReturnType<typeof completionOf>): string {
  switch (completion) {
    case 'reboot':
      return 'waiting for the node to come back with a new boot ID';
    case 'down':
      return 'waiting for the node to go down';
    case 'removed':
      return 'waiting for its Node object to be deleted (a reset machine leaves it behind: kubectl delete node once the reset is done)';
    case 'mark':
      return 'waiting for the node to be Ready';
  }
}
