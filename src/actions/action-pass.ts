// Reconciling one action: what the caches show of it (observations.ts) given to decide()
// — with a fresh evaluation of its checks and a fresh read of etcd when the decision asks
// for them — then the decision committed: its status written, conditional on the
// resourceVersion decided upon, then its effects carried out (action-effects.ts).
import { NODE_ACTION_FINALIZER } from '../api/names.ts';
import type { ActionObject } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import { sameJSON } from '../canonical-json.ts';
import { checkGates } from '../checks/selection.ts';
import { unknownState } from '../checks/state.ts';
import type { HookObject } from '../hooks/select.ts';
import { isConflict } from '../kube/reconciler.ts';
import type { ReconcileResult } from '../kube/workqueue.ts';
import type { Logger } from '../log.ts';
import { NO_TALOSCONFIG } from '../talos/etcd-check.ts';
import type { TurnSection } from '../kube/turn-lease.ts';
import type { EtcdCheckState } from '../talos/etcd-health.ts';
import type { ConfigRead } from '../talos/config-disruption-read.ts';
import { ActionEffects } from './action-effects.ts';
import { ADMISSION_KEY, policyFacts, type ActionContext } from './context.ts';
import {
  decide,
  type ActionDecision,
  type ActionInput,
  type CheckFacts,
  type FreshChecks,
} from './decide.ts';
import { TURN_RETRY_MS, enterTurn } from './instance-turn.ts';
import { etcdAway, etcdDisruption } from './etcd-guard.ts';
import { doNotDisruptCap } from './do-not-disrupt.ts';
import type { NodeNeighbours } from './neighbours.ts';
import { readNeighbours } from './neighbours-read.ts';
import type { DrainForecastRead } from './drain-forecast.ts';
import { readDrainForecast } from './drain-forecast-read.ts';
import { drainForecastBlockedBy } from './phases/drain-forecast-gate.ts';
import { etcdSnapshotPolicy } from './etcd-snapshot.ts';
import { isNew } from './admission.ts';
import { nodeFacts } from './observations.ts';
import { holdSilences } from './silences.ts';
import { remediationPauseOff } from './remediation.ts';
import { foreignCordonAllowed } from './maintainers.ts';
import type { PolicyFacts } from '../policies/evaluate.ts';
import type { KubeObject } from '../kube/informer.ts';

/** What the ActionPolicies governing the action on its node say beyond admission, for decide(). */
function policyInputs(
  policies: readonly PolicyFacts[],
  action: ActionObject,
  node: KubeObject | undefined,
): Pick<
  ActionInput,
  'doNotDisruptCap' | 'remediationPauseOff' | 'allowForeignCordon' | 'drainForecastBlock' | 'etcdSnapshot'
> {
  if (!node) return {};
  const labels = node.metadata.labels ?? {};
  const off = remediationPauseOff(policies, action.spec, labels);
  const block = drainForecastBlockedBy(policies, action.spec, labels);
  const snapshot = etcdSnapshotPolicy(policies, action.spec, labels);
  return {
    ...(snapshot ? { etcdSnapshot: snapshot } : {}),
    ...(block !== undefined ? { drainForecastBlock: block } : {}),
    doNotDisruptCap: doNotDisruptCap(policies, action.spec, labels),
    ...(off !== undefined ? { remediationPauseOff: off } : {}),
    ...(foreignCordonAllowed(policies, action.spec, labels) ? { allowForeignCordon: true as const } : {}),
  };
}

/** How long a gate waits inline for checker Jobs before saying, in the status, that it waits on them. */
const CHECKER_JOB_SETTLE_MS = 1000;

/** The etcd guard's lock and turn, held from its read to the write of the decision made on it. */
export interface EtcdHold {
  /** Whether the turn was another instance's: nothing was read. */
  waiting: boolean;
  release(): void;
  /** Whether the turn the read was made under is still ours: false, and the decision is not written. */
  valid(): boolean;
}

export class ActionPass {
  readonly effects: ActionEffects;
  private readonly c: ActionContext;
  /**
   * Held from the etcd guard's read to the status write of the decision made on it: two
   * control-plane actions judged at once would each see the other not yet approved.
   */
  private etcdTurn: Promise<void> = Promise.resolve();
  /** Actions whose etcd guard waits for the turn: looked at again when it comes. */
  private readonly turnWaiters = new Set<string>();

