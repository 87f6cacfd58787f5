// What the person at the terminal reads when the gate holds their call: one gRPC status
// message (talosctl prints it as the error) saying which action holds it, what that
// action waits for now (the check or hook by name), and what to do. Pure.
import type { ObservedNodeAction } from '../api/node-action.ts';

const MAX = 900;

/** What the action waits for now, in words, naming the checks or hooks that hold it. */
export function waitingFor(action: ObservedNodeAction): string {
  const status = action.status;
  switch (status?.phase) {
    case undefined:
      return 'it was just created; the controller has not looked at it yet (is the gatehouse controller running?)';
    case 'Pending':
      return `it waits for its policies to allow it (a free slot, an open window)${status.message ? `: ${status.message}` : ''}`;
    case 'WaitingForHealth': {
      const failing = (status.checks ?? []).filter((c) => !c.healthy && !c.bypassed);
      if (failing.length === 0) return 'its health checks are being evaluated';
      return `health check${failing.length > 1 ? 's' : ''} ${failing
        .map((c) => `${c.name} ${c.message ? `(${c.message})` : 'is not healthy'}`)
        .join(', ')} ${failing.length > 1 ? 'are' : 'is'} not healthy`;
    }
    case 'RunningPreHooks': {
      const open = (status.hooks ?? []).filter((h) => h.phase === 'Pending' || h.phase === 'Running');
      if (open.length === 0) return 'its pre-action hooks are starting';
      return `pre-action hook${open.length > 1 ? 's' : ''} ${open
        .map(
          (h) =>
            `${h.kind} ${h.namespace}/${h.name} (${h.phase.toLowerCase()}${h.jobName ? `, Job ${h.jobName}` : ''})`,
        )
        .join(', ')} must finish first`;
    }
    default:
      return `it is ${status?.phase ?? 'new'}${status?.message ? `: ${status.message}` : ''}`;
  }
}

/**
 * The status message of a held call.
 *
 * @example heldMessage(action, 'MachineService.Reboot', 'w1')
 *   // "talos gate: MachineService.Reboot on node w1 is held by NodeAction reboot-w1-x2k4 (WaitingForHealth):
 *   //  health check ceph (HEALTH_WARN) is not healthy. Follow it: gatehouse actions describe reboot-w1-x2k4 …"
 */
export function heldMessage(action: ObservedNodeAction, call: string, node: string): string {
  const name = action.metadata.name;
  const text = `talos gate: ${call} on node ${node} is held by NodeAction ${name} (${action.status?.phase ?? 'new'}): ${waitingFor(action)}. Follow it: gatehouse actions describe ${name} (or kubectl get nodeaction ${name} -w); run this command again once it is Approved, and it passes. To give up: gatehouse actions cancel ${name}.`;
  return text.length > MAX ? `${text.slice(0, MAX - 1)}…` : text;
}
