// The Talos API as the gate sees it: for every method of the Talos versions gatehouse
// supports (1.11 to 1.14), which Talos roles may call it (Talos's own authorization
// rules, machined's `rules` table: facts of the API, carried over) and whether the gate
// holds it as a NodeAction, with why. docs/talos-gate.md shows this table;
// test/unit/talos-gate-methods.test.ts checks that the two agree.

import type { Action } from '../api/common.ts';
import type { TalosRole } from '../talos/roles.ts';

export { TALOS_ROLES, type TalosRole } from '../talos/roles.ts';

const ADMIN: TalosRole[] = ['os:admin'];
const OPERATOR: TalosRole[] = ['os:admin', 'os:operator'];
const READER: TalosRole[] = ['os:admin', 'os:operator', 'os:reader'];

/**
 * How the gate treats a method: forwarded as it is, or held until a NodeAction of that kind
 * allows it (`EtcdRemoveMember`: an EtcdLeave of the member's node, once the gate knows
 * which node that is). classify.ts decides per kind, so a kind added to the API does not
 * compile there until the gate says which calls, if any, ask for it.
 */
/** The actions a Talos call can be: every kind but the one the controller performs itself (Maintenance). */
export type TalosAction = Exclude<Action, 'Maintenance'>;

export type Gating = { gated: false; why: string } | { gated: TalosAction | 'EtcdRemoveMember'; why: string };

export interface MethodFacts {
  /** Roles allowed to call it (Talos's rule; a method without one is admin-only). */
  roles: readonly TalosRole[];
  gating: Gating;
}

const read = (why = 'reads only'): MethodFacts => ({ roles: READER, gating: { gated: false, why } });
const forward = (roles: readonly TalosRole[], why: string): MethodFacts => ({
  roles,
  gating: { gated: false, why },
});