  constructor(context: ActionContext) {
    this.c = context;
    this.effects = new ActionEffects(context);
  }

  async reconcile(name: string): Promise<ReconcileResult | undefined> {
    const { o, writes, queue } = this.c;
    const action = o.actions.get(name);
    if (!action) return undefined;
    // Our own newer write has not reached the cache yet; its event will bring us back.
    if (writes.stale(action)) return { requeueAfterMs: 1000 };
    const log = this.c.log.child({ action: name, node: action.spec.nodeName });
    let hold: EtcdHold | undefined;
    try {
      const decision = await this.decideFor(action, false, (h) => (hold = h));
      if (!o.isLeader()) return undefined;
      // Decided on an etcd read made under a turn that is gone: another instance may have
      // approved since. Decide again.
      if (hold && !hold.valid()) return { requeueAfterMs: 0 };
      // The etcd guard waits for the turn, asked for: nothing is decided (its arrival, or
      // this, brings the action back).
      if (hold?.waiting) return { requeueAfterMs: TURN_RETRY_MS };
      if (isNew(action) && decision.status.phase === 'Pending') {
        // Recorded as requested by the admission pass, in the same write as its admission
        // when its policies allow it at once: one write instead of two.
        queue.add(ADMISSION_KEY);
        return undefined;
      }
      return await this.commit(action, decision, log);
    } finally {
      hold?.release();
    }
  }

  /** The checks as the runner has them; a Node-scoped one's state is its state for `node`. */
  private checkFacts(node?: string): CheckFacts[] {
    return this.c.o.checks.views().map((v) => ({
      name: v.name,
      spec: v.spec,
      state: (node !== undefined && v.nodeState?.(node)) || (v.nodeState ? unknownState() : v.state),
    }));
  }

  private hookObjects(): HookObject[] {
    const hooks: HookObject[] = [];
    for (const [kind, informer] of this.c.o.hooks) {
      for (const h of informer.list()) {
        if (h.metadata.deletionTimestamp || !h.metadata.namespace || !h.metadata.uid) continue;
        hooks.push({
          kind,
          metadata: {
            name: h.metadata.name,
            namespace: h.metadata.namespace,
            uid: h.metadata.uid,
            ...(h.metadata.generation !== undefined ? { generation: h.metadata.generation } : {}),
          },
          spec: h.spec,
        });
      }
    }
    return hooks;
  }

  /** Waits for the etcd guard's turn (see etcdTurn); the caller releases it. */
  private async etcdLock(): Promise<() => void> {
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const before = this.etcdTurn;
    this.etcdTurn = before.then(() => mine);
    await before;
    return release;
  }

  /**
   * The etcd guard's lock, and the turn (instance-turn.ts): held from its read to the
   * write of the decision made on it, so that no approval of this instance or another is
   * written between. Without the turn, `turn` is undefined and it has been asked for.
   */
  private async etcdHold(action: ActionObject): Promise<EtcdHold & { turn: TurnSection | undefined }> {
    const unlock = await this.etcdLock();
    const turn = enterTurn(this.c.o.turn);
    if (!turn) this.turnWaiters.add(action.metadata.name);
    return {
      turn,
      waiting: turn === undefined,
      valid: () => turn?.valid() ?? true,
      release: () => {
        turn?.release();
        unlock();
      },
    };
  }

  /** The actions whose etcd guard waited for the turn since last asked: to look at again now it came. */
  takeTurnWaiters(): string[] {
    const names = [...this.turnWaiters];
    this.turnWaiters.clear();
    return names;
  }

  /**
   * The etcd guard's read for the action (etcd-guard.ts), counting as down the members
   * of nodes whose disruptive action is approved — from a quorum read of every
   * instance's actions, made under the turn, not the cache, which may not show an
   * approval just written.
   */
  private async readEtcd(action: ActionObject): Promise<EtcdCheckState> {
    const { o } = this.c;
    if (!o.etcd)
      return { at: new Date(), checked: false, healthy: false, spareable: true, message: NO_TALOSCONFIG };
    const list = await o.rest.request<{ items: ActionObject[] }>(NODE_ACTIONS_PATH);
    return o.etcd.check(action.spec.nodeName, etcdAway(list.items, action), etcdDisruption(action.spec));
  }

