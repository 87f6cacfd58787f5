// The admission pass: the one place actions take slots of their policies' budgets. It
// runs in one work-queue key (ADMISSION_KEY), never two at once, only on the leader; it
// counts every instance's unfinished actions from a quorum read, or from the caches once
// they provably show every slot (admission-read.ts); planAdmissions() (admission.ts)
// decides; each admission is one status write, conditional on the version listed. It
// also writes each ActionPolicy's status (what it allows, how much is taken).
import { INSTANCE_LABEL, POLICY_VALID_CONDITION } from '../api/names.ts';
import type { ActionObject } from '../api/node-action.ts';
import { ACTION_POLICIES_PATH, NODE_ACTIONS_PATH } from '../api/paths.ts';
import { UNFINISHED_FIELD_SELECTOR, holdsSlot, isTerminal } from '../api/phases.ts';
import { sameJSON } from '../canonical-json.ts';
import { setCondition } from '../kube/conditions.ts';
import { KubeApiError } from '../kube/rest.ts';
import { isConflict } from '../kube/reconciler.ts';
import type { ReconcileResult } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import { reportPolicy, type ActionRef, type NodeLabels } from '../policies/evaluate.ts';
import { errorMessage } from '../wait.ts';
import type { TurnSection } from '../kube/turn-lease.ts';
import {
  cacheShowsEverySlot,
  foreignUnfinished,
  parseResourceVersion,
  type AdmissionReadState,
  afterWrite,
} from './admission-read.ts';
import { enterTurn, waitingForTurn } from './instance-turn.ts';
import { actionRef, isCandidate, isNew, planAdmissions } from './admission.ts';
import type { ActionPass } from './action-pass.ts';
import { policyFacts, type ActionContext } from './context.ts';
import type { ActionDecision } from './decide.ts';

/**
 * How long an admission pass waits for an admitted action's fresh evaluation (begun
 * beside its list) before writing the admission alone: a slow probe must not hold up
 * every other admission.
 */
const FOLD_WAIT_MS = 250;

type UnfinishedList = { items: ActionObject[]; metadata?: { resourceVersion?: string } };

/** What the admission pass reads of another instance's action: who, where, and whether it holds a slot. */
export function slimForeignAction(a: ActionObject): ActionObject {
  const { name, uid, resourceVersion, labels, creationTimestamp, deletionTimestamp } = a.metadata;
  return {
    metadata: {
      name,
      uid,
      ...(resourceVersion !== undefined ? { resourceVersion } : {}),
      ...(labels ? { labels } : {}),
      ...(creationTimestamp !== undefined ? { creationTimestamp } : {}),
      ...(deletionTimestamp !== undefined ? { deletionTimestamp } : {}),
    },
    spec: { nodeName: a.spec.nodeName, action: a.spec.action },
    ...(a.status?.phase !== undefined ? { status: { phase: a.status.phase } } : {}),
  } as ActionObject;
}

export class AdmissionPass {
  private readonly c: ActionContext;
  private readonly actions: ActionPass;
  /** Whether the API server filters NodeActions by phase (see readUnfinished). */
  private fieldSelectors = true;
  /** What the admission pass knows of the caches' completeness (admission-read.ts). */
  private read: AdmissionReadState = {};
  /** Bumped whenever leadership may have changed hands: a quorum read begun before does not count. */
  private leadership = 0;
  /** Other instances' unfinished actions as the last quorum read showed them (admission-read.ts). */
  private foreignAtQuorum: { items: ActionObject[]; resourceVersion?: string } = { items: [] };

  constructor(context: ActionContext, actions: ActionPass) {
    this.c = context;
    this.actions = actions;
  }

  /** A write of ours returned this resourceVersion: the caches must show it before they are counted from. */
  written(resourceVersion: string | undefined): void {
    this.read = afterWrite(this.read, resourceVersion);
  }

  /**
   * Leadership may have changed hands (or a write conflicted): the next pass counts from a
   * quorum read, since another leader may have taken slots since our last one.
   */
  forgetQuorum(): void {
    this.leadership++;
    this.read = { ...this.read, quorum: undefined };
  }

  private nodeLabels(): NodeLabels {
    return new Map(this.c.o.nodes.list().map((n) => [n.metadata.name, n.metadata.labels ?? {}]));
  }

