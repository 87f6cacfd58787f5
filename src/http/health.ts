// GET /v1/health[/{check}][?action=&node=]: whether the cluster's checks hold, readable
// by anyone, over plain HTTP. 200 when every selected check is healthy, 503 otherwise —
// so the endpoint itself works as a probe (unlike a status page that always says 200).
//
// Answers come from each check's current state (at most one interval old). They never
// trigger probes: an unauthenticated endpoint must not be a way to load the cluster. The
// one exception is bounded: a prospective action that takes a control-plane node down
// also shows the etcd guard (builtin:etcd), read at most once per ETCD_HEALTH_CACHE_MS per
// control-plane node whoever asks (src/talos/etcd-check.ts).
// Each is serialised once per change of the checks and carries an ETag (health-cache.ts).
import { ACTIONS, type Action } from '../api/common.ts';
import { probeTypeOf } from '../checks/probe.ts';
import type { CheckRunner, CheckView } from '../checks/runner.ts';
import { checkGates } from '../checks/selection.ts';
import { unknownState } from '../checks/state.ts';
import { rfc3339 } from '../kube/events.ts';
import { etcdGuardApplies } from '../actions/etcd-guard.ts';
import { ETCD_CHECK_NAME, type EtcdCheckState } from '../talos/etcd-health.ts';
import { HealthCache, type HealthAnswer } from './health-cache.ts';
import { HttpError, type Request, type Router } from './router.ts';

export interface HealthSources {
  checks: CheckRunner;
  /** Labels of a node, or undefined if there is no such node. */
  nodeLabels: (name: string) => Record<string, string> | undefined;
  /**
   * The etcd guard's state for a control-plane node (src/talos/etcd-check.ts EtcdCheck.cached:
   * at most a few seconds old, one read shared by every asker). Absent: not shown.
   */
  etcd?: (node: string) => Promise<EtcdCheckState>;
}

/** The etcd guard as one of /v1/health's checks, shaped like a ClusterHealthCheck's summary. */
export function etcdSummary(state: EtcdCheckState) {
  return {
    name: ETCD_CHECK_NAME,
    healthy: state.healthy,
    state: !state.checked ? 'NotChecked' : state.healthy ? 'Healthy' : 'Unhealthy',
    reason: !state.checked ? 'NotChecked' : state.healthy ? 'EtcdCanSpare' : 'EtcdCannotSpare',
    message: state.message,
    probe: 'builtin',
    consecutiveSuccesses: null,
    consecutiveFailures: null,
    lastProbeTime: rfc3339(state.at),
    lastTransitionTime: null,
  };
}

/**
 * A check as readers see it. A Node-scoped check is shown for `node` when one is asked
 * about (its state for that node), else as its per-node summary (`nodes`), which has no
 * verdict of its own: `state` PerNode.
 */
export function checkSummary(view: CheckView, node?: string) {
  const perNode = view.scope === 'Node' && node === undefined;
  const state =
    view.scope === 'Node' && node !== undefined ? (view.nodeState?.(node) ?? unknownState()) : view.state;
  return {
    name: view.name,
    healthy: state.healthy === true,
    state: perNode
      ? 'PerNode'
      : state.healthy === undefined
        ? 'Unknown'
        : state.healthy
          ? 'Healthy'
          : 'Unhealthy',
    reason: state.reason,
    message: state.message,
    probe: probeTypeOf(view.spec),
    ...(view.scope === 'Node' ? { scope: 'Node', ...(node === undefined ? {} : { node }) } : {}),
    consecutiveSuccesses: state.consecutiveSuccesses,
    consecutiveFailures: state.consecutiveFailures,
    lastProbeTime: state.lastProbeTime ? rfc3339(state.lastProbeTime) : null,
    lastTransitionTime: state.lastTransitionTime ? rfc3339(state.lastTransitionTime) : null,
    ...(perNode && view.nodes
      ? {
          nodes: {
            ...view.nodes,
            unsafeNodes: view.nodes.unsafeNodes.map((n) => ({
              name: n.name,
              message: n.message,
              lastProbeTime: n.lastProbeTime ? rfc3339(n.lastProbeTime) : null,
            })),
          },
        }
      : {}),
  };
}

/** Whether a view counts toward an answer's verdict: a Node-scoped check only for a node. */
function judged(view: CheckView, node: string | undefined): boolean {
  return view.scope !== 'Node' || node !== undefined;
}

function prospective(
  req: Request,
  sources: HealthSources,
): { action: Action | undefined; node: string; labels: Record<string, string> } | undefined {
  const action = req.url.searchParams.get('action');
  const node = req.url.searchParams.get('node');
  if (action === null && node === null) return undefined;
  if (node === null) {
    throw new HttpError(
      400,
      'ask about a prospective action with both ?action= and ?node= (or ?node= alone: every check that gates some action on it), e.g. ?action=Reboot&node=worker-1',
    );
  }
  // ?node= alone: every check that gates some action on the node.
  if (action === null) return { action: undefined, node, labels: sources.nodeLabels(node) ?? {} };
  if (!(ACTIONS as readonly string[]).includes(action)) {
    throw new HttpError(400, `action "${action}" is not one of ${ACTIONS.join(', ')}`);
  }
  // An unknown node is answered as a node without labels: this endpoint is anonymous, and
  // must not tell a node that exists from one that does not (node enumeration).
  const labels = sources.nodeLabels(node) ?? {};
  return { action: action as Action, node, labels };
}

