// The CLI talking straight to the Kubernetes API with a kubeconfig: NodeActions are
// created by the caller itself (spec.requestedBy is its own name, from the
// SelfSubjectReview API, which the admission policy checks), and progress comes from
// watches of the action and its node, so that every phase the action went through is
// shown, however briefly it lasted.
import { createHash } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import type { ClusterHealthCheckSpec, ClusterHealthCheckStatus } from '../api/cluster-health-check.ts';
import { API_VERSION } from '../api/common.ts';
import {
  INSTANCE_LABEL,
  instanceSelector,
  IDEMPOTENCY_KEY_ANNOTATION,
  REQUESTED_VIA_ANNOTATION,
} from '../api/names.ts';
import { ACTION_POLICIES_PATH, CHECKS_PATH, NODE_ACTIONS_PATH } from '../api/paths.ts';
import { isTerminal } from '../api/phases.ts';
import { probeTypeOf } from '../checks/probe.ts';
import { EXECUTED } from '../http/actions/executed.ts';
import type { RequesterMark } from '../http/actions/mark.ts';
import { RELEASE } from '../http/actions/released.ts';
import { approvalPatch, approvalRefusal } from '../http/actions/approve.ts';
import { actionNamePrefix } from '../http/actions/names.ts';
import { canonicalJson } from '../canonical-json.ts';
import { nodeView, type NodeObject } from '../http/node-view.ts';
import type { KubeObject } from '../kube/informer.ts';
import { KubeApiError, RestClient } from '../kube/rest.ts';
import { ObjectWatch, type ObjectWatchOptions } from '../kube/watch.ts';
import { errorMessage } from '../wait.ts';
import type {
  ActionObject,
  Backend,
  CheckSummary,
  CreateOptions,
  NodeView,
  PolicyObject,
  Progress,
  RequestSpec,
} from './backend.ts';
import { CliError, EXIT } from './exit.ts';

/** Turns a failed request into what the user should hear, with the exit code it deserves. */
export function kubeFailure(error: unknown, what: string): CliError {
  if (error instanceof CliError) return error;
  if (error instanceof KubeApiError) {
    const message = `cannot ${what}: ${error.serverMessage || error.message}`;
    if (error.code === 401)
      return new CliError(`${message} (the kubeconfig's credentials were not accepted)`, EXIT.unreachable);
    if (error.code === 400 || error.code === 422) return new CliError(message, EXIT.usage);
    if (error.code >= 500 || error.code === 429) return new CliError(message, EXIT.unreachable);
    return new CliError(message, EXIT.failed);
  }
  return new CliError(
    `cannot ${what}: the cluster is unreachable (${errorMessage(error)})`,
    EXIT.unreachable,
  );
}

type CheckObject = KubeObject & { spec: ClusterHealthCheckSpec; status?: ClusterHealthCheckStatus };

/**
 * A check's summary from what the controller recorded in its status. A Node-scoped one's
 * status names only its unsafe nodes (the first 20): for `node` it says Unhealthy when
 * the node is among them, Unknown otherwise (safe, or not recorded: --server tells).
 */
export function summaryFromStatus(check: CheckObject, node?: string): CheckSummary {
  const status = check.status ?? {};
  if (check.spec.scope === 'Node') return nodeSummaryFromStatus(check, node);
  const condition = status.conditions?.find((c) => c.type === 'Healthy');
  const reasons = ['NotProbed', 'ProbeSucceeded', 'ProbeFailed', 'ProbeError', 'ProbeTimeout'] as const;
  const reason = reasons.find((r) => r === condition?.reason) ?? 'NotProbed';
  return {
    name: check.metadata.name,
    healthy: status.healthy === true,
    state: status.healthy === undefined ? 'Unknown' : status.healthy ? 'Healthy' : 'Unhealthy',
    reason,
    message: status.message ?? 'not probed yet',
    probe: probeTypeOf(check.spec),
    consecutiveSuccesses: status.consecutiveSuccesses ?? 0,
    consecutiveFailures: status.consecutiveFailures ?? 0,
    lastProbeTime: status.lastProbeTime ?? null,
    lastTransitionTime: status.lastTransitionTime ?? null,
  };
}

