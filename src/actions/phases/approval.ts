// Approval, the end of RunningPreHooks: once the etcd guard (etcd-guard.ts) spares a
// control-plane node on a read of its own, and after the coming boot is announced on the
// node (src/boots), the action is Approved — to be executed here (Managed, with a Talos
// executor) or by its requester, who is told how.
import { EXECUTED_ANNOTATION } from '../../api/names.ts';
import { isTerminal } from '../../api/phases.ts';
import { selectHooks } from '../../hooks/select.ts';
import { COMPLETIONS } from '../completions.ts';
import type { DecisionBuilder } from '../decision.ts';
import { ETCD_CHECK_NAME, ETCD_RETRY_MS, guardEtcd, withEtcdResult } from '../etcd-guard.ts';
import { etcdSnapshotTaken, recordEtcdSnapshot } from '../etcd-snapshot.ts';
import { completionOf, kindOf } from '../kinds/index.ts';
import { approvalTakesLease } from '../medik8s-lease.ts';
import type { NodeFacts } from '../observations.ts';
import { actionParameters, performsHere, targetImageOf } from '../subject.ts';

/**
 * Before an action that makes its node boot is approved, the coming boot is announced
 * on the node — with the preready taint when a NodePrereadyJob selects it — so that the
 * node comes back tainted and the boot reconciler knows whose boot it is (src/boots).
 * The approval waits until the node, as observed, shows both: the taint is on before
 * the approval can be seen.
 */
function bootAnnounced(b: DecisionBuilder, n: NodeFacts): boolean {
  const { action, spec, nodeName, now } = b;
  if (!COMPLETIONS[completionOf(spec, undefined, n.osImage)].boots) return true;
  const prepare = selectHooks(b.input.hooks, 'NodePrereadyJob', n.labels).length;
  const ready = selectHooks(b.input.hooks, 'NodeReadyJob', n.labels).length;
  if (prepare + ready === 0) return true;
  const taint = prepare > 0;
  const a = n.announcement;
  if (
    a?.action.uid === action.metadata.uid &&
    a.bootID === (n.bootID ?? '') &&
    (!taint || n.prereadyTaint === true)
  )
    return true;
  b.effect({
    type: 'announceBoot',
    taint,
    announcement: {
      action: {
        name: action.metadata.name,
        uid: action.metadata.uid,
        action: spec.action,
        parameters: actionParameters(spec),
        ...targetImageOf(spec),
      },
      bootID: n.bootID ?? '',
      time: now.toISOString(),
    },
  });
  b.say(
    taint
      ? `putting the preready taint on node ${nodeName} before approval, so that it comes back tainted until its NodePrereadyJobs succeed`
      : `announcing the coming boot of node ${nodeName} to its boot hooks before approval`,
  );
  b.wake(2000);
  return false;
}

/**
 * The etcd guard once more, on a read made for the approval itself (the health gate's
 * may be minutes old once pre-hooks are done): the action holds here until it passes.
 */
function etcdSpares(b: DecisionBuilder): boolean {
  const { status } = b;
  if (b.spec.bypass?.healthChecks) return true; // recorded as bypassed by the health gate
  const etcd = guardEtcd(b);
  if (etcd.result) status.checks = withEtcdResult(status, etcd.result);
  if (etcd.go || isTerminal(status.phase)) return etcd.go;
  const held = status.checks?.find((c) => c.name === ETCD_CHECK_NAME);
  if (held && !held.healthy) {
    b.say(`pre-action hooks done; waiting for etcd before approval: ${held.message ?? ''}`);
    b.wake(ETCD_RETRY_MS);
  }
  return false;
}

export function approve(b: DecisionBuilder, n: NodeFacts): void {
  const { spec, nodeName, status, condition, transition } = b;
  recordEtcdSnapshot(b);
  if (!etcdSpares(b)) return;
  // Once etcd spares the node, the snapshot an ActionPolicy asks for (etcd-snapshot.ts).
  if (!etcdSnapshotTaken(b)) return;
  if (!bootAnnounced(b, n)) return;
  if (!approvalTakesLease(b)) return;
  status.approvalTime = b.now.toISOString();
  status.bootIDBefore = n.bootID;
  const execution = spec.execution ?? 'Managed';
  const kind = kindOf(spec);
  if (execution === 'Managed' && performsHere(kind, b.input)) {
    condition('Approved', 'True', 'Approved', `approved at boot ID ${n.bootID ?? '?'}`);
    transition('Approved', `approved; the controller performs it ${kind.words.managed}`);
    return;
  }
  const instruction = `${kind.words.perform} node ${nodeName}, then set the annotation ${EXECUTED_ANNOTATION}: "true"`;
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
