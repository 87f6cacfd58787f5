// EtcdLeave: a control-plane node's etcd member leaves the cluster for good (Talos's
// EtcdLeaveCluster: the member removed, etcd stopped, its data emptied). The node keeps
// running its workloads; etcd has one member fewer. Through the Talos API gate it is also
// what `talosctl etcd remove-member` of that node's member asks for.
import { etcdLeaveSteps } from '../../talos/plan.ts';
import { THROUGH_TALOS, type ActionKind } from './kind.ts';

export const etcdLeave: ActionKind = {
  // Leaving etcd is the first step of taking a control-plane node out of the cluster: the
  // preparation for a reset (an etcd snapshot, moving what the node serves) is the one
  // wanted. See docs/decisions.md, "EtcdLeave".
  preHookKind: 'PreResetJob',
  managed: { by: 'talos', steps: etcdLeaveSteps },
  noDrain: () => 'leaving etcd stops no workload on the node',
  // The guard judges quorum without the member, for good: two members may become one,
  // the last may not leave (refused, not held).
  etcdGuard: () => true,
  etcdMember: () => 'leaves',
  cordonAtEnd: 'lift',
  // Nothing on the node shows it: done on the executed mark (External) or Talos's answer.
  completion: () => 'mark',
  words: {
    perform: 'make the etcd member leave on',
    managed: THROUGH_TALOS,
    done: 'etcd member left',
    goneForGood: () => 'it leaves etcd',
  },
};
