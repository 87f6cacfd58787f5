// The imperative half of Managed execution: carries out the steps the decision core asks
// for (decide.ts execute(): prepare, drain, install, the Talos call) outside the
// reconciler's workers, and tells it what it knows of them. That knowledge lives in
// memory only: a restarted controller (or a new leader) knows nothing of a step, which
// the core reads as "not made here" — repeatable steps are made again, and a call whose
// record is in the status is not (it may have been made).
//
// The call is guarded twice: its record (callTime) is written to the status before the
// reconciler hands it over, and it is made only if a fresh read of the action still
// shows that record, the action unfinished and not deleted.
//
// Its credentials can change while it runs (the talosconfig file is followed:
// config-reload.ts). A step takes the client in use when it starts talking to Talos and
// keeps it to the end, so a call is never cut off or sent again by a switch; the old
// client is closed once the last step holding it ends. Until it has credentials at all
// the executor knows nothing (facts() is undefined), which the decision core reads as
// no executor: Managed actions are approved for their requester to perform.
import type { DrainBlocker, ObservedNodeAction } from '../api/node-action.ts';
import type { RestClient } from '../kube/rest.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { Logger } from '../log.ts';
import { formatDuration, parseDuration } from '../duration.ts';
import { errorMessage } from '../wait.ts';
import type { TalosClient, TalosClientOptions } from './client.ts';
import type { TalosContext } from './config.ts';
import { DrainError, drainNode } from './drain.ts';
import { TalosApiError, TalosUpgradeFailedError } from './errors.ts';
import { CONTROL_PLANE_LABEL } from '../api/names.ts';
import {
  callTalos,
  forfeitEtcdLeadership,
  installTalosUpgrade,
  prepareTalosAction,
  type TalosTarget,
} from './executor.ts';
import { callReached } from './events.ts';
import type { ExecutionFacts, ExecutionStep, ExecutionStepFacts } from './facts.ts';
import { callSequence, type ConfigSecret, type TalosSteps } from './plan.ts';
import { CONFIG_READ_TIMEOUT_MS, type ConfigRead } from './config-disruption-read.ts';
import { etcdSnapshotStep, type EtcdSnapshotStepRequest } from './etcd-snapshot-step.ts';

export interface TalosExecutorOptions {
  rest: RestClient;
  log: Logger;
  /** The talosconfig context the controller uses; undefined: none yet (see useCredentials). */
  context: TalosContext | undefined;
  /** The controller's namespace: where a ConfigChange's configSecretRef is. */
  namespace: string;
  /** The Node as the controller's cache shows it. */
  node: (name: string) => KubeObject | undefined;
  /** Only the leader acts. */
  mayWrite: () => boolean;
  client?: TalosClientOptions;
  /** Between refused evictions (drain.ts); default 5s. */
  drainRetryMs?: number;
}

export interface StepRequest {
  action: ObservedNodeAction;
  /**
   * The action's Talos steps on its node, as its kind plans them (src/actions/kinds/):
   * what the prepare, install and call steps make. Throws when they cannot be chosen.
   */
  talos?: () => TalosSteps;
  /** The step changed state (or, at most once a second, made progress): decide again. */
  onChange: () => void;
  /** For the call: whether the action, read afresh, still records this call and is unfinished. */
  confirm?: () => Promise<boolean>;
  /** For the snapshot step: what to take and where to store it. */
  snapshot?: EtcdSnapshotStepRequest;
}

/** A client and the steps talking to Talos through it. */
interface ClientInUse {
  context: TalosContext;
  /** Made once the Talos client's code is loaded (see makeClient). */
  client: Promise<TalosClient>;
  users: number;
  /** Replaced by newer credentials: closed when its last user is done. */
  retired: boolean;
}

interface RunningStep {
  facts: ExecutionStepFacts;
  abort: AbortController;
  touched: number;
}

