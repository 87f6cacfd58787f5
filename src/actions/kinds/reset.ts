// Reset: the node is wiped and leaves the cluster (a control-plane node leaves etcd).
import { resetSteps } from '../../talos/plan.ts';
import { THROUGH_TALOS, type ActionKind } from './kind.ts';

export const reset: ActionKind = {
  preHookKind: 'PreResetJob',
  managed: { by: 'talos', steps: resetSteps },
  noDrain: () => undefined,
  etcdGuard: () => true,
  // For good either way: a graceful reset leaves etcd (Talos's LeaveEtcd: N → N−1
  // members), one that is not leaves a dead member listed.
  etcdMember: (spec) => ((spec.reset?.graceful ?? true) ? 'leaves' : 'dead'),
  cordonAtEnd: 'keep',
  // A Talos reset never deletes the Node object: it is done once the node goes down
  // (gatehouse resets without Talos's `reboot`), or comes back with a new boot ID when
  // whoever performed it (External) asked for the reboot.
  completion: () => 'down',
  words: {
    perform: 'perform the Reset of',
    managed: THROUGH_TALOS,
    done: 'reset done',
    goneForGood: (spec) =>
      (spec.reset?.graceful ?? true)
        ? 'a graceful reset leaves etcd'
        : 'a reset that is not graceful leaves a dead member',
  },
};