  /** The drain forecast of the action's node (drain-forecast-read.ts), over the nodes the cache has. */
  private forecastDrain(action: ActionObject): Promise<DrainForecastRead> {
    const { rest, nodes } = this.c.o;
    return readDrainForecast(rest, action.spec.nodeName, nodes.list(), action.spec.drain?.podSelector);
  }

  /** A ConfigChange's configurations, for its disruption class (config-disruption-read.ts). */
  private readConfigs(action: ActionObject): Promise<ConfigRead> {
    const { executor } = this.c.o;
    if (!executor) return Promise.resolve({ at: new Date(), error: 'this controller performs no actions' });
    return executor.readConfigs(action);
  }

  /** The checks that gate the action on its node, as the cache has them; undefined without a node. */
  gatingChecks(action: ActionObject): string[] | undefined {
    const node = this.c.o.nodes.get(action.spec.nodeName);
    if (!node || action.spec.bypass?.healthChecks) return undefined;
    const labels = node.metadata.labels ?? {};
    return this.checkFacts()
      .filter((c) => checkGates(c.spec, action.spec.action, labels))
      .map((c) => c.name);
  }

  /** Begins the fresh evaluation the action's health gate will ask for (fresh-evaluations.ts). */
  beginEvaluation(action: ActionObject): void {
    if (action.metadata.deletionTimestamp) return;
    const names = this.gatingChecks(action);
    if (names && names.length > 0) this.c.fresh.begin(action.metadata.uid, names, action.spec.nodeName);
  }

  /**
   * When these checks include `job` probes whose fresh evaluation takes longer than
   * CHECKER_JOB_SETTLE_MS: the evaluation is left under way (the action is queued again
   * when it finishes) and what it waits on is returned, for the action's status to say.
   * Undefined: evaluate (or take the finished evaluation) now.
   */
  private async awaitCheckerJobs(
    action: ActionObject,
    checks: readonly string[],
  ): Promise<{ check: string; job?: string }[] | undefined> {
    const { o, fresh, queue } = this.c;
    const jobChecks = checks.filter((name) => o.checks.view(name)?.spec.job !== undefined);
    if (jobChecks.length === 0) return undefined;
    const { uid, name } = action.metadata;
    const node = action.spec.nodeName;
    fresh.begin(uid, checks, node);
    await fresh.settle(uid, CHECKER_JOB_SETTLE_MS);
    if (fresh.finished(uid)) return undefined;
    void fresh.done(uid).then(() => queue.add(name));
    return jobChecks.map((check) => {
      const job = o.checks.runningJob(check, node);
      return job ? { check, job } : { check };
    });
  }

  /** A fresh evaluation of these checks for the action: the one begun ahead of the gate, or one now. */
  private async evaluate(uid: string, names: string[], node: string): Promise<FreshChecks> {
    const begun = this.c.fresh.take(uid, names);
    if (begun) return begun;
    const states = await this.c.o.checks.evaluateNow(names, node);
    return { at: new Date(), states };
  }

