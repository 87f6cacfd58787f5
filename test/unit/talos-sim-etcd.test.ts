// The simulator's etcd cluster, derived from Nodes: membership, leader, quorum, faults;
// and the sandbox's nodes on mixed Talos versions.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { defaultNodeSpecs, normalTalosVersion } from '../../sandbox/nodes.ts';
import {
  CONTROL_PLANE_LABEL,
  ETCD_CLUSTER_LABEL,
  ETCD_FAULT_ANNOTATION,
  ETCD_LEADER_ANNOTATION,
  ETCD_LEFT_ANNOTATION,
  etcdLeader,
  etcdMembers,
  transferee,
  parseEtcdFaults,
  raftIndexOf,
  type EtcdNode,
} from '../../sandbox/talos-etcd.ts';

const node = (name: string, change: Partial<EtcdNode> = {}): EtcdNode => ({
  name,
  uid: `uid-${name}`,
  labels: { [CONTROL_PLANE_LABEL]: '' },
  annotations: {},
  down: false,
  ...change,
});

describe('simulated etcd', () => {
  it('has the control-plane nodes of one cluster as members, with stable 64-bit IDs', () => {
    const nodes = [
      node('cp-2'),
      node('cp-1'),
      node('worker-1', { labels: {} }),
      node('other-cp', { labels: { [CONTROL_PLANE_LABEL]: '', [ETCD_CLUSTER_LABEL]: 'test' } }),
      node('cp-3', { annotations: { [ETCD_LEFT_ANNOTATION]: 'true' } }),
    ];
    const members = etcdMembers(nodes, '');
    assert.deepEqual(
      members.map((m) => m.hostname),
      ['cp-1', 'cp-2'],
    );
    assert.equal(etcdMembers(nodes, '')[0]?.id, members[0]?.id);
    assert.deepEqual(
      etcdMembers(nodes, 'test').map((m) => m.hostname),
      ['other-cp'],
    );
  });

  it('elects the preferred healthy member, else the first, and none without quorum', () => {
    const three = (change: (nodes: EtcdNode[]) => void = () => undefined) => {
      const nodes = [node('cp-1'), node('cp-2'), node('cp-3')];
      change(nodes);
      return etcdMembers(nodes, '');
    };
    assert.equal(etcdLeader(three())?.hostname, 'cp-1');
    const preferred = three((n) => ((n[2] as EtcdNode).annotations[ETCD_LEADER_ANNOTATION] = 'true'));
    assert.equal(etcdLeader(preferred)?.hostname, 'cp-3');
    const leaderDown = three((n) => ((n[0] as EtcdNode).down = true));
    assert.equal(etcdLeader(leaderDown)?.hostname, 'cp-2');
    const twoDown = three((n) => {
      (n[0] as EtcdNode).down = true;
      (n[1] as EtcdNode).annotations[ETCD_FAULT_ANNOTATION] = 'unhealthy';
    });
    assert.equal(etcdLeader(twoDown), undefined);
    // Talos moves leadership to the first other member listed, able to lead or not.
    const members = three();
    assert.equal(transferee(members, members[0] as never)?.hostname, 'cp-2');
    const firstDown = three((n) => ((n[1] as EtcdNode).down = true));
    assert.equal(transferee(firstDown, firstDown[0] as never)?.hostname, 'cp-2');
    const [alone] = etcdMembers([node('cp-1')], '');
    assert.equal(transferee([alone as never], alone as never), undefined);
  });

  it('injects faults by annotation: learner and lagging members trail the raft index', () => {
    assert.deepEqual(parseEtcdFaults(' nospace, learner '), ['nospace', 'learner']);
    assert.throws(() => parseEtcdFaults('slow'), /unknown fault "slow"/);
    const [lagging] = etcdMembers(
      [node('cp-1', { annotations: { [ETCD_FAULT_ANNOTATION]: 'lagging' } })],
      '',
    );
    const [healthy] = etcdMembers([node('cp-2')], '');
    assert.ok(lagging && healthy);
    assert.ok(raftIndexOf(healthy, 1_000_000_000) - raftIndexOf(lagging, 1_000_000_000) >= 50_000n);
  });
});

describe('sandbox nodes on mixed Talos versions', () => {
  it('gives the nodes the versions in turn', () => {
    const specs = defaultNodeSpecs(4, 3, ['1.12.6', 'v1.13.9', '1.14.0']);
    assert.deepEqual(
      specs.map((s) => [s.name, s.role, s.talosVersion]),
      [
        ['cp-1', 'control-plane', 'v1.12.6'],
        ['cp-2', 'control-plane', 'v1.13.9'],
        ['cp-3', 'control-plane', 'v1.14.0'],
        ['worker-1', 'worker', 'v1.12.6'],
      ],
    );
    assert.equal(defaultNodeSpecs(1)[0]?.talosVersion, undefined);
    assert.throws(() => normalTalosVersion('latest'), /not a Talos version/);
  });
});