  async run(): Promise<ReconcileResult | undefined> {
    const { o } = this.c;
    const now = new Date();
    const nodes = this.nodeLabels();
    let holders: ActionRef[];
    let requeueAfterMs: number | undefined;
    if (!o.actions.list().some((a) => isCandidate(a) || isNew(a))) {
      holders = o.actions
        .list()
        .filter((a) => holdsSlot(a.status?.phase))
        .map(actionRef);
    } else {
      // Admissions of every instance take turns (instance-turn.ts): without the turn, the
      // pass only tells its actions what they wait for, from the caches.
      const turn = enterTurn(o.turn);
      let plan: Awaited<ReturnType<AdmissionPass['admit']>>;
      try {
        plan = await this.admit(now, nodes, turn);
      } finally {
        turn?.release();
      }
      if (plan === 'not leading') return undefined;
      if (plan === 'conflict') return { requeueAfterMs: 0 };
      holders = plan.holders;
      requeueAfterMs = plan.requeueAfterMs;
    }
    await this.writePolicyStatuses(holders, nodes, now);
    return requeueAfterMs !== undefined ? { requeueAfterMs } : undefined;
  }

  /**
   * Admits what the policies allow and records why the others wait. 'conflict': an
   * admission conflicted, and the pass runs again at once, from a quorum read.
   */
  private async admit(
    now: Date,
    nodes: NodeLabels,
    turn: TurnSection | undefined,
  ): Promise<{ holders: ActionRef[]; requeueAfterMs?: number } | 'conflict' | 'not leading'> {
    const { o } = this.c;
    // The cache foretells whom this pass will admit: their health gates' evaluations
    // begin now, beside the list, so that the admission can carry the gate's verdict.
    const foretold = planAdmissions({
      now,
      actions: o.actions
        .list()
        .map((a) => (isNew(a) ? { ...a, status: { ...a.status, phase: 'Pending' as const } } : a)),
      nodes,
      policies: policyFacts(o.policies),
    });
    for (const { action } of foretold.admit) this.actions.beginEvaluation(action);
    // Every instance's unfinished actions: another instance's action on a node keeps
    // ours off it. From the caches when they show every slot taken (admission-read.ts),
    // else a quorum read: a cache that missed an admission written a moment ago could
    // give one slot out twice.
    const list = turn
      ? (this.unfinishedFromCaches() ?? (await this.listUnfinished()))
      : this.cachedUnfinished();
    const mine = (a: ActionObject) => a.metadata.labels?.[INSTANCE_LABEL] === o.instance;
    // New actions enter the pass as their own decision records them: requested, Pending.
    const requested = new Map<string, ActionDecision>();
    const listed: ActionObject[] = [];
    for (const a of list.items.filter(mine)) {
      const decision = isNew(a) ? await this.actions.decideFor(a, true) : undefined;
      if (decision?.status.phase !== 'Pending') {
        listed.push(a);
        continue;
      }
      requested.set(a.metadata.name, decision);
      listed.push({ ...a, status: decision.status });
    }
    const planned = planAdmissions({
      now,
      actions: listed,
      others: list.items.filter((a) => !mine(a)),
      ...(o.controlPlaneAcrossInstances ? { controlPlaneInstances: o.controlPlaneAcrossInstances } : {}),
      nodes,
      policies: policyFacts(o.policies),
    });
    const plan = turn ? planned : waitingForTurn(planned, o.turn);
    // Leading, and the turn still ours: lost since the read (renewals failing), another
    // instance may be admitting, and this pass's read counts for nothing.
    const lost = () => {
      if (!o.isLeader()) return 'not leading' as const;
      this.forgetQuorum();
      return 'conflict' as const;
    };
    for (const { action, status } of plan.admit) {
      if (!o.isLeader() || !turn?.valid()) return lost();
      const admitted = { ...(action as ActionObject), status };
      const log = this.c.log.child({ action: action.metadata.name, node: action.spec.nodeName });
      const onward = await this.decideOnward(admitted);
      if (!o.isLeader() || !turn.valid()) return lost();
      let written: ActionObject;
      try {
        // One write, conditional on the listed version: the slot, and (when it could be
        // decided at once) the action's way on from it — up to its approval.
        written = await this.c.writes.writeStatus(action, onward?.status ?? status);
      } catch (error) {
        if (isConflict(error)) {
          // It changed since the list (a deadline, a deletion): judge everyone again,
          // from a quorum read (a cache behind the write would only conflict again).
          this.forgetQuorum();
          return 'conflict';
        }
        throw error;
      }
      await this.recorded(requested, written, log);
      this.c.log.info(
        { action: action.metadata.name, node: action.spec.nodeName, message: status.message },
        'action admitted',
      );
      await o.events.record(action, {
        type: 'Normal',
        reason: 'WaitingForHealth',
        message: `${action.spec.action} of node ${action.spec.nodeName}: ${status.message ?? ''}`,
      });
      if (onward) {
        if (onward.status.phase !== status.phase)
          log.info({ phase: onward.status.phase, message: onward.status.message }, 'action phase changed');
        await this.actions.effects.apply(onward.effects, written, log);
        if (onward.requeueAfterMs !== undefined)
          this.c.queue.addAfter(action.metadata.name, onward.requeueAfterMs);
      }
      this.c.queue.add(action.metadata.name);
    }
    const waiting = [
      ...plan.wait,
      // New, and neither admitted nor told why not (planAdmissions leaves out what its
      // reconciler is to deny): recorded as requested all the same.
      ...listed.flatMap((action) =>
        requested.has(action.metadata.name) &&
        !plan.admit.some((u) => u.action.metadata.name === action.metadata.name) &&
        !plan.wait.some((u) => u.action.metadata.name === action.metadata.name)
          ? [{ action, status: action.status ?? {} }]
          : [],
      ),
    ];
    for (const { action, status } of waiting) {
      if (!o.isLeader()) return 'not leading';
      const log = this.c.log.child({ action: action.metadata.name, node: action.spec.nodeName });
      try {
        await this.recorded(requested, await this.c.writes.writeStatus(action, status), log);
      } catch (error) {
        if (!isConflict(error)) throw error;
      }
    }
    return {
      holders: plan.holders,
      ...(plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : {}),
    };
  }