interface NodeObject extends KubeObject {
  metadata: KubeObject['metadata'] & { labels?: Record<string, string> };
  status?: {
    addresses?: { type: string; address: string }[];
    nodeInfo?: { osImage?: string };
  };
}

/**
 * A Talos client, its code (gRPC and the Talos API's messages: a third of the controller's
 * code) loaded on first use rather than at the controller's start: a controller that never
 * talks to Talos, or not yet, never spends its start parsing it.
 */
async function makeClient(
  context: TalosContext,
  options: TalosClientOptions | undefined,
): Promise<TalosClient> {
  const { TalosClient } = await import('./client.ts');
  return new TalosClient(context, options);
}

/** Closes a client once it is made (one that failed to be made has nothing to close). */
function closeClient(client: Promise<TalosClient>): void {
  client.then(
    (c) => c.close(),
    () => undefined,
  );
}

/** The Kubernetes default key of a ConfigChange's Secret (spec.configChange.configSecretRef.key). */
const CONFIG_KEY = 'config.yaml';
const PROGRESS_INTERVAL_MS = 1000;

/** How long MachineService.Rollback, or a TRY's commit, may take to answer. */
const ROLLBACK_TIMEOUT_MS = 60_000;

/** Failures that show the call did not reach Talos, or that Talos refused it. */
function definitelyNotMade(error: unknown): boolean {
  return error instanceof TalosApiError && error.failure !== 'deadline' && error.failure !== 'cancelled';
}

export class TalosExecutor {
  private readonly o: TalosExecutorOptions;
  private credentials: ClientInUse | undefined;
  /** By `<action uid>/<step>`. */
  private readonly steps = new Map<string, RunningStep>();

  constructor(options: TalosExecutorOptions) {
    this.o = options;
    if (options.context) this.useCredentials(options.context);
  }

  /** The talosconfig context new steps use; undefined until there is one. */
  get context(): TalosContext | undefined {
    return this.credentials?.context;
  }

  /**
   * Makes steps that start talking to Talos from now on use these credentials. Steps
   * already talking to Talos finish on the client they have, which is closed after them.
   */
  useCredentials(context: TalosContext): void {
    const old = this.credentials;
    const client = makeClient(context, this.o.client);
    // A client that cannot be made fails each step that holds it, saying why (hold).
    client.catch(() => undefined);
    this.credentials = { context, client, users: 0, retired: false };
    if (old) {
      old.retired = true;
      if (old.users === 0) closeClient(old.client);
    }
  }

  /** Whether steps that talk to Talos can run: there are credentials (see useCredentials). */
  get talking(): boolean {
    return this.credentials !== undefined;
  }

  /**
   * What this process knows of the action's steps (without credentials, only a drain's:
   * the decision core then performs only what needs no Talos, see `talking`).
   */
  facts(uid: string): ExecutionFacts {
    const facts: ExecutionFacts = {};
    for (const step of [
      'prepare',
      'drain',
      'install',
      'call',
      'verify',
      'rollback',
      'snapshot',
      'commit',
    ] as const) {
      const s = this.steps.get(`${uid}/${step}`);
      if (s) {
        s.touched = Date.now();
        facts[step] = { ...s.facts };
      }
    }
    return facts;
  }

