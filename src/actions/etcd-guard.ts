// The etcd guard, the built-in check `builtin:etcd` (invariant 7): no control-plane node
// is taken down or out unless etcd, read afresh through the Talos API, shows every
// voting member healthy, no alarm, no learner catching up, and quorum held without the
// node's member — with the members of other control-plane nodes whose disruptive action
// is approved counted as down, so two are never down at once, whatever the policies allow.
//
// Pure: the read is the reconciler's (src/talos/etcd-check.ts), asked for with
// DecisionBuilder.readEtcd() and given back as ActionInput.etcd. The health gate
// (phases/waiting-for-health.ts) judges it with the ClusterHealthChecks, and the approval
// (phases/approval.ts) again, on a read of its own: pre-hooks may take long.
import { CONTROL_PLANE_LABEL } from '../api/names.ts';
import { PHASES } from '../api/phases.ts';
import type { NodeActionSpec, NodeActionStatus, ObservedNodeAction } from '../api/node-action.ts';
import { ETCD_CHECK_NAME, type EtcdCheckState, type EtcdDisruption } from '../talos/etcd-health.ts';
import { COMPLETIONS } from './completions.ts';
import type { DecisionBuilder } from './decision.ts';
import { completionOf, kindOf } from './kinds/index.ts';

export { ETCD_CHECK_NAME };

/** How often a guard holding an action reads etcd again (as HEALTH_RETRY_MS). */
export const ETCD_RETRY_MS = 5000;

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

/** Whether the etcd guard holds this action: one that takes a control-plane node down or out (ActionKind.etcdGuard). */
export function etcdGuardApplies(
  spec: NodeActionSpec,
  labels: Readonly<Record<string, string>>,
  osImage?: string,
  status?: NodeActionStatus,
): boolean {
  return labels[CONTROL_PLANE_LABEL] !== undefined && kindOf(spec).etcdGuard(spec, osImage, status);
}

/** What the action does to its node's etcd member (ActionKind.etcdMember). */
export function etcdDisruption(spec: NodeActionSpec): EtcdDisruption {
  return kindOf(spec).etcdMember(spec);
}

/**
 * The nodes (by name) whose etcd member counts as down for the guard of `self`: those of
 * other unfinished actions already approved that take their node down (a live change
 * that Talos said does not reboot is no longer one). Every instance's actions count.
 */
export function etcdAway(
  actions: readonly Pick<ObservedNodeAction, 'metadata' | 'spec' | 'status'>[],
  self: Pick<ObservedNodeAction, 'metadata' | 'spec'>,
): Map<string, string> {
  const away = new Map<string, string>();
  for (const a of actions) {
    const phase = a.status?.phase;
    if (a.metadata.uid === self.metadata.uid || a.spec.nodeName === self.spec.nodeName) continue;
    // Phases in which an approved action's node is going down, or is down, because of it.
    if (phase === undefined || !PHASES[phase].nodeAway) continue;
    if (!COMPLETIONS[completionOf(a.spec, a.status?.execution)].away) continue;
    away.set(a.spec.nodeName, `its ${a.spec.action} (NodeAction ${a.metadata.name}) is ${phase}`);
  }
  return away;
}

/** What the guard found, as one of the action's check results. */
function result(state: EtcdCheckState, healthy: boolean, message: string): CheckResult {
  return {
    name: ETCD_CHECK_NAME,
    healthy,
    ...(state.checked ? {} : { notChecked: true }),
    probeTime: state.at.toISOString(),
    message: message.slice(0, 4096),
  };
}

/** The status's check results with the guard's put in (replacing an earlier one). */
export function withEtcdResult(status: NodeActionStatus, r: CheckResult): CheckResult[] {
  return [...(status.checks ?? []).filter((c) => c.name !== ETCD_CHECK_NAME), r];
}

export type EtcdGuardOutcome =
  /** The guard does not apply, or passed, or was bypassed: go on. */
  | { go: true; result?: CheckResult }
  /** Hold (or, ended: the action was refused); `result` is for status.checks when there is a new one. */
  | { go: false; result?: CheckResult; asked: boolean };

/**
 * The guard, for a gate deciding now. Without a read made for this decision it asks for
 * one (unless the recorded result holds it and is younger than ETCD_RETRY_MS: then it
 * wakes when that is over), and holds. With one, it judges: healthy goes on; a Reset
 * whose member etcd can never spare is refused (Denied); anything else holds.
 *
 * Without a talosconfig etcd cannot be read: Managed execution holds (fail closed: the
 * controller is asked to act on a control-plane node it cannot check), External goes on
 * with the result saying so — the requester, who performs the action, checks etcd.
 */
export function guardEtcd(b: DecisionBuilder): EtcdGuardOutcome {
  const { spec, node, nodeName, input, status, now } = b;
  if (!node || !etcdGuardApplies(spec, node.labels, node.osImage, b.status)) return { go: true };
  if (spec.bypass?.healthChecks) {
    return {
      go: true,
      result: {
        name: ETCD_CHECK_NAME,
        healthy: false,
        bypassed: true,
        probeTime: now.toISOString(),
        message:
          `etcd not read: health checks bypassed by ${spec.requestedBy}: ${spec.bypass.reason ?? ''}`.slice(
            0,
            4096,
          ),
      },
    };
  }
  const state = input.etcd;
  if (!state) {
    const recorded = status.checks?.find((c) => c.name === ETCD_CHECK_NAME);
    const age = now.getTime() - (Date.parse(recorded?.probeTime ?? '') || 0);
    if (recorded && !recorded.healthy && age < ETCD_RETRY_MS) {
      b.wake(ETCD_RETRY_MS - age);
      return { go: false, asked: false };
    }
    b.readEtcd();
    return { go: false, asked: true };
  }
  if (!state.checked) {
    if ((spec.execution ?? 'Managed') === 'Managed')
      return {
        go: false,
        asked: false,
        result: result(
          state,
          false,
          `${state.message}; a Managed ${spec.action} of control-plane node ${nodeName} waits until it can (give the controller a talosconfig), or use External execution and check etcd yourself, or bypass.healthChecks with a reason`,
        ),
      };
    return {
      go: true,
      result: result(
        state,
        true,
        `${state.message}; with External execution whoever performs the ${spec.action} must check etcd first (talosctl etcd status)`,
      ),
    };
  }
  const r = result(state, state.healthy, state.message);
  if (state.healthy) return { go: true, result: r };
  if (etcdDisruption(spec) !== 'down' && !state.spareable) {
    b.end(
      'Denied',
      `refused: a ${spec.action} of control-plane node ${nodeName} takes its etcd member out for good (${kindOf(spec).words.goneForGood?.(spec) ?? 'it leaves etcd'}), and ${state.message}; add a control-plane node first`,
    );
    return { go: false, asked: false, result: r };
  }
  return { go: false, asked: false, result: r };
}