  /**
   * Every instance's unfinished actions, by a quorum read filtered on the server: the
   * finished ones kept for history would make each admission slower as they pile up.
   */
  private async listUnfinished(): Promise<{ items: ActionObject[] }> {
    const { o } = this.c;
    const leadership = this.leadership;
    const list = await this.readUnfinished();
    if (o.isLeader() && leadership === this.leadership) {
      this.read = { ...this.read, quorum: parseResourceVersion(list.metadata?.resourceVersion) };
      this.foreignAtQuorum = {
        items: list.items.filter((a) => a.metadata.labels?.[INSTANCE_LABEL] !== o.instance),
        ...(list.metadata?.resourceVersion !== undefined
          ? { resourceVersion: list.metadata.resourceVersion }
          : {}),
      };
    }
    o.metrics?.admissionReads.inc({ source: 'quorum' });
    return list;
  }

  /**
   * Every instance's unfinished actions from the caches, when they show every slot taken
   * (ours: admission-read.ts; other instances': the last quorum read, made under the turn
   * we still hold, as their informer updates it); else undefined.
   */
  private unfinishedFromCaches(): { items: ActionObject[] } | undefined {
    const { o } = this.c;
    const foreign = o.foreignActions;
    if (!foreign || !cacheShowsEverySlot(this.read, o.actions.watchedVersion)) return undefined;
    o.metrics?.admissionReads.inc({ source: 'cache' });
    const theirs = foreignUnfinished(
      this.foreignAtQuorum,
      { items: foreign.list(), ...(foreign.watchedVersion ? { watched: foreign.watchedVersion } : {}) },
      (a) => isTerminal(a.status?.phase),
    );
    return { items: [...o.actions.list().filter((a) => !isTerminal(a.status?.phase)), ...theirs] };
  }

  /** Every instance's unfinished actions as the caches show them: for messages only, never to admit. */
  private cachedUnfinished(): { items: ActionObject[] } {
    const { o } = this.c;
    const all = [...o.actions.list(), ...(o.foreignActions?.list() ?? [])];
    return { items: all.filter((a) => !isTerminal(a.status?.phase)) };
  }

