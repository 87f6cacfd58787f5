// The simulator's etcd: one cluster whose members are the control-plane Nodes, derived
// afresh from the Nodes on every call (as the rest of the simulator's state, it lives
// on them). A member is unreachable while its node is down; annotations inject faults:
//
//   sandbox.gatehouse.dev/etcd-fault: unhealthy | nospace | learner | lagging (comma-separated)
//
// unhealthy: its EtcdStatus reports errors; nospace: a NOSPACE alarm; learner: a learner
// still catching up; lagging: its raft index far behind the leader's. The leader is the
// member marked with ETCD_LEADER_ANNOTATION while it is up and healthy, else the first
// such voting member by name; without a quorum of healthy voting members there is none.
import { createHash, randomBytes } from 'node:crypto';
import type { MessageInitShape } from '@bufbuild/protobuf';
import {
  EtcdMemberAlarm_AlarmType as AlarmType,
  type EtcdAlarmListResponseSchema,
  type EtcdMemberListResponseSchema,
  type EtcdStatusResponseSchema,
} from '../src/talos/gen/gatehouse/talos/machine_pb.ts';

export const ETCD_FAULT_ANNOTATION = 'sandbox.gatehouse.dev/etcd-fault';
/** Set on the member that took leadership over (EtcdForfeitLeadership moves it). */
export const ETCD_LEADER_ANNOTATION = 'sandbox.gatehouse.dev/etcd-leader';
/** Set when a graceful reset made the member leave etcd; a boot joins it again. */
export const ETCD_LEFT_ANNOTATION = 'sandbox.gatehouse.dev/etcd-left';
export const CONTROL_PLANE_LABEL = 'node-role.kubernetes.io/control-plane';
/**
 * Which simulated etcd cluster a control-plane Node belongs to (absent: the sandbox's
 * own), so that tests can build clusters of their own beside it.
 */
export const ETCD_CLUSTER_LABEL = 'sandbox.gatehouse.dev/etcd-cluster';

const FAULTS = ['unhealthy', 'nospace', 'learner', 'lagging'] as const;
export type EtcdFault = (typeof FAULTS)[number];

/** What the etcd simulation reads of a Node. */
export interface EtcdNode {
  name: string;
  uid: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  /** Powered off (rebooting, shut down, halted). */
  down: boolean;
}

export interface SimulatedMember {
  id: bigint;
  hostname: string;
  learner: boolean;
  unhealthy: boolean;
  nospace: boolean;
  lagging: boolean;
  down: boolean;
  preferredLeader: boolean;
}