/** Every method by its gRPC path. */
export const TALOS_METHODS: Readonly<Record<string, MethodFacts>> = {
  '/machine.MachineService/ApplyConfiguration': {
    // Talos lets a reader apply in maintenance mode only (checked by its handler).
    roles: ['os:admin', 'os:reader'],
    gating: {
      gated: 'ConfigChange',
      why: 'modes that reboot (REBOOT; AUTO before 1.14) and, from 1.14, NO_REBOOT, AUTO and TRY (they may restart CRI); STAGED and dry runs pass',
    },
  },
  '/machine.MachineService/Bootstrap': forward(
    ADMIN,
    'starts etcd on a fresh control plane once; refused by Talos on a bootstrapped node',
  ),
  '/machine.MachineService/CPUFreqStats': read(),
  '/machine.MachineService/CPUInfo': read(),
  '/machine.MachineService/Containers': read(),
  '/machine.MachineService/Copy': forward(ADMIN, 'reads files from the node'),
  '/machine.MachineService/DiskStats': read(),
  '/machine.MachineService/DiskUsage': read(),
  '/machine.MachineService/Dmesg': read(),
  '/machine.MachineService/Events': read(),
  '/machine.MachineService/EtcdAlarmDisarm': forward(OPERATOR, 'clears alarms; takes no member down'),
  '/machine.MachineService/EtcdAlarmList': forward([...READER, 'os:etcd:backup'], 'reads only'),
  '/machine.MachineService/EtcdDefragment': forward(
    OPERATOR,
    'compacts one member’s database; membership and quorum unchanged',
  ),
  '/machine.MachineService/EtcdDowngradeCancel': forward(
    ADMIN,
    'changes the cluster version policy, takes no member down',
  ),
  '/machine.MachineService/EtcdDowngradeEnable': forward(
    ADMIN,
    'changes the cluster version policy, takes no member down',
  ),
  '/machine.MachineService/EtcdDowngradeValidate': forward(ADMIN, 'validates only'),
  '/machine.MachineService/EtcdForfeitLeadership': forward(
    ADMIN,
    'hands leadership to another member (gatehouse does it itself before an action); membership unchanged',
  ),
  '/machine.MachineService/EtcdLeaveCluster': {
    roles: ADMIN,
    gating: { gated: 'EtcdLeave', why: "the node's member leaves etcd for good (quorum)" },
  },
  '/machine.MachineService/EtcdMemberList': forward([...READER, 'os:etcd:backup'], 'reads only'),
  '/machine.MachineService/EtcdRecover': forward(
    ADMIN,
    'restores a snapshot into a member that was never bootstrapped; refused otherwise',
  ),
  '/machine.MachineService/EtcdRemoveMemberByID': {
    roles: ADMIN,
    gating: {
      gated: 'EtcdRemoveMember',
      why: "an EtcdLeave of the member's node; a member of no Node: bypass holders only",
    },
  },
  '/machine.MachineService/EtcdSnapshot': forward(
    ['os:admin', 'os:operator', 'os:etcd:backup'],
    'reads only',
  ),
  '/machine.MachineService/EtcdStatus': forward([...READER, 'os:etcd:backup'], 'reads only'),
  '/machine.MachineService/GenerateClientConfiguration': forward(
    ADMIN,
    'issues Talos credentials; disrupts nothing (lock down by role)',
  ),
  '/machine.MachineService/GenerateConfiguration': forward(
    ADMIN,
    'generates a configuration, applies nothing (Talos 1.11 and 1.12)',
  ),
  '/machine.MachineService/Hostname': read(),
  '/machine.MachineService/ImageList': read(),
  '/machine.MachineService/ImagePull': forward(OPERATOR, 'pulls an image into the CRI; runs nothing'),
  '/machine.MachineService/Kubeconfig': forward(
    ADMIN,
    'reads credentials; disrupts nothing (lock down by role)',
  ),
  '/machine.MachineService/List': read(),
  '/machine.MachineService/LoadAvg': read(),
  '/machine.MachineService/Logs': read(),
  '/machine.MachineService/LogsContainers': read(),
  '/machine.MachineService/Memory': read(),
  '/machine.MachineService/MetaDelete': forward(
    ['os:admin', 'os:meta:writer'],
    'edits META keys read at the next boot; no boot of its own',
  ),
  '/machine.MachineService/MetaWrite': forward(
    ['os:admin', 'os:meta:writer'],
    'edits META keys read at the next boot; no boot of its own',
  ),
  '/machine.MachineService/Mounts': read(),
  '/machine.MachineService/NetworkDeviceStats': read(),
  '/machine.MachineService/Netstat': read(),
  '/machine.MachineService/PacketCapture': forward(OPERATOR, 'captures packets; changes nothing'),
  '/machine.MachineService/Processes': read(),
  '/machine.MachineService/Read': forward(ADMIN, 'reads a file'),
  '/machine.MachineService/Reboot': {
    roles: OPERATOR,
    gating: { gated: 'Reboot', why: 'reboots the node' },
  },
  '/machine.MachineService/Reset': {
    roles: ADMIN,
    gating: { gated: 'Reset', why: 'wipes the node (and leaves etcd when graceful)' },
  },
  '/machine.MachineService/Restart': forward(OPERATOR, 'restarts one container, not the node'),
  '/machine.MachineService/Rollback': {
    roles: ADMIN,
    gating: { gated: 'Reboot', why: 'boots the previous Talos version: a reboot' },
  },
  '/machine.MachineService/ServiceList': read(),
  '/machine.MachineService/ServiceRestart': forward(
    OPERATOR,
    'not gated yet: no action kind describes a service restart; give os:reader to whoever must not',
  ),
  '/machine.MachineService/ServiceStart': forward(OPERATOR, 'starts a service'),
  '/machine.MachineService/ServiceStop': forward(
    OPERATOR,
    'not gated yet: no action kind describes a service stop; give os:reader to whoever must not',
  ),
  '/machine.MachineService/Shutdown': {
    roles: OPERATOR,
    gating: { gated: 'Shutdown', why: 'powers the node off' },
  },
  '/machine.MachineService/Stats': read(),
  '/machine.MachineService/SystemStat': read(),
  '/machine.MachineService/Upgrade': {
    roles: ADMIN,
    gating: { gated: 'Upgrade', why: 'the legacy upgrade: installs and reboots in one call' },
  },
  '/machine.MachineService/Version': read(),
  '/machine.ImageService/Import': forward(ADMIN, 'imports an image; runs nothing'),
  '/machine.ImageService/List': read(),
  '/machine.ImageService/Pull': forward(
    OPERATOR,
    'pulls an image (the first step of a 1.13+ upgrade); installs nothing',
  ),
  '/machine.ImageService/Remove': forward(ADMIN, 'removes an image; runs nothing'),
  '/machine.ImageService/Verify': forward([...READER, 'os:image:verifier'], 'verifies only'),
  '/machine.LifecycleService/Install': forward(
    ADMIN,
    'installs to a node in maintenance mode (not yet in the cluster)',
  ),
  '/machine.LifecycleService/Upgrade': {
    roles: ADMIN,
    gating: {
      gated: 'Upgrade',
      why: 'installs the new version; with the Reboot that follows it, one Upgrade action',
    },
  },
  '/machine.DebugService/ContainerRun': forward(ADMIN, 'runs a debug container (lock down by role)'),
  '/machine.LVMService/LogicalVolumeRemove': forward(
    ['os:admin', 'os:reader'],
    'maintenance mode only (Talos checks)',
  ),
  '/machine.LVMService/PhysicalVolumeRemove': forward(
    ['os:admin', 'os:reader'],
    'maintenance mode only (Talos checks)',
  ),
  '/machine.LVMService/VolumeGroupRemove': forward(
    ['os:admin', 'os:reader'],
    'maintenance mode only (Talos checks)',
  ),
  '/machine.MDService/Destroy': forward(['os:admin', 'os:reader'], 'maintenance mode only (Talos checks)'),
  '/storage.StorageService/BlockDeviceWipe': forward(
    ['os:admin', 'os:reader'],
    'wipes a disk Talos does not use; maintenance mode only for readers (Talos checks)',
  ),
  '/storage.StorageService/Disks': read(),
  '/cluster.ClusterService/HealthCheck': read(),
  '/inspect.InspectService/ControllerRuntimeDependencies': read(),
  '/security.SecurityService/Certificate': forward(ADMIN, 'signs a certificate; disrupts nothing'),
  '/time.TimeService/Time': read(),
  '/time.TimeService/TimeCheck': read(),
  '/cosi.resource.State/Create': forward(ADMIN, 'Talos resources (per-type checks by Talos)'),
  '/cosi.resource.State/Destroy': forward(ADMIN, 'Talos resources (per-type checks by Talos)'),
  '/cosi.resource.State/Get': read(),
  '/cosi.resource.State/List': read(),
  '/cosi.resource.State/Teardown': forward(ADMIN, 'Talos resources (per-type checks by Talos)'),
  '/cosi.resource.State/TeardownAndDestroy': forward(ADMIN, 'Talos resources (per-type checks by Talos)'),
  '/cosi.resource.State/Update': forward(ADMIN, 'Talos resources (per-type checks by Talos)'),
  '/cosi.resource.State/Watch': read(),
};

/** A method the table does not know (a newer Talos): forwarded, admin only, as Talos's fallback rule. */
const UNKNOWN: MethodFacts = {
  roles: ADMIN,
  gating: {
    gated: false,
    why: 'unknown to gatehouse: forwarded by path, os:admin only (Talos’s fallback rule)',
  },
};

export function methodFacts(path: string): MethodFacts {
  return TALOS_METHODS[path] ?? UNKNOWN;
}

/** Whether a caller with `roles` may call `path` (Talos's rule: any one role in common). */
export function mayCall(roles: readonly string[], path: string): boolean {
  return methodFacts(path).roles.some((role) => roles.includes(role));
}