  /** Starts a step, unless this process already has it (running or done). */
  start(step: ExecutionStep, request: StepRequest, log: Logger = this.o.log): void {
    const { action } = request;
    const key = `${action.metadata.uid}/${step}`;
    if (this.steps.has(key) || !this.o.mayWrite()) return;
    const running: RunningStep = {
      facts: { state: 'running', message: 'starting' },
      abort: new AbortController(),
      touched: Date.now(),
    };
    this.steps.set(key, running);
    let noticed = 0;
    const progress = (message: string) => {
      if (running.facts.state !== 'running') return;
      running.facts = { ...running.facts, message };
      if (Date.now() - noticed < PROGRESS_INTERVAL_MS) return;
      noticed = Date.now();
      request.onChange();
    };
    const finish = (facts: ExecutionStepFacts) => {
      running.facts = facts;
      log.info({ step, state: facts.state, message: facts.message }, 'Managed execution step ended');
      request.onChange();
    };
    log.info({ step }, 'Managed execution step started');
    // A change in what holds the drain is told at once: it is rare, and it is what the
    // status shows (status.drain), unlike the progress lines.
    const blocked = (blockers: DrainBlocker[]) => {
      if (running.facts.state !== 'running') return;
      running.facts = { ...running.facts, blockers };
      request.onChange();
    };
    const signal = running.abort.signal;
    const work =
      step === 'drain'
        ? this.drain(action, signal, progress, blocked)
        : step === 'call'
          ? this.call(request, signal, progress)
          : step === 'rollback'
            ? this.rollback(request, signal)
            : step === 'commit'
              ? this.commit(request, signal)
              : step === 'verify'
                ? this.verify(action, signal)
                : step === 'snapshot'
                  ? this.snapshot(request, signal, progress)
                  : this.prepare(step, request, signal, progress);
    work.then(
      (facts) => finish(facts),
      (error: unknown) => {
        // A failure before the call reached the wire (no address, no Secret) is a
        // failure of the step; `call` itself says when the call may have gone out.
        finish({
          state: 'failed',
          message: errorMessage(error),
          ...(step === 'call' || step === 'rollback' || step === 'commit' ? { mayHaveReached: false } : {}),
          ...(error instanceof TalosUpgradeFailedError ? { exitCode: error.exitCode } : {}),
          ...(error instanceof DrainError ? { timedOut: true } : {}),
        });
      },
    );
  }

  /**
   * Forgets what this process knows of finished steps of an action, so that the decision
   * core asks for them again (an install whose installer failed on a dependency: pulled
   * and installed again). Running steps are left alone.
   */
  again(uid: string, steps: readonly ExecutionStep[]): void {
    for (const step of steps) {
      const s = this.steps.get(`${uid}/${step}`);
      if (s && s.facts.state !== 'running') this.steps.delete(`${uid}/${step}`);
    }
  }

  /** Stops the action's steps that still run (its outcome no longer matters, or it is over). */
  stop(uid: string, reason: string): void {
    for (const [key, s] of this.steps)
      if (key.startsWith(`${uid}/`) && s.facts.state === 'running') s.abort.abort(new Error(reason));
  }

  /** Stops and forgets everything about an action (it is gone). */
  forget(uid: string): void {
    this.stop(uid, 'the action is gone');
    for (const key of [...this.steps.keys()]) if (key.startsWith(`${uid}/`)) this.steps.delete(key);
    // Results nobody asked for in an hour belong to actions long finished.
    const stale = Date.now() - 3_600_000;
    for (const [key, s] of this.steps)
      if (s.facts.state !== 'running' && s.touched < stale) this.steps.delete(key);
  }

  /**
   * Stops every running step and forgets every step (leadership lost, or the controller
   * stops): this replica, leading again later, must decide from the status alone, as a
   * new leader would — a step stopped here is not a step that failed.
   */
  stopAll(reason: string): void {
    for (const s of this.steps.values()) if (s.facts.state === 'running') s.abort.abort(new Error(reason));
    this.steps.clear();
  }

  close(): void {
    this.stopAll('the controller is stopping');
    // The aborted steps close the retired clients they hold as they end.
    if (this.credentials) closeClient(this.credentials.client);
  }

  /**
   * Runs `fn` with the client in use, held to its end (a read, such as the etcd guard's:
   * src/talos/etcd-check.ts). Undefined, without calling `fn`, while there are no credentials.
   */
  async withClient<T>(fn: (client: TalosClient) => Promise<T>): Promise<{ value: T } | undefined> {
    if (!this.credentials) return undefined;
    const { client, release } = await this.hold();
    try {
      return { value: await fn(client) };
    } finally {
      release();
    }
  }

