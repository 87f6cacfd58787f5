// Whether etcd can spare one control-plane member now: the guard before an action that
// takes a control-plane node down or out. Talos 1.13 and later upgrade without checking
// etcd (the legacy upgrade held a lock and checked), so whoever drives the flow must.
//
// evaluateEtcdHealth() is pure: it judges what readEtcd() (etcd.ts) gathered through the
// Talos API — the member list, each member's own status (asked of its node), the
// alarms — and fails closed: a member whose status could not be read is unhealthy.
import type { EtcdAlarmInfo, EtcdMemberInfo, EtcdMemberStatusInfo } from './client.ts';

/** How far (in raft entries) a voting member may trail the leader and still count as caught up. */
export const MAX_RAFT_LAG = 1000n;

export interface EtcdObservation {
  members: EtcdMemberInfo[];
  /** Each member's status by member ID, or why it could not be read. */
  statuses: Map<bigint, EtcdMemberStatusInfo | { error: string }>;
  alarms: EtcdAlarmInfo[];
}

export interface EtcdVerdict {
  /** Whether the member may go down now. */
  healthy: boolean;
  /** For the action's status: names the member at fault when there is one. */
  message: string;
  /** The leader the members agree on, if any. */
  leader: EtcdMemberInfo | undefined;
  /** Whether the member to take down leads: forfeit leadership first. */
  targetIsLeader: boolean;
  /**
   * Whether the voting members other than this one are a quorum at all, healthy or not:
   * false in a cluster of one or two voting members, where taking it out (a Reset, whose
   * graceful form leaves etcd) never leaves a cluster that can go on; waiting cannot help.
   */
  spareable: boolean;
}

/**
 * What the action does to the node's etcd member:
 * - `down`: it goes down and comes back (a reboot, an upgrade, a shutdown);
 * - `leaves`: it leaves the cluster for good (a graceful Reset of a control-plane node:
 *   Talos's LeaveEtcd removes the member), so etcd goes on with one member less;
 * - `dead`: it never comes back but stays listed (a Reset that is not graceful), so the
 *   others must keep a quorum of the old size without it, for good.
 */
export type EtcdDisruption = 'down' | 'leaves' | 'dead';

/** The name the etcd guard goes by in an action's status.checks and in /v1/health: never a ClusterHealthCheck's (a colon is no DNS name). */
export const ETCD_CHECK_NAME = 'builtin:etcd';

/**
 * The etcd guard's result for one node, as the reconciler gathered it (src/talos/etcd-check.ts)
 * and the decision core reads it: plain data.
 */
export interface EtcdCheckState {
  /** When etcd was read (or found unreadable). */
  at: Date;
  /** False: etcd could not be asked at all (no talosconfig); `message` says why. */
  checked: boolean;
  healthy: boolean;
  /** See EtcdVerdict.spareable; true when unknown. */
  spareable: boolean;
  message: string;
}

const nameOf = (m: EtcdMemberInfo) => m.hostname || `member ${m.id.toString(16)}`;

/**
 * Judges whether the member on node `target` (its hostname, as etcd lists it) can go
 * down: every voting member healthy (status readable, no errors, caught up), no alarm,
 * no learner catching up, a leader, and a quorum of voting members without it.
 *
 * `away` names the nodes (by hostname) that are about to go down or are down for an
 * action already approved, with why: their members count as down even while etcd still
 * sees them up, so that two control-plane members are never taken down at once, whatever
 * the ActionPolicies allow.
 */