function nodeSummaryFromStatus(check: CheckObject, node: string | undefined): CheckSummary {
  const status = check.status ?? {};
  const nodes = status.nodes ?? { evaluated: 0, safe: 0, unsafe: 0 };
  const common = {
    name: check.metadata.name,
    probe: probeTypeOf(check.spec),
    scope: 'Node' as const,
    consecutiveSuccesses: 0,
    consecutiveFailures: 0,
    lastTransitionTime: null,
  };
  if (node === undefined)
    return {
      ...common,
      healthy: false,
      state: 'PerNode',
      reason: nodes.evaluated === 0 ? 'NotProbed' : nodes.unsafe === 0 ? 'ProbeSucceeded' : 'ProbeFailed',
      message: status.message ?? 'not evaluated for any node yet',
      lastProbeTime: status.lastProbeTime ?? null,
      nodes: {
        evaluated: nodes.evaluated,
        safe: nodes.safe,
        unsafe: nodes.unsafe,
        unsafeNodes: (nodes.unsafeNodes ?? []).map((n) => ({ ...n, lastProbeTime: n.lastProbeTime ?? null })),
      },
    };
  const unsafe = nodes.unsafeNodes?.find((n) => n.name === node);
  return unsafe
    ? {
        ...common,
        node,
        healthy: false,
        state: 'Unhealthy',
        reason: 'ProbeFailed',
        message: unsafe.message,
        lastProbeTime: unsafe.lastProbeTime ?? null,
      }
    : {
        ...common,
        node,
        healthy: false,
        state: 'Unknown',
        reason: 'NotProbed',
        message: `${node} is not among the unsafe nodes the status records (${String(nodes.unsafe)} of ${String(nodes.evaluated)} evaluated), which names at most 20; --server evaluates it for ${node} now`,
        lastProbeTime: null,
      };
}

export interface KubeBackendOptions {
  /** The controller's namespace, where a Managed ConfigChange's configuration Secret goes. */
  controllerNamespace?: string;
  /** The controller instance whose actions to create and show (see ControllerOptions.instance). */
  instance?: string;
  /** Following an action: the server ends each watch after this long, and it is resumed. Default 300. */
  watchTimeoutSeconds?: number;
  /** Following an action: how often to make sure a watch has not silently stalled. Default 10s. */
  safetyPollMs?: number;
}

export class KubeBackend implements Backend {
  readonly mode = 'kubernetes';
  readonly target: string;
  private readonly rest: RestClient;
  private readonly watchTiming: Pick<ObjectWatchOptions<KubeObject>, 'watchTimeoutSeconds' | 'safetyPollMs'>;
  private readonly instance: string | undefined;
  private user: { username: string; groups: string[] } | undefined;
  /**
   * The latest version of each action this backend wrote (created, marked executed) or
   * followed. Following starts from it rather than from a fresh read, so that no phase
   * after our own write is missed, and a second follow (after Ctrl-C cancels) goes on
   * from where the first stopped instead of telling the story again.
   */
  private readonly lastSeen = new Map<string, ActionObject>();

  constructor(kubeConfig: KubeConfig, options: KubeBackendOptions = {}) {
    try {
      this.rest = new RestClient(kubeConfig);
    } catch (error) {
      throw new CliError(errorMessage(error), EXIT.unreachable);
    }
    this.target = `cluster ${kubeConfig.getCurrentCluster()?.server ?? '?'} (context ${kubeConfig.getCurrentContext()})`;
    this.watchTiming = {
      ...(options.watchTimeoutSeconds !== undefined
        ? { watchTimeoutSeconds: options.watchTimeoutSeconds }
        : {}),
      ...(options.safetyPollMs !== undefined ? { safetyPollMs: options.safetyPollMs } : {}),
    };
    this.instance = options.instance;
  }

  private async call<T>(
    what: string,
    path: string,
    init: Parameters<RestClient['request']>[1] = {},
  ): Promise<T> {
    try {
      return await this.rest.request<T>(path, init);
    } catch (error) {
      throw kubeFailure(error, what);
    }
  }