  /**
   * The node's running configuration and the ConfigChange's new one, for its disruption
   * class (config-disruption-read.ts). Never throws: a failed read says why.
   */
  async readConfigs(action: ObservedNodeAction): Promise<ConfigRead> {
    const at = new Date();
    const ref = action.spec.configChange?.configSecretRef;
    try {
      const next = await this.machineConfig(
        ref && { name: ref.name, ...(ref.key !== undefined ? { key: ref.key } : {}) },
        AbortSignal.timeout(CONFIG_READ_TIMEOUT_MS),
      );
      const { address } = this.target(action);
      const read = await this.withClient((client) =>
        client.machineConfiguration({ node: address, timeoutMs: CONFIG_READ_TIMEOUT_MS }),
      );
      if (!read) return { at, error: 'this controller has no talosconfig to read the node with' };
      return { at, current: read.value, next };
    } catch (error) {
      return { at, error: errorMessage(error) };
    }
  }

  /** The client in use, held until `release` (see useCredentials). */
  private async hold(): Promise<{ client: TalosClient; release: () => void }> {
    const held = this.credentials;
    if (!held) throw new Error('the controller has no talosconfig yet: no Talos call can be made');
    held.users += 1;
    const release = () => {
      held.users -= 1;
      if (held.retired && held.users === 0) closeClient(held.client);
    };
    try {
      return { client: await held.client, release };
    } catch (error) {
      release();
      throw error;
    }
  }

  // --- the steps --------------------------------------------------------------------

  private target(action: ObservedNodeAction): TalosTarget {
    const name = action.spec.nodeName;
    const node: NodeObject | undefined = this.o.node(name);
    if (!node) throw new Error(`node ${name} does not exist`);
    const address = node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
    if (!address)
      throw new Error(
        `node ${name} has no InternalIP in status.addresses: the Talos API cannot be told which node`,
      );
    return {
      address,
      osImage: node.status?.nodeInfo?.osImage,
      controlPlane: node.metadata.labels?.[CONTROL_PLANE_LABEL] !== undefined,
    };
  }