// Answers are cached until a check changes (health-cache.ts); building one then reuses
// every unchanged check's summary: it only changes when its state does (states are
// replaced, never mutated), so each is serialised once per probe.
const serialised = new WeakMap<CheckView['state'], string>();

function summaryJson(view: CheckView, node: string | undefined): string {
  // A node's answer is built per node; only the check's own state is worth remembering.
  if (view.scope === 'Node' && node !== undefined) return JSON.stringify(checkSummary(view, node));
  let json = serialised.get(view.state);
  if (json === undefined) {
    json = JSON.stringify(checkSummary(view));
    serialised.set(view.state, json);
  }
  return json;
}

function stateFor(view: CheckView, node: string | undefined) {
  return view.scope === 'Node' && node !== undefined ? view.nodeState?.(node) : view.state;
}

function answer(
  views: CheckView[],
  scope: Record<string, unknown>,
  node?: string,
  etcd?: EtcdCheckState,
): HealthAnswer {
  const verdicts = views.filter((v) => judged(v, node));
  const unhealthy = verdicts.filter((v) => stateFor(v, node)?.healthy !== true).map((v) => v.name);
  if (etcd && !etcd.healthy) unhealthy.push(ETCD_CHECK_NAME);
  const count = verdicts.length + (etcd ? 1 : 0);
  const healthy = unhealthy.length === 0;
  const message =
    count === 0
      ? 'no checks apply'
      : healthy
        ? `all ${String(count)} checks healthy`
        : `${String(unhealthy.length)} of ${String(count)} checks not healthy: ${unhealthy.join(', ')}`;
  const head = JSON.stringify({ healthy, message, ...scope });
  const summaries = [
    ...views.map((v) => summaryJson(v, node)),
    ...(etcd ? [JSON.stringify(etcdSummary(etcd))] : []),
  ];
  return {
    status: healthy ? 200 : 503,
    body: `${head.slice(0, -1)},"checks":[${summaries.join(',')}]}\n`,
  };
}

/** What an answer depends on besides the checks: which it covers, and the prospective action. */
function cacheKey(check: string | undefined, target: ReturnType<typeof prospective>): string {
  return JSON.stringify(target ? [check, target.action, target.node, target.labels] : [check]);
}

type Target = NonNullable<ReturnType<typeof prospective>>;

function gates(view: CheckView, target: Target): boolean {
  if (target.action !== undefined) return checkGates(view.spec, target.action, target.labels);
  return ACTIONS.some((action) => checkGates(view.spec, action, target.labels));
}

function scopeOf(target: Target): Record<string, unknown> {
  return target.action === undefined ? { node: target.node } : { action: target.action, node: target.node };
}

export function healthRoutes(router: Router, sources: HealthSources): HealthCache {
  const cache = new HealthCache(sources.checks);
  router.on('GET', '/v1/health', async (req) => {
    const target = prospective(req, sources);
    // A prospective action that takes a control-plane node down: the etcd guard too. Its
    // state (at most ETCD_HEALTH_CACHE_MS old) is part of the answer's key.
    const action = target?.action;
    const etcd =
      target &&
      action !== undefined &&
      sources.etcd &&
      etcdGuardApplies({ nodeName: target.node, action, requestedBy: '' }, target.labels)
        ? await sources.etcd(target.node)
        : undefined;
    const key = `${cacheKey(undefined, target)}${etcd ? JSON.stringify(etcdSummary(etcd)) : ''}`;
    return cache.reply(req, key, () => {
      const views = sources.checks.views().filter((v) => !target || gates(v, target));
      return answer(views, target ? scopeOf(target) : {}, target?.node, etcd);
    });
  });
  router.on('GET', '/v1/health/{check}', (req) => {
    const name = req.params.check ?? '';
    const view = sources.checks.view(name);
    if (!view) throw new HttpError(404, `ClusterHealthCheck "${name}" does not exist`);
    const target = prospective(req, sources);
    return cache.reply(req, cacheKey(name, target), () => {
      if (target && !gates(view, target)) {
        const body = {
          healthy: true,
          message: `${name} does not gate ${target.action ?? 'any action'} on ${target.node}`,
          gates: false,
          checks: [checkSummary(view, target.node)],
        };
        return { status: 200, body: `${JSON.stringify(body)}\n` };
      }
      return answer([view], target ? { ...scopeOf(target), gates: true } : {}, target?.node);
    });
  });
  return cache;
}