  /**
   * decide() on what the caches show of the action, with a fresh evaluation when it asks
   * (with `begunOnly`, only one already begun: otherwise the decision is left asking), then
   * its silences.
   */
  async decideFor(
    action: ActionObject,
    begunOnly = false,
    /** Takes the etcd guard's hold, when it was taken, to release it after the write (else released here). */
    holdEtcd?: (hold: EtcdHold) => void,
  ): Promise<ActionDecision> {
    const { o, fresh: evaluations } = this.c;
    const records = [...(action.status?.hooks ?? []), ...(action.status?.undo?.runs ?? [])];
    const nodeObject = o.nodes.get(action.spec.nodeName);
    const policies = policyFacts(o.policies);
    const input: ActionInput = {
      now: new Date(),
      action,
      node: nodeFacts(nodeObject),
      checks: this.checkFacts(action.spec.nodeName),
      hooks: this.hookObjects(),
      jobs: await o.runner.jobFacts(records),
      webhooks: o.runner.webhookFacts(),
      ...(o.executor ? { execution: o.executor.facts(action.metadata.uid) } : {}),
      ...(o.executor && !o.executor.talking ? { noTalos: true as const } : {}),
      ...policyInputs(policies, action, nodeObject),
    };
    let now = input.now;
    let decision = decide(input);
    let begun: Promise<FreshChecks> | undefined;
    if (begunOnly) {
      // (The do-not-disrupt read and the drain forecast are a few reads of the watch cache: made inline.)
      if (decision.readEtcd || decision.readConfigs) return decision;
      if (decision.evaluateChecks) {
        begun = evaluations.take(action.metadata.uid, decision.evaluateChecks);
        if (!begun) return decision;
      }
    }
    // A fresh evaluation, an etcd read, the node's neighbours, its drain forecast (in parallel), then
    // decide again; the approval may ask for a read of its own after the health gate's,
    // hence the rounds.
    let fresh: FreshChecks | undefined;
    let etcd: EtcdCheckState | undefined;
    let pods: NodeNeighbours | undefined;
    let forecast: DrainForecastRead | undefined;
    let configs: ConfigRead | undefined;
    let hold: (EtcdHold & { turn: TurnSection | undefined }) | undefined;
    try {
      const asks = (d: ActionDecision) =>
        d.evaluateChecks || d.readEtcd || d.readNeighbours || d.readDrainForecast || d.readConfigs;
      for (let round = 0; round < 3 && asks(decision); round++) {
        const checks = decision.evaluateChecks;
        const evaluating =
          checks && !begun && !begunOnly ? await this.awaitCheckerJobs(action, checks) : undefined;
        if (evaluating) {
          now = new Date();
          decision = decide({ ...input, now, evaluating });
          break;
        }
        if (decision.readEtcd) {
          hold ??= await this.etcdHold(action);
          // Another instance has the turn: no read, no decision on one (the caller waits).
          if (hold.waiting) break;
        }
        [fresh, etcd, pods, forecast, configs] = await Promise.all([
          checks
            ? (begun ?? this.evaluate(action.metadata.uid, checks, action.spec.nodeName))
            : Promise.resolve(fresh),
          decision.readEtcd ? this.readEtcd(action) : Promise.resolve(etcd),
          decision.readNeighbours
            ? readNeighbours(o.rest, action.spec.nodeName).catch((error: unknown): NodeNeighbours => ({
                at: new Date(),
                pods: [],
                error: String(error),
              }))
            : Promise.resolve(pods),
          decision.readDrainForecast ? this.forecastDrain(action) : Promise.resolve(forecast),
          decision.readConfigs ? this.readConfigs(action) : Promise.resolve(configs),
        ]);
        begun = undefined;
        now = new Date();
        decision = decide({
          ...input,
          now,
          ...(fresh ? { fresh } : {}),
          ...(etcd ? { etcd } : {}),
          ...(pods ? { neighbours: pods } : {}),
          ...(forecast ? { drainForecast: forecast } : {}),
          ...(configs ? { configs } : {}),
        });
      }
    } finally {
      // Held on to the status write when the caller takes it; else released now.
      if (hold && holdEtcd) holdEtcd(hold);
      else hold?.release();
    }
    return holdSilences(decision, action, {
      now,
      policies,
      nodeLabels: nodeObject ? (nodeObject.metadata.labels ?? {}) : undefined,
      facts: this.c.silences.facts(action.metadata.uid),
    });
  }

  /** Carries out a decision about the action as observed: its status written (conditionally), then its effects. */
  private async commit(
    action: ActionObject,
    decision: ActionDecision,
    log: Logger,
  ): Promise<ReconcileResult | undefined> {
    const { writes } = this.c;
    if (decision.addFinalizer) {
      // The written object enters the cache at once (applyWritten), which brings the next pass.
      await writes.patchFinalizers(action, [...(action.metadata.finalizers ?? []), NODE_ACTION_FINALIZER]);
      return undefined;
    }
    let current: ActionObject = action;
    if (!sameJSON(decision.status, action.status ?? {})) {
      try {
        current = await writes.writeStatus(action, decision.status);
      } catch (error) {
        if (isConflict(error)) {
          // Someone wrote in between (or it is gone): decide again on what is there now.
          log.debug({ err: error.message }, 'status write conflicted; deciding again');
          return { requeueAfterMs: 250 };
        }
        throw error;
      }
      const phase = decision.status.phase;
      if (phase !== action.status?.phase)
        log.info({ phase, message: decision.status.message }, 'action phase changed');
    }
    await this.effects.apply(decision.effects, current, log);
    if (decision.removeFinalizer) {
      await writes.patchFinalizers(
        current,
        (current.metadata.finalizers ?? []).filter((f) => f !== NODE_ACTION_FINALIZER),
      );
    }
    return decision.requeueAfterMs !== undefined ? { requeueAfterMs: decision.requeueAfterMs } : undefined;
  }
}
