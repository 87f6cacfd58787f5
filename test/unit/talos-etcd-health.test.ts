// The etcd guard's judgement: each rule holds a member down on its own.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { EtcdMemberInfo, EtcdMemberStatusInfo } from '../../src/talos/client.ts';
import { evaluateEtcdHealth, type EtcdObservation } from '../../src/talos/etcd-health.ts';

const member = (hostname: string, id: bigint, isLearner = false): EtcdMemberInfo => ({
  id,
  hostname,
  isLearner,
  peerUrls: [],
  clientUrls: [],
});
const status = (memberId: bigint, leader: bigint, extra: Partial<EtcdMemberStatusInfo> = {}) => ({
  memberId,
  leader,
  raftIndex: 5000n,
  raftAppliedIndex: 5000n,
  isLearner: false,
  dbSize: 1n,
  errors: [],
  ...extra,
});
// IDs above 2^53, as etcd's are.
const [A, B, C] = [0xa000000000000001n, 0xb000000000000002n, 0xc000000000000003n];

function cluster(change: (o: EtcdObservation) => void = () => undefined): EtcdObservation {
  const o: EtcdObservation = {
    members: [member('cp-1', A), member('cp-2', B), member('cp-3', C)],
    statuses: new Map([
      [A, status(A, A)],
      [B, status(B, A)],
      [C, status(C, A)],
    ]),
    alarms: [],
  };
  change(o);
  return o;
}

describe('etcd health', () => {
  it('lets one of three healthy members go, and finds the leader', () => {
    const v = evaluateEtcdHealth(cluster(), 'cp-2');
    assert.equal(v.healthy, true, v.message);
    assert.equal(v.leader?.hostname, 'cp-1');
    assert.equal(v.targetIsLeader, false);
    assert.match(v.message, /can spare cp-2/);
    assert.equal(evaluateEtcdHealth(cluster(), 'cp-1').targetIsLeader, true);
  });

  it('holds while another member is unhealthy or unreachable, naming it', () => {
    const unhealthy = cluster((o) => o.statuses.set(C, status(C, A, { errors: ['request timed out'] })));
    const v = evaluateEtcdHealth(unhealthy, 'cp-2');
    assert.equal(v.healthy, false);
    assert.match(v.message, /cp-3 is unhealthy: request timed out/);
    const down = cluster((o) => o.statuses.set(C, { error: 'connection refused' }));
    assert.match(evaluateEtcdHealth(down, 'cp-2').message, /cp-3 is unreachable: connection refused/);
    const unread = cluster((o) => o.statuses.delete(C));
    assert.equal(evaluateEtcdHealth(unread, 'cp-2').healthy, false);
  });

  it('holds on an alarm, a learner, a lagging member, or no agreed leader', () => {
    const alarm = cluster((o) => o.alarms.push({ memberId: B, alarm: 'NOSPACE' }));
    assert.match(evaluateEtcdHealth(alarm, 'cp-1').message, /alarm NOSPACE on cp-2/);
    const learner = cluster((o) => o.members.push(member('cp-4', 4n, true)));
    assert.match(evaluateEtcdHealth(learner, 'cp-1').message, /cp-4 is a learner still catching up/);
    const lagging = cluster((o) => o.statuses.set(C, status(C, A, { raftIndex: 1000n })));
    assert.match(evaluateEtcdHealth(lagging, 'cp-1').message, /cp-3 lags the leader by 4000 raft entries/);
    const split = cluster((o) => o.statuses.set(C, status(C, C)));
    assert.match(evaluateEtcdHealth(split, 'cp-1').message, /no leader/);
  });

  it('refuses to lose quorum: one of one, or one of two', () => {
    const one = cluster((o) => {
      o.members = [member('cp-1', A)];
    });
    const single = evaluateEtcdHealth(one, 'cp-1');
    assert.equal(single.healthy, false);
    assert.match(single.message, /single member, cp-1: .* bypass\.healthChecks with a reason/);
    const two = cluster((o) => {
      o.members = [member('cp-1', A), member('cp-2', B)];
    });
    assert.match(
      evaluateEtcdHealth(two, 'cp-2').message,
      /would lose quorum without cp-2: 1 of 2 .* 2 needed/,
    );
  });

  it('judges a graceful reset as a member leaving for good: N → N-1, never the last one', () => {
    const two = cluster((o) => {
      o.members = [member('cp-1', A), member('cp-2', B)];
    });
    // Down for a while, two members cannot spare one; leaving for good, one member goes on.
    assert.equal(evaluateEtcdHealth(two, 'cp-2', new Map(), 'down').spareable, false);
    const leaves = evaluateEtcdHealth(two, 'cp-2', new Map(), 'leaves');
    assert.equal(leaves.healthy, true);
    assert.equal(leaves.spareable, true);
    assert.match(leaves.message, /leave for good: 2 → 1 voting members, all healthy, quorum then 1/);
    const dead = evaluateEtcdHealth(two, 'cp-2', new Map(), 'dead');
    assert.equal(dead.spareable, false);
    assert.match(dead.message, /for good: a Reset that is not graceful/);
    const one = cluster((o) => {
      o.members = [member('cp-1', A)];
    });
    const last = evaluateEtcdHealth(one, 'cp-1', new Map(), 'leaves');
    assert.equal(last.spareable, false);
    assert.match(last.message, /only voting member: it cannot leave etcd without ending it/);
    // Every other member must be healthy: they are the cluster that goes on.
    const unhealthy = cluster((o) => o.statuses.set(C, status(C, A, { errors: ['timeout'] })));
    assert.equal(evaluateEtcdHealth(unhealthy, 'cp-2', new Map(), 'leaves').healthy, false);
  });

  it('judges a node that is no member by the cluster alone', () => {
    const v = evaluateEtcdHealth(cluster(), 'worker-1');
    assert.equal(v.healthy, true);
    assert.equal(v.targetIsLeader, false);
  });

  it('counts a member whose node is going down for another action as down, naming it', () => {
    const away = new Map([['cp-3', 'its Reboot (NodeAction r3) is Approved']]);
    const v = evaluateEtcdHealth(cluster(), 'cp-2', away);
    assert.equal(v.healthy, false);
    assert.match(v.message, /etcd member cp-3 is going down: its Reboot \(NodeAction r3\) is Approved/);
    // The target's own entry does not hold it back.
    assert.equal(evaluateEtcdHealth(cluster(), 'cp-3', away).healthy, true);
  });

  it('tells a member etcd can never spare (one or two voting members) from one it cannot spare now', () => {
    assert.equal(evaluateEtcdHealth(cluster(), 'cp-1').spareable, true);
    const two = cluster((o) => {
      o.members = [member('cp-1', A), member('cp-2', B)];
    });
    assert.equal(evaluateEtcdHealth(two, 'cp-1').spareable, false);
    const unhealthy = cluster((o) => o.statuses.set(C, status(C, A, { errors: ['NOSPACE'] })));
    assert.equal(evaluateEtcdHealth(unhealthy, 'cp-1').spareable, true, 'waiting helps');
  });
});