export function evaluateEtcdHealth(
  observation: EtcdObservation,
  target: string,
  away: ReadonlyMap<string, string> = new Map(),
  disruption: EtcdDisruption = 'down',
): EtcdVerdict {
  const { members, statuses, alarms } = observation;
  const member = members.find((m) => m.hostname === target);
  const votingCount = members.filter((m) => !m.isLearner).length;
  // A member leaving for good needs someone left; one that goes away (for a while or
  // for good, still listed) needs a quorum of the current size without it.
  const spareable =
    member === undefined ||
    member.isLearner ||
    (disruption === 'leaves' ? votingCount - 1 >= 1 : votingCount - 1 >= Math.floor(votingCount / 2) + 1);
  const verdict = (healthy: boolean, message: string, leader?: EtcdMemberInfo): EtcdVerdict => ({
    healthy,
    message,
    leader,
    targetIsLeader: leader !== undefined && member !== undefined && leader.id === member.id,
    spareable,
  });
  if (members.length === 0) return verdict(false, 'etcd lists no members');
  const byId = new Map(members.map((m) => [m.id, m]));

  // The leader: the one every readable voting member names (split views are no leader).
  const named = new Set<bigint>();
  for (const m of members) {
    const s = statuses.get(m.id);
    if (s && !('error' in s) && s.leader !== 0n) named.add(s.leader);
  }
  const leaderId = named.size === 1 ? [...named][0] : undefined;
  const leader = leaderId === undefined ? undefined : byId.get(leaderId);
  const leaderStatus = leaderId === undefined ? undefined : statuses.get(leaderId);

  const alarm = alarms[0];
  if (alarm) {
    const who = byId.get(alarm.memberId);
    return verdict(
      false,
      `etcd alarm ${alarm.alarm} on ${who ? nameOf(who) : `member ${alarm.memberId.toString(16)}`}`,
      leader,
    );
  }
  const learner = members.find((m) => m.isLearner);
  if (learner) return verdict(false, `etcd member ${nameOf(learner)} is a learner still catching up`, leader);

  const voting = members.filter((m) => !m.isLearner);
  for (const m of voting) {
    const why = m.hostname !== target ? away.get(m.hostname) : undefined;
    if (why !== undefined) return verdict(false, `etcd member ${nameOf(m)} is going down: ${why}`, leader);
    const s = statuses.get(m.id);
    if (!s) return verdict(false, `etcd member ${nameOf(m)}: its status was not read`, leader);
    if ('error' in s) return verdict(false, `etcd member ${nameOf(m)} is unreachable: ${s.error}`, leader);
    if (s.errors.length > 0)
      return verdict(false, `etcd member ${nameOf(m)} is unhealthy: ${s.errors.join('; ')}`, leader);
    if (s.isLearner) return verdict(false, `etcd member ${nameOf(m)} is a learner still catching up`, leader);
    if (leaderStatus && !('error' in leaderStatus) && leaderStatus.raftIndex - s.raftIndex > MAX_RAFT_LAG)
      return verdict(
        false,
        `etcd member ${nameOf(m)} lags the leader by ${(leaderStatus.raftIndex - s.raftIndex).toString()} raft entries`,
        leader,
      );
  }
  if (!leader) return verdict(false, 'etcd has no leader the members agree on', leader);

  const without = voting.filter((m) => m.hostname !== target).length;
  const targetVotes = member !== undefined && !member.isLearner;
  if (disruption === 'leaves' && targetVotes) {
    // Every other voting member is healthy (checked above): they are the new cluster.
    if (without < 1)
      return verdict(
        false,
        `etcd member ${nameOf(member)} is the only voting member: it cannot leave etcd without ending it`,
        leader,
      );
    const after = Math.floor(without / 2) + 1;
    return verdict(
      true,
      `etcd can let ${nameOf(member)} leave for good: ${String(voting.length)} → ${String(without)} voting members, all healthy, quorum then ${String(after)}, leader ${nameOf(leader)}`,
      leader,
    );
  }
  const quorum = Math.floor(voting.length / 2) + 1;
  if (without < quorum)
    return verdict(
      false,
      voting.length === 1 && targetVotes
        ? `etcd has a single member, ${nameOf(member)}: etcd is unavailable while it is down, which no check can make safe; bypass.healthChecks with a reason to go ahead (a cluster of one control-plane node)`
        : `etcd would lose quorum without ${member ? nameOf(member) : target}${disruption === 'dead' ? ' (for good: a Reset that is not graceful leaves its member listed and dead)' : ''}: ${String(without)} of ${String(voting.length)} voting members left, ${String(quorum)} needed`,
      leader,
    );
  const spare = member
    ? `etcd can spare ${nameOf(member)}: ${String(voting.length)} healthy voting members, quorum ${String(quorum)}`
    : `node ${target} is no etcd member; etcd is healthy (${String(voting.length)} voting members)`;
  return verdict(true, `${spare}, leader ${nameOf(leader)}`, leader);
}