export function parseEtcdFaults(text: string | undefined): EtcdFault[] {
  const entries = (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  for (const e of entries)
    if (!FAULTS.includes(e as EtcdFault))
      throw new Error(`${ETCD_FAULT_ANNOTATION}: unknown fault "${e}" (known: ${FAULTS.join(', ')})`);
  return entries as EtcdFault[];
}

/** A stable, non-zero 64-bit member ID per Node, as etcd's are random 64-bit numbers. */
export function memberIdOf(uid: string): bigint {
  const id = createHash('sha256').update(`etcd-member/${uid}`).digest().readBigUInt64BE(0);
  return id === 0n ? 1n : id;
}

export function isControlPlane(node: EtcdNode): boolean {
  return CONTROL_PLANE_LABEL in node.labels;
}

export function etcdClusterOf(node: EtcdNode): string {
  return node.labels[ETCD_CLUSTER_LABEL] ?? '';
}

/** The members of `cluster`, by name: its control-plane Nodes that have not left etcd. */
export function etcdMembers(nodes: EtcdNode[], cluster: string): SimulatedMember[] {
  return nodes
    .filter(
      (n) =>
        isControlPlane(n) &&
        etcdClusterOf(n) === cluster &&
        n.annotations[ETCD_LEFT_ANNOTATION] === undefined,
    )
    .sort((a, b) => a.name.localeCompare(b.name))
    .map((n) => {
      const faults = parseEtcdFaults(n.annotations[ETCD_FAULT_ANNOTATION]);
      return {
        id: memberIdOf(n.uid),
        hostname: n.name,
        learner: faults.includes('learner'),
        unhealthy: faults.includes('unhealthy'),
        nospace: faults.includes('nospace'),
        lagging: faults.includes('lagging'),
        down: n.down,
        preferredLeader: n.annotations[ETCD_LEADER_ANNOTATION] !== undefined,
      };
    });
}

/** The size of a simulated member's database (EtcdStatus dbSize): what its snapshot holds, before etcd's 32-byte SHA-256. */
export const ETCD_DB_SIZE = 2 * 1024 * 1024;
/** The most Talos's stream chunker puts in one common.Data of a snapshot. */
export const SNAPSHOT_CHUNK = 1024;

/**
 * A simulated member's database file, as a snapshot carries it: a line naming the member
 * and when, then bytes that differ every time (as a live database's do), ETCD_DB_SIZE in all.
 */
export function etcdDatabase(member: SimulatedMember, now = Date.now()): Buffer {
  const head = Buffer.from(
    `gatehouse simulated etcd database of member ${member.hostname} (${member.id.toString(16)}) at ${new Date(now).toISOString()}\n`,
  );
  return Buffer.concat([head, randomBytes(ETCD_DB_SIZE - head.length)]);
}

const canLead = (m: SimulatedMember) => !m.down && !m.unhealthy && !m.learner;

/** The leader, or undefined when healthy voting members are no quorum. */
export function etcdLeader(members: SimulatedMember[]): SimulatedMember | undefined {
  const voting = members.filter((m) => !m.learner);
  const able = voting.filter(canLead);
  if (able.length < Math.floor(voting.length / 2) + 1) return undefined;
  return able.find((m) => m.preferredLeader) ?? able[0];
}

/**
 * Who Talos moves leadership to when `from` forfeits it: the first other member listed,
 * whether it can lead or not (MoveLeader then fails); undefined for a single member.
 */
export function transferee(members: SimulatedMember[], from: SimulatedMember): SimulatedMember | undefined {
  return members.find((m) => m.id !== from.id);
}

/** The raft index a member reports: the cluster's (advancing with time), far behind when lagging. */
export function raftIndexOf(member: SimulatedMember, now = Date.now()): bigint {
  const committed = BigInt(Math.floor(now / 100));
  return member.lagging || member.learner ? committed - 50_000n : committed;
}

// --- replies (without common.Metadata, as a node addressed with `node` sends) ------

export function memberListReply(
  members: SimulatedMember[],
): MessageInitShape<typeof EtcdMemberListResponseSchema> {
  return {
    messages: [
      {
        members: members.map((m) => ({
          id: m.id,
          hostname: m.hostname,
          peerUrls: [`https://${m.hostname}:2380`],
          clientUrls: [`https://${m.hostname}:2379`],
          isLearner: m.learner,
        })),
      },
    ],
  };
}

/** The member's own view: an unhealthy member or one without a leader reports errors. */
export function statusReply(
  member: SimulatedMember,
  members: SimulatedMember[],
  now = Date.now(),
): MessageInitShape<typeof EtcdStatusResponseSchema> {
  const leader = etcdLeader(members);
  const errors = [
    ...(member.unhealthy ? ['etcdserver: request timed out (simulated unhealthy member)'] : []),
    ...(leader ? [] : ['etcdserver: no leader']),
  ];
  return {
    messages: [
      {
        memberStatus: {
          memberId: member.id,
          protocolVersion: '3.6.0',
          dbSize: BigInt(ETCD_DB_SIZE),
          dbSizeInUse: BigInt(ETCD_DB_SIZE / 2),
          leader: leader?.id ?? 0n,
          raftIndex: raftIndexOf(member, now),
          raftTerm: 7n,
          raftAppliedIndex: raftIndexOf(member, now),
          errors,
          isLearner: member.learner,
        },
      },
    ],
  };
}

export function alarmListReply(
  members: SimulatedMember[],
): MessageInitShape<typeof EtcdAlarmListResponseSchema> {
  return {
    messages: [
      {
        memberAlarms: members
          .filter((m) => m.nospace)
          .map((m) => ({ memberId: m.id, alarm: AlarmType.NOSPACE })),
      },
    ],
  };
}

/**
 * Why the legacy MachineService.Upgrade of a control-plane node refuses, as Talos's
 * ValidateForUpgrade does (internal/pkg/etcd/etcd.go): two members cannot keep a quorum
 * through it; every member (this one too) must answer a quorum read. One member passes.
 */
export function etcdUpgradeProblem(members: SimulatedMember[]): string | undefined {
  if (members.length === 2)
    return 'etcd member count(2) is insufficient to maintain quorum if upgrade commences';
  for (const m of members) {
    const hex = m.id.toString(16).padStart(16, '0');
    if (m.down || m.unhealthy || m.learner)
      return `etcd member ${hex} is not healthy; all members must be healthy to perform an upgrade: ${
        m.learner ? 'etcdserver: rpc not supported for learner' : 'context deadline exceeded'
      }`;
  }
  return undefined;
}
