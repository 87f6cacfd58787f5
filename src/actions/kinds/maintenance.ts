// Maintenance: the node is taken out for work that is no Talos call — hardware, the
// hypervisor, a cable — cordoned and drained, then held out of service (phase Held,
// counting against every budget) until someone releases it; then its NodeReadyJobs run
// and the cordon is lifted. What the medik8s NodeMaintenance does, behind the same gates
// as every other action (docs/decisions.md, "Maintenance").
import { type ActionKind } from './kind.ts';

export const maintenance: ActionKind = {
  preHookKind: 'PreMaintenanceJob',
  managed: { by: 'controller' },
  noDrain: () => undefined,
  // The node's etcd member stays up while its workloads leave, but the work it is held
  // for may well power it off: on a control-plane node the guard judges it as a reboot,
  // and its member counts as away for every other action while it is held.
  etcdGuard: () => true,
  etcdMember: () => 'down',
  cordonAtEnd: 'lift',
  completion: () => 'release',
  words: {
    perform: 'drain, then do the maintenance of',
    managed: 'by cordoning and draining the node',
    done: 'maintenance done',
  },
};