  private async maybe<T>(what: string, path: string): Promise<T | undefined> {
    try {
      return await this.rest.request<T>(path);
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404) return undefined;
      throw kubeFailure(error, what);
    }
  }

  async whoami(): Promise<string> {
    return (await this.identity()).username;
  }

  /** Who the API server says we are, with our groups (SelfSubjectReview), asked once. */
  private async identity(): Promise<{ username: string; groups: string[] }> {
    if (this.user) return this.user;
    const review = await this.call<{ status?: { userInfo?: { username?: string; groups?: string[] } } }>(
      'learn who you are (SelfSubjectReview)',
      '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      {
        method: 'POST',
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
      },
    );
    const name = review.status?.userInfo?.username;
    if (!name) throw new CliError('the API server did not say who you are (SelfSubjectReview)', EXIT.failed);
    this.user = { username: name, groups: review.status?.userInfo?.groups ?? [] };
    return this.user;
  }

  async checks(): Promise<CheckSummary[]> {
    const list = await this.call<{ items: CheckObject[] }>('list ClusterHealthChecks', CHECKS_PATH);
    return list.items.map((c) => summaryFromStatus(c)).sort((a, b) => a.name.localeCompare(b.name));
  }

  async check(
    name: string,
    node?: string,
  ): Promise<{ summary: CheckSummary; fresh: boolean; interval?: string } | undefined> {
    const check = await this.maybe<CheckObject>(
      `read ClusterHealthCheck ${name}`,
      `${CHECKS_PATH}/${encodeURIComponent(name)}`,
    );
    return check
      ? { summary: summaryFromStatus(check, node), fresh: false, interval: check.spec.interval ?? '30s' }
      : undefined;
  }

  async policies(): Promise<PolicyObject[]> {
    const list = await this.call<{ items: PolicyObject[] }>('list ActionPolicies', ACTION_POLICIES_PATH);
    return list.items.sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  }

  async actions(): Promise<ActionObject[]> {
    const list = await this.call<{ items: ActionObject[] }>('list NodeActions', NODE_ACTIONS_PATH, {
      query: { labelSelector: instanceSelector(this.instance) },
    });
    return list.items;
  }

  action(name: string): Promise<ActionObject | undefined> {
    return this.maybe<ActionObject>(
      `read NodeAction ${name}`,
      `${NODE_ACTIONS_PATH}/${encodeURIComponent(name)}`,
    );
  }

  async node(name: string): Promise<NodeView> {
    const node = await this.maybe<NodeObject>(
      `read Node ${name}`,
      `/api/v1/nodes/${encodeURIComponent(name)}`,
    );
    return nodeView(name, node);
  }

  async nodeNamed(address: string): Promise<string | undefined> {
    const list = await this.call<{
      items: (NodeObject & { status?: { addresses?: { type: string; address: string }[] } })[];
    }>('list Nodes', '/api/v1/nodes');
    const byName = list.items.find((n) => n.metadata.name === address);
    if (byName) return byName.metadata.name;
    return list.items.find((n) =>
      (n.status?.addresses ?? []).some(
        (a) => (a.type === 'InternalIP' || a.type === 'Hostname') && a.address === address,
      ),
    )?.metadata.name;
  }

  /** A Secret holding the configuration, named after its content so every node of one run shares it. */
  private async configSecret(content: Buffer, namespace: string): Promise<string> {
    const name = `gatehouse-config-${createHash('sha256').update(content).digest('hex').slice(0, 16)}`;
    const path = `/api/v1/namespaces/${namespace}/secrets`;
    const data = { 'config.yaml': content.toString('base64') };
    try {
      await this.rest.request(path, {
        method: 'POST',
        body: {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name, labels: { 'app.kubernetes.io/part-of': 'gatehouse' } },
          type: 'Opaque',
          data,
        },
      });
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 409)) {
        throw kubeFailure(error, `create the configuration Secret in namespace ${namespace}`);
      }
      const existing = await this.call<{ data?: Record<string, string> }>(
        'read the configuration Secret',
        `${path}/${name}`,
      );
      if (existing.data?.['config.yaml'] !== data['config.yaml']) {
        throw new CliError(
          `Secret ${namespace}/${name} exists with other content; delete it and retry`,
          EXIT.failed,
        );
      }
    }
    return name;
  }

  async createAction(spec: RequestSpec, options: CreateOptions = {}): Promise<ActionObject> {
    const requestedBy = await this.whoami();
    let full = { ...spec, requestedBy };
    let secret: { name: string; namespace: string } | undefined;
    if (options.configFile && spec.configChange) {
      const { content, namespace } = options.configFile;
      secret = { name: await this.configSecret(content, namespace), namespace };
      full = {
        ...full,
        configChange: { ...spec.configChange, configSecretRef: { name: secret.name, key: 'config.yaml' } },
      };
    }
    const what = `create a ${spec.action} NodeAction for node ${spec.nodeName}`;
    const body = {
      apiVersion: API_VERSION,
      kind: 'NodeAction',
      metadata: {
        ...(options.name !== undefined
          ? { name: options.name }
          : { generateName: actionNamePrefix(spec.nodeName, spec.action, 5) }),
        ...(this.instance ? { labels: { [INSTANCE_LABEL]: this.instance } } : {}),
        annotations: {
          [REQUESTED_VIA_ANNOTATION]: 'cli',
          ...(options.idempotencyKey !== undefined
            ? { [IDEMPOTENCY_KEY_ANNOTATION]: options.idempotencyKey }
            : {}),
        },
      },
      spec: full,
    };
    let created: ActionObject;
    try {
      created = await this.rest.request<ActionObject>(NODE_ACTIONS_PATH, { method: 'POST', body });
    } catch (error) {
      const existing =
        options.name !== undefined && error instanceof KubeApiError && error.code === 409
          ? await this.action(options.name)
          : undefined;
      if (!existing) throw kubeFailure(error, what);
      this.lastSeen.set(existing.metadata.name, existing);
      return existing;
    }
    this.lastSeen.set(created.metadata.name, created);
    if (secret) {
      // The Secret goes when the last action using it is garbage-collected.
      await this.call(
        'own the configuration Secret',
        `/api/v1/namespaces/${secret.namespace}/secrets/${secret.name}`,
        {
          method: 'PATCH',
          contentType: 'application/strategic-merge-patch+json',
          body: {
            metadata: {
              ownerReferences: [
                {
                  apiVersion: API_VERSION,
                  kind: 'NodeAction',
                  name: created.metadata.name,
                  uid: created.metadata.uid,
                },
              ],
            },
          },
        },
      );
    }
    return created;
  }

  async cancel(name: string): Promise<void> {
    const action = await this.action(name);
    if (!action) throw new CliError(`NodeAction ${name} does not exist`, EXIT.failed);
    const phase = action.status?.phase;
    if (isTerminal(phase)) {
      throw new CliError(
        `NodeAction ${name} has already ended (${String(phase)}): nothing to cancel`,
        EXIT.failed,
      );
    }
    if (action.metadata.deletionTimestamp) return;
    try {
      await this.rest.request(`${NODE_ACTIONS_PATH}/${encodeURIComponent(name)}`, {
        method: 'DELETE',
        body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid: action.metadata.uid } },
      });
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404) return;
      throw kubeFailure(error, `cancel NodeAction ${name}`);
    }
  }

  markExecuted(name: string): Promise<ActionObject> {
    return this.setMark(name, EXECUTED);
  }

  release(name: string): Promise<ActionObject> {
    return this.setMark(name, RELEASE);
  }

  /** Answers the approval the action waits for, in our own name; the admission policy judges it. */
  async approve(name: string, decision: 'Approve' | 'Refuse', reason: string): Promise<ActionObject> {
    const caller = await this.identity();
    for (let attempt = 1; ; attempt++) {
      const action = await this.action(name);
      if (!action) throw new CliError(`NodeAction ${name} does not exist`, EXIT.failed);
      const refusal = approvalRefusal(action, caller, decision);
      if (refusal) throw new CliError(refusal.message, EXIT.failed);
      const hook = action.status?.approval?.pending?.hook ?? '';
      try {
        const answered = await this.rest.request<ActionObject>(
          `${NODE_ACTIONS_PATH}/${encodeURIComponent(name)}`,
          {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: approvalPatch(action, { decision, by: caller.username, reason, hook }),
          },
        );
        this.lastSeen.set(name, answered);
        return answered;
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 409 && attempt < 5) continue;
        throw kubeFailure(error, `answer the approval of NodeAction ${name}`);
      }
    }
  }

  /** A requester's mark, by the rules the HTTP API applies (src/http/actions/mark.ts). */
  private async setMark(name: string, mark: RequesterMark): Promise<ActionObject> {
    for (let attempt = 1; ; attempt++) {
      const action = await this.action(name);
      if (!action) throw new CliError(`NodeAction ${name} does not exist`, EXIT.failed);
      if (mark.marked(action) || mark.past(action)) return action;
      const refusal = mark.refusal(action);
      if (refusal) throw new CliError(refusal, EXIT.failed);
      try {
        const marked = await this.rest.request<ActionObject>(
          `${NODE_ACTIONS_PATH}/${encodeURIComponent(name)}`,
          { method: 'PATCH', contentType: 'application/merge-patch+json', body: mark.patch(action) },
        );
        this.lastSeen.set(name, marked);
        return marked;
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 409 && attempt < 5) continue;
        throw kubeFailure(error, mark.doing(name));
      }
    }
  }

  async follow(
    name: string,
    onProgress: (progress: Progress) => void,
    options: { until?: (progress: Progress) => boolean; signal?: AbortSignal },
  ): Promise<Progress> {
    options.signal?.throwIfAborted();
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const ended = Promise.withResolvers<Progress>();
    const finish = (settle: () => void) => {
      if (stop.signal.aborted) return;
      stop.abort();
      settle();
    };
    const onAbort = () => finish(() => ended.reject(options.signal?.reason));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    const runs: Promise<void>[] = [];
    const run = <T extends KubeObject>(what: string, watch: ObjectWatchOptions<T>) => {
      runs.push(
        new ObjectWatch({ ...this.watchTiming, ...watch })
          .run(signal)
          .catch((error: unknown) => finish(() => ended.reject(kubeFailure(error, what)))),
      );
    };

    let shown = '';
    let node: NodeView | undefined;
    let latest: ActionObject | undefined;
    let nodeWatched = false;
    // Versions of the action seen before the node's first state: shown with it, in order.
    let early: ActionObject[] | undefined = [];
    let ending = false;
    const show = (progress: Progress) => {
      const text = canonicalJson(progress);
      if (text !== shown) {
        shown = text;
        onProgress(progress);
      }
    };
    const emit = (action: ActionObject | undefined) => {
      if (stop.signal.aborted || ending) return;
      const progress = { action, node };
      const done = !action || isTerminal(action.status?.phase) || options.until?.(progress) === true;
      if (!done || !action) {
        show(progress);
        if (done) finish(() => ended.resolve(progress));
        return;
      }
      // The two watches are independent, and the node's can lag the action's: the action may
      // say the node is back before its watch has shown the reboot. Read the node once more,
      // so that the last picture (and the story told in a pipe) has the node as it is now.
      ending = true;
      this.node(action.spec.nodeName).then(
        (now) => {
          const last = { action, node: now };
          show(last);
          finish(() => ended.resolve(last));
        },
        (error: unknown) => finish(() => ended.reject(error)),
      );
    };
    const flushEarly = () => {
      const versions = early ?? [];
      early = undefined;
      for (const version of versions) emit(version);
    };
    const followNode = (nodeName: string) => {
      nodeWatched = true;
      run<NodeObject & KubeObject>(`read Node ${nodeName}`, {
        rest: this.rest,
        path: '/api/v1/nodes',
        name: nodeName,
        onVersion: (object) => {
          if (stop.signal.aborted) return;
          node = nodeView(nodeName, object);
          if (early) flushEarly();
          else emit(latest);
        },
      });
    };
    const from = this.lastSeen.get(name);
    run<ActionObject>(`read NodeAction ${name}`, {
      rest: this.rest,
      path: NODE_ACTIONS_PATH,
      name,
      ...(from ? { from } : {}),
      onVersion: (action) => {
        if (stop.signal.aborted) return;
        latest = action;
        if (!action) {
          flushEarly();
          emit(undefined);
          return;
        }
        this.lastSeen.set(name, action);
        if (!nodeWatched) followNode(action.spec.nodeName);
        if (early) early.push(action);
        else emit(action);
      },
    });
    try {
      return await ended.promise;
    } finally {
      stop.abort();
      options.signal?.removeEventListener('abort', onAbort);
      // Both watches closed (sockets, timers) before returning: nothing keeps the process up.
      await Promise.all(runs);
    }
  }
}