  /**
   * An API server older than selectable CRD fields (Kubernetes 1.31) refuses the
   * selector; then the whole list is read and filtered here, from then on.
   */
  private async readUnfinished(): Promise<UnfinishedList> {
    const { o } = this.c;
    if (this.fieldSelectors) {
      try {
        return await o.rest.request<UnfinishedList>(
          `${NODE_ACTIONS_PATH}?fieldSelector=${encodeURIComponent(UNFINISHED_FIELD_SELECTOR)}`,
        );
      } catch (error) {
        if (!(error instanceof KubeApiError && error.code === 400)) throw error;
        this.c.log.warn(
          { error: error.message },
          'the API server cannot select NodeActions by phase (Kubernetes before 1.31, or an older CRD): listing them all',
        );
        this.fieldSelectors = false;
      }
    }
    const all = await o.rest.request<UnfinishedList>(NODE_ACTIONS_PATH);
    return { ...all, items: all.items.filter((a) => !isTerminal(a.status?.phase)) };
  }

  /** The effects (Events) of a new action's being recorded as requested, once that is written. */
  private async recorded(
    requested: ReadonlyMap<string, ActionDecision>,
    written: ActionObject,
    log: Logger,
  ): Promise<void> {
    const decision = requested.get(written.metadata.name);
    if (!decision) return;
    log.info({ phase: 'Pending' }, 'action phase changed');
    await this.actions.effects.apply(
      decision.effects.filter((e) => e.type !== 'admission'),
      written,
      log,
    );
  }

  /**
   * The decision an action just admitted goes on to, taken with its admission (one
   * write): only when its health gate's evaluation, begun ahead, is done or nearly
   * (FOLD_WAIT_MS) and the decision approves it.
   * Undefined: the admission is written alone, and the action's own pass goes on.
   */
  private async decideOnward(admitted: ActionObject): Promise<ActionDecision | undefined> {
    const uid = admitted.metadata.uid;
    const gating = this.actions.gatingChecks(admitted);
    if (gating && gating.length > 0) {
      await this.c.fresh.settle(uid, FOLD_WAIT_MS);
      if (!this.c.fresh.finished(uid)) return undefined;
    }
    const decision = await this.actions.decideFor(admitted, true);
    // Only all the way to the approval, which the requester waits for: an action held at
    // its health gate or on its pre-hooks waits seconds anyway, and is written phase by
    // phase as before.
    if (decision.status.phase !== 'Approved' || decision.addFinalizer || decision.removeFinalizer)
      return undefined;
    return decision;
  }

  private async writePolicyStatuses(
    holders: readonly ActionRef[],
    nodes: NodeLabels,
    now: Date,
  ): Promise<void> {
    const { o } = this.c;
    for (const policy of o.policies.list()) {
      // Every instance obeys every policy, but reports only on its own: a policy's status
      // counts one instance's actions, and two instances would overwrite each other.
      if (policy.metadata.labels?.[INSTANCE_LABEL] !== o.instance) continue;
      const report = reportPolicy(policy.spec, holders, nodes, now);
      const generation = policy.metadata.generation;
      const valid = report.problems.length === 0;
      const status = {
        ...(generation !== undefined ? { observedGeneration: generation } : {}),
        matchingNodes: report.matchingNodes,
        allowedConcurrent: report.allowedConcurrent,
        activeActions: report.activeActions,
        windowOpen: report.windowOpen,
        ...(report.nextWindowStart
          ? { nextWindowStart: report.nextWindowStart.toISOString().replace(/\.\d{3}Z$/, 'Z') }
          : {}),
        ...(report.frozenUntil
          ? { frozenUntil: report.frozenUntil.toISOString().replace(/\.\d{3}Z$/, 'Z') }
          : {}),
        conditions: setCondition(
          policy.status?.conditions,
          {
            type: POLICY_VALID_CONDITION,
            status: valid ? 'True' : 'False',
            reason: valid ? 'Valid' : 'InvalidWindow',
            message: valid
              ? 'the policy can be applied'
              : `windows that never open: ${report.problems.join('; ')}`,
            ...(generation !== undefined ? { observedGeneration: generation } : {}),
          },
          now,
        ),
      };
      // The snapshot catalogue is the snapshot step's (src/talos/etcd-snapshot-catalogue.ts): neither compared nor written here.
      const { etcdSnapshots: _catalogue, ...reported } = policy.status ?? {};
      if (sameJSON(status, reported)) continue;
      if (!o.isLeader()) return;
      await o.rest
        .request(`${ACTION_POLICIES_PATH}/${policy.metadata.name}/status`, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: { status: { nextWindowStart: null, frozenUntil: null, ...status } },
        })
        .catch((error: unknown) => {
          this.c.log.warn(
            { policy: policy.metadata.name, err: errorMessage(error) },
            'could not write policy status',
          );
        });
    }
  }
}