  private async drain(
    action: ObservedNodeAction,
    signal: AbortSignal,
    progress: (message: string) => void,
    blocked: (blockers: DrainBlocker[]) => void,
  ): Promise<ExecutionStepFacts> {
    const drain = action.spec.drain;
    const timeoutMs = parseDuration(drain?.timeout ?? '10m');
    const result = await drainNode({
      rest: this.o.rest,
      node: action.spec.nodeName,
      timeoutMs,
      owner: action.metadata.name,
      signal,
      progress,
      blocked,
      ...(this.o.drainRetryMs !== undefined ? { retryMs: this.o.drainRetryMs } : {}),
      ...(drain?.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: drain.gracePeriodSeconds } : {}),
      ...(drain?.podSelector ? { podSelector: drain.podSelector } : {}),
    });
    const message = result.skipped
      ? `not drained: ${result.skipped}`
      : `cordoned and drained node ${action.spec.nodeName} within ${formatDuration(timeoutMs)}: ${String(result.evicted.length)} pod(s) evicted, ${String(result.leftInPlace.length)} left in place`;
    return { state: 'succeeded', message };
  }

  private async machineConfig(ref: ConfigSecret | undefined, signal: AbortSignal): Promise<string> {
    if (!ref) throw new Error('spec.configChange.configSecretRef is missing');
    const key = ref.key ?? CONFIG_KEY;
    const where = `Secret ${this.o.namespace}/${ref.name}`;
    let secret: { data?: Record<string, string> };
    try {
      secret = await this.o.rest.request(
        `/api/v1/namespaces/${encodeURIComponent(this.o.namespace)}/secrets/${encodeURIComponent(ref.name)}`,
        { signal },
      );
    } catch (error) {
      throw new Error(`cannot read the machine configuration from ${where}: ${errorMessage(error)}`, {
        cause: error,
      });
    }
    const data = secret.data?.[key];
    if (data === undefined)
      throw new Error(
        `${where} has no key "${key}" (it has: ${Object.keys(secret.data ?? {}).join(', ') || 'no keys'})`,
      );
    const text = Buffer.from(data, 'base64').toString('utf8');
    if (text.trim() === '') throw new Error(`${where} key "${key}" is empty`);
    return text;
  }

  /** The action's Talos steps, as its kind planned them. */
  private talosSteps(request: StepRequest): TalosSteps {
    if (!request.talos) throw new Error(`${request.action.spec.action} has no Talos steps`);
    return request.talos();
  }

  private async prepare(
    step: 'prepare' | 'install',
    request: StepRequest,
    signal: AbortSignal,
    progress: (message: string) => void,
  ): Promise<ExecutionStepFacts> {
    const steps = this.talosSteps(request);
    const made = step === 'prepare' ? steps.prepare : steps.install;
    if (made === undefined) return { state: 'succeeded', message: `nothing to ${step}` };
    if (made.type === 'readConfig') {
      const config = await this.machineConfig(made.secret, signal);
      return {
        state: 'succeeded',
        message: `read the machine configuration (${String(config.length)} bytes)`,
      };
    }
    const target = this.target(request.action);
    // Applying a configuration without a reboot (Talos ≥ 1.14) needs it read first.
    const machineConfig =
      made.type === 'applyConfig' ? await this.machineConfig(made.secret, signal) : undefined;
    const options = { signal, progress, ...(machineConfig !== undefined ? { machineConfig } : {}) };
    const { client, release } = await this.hold();
    try {
      const message =
        made.type === 'pull'
          ? await prepareTalosAction(client, made, target, options)
          : await installTalosUpgrade(client, made, target, options);
      return { state: 'succeeded', message };
    } finally {
      release();
    }
  }

  /**
   * Whether the call the action records reached the node: the node's events show the
   * sequence that call starts (plan.ts callSequence), or, when they reach back far
   * enough and show none, that it never came; a history that may not reach back to the
   * call tells nothing (events.ts callReached). Asked only of a node still in the boot
   * the call was recorded in, once any call a gone process may have sent has arrived or
   * been given up (the decision core waits for that).
   */
  private async verify(action: ObservedNodeAction, signal: AbortSignal): Promise<ExecutionStepFacts> {
    const call = action.status?.execution?.call ?? '';
    const sequence = callSequence(call, action.spec);
    if (!sequence) throw new Error(`${call || 'the call'} starts no sequence the node's events would show`);
    const callTime = new Date(action.status?.execution?.callTime ?? '');
    if (Number.isNaN(callTime.getTime())) throw new Error('the call has no recorded callTime');
    const target = this.target(action);
    const { client, release } = await this.hold();
    try {
      const history = await client.eventHistory({ node: target.address, signal });
      const { reached, message } = callReached(history, sequence, callTime);
      return { state: 'succeeded', ...(reached !== undefined ? { reached } : {}), message };
    } finally {
      release();
    }
  }

  /** The etcd snapshot before a control-plane action is approved (etcd-snapshot-step.ts). */
  private async snapshot(
    request: StepRequest,
    signal: AbortSignal,
    progress: (message: string) => void,
  ): Promise<ExecutionStepFacts> {
    const { action, snapshot } = request;
    if (!snapshot) throw new Error('the snapshot to take is missing');
    const { client, release } = await this.hold();
    try {
      const who = { name: action.metadata.name, node: action.spec.nodeName };
      return await etcdSnapshotStep(client, this.o.rest, who, snapshot, signal, progress);
    } finally {
      release();
    }
  }

  /**
   * A Talos call made after the action's own, at most once: only while the action, read
   * afresh, still records it without an outcome (`request.confirm`) and this replica
   * leads; `what` names it for the refusal. Talos's answer, or the failure, as facts.
   */
  private async guardedCall(
    request: StepRequest,
    what: string,
    make: (client: TalosClient, address: string) => Promise<string>,
  ): Promise<ExecutionStepFacts> {
    const { action, confirm } = request;
    if (!confirm || !(await confirm()) || !this.o.mayWrite())
      return {
        state: 'failed',
        mayHaveReached: false,
        message: `not made: the action no longer records the ${what}, or this replica no longer leads`,
      };
    const target = this.target(action);
    const { client, release } = await this.hold();
    try {
      return { state: 'succeeded', message: await make(client, target.address) };
    } catch (error) {
      return { state: 'failed', mayHaveReached: !definitelyNotMade(error), message: errorMessage(error) };
    } finally {
      release();
    }
  }

  /** MachineService.Rollback of an upgrade whose post-checks failed. Answers before the node is back. */
  private rollback(request: StepRequest, signal: AbortSignal): Promise<ExecutionStepFacts> {
    return this.guardedCall(request, 'rollback', async (client, node) => {
      await client.rollback({ node, signal, timeoutMs: ROLLBACK_TIMEOUT_MS });
      return 'Talos acknowledged MachineService.Rollback';
    });
  }

  /**
   * The commit of a TRY confirmed by checks: the same configuration applied again with
   * NO_REBOOT, which keeps it (Talos cancels the TRY's revert).
   */
  private async commit(request: StepRequest, signal: AbortSignal): Promise<ExecutionStepFacts> {
    // Read first: a Secret that cannot be read is a commit not made (the step fails so).
    const data = await this.machineConfig(request.action.spec.configChange?.configSecretRef, signal);
    return this.guardedCall(request, 'commit', async (client, node) => {
      const applied = await client.applyConfiguration({
        node,
        data,
        mode: 'no-reboot',
        signal,
        timeoutMs: ROLLBACK_TIMEOUT_MS,
      });
      return `committed: the configuration applied again (mode ${applied.mode})`;
    });
  }

  private async call(
    request: StepRequest,
    signal: AbortSignal,
    progress: (message: string) => void,
  ): Promise<ExecutionStepFacts> {
    const { action, confirm } = request;
    if (!confirm || !(await confirm()))
      return {
        state: 'failed',
        mayHaveReached: false,
        message: 'not made: the action no longer records the call (it was deleted or ended meanwhile)',
      };
    if (!this.o.mayWrite())
      return {
        state: 'failed',
        mayHaveReached: false,
        message: 'not made: this replica is no longer the leader',
      };
    const target = this.target(action);
    const { call } = this.talosSteps(request);
    const machineConfig =
      call.method === 'MachineService.ApplyConfiguration'
        ? await this.machineConfig(call.secret, signal)
        : undefined;
    // Held before the call: failing to get a client is a call not made.
    const { client, release } = await this.hold();
    let handOff: string | undefined;
    try {
      // Before the disruptive call, not instead of it: a failure here is a call not made,
      // unless etcd's health was bypassed on the record (then it is said, and the call goes).
      handOff = await forfeitEtcdLeadership(
        client,
        call,
        { ...target, name: action.spec.nodeName },
        { signal },
      );
      if (handOff) progress(handOff);
    } catch (error) {
      if (!action.spec.bypass?.healthChecks) {
        release();
        return {
          state: 'failed',
          mayHaveReached: false,
          message: `not made: could not hand etcd leadership over first: ${errorMessage(error)}`,
        };
      }
      handOff = `could not hand etcd leadership over (${errorMessage(error)}); going on, as health checks were bypassed`;
      progress(handOff);
    }
    const told = handOff !== undefined ? { handOff } : {};
    progress(`waiting for Talos to answer (node ${target.address})`);
    try {
      const outcome = await callTalos(client, call, target, {
        signal,
        ...(machineConfig !== undefined ? { machineConfig } : {}),
      });
      return { state: 'succeeded', message: outcome.message, disrupts: outcome.disrupts, ...told };
    } catch (error) {
      return {
        state: 'failed',
        mayHaveReached: !definitelyNotMade(error),
        message: errorMessage(error),
        ...told,
      };
    } finally {
      release();
    }
  }
}
