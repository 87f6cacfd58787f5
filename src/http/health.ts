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

export function checkSummary(view: CheckView) {
  const { state } = view;
  return {
    name: view.name,
    healthy: state.healthy === true,
    state: state.healthy === undefined ? 'Unknown' : state.healthy ? 'Healthy' : 'Unhealthy',
    reason: state.reason,
    message: state.message,
    probe: probeTypeOf(view.spec),
    consecutiveSuccesses: state.consecutiveSuccesses,
    consecutiveFailures: state.consecutiveFailures,
    lastProbeTime: state.lastProbeTime ? rfc3339(state.lastProbeTime) : null,
    lastTransitionTime: state.lastTransitionTime ? rfc3339(state.lastTransitionTime) : null,
  };
}

function prospective(
  req: Request,
  sources: HealthSources,
): { action: Action; node: string; labels: Record<string, string> } | undefined {
  const action = req.url.searchParams.get('action');
  const node = req.url.searchParams.get('node');
  if (action === null && node === null) return undefined;
  if (action === null || node === null) {
    throw new HttpError(
      400,
      'ask about a prospective action with both ?action= and ?node=, e.g. ?action=Reboot&node=worker-1',
    );
  }
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

function summaryJson(view: CheckView): string {
  let json = serialised.get(view.state);
  if (json === undefined) {
    json = JSON.stringify(checkSummary(view));
    serialised.set(view.state, json);
  }
  return json;
}

function answer(views: CheckView[], scope: Record<string, unknown>, etcd?: EtcdCheckState): HealthAnswer {
  const unhealthy = views.filter((v) => v.state.healthy !== true).map((v) => v.name);
  if (etcd && !etcd.healthy) unhealthy.push(ETCD_CHECK_NAME);
  const count = views.length + (etcd ? 1 : 0);
  const healthy = unhealthy.length === 0;
  const message =
    count === 0
      ? 'no checks apply'
      : healthy
        ? `all ${String(count)} checks healthy`
        : `${String(unhealthy.length)} of ${String(count)} checks not healthy: ${unhealthy.join(', ')}`;
  const head = JSON.stringify({ healthy, message, ...scope });
  const summaries = [...views.map(summaryJson), ...(etcd ? [JSON.stringify(etcdSummary(etcd))] : [])];
  return {
    status: healthy ? 200 : 503,
    body: `${head.slice(0, -1)},"checks":[${summaries.join(',')}]}\n`,
  };
}

/** What an answer depends on besides the checks: which it covers, and the prospective action. */
function cacheKey(check: string | undefined, target: ReturnType<typeof prospective>): string {
  return JSON.stringify(target ? [check, target.action, target.node, target.labels] : [check]);
}

export function healthRoutes(router: Router, sources: HealthSources): HealthCache {
  const cache = new HealthCache(sources.checks);
  router.on('GET', '/v1/health', async (req) => {
    const target = prospective(req, sources);
    // A prospective action that takes a control-plane node down: the etcd guard too. Its
    // state (at most ETCD_HEALTH_CACHE_MS old) is part of the answer's key.
    const etcd =
      target &&
      sources.etcd &&
      etcdGuardApplies({ nodeName: target.node, action: target.action, requestedBy: '' }, target.labels)
        ? await sources.etcd(target.node)
        : undefined;
    const key = `${cacheKey(undefined, target)}${etcd ? JSON.stringify(etcdSummary(etcd)) : ''}`;
    return cache.reply(req, key, () => {
      const views = sources.checks
        .views()
        .filter((v) => !target || checkGates(v.spec, target.action, target.labels));
      return answer(views, target ? { action: target.action, node: target.node } : {}, etcd);
    });
  });
  router.on('GET', '/v1/health/{check}', (req) => {
    const name = req.params.check ?? '';
    const view = sources.checks.view(name);
    if (!view) throw new HttpError(404, `ClusterHealthCheck "${name}" does not exist`);
    const target = prospective(req, sources);
    return cache.reply(req, cacheKey(name, target), () => {
      if (target && !checkGates(view.spec, target.action, target.labels)) {
        const body = {
          healthy: true,
          message: `${name} does not gate ${target.action} on ${target.node}`,
          gates: false,
          checks: [checkSummary(view)],
        };
        return { status: 200, body: `${JSON.stringify(body)}\n` };
      }
      return answer([view], target ? { action: target.action, node: target.node, gates: true } : {});
    });
  });
  return cache;
}
