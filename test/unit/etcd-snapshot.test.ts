// The etcd snapshot before approval (ActionPolicy spec.etcdSnapshot): the decision core's
// step (src/actions/etcd-snapshot.ts), the choice of the member to stream from and the
// check of etcd's own checksum (src/talos/etcd-snapshot.ts), and the catalogue's pruning
// (src/talos/etcd-snapshot-catalogue.ts).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import {
  decide,
  type ActionDecision,
  type ActionEffect,
  type ActionInput,
} from '../../src/actions/decide.ts';
import { ETCD_SNAPSHOT_RETRY_MS, etcdSnapshotPolicy, snapshotName } from '../../src/actions/etcd-snapshot.ts';
import type { EtcdSnapshotEntry } from '../../src/api/action-policy.ts';
import { CONTROL_PLANE_LABEL } from '../../src/api/names.ts';
import type { NodeActionSpec, NodeActionStatus } from '../../src/api/node-action.ts';
import type { EtcdCheckState } from '../../src/talos/etcd-health.ts';
import { SnapshotDigest, snapshotSources } from '../../src/talos/etcd-snapshot.ts';
import { catalogueWith } from '../../src/talos/etcd-snapshot-catalogue.ts';
import type { ExecutionStepFacts } from '../../src/talos/facts.ts';
import { describeText } from '../../src/cli/actions.ts';
import { makeStyle } from '../../src/cli/style.ts';
import { T0, action, admitted, at, input, node } from './action-fixtures.ts';

const cp = node('cp-1', {
  labels: { 'kubernetes.io/hostname': 'cp-1', [CONTROL_PLANE_LABEL]: '' },
  osImage: 'Talos (v1.13.0)',
});
const healthy: EtcdCheckState = {
  at: T0,
  checked: true,
  healthy: true,
  spareable: true,
  message: 'etcd can spare cp-1',
};
const POLICY = { policy: 'control-planes', spec: { http: { url: 'http://store.example/etcd/' }, keep: 3 } };

/** An action whose pre-action hooks are done (there are none), at approval, with etcd healthy. */
function atApproval(
  status: NodeActionStatus = {},
  options: { spec?: Partial<NodeActionSpec>; now?: Date; snapshot?: ExecutionStepFacts } = {},
): ActionInput {
  return input({
    now: options.now ?? T0,
    action: action(
      { nodeName: 'cp-1', ...options.spec },
      admitted(T0, { phase: 'RunningPreHooks', ...status }),
    ),
    node: cp,
    etcd: healthy,
    etcdSnapshot: POLICY,
    execution: options.snapshot ? { snapshot: options.snapshot } : {},
  });
}

const snapshotEffect = (d: ActionDecision) =>
  d.effects.find((e): e is Extract<ActionEffect, { type: 'etcdSnapshot' }> => e.type === 'etcdSnapshot');
const reasons = (d: ActionDecision) => d.effects.flatMap((e) => (e.type === 'event' ? [e.reason] : []));

const TAKEN: ExecutionStepFacts = {
  state: 'succeeded',
  message: 'stored etcd-x.db (2097184 bytes, sha256 ab) from etcd member cp-2',
  snapshot: {
    name: 'etcd-x.db',
    url: 'http://store.example/etcd/etcd-x.db',
    member: 'cp-2',
    size: 2097184,
    sha256: 'ab',
    raftIndex: 42,
    pruned: ['etcd-old.db'],
  },
};

describe('etcd snapshot before approval', () => {
  it('asks for a snapshot before approving a control-plane reboot, holds while it runs, records it and approves', () => {
    const first = decide(atApproval());
    assert.equal(first.status.phase, 'RunningPreHooks', 'not approved before the snapshot');
    assert.equal(first.status.etcdSnapshot?.phase, 'Taking');
    assert.equal(first.status.etcdSnapshot.attempts, 1);
    const asked = snapshotEffect(first);
    assert.ok(asked);
    assert.equal(asked.url, 'http://store.example/etcd/');
    assert.equal(asked.keep, 3);
    assert.equal(asked.again, false);
    assert.equal(asked.name, 'etcd-20260302T100000Z-reboot-w1.db');
    assert.equal(asked.deadline, at(300).toISOString(), 'the default timeout: 5m');

    const taking = first.status;
    const running = decide(
      atApproval(taking, { now: at(3), snapshot: { state: 'running', message: 'streaming' } }),
    );
    assert.equal(running.status.phase, 'RunningPreHooks');
    assert.equal(snapshotEffect(running), undefined, 'one attempt at a time');
    assert.match(
      running.status.message ?? '',
      /taking the etcd snapshot ActionPolicy control-planes asks for: streaming/,
    );

    const done = decide(atApproval(taking, { now: at(5), snapshot: TAKEN }));
    assert.equal(done.status.phase, 'Approved', done.status.message);
    assert.deepEqual(
      { ...done.status.etcdSnapshot, message: undefined },
      {
        phase: 'Taken',
        policy: 'control-planes',
        startTime: T0.toISOString(),
        attempts: 1,
        time: at(5).toISOString(),
        name: 'etcd-x.db',
        url: 'http://store.example/etcd/etcd-x.db',
        member: 'cp-2',
        size: 2097184,
        sha256: 'ab',
        raftIndex: 42,
        pruned: ['etcd-old.db'],
        message: undefined,
      },
    );
    assert.ok(reasons(done).includes('EtcdSnapshotTaken'));
  });

  it('holds a failed snapshot, tries again after the retry interval, and fails closed past the timeout', () => {
    const taking = decide(atApproval()).status;
    const failed = decide(
      atApproval(taking, {
        now: at(2),
        snapshot: { state: 'failed', message: 'the store refused PUT x: 403 Forbidden' },
      }),
    );
    assert.equal(failed.status.phase, 'RunningPreHooks');
    assert.equal(failed.status.etcdSnapshot?.phase, 'Failed');
    assert.match(
      failed.status.message ?? '',
      /held: the etcd snapshot .* failed \(the store refused PUT x: 403 Forbidden\)/,
    );
    assert.ok(reasons(failed).includes('EtcdSnapshotFailed'));
    assert.equal(snapshotEffect(failed), undefined);
    assert.ok((failed.requeueAfterMs ?? Infinity) <= ETCD_SNAPSHOT_RETRY_MS);

    const retry = decide(
      atApproval(failed.status, {
        now: at(2 + ETCD_SNAPSHOT_RETRY_MS / 1000),
        snapshot: { state: 'failed', message: 'the store refused PUT x: 403 Forbidden' },
      }),
    );
    const again = snapshotEffect(retry);
    assert.ok(again?.again, 'a new attempt, the failed one forgotten');
    assert.equal(retry.status.etcdSnapshot?.attempts, 2);
    assert.equal(retry.status.phase, 'RunningPreHooks');

    const late = decide(atApproval(failed.status, { now: at(301) }));
    assert.equal(late.status.phase, 'Failed');
    assert.match(
      late.status.message ?? '',
      /no etcd snapshot within etcdSnapshot.timeout \(5m\) of ActionPolicy control-planes: the store refused PUT x: 403 Forbidden; .*bypass.healthChecks/,
    );
  });

  it('begins another attempt when the status says Taking but this process has none (a restart)', () => {
    const taking = decide(atApproval()).status;
    const after = decide(atApproval(taking, { now: at(30) }));
    const asked = snapshotEffect(after);
    assert.ok(asked);
    assert.equal(asked.deadline, at(300).toISOString(), 'the timeout still counts from the first attempt');
    assert.equal(after.status.etcdSnapshot?.attempts, 2);
  });

  it('records a snapshot finished while the etcd guard holds the approval', () => {
    const taking = decide(atApproval()).status;
    const d = decide({
      ...atApproval(taking, { now: at(5), snapshot: TAKEN }),
      etcd: { ...healthy, healthy: false, message: 'etcd member cp-3 is unhealthy' },
    });
    assert.equal(d.status.phase, 'RunningPreHooks');
    assert.equal(d.status.etcdSnapshot?.phase, 'Taken');
  });

  it('holds without a talosconfig (fail closed), and fails at the timeout', () => {
    const d = decide({ ...atApproval(), noTalos: true });
    assert.equal(d.status.phase, 'RunningPreHooks');
    assert.equal(snapshotEffect(d), undefined);
    assert.equal(d.status.etcdSnapshot?.phase, 'Failed');
    assert.match(d.status.message ?? '', /no talosconfig/);
    const late = decide({ ...atApproval(d.status, { now: at(300) }), noTalos: true });
    assert.equal(late.status.phase, 'Failed');
  });

  it('goes without one under bypass.healthChecks, recorded and told', () => {
    const d = decide(
      atApproval(
        {},
        { spec: { bypass: { healthChecks: true, reason: 'etcd is broken, rebooting to fix it' } } },
      ),
    );
    assert.equal(d.status.phase, 'Approved');
    assert.equal(d.status.etcdSnapshot?.phase, 'Bypassed');
    assert.match(d.status.etcdSnapshot.message ?? '', /bypassed by alice: etcd is broken/);
    assert.ok(reasons(d).includes('EtcdSnapshotBypassed'));
    assert.equal(snapshotEffect(d), undefined);
  });

  it('is not asked for on a worker, nor without a policy that asks', () => {
    const worker = decide({ ...atApproval(), node: node('cp-1') });
    assert.equal(worker.status.phase, 'Approved');
    assert.equal(worker.status.etcdSnapshot, undefined);
    const { etcdSnapshot: _none, ...without } = atApproval();
    assert.equal(decide(without).status.phase, 'Approved');
  });

  it('follows the first governing policy by name that asks for one', () => {
    const policy = (name: string, spec: object) => ({ name, spec });
    const chosen = etcdSnapshotPolicy(
      [
        policy('b', { etcdSnapshot: { http: { url: 'http://b/' } } }),
        policy('a', { maxConcurrent: 1 }),
        policy('c', { etcdSnapshot: { http: { url: 'http://c/' } } }),
        policy('0', {
          nodeSelector: { matchLabels: { other: 'x' } },
          etcdSnapshot: { http: { url: 'http://0/' } },
        }),
      ],
      { action: 'Reboot', nodeName: 'cp-1' },
      cp.labels,
    );
    assert.equal(chosen?.policy, 'b');
    assert.equal(
      snapshotName('reboot-cp-1', new Date('2026-12-04T02:03:04.567Z')),
      'etcd-20261204T020304Z-reboot-cp-1.db',
    );
  });
});

describe('the snapshot stream and its store', () => {
  const members = (...names: string[]) =>
    names.map((hostname, i) => ({
      id: BigInt(i + 1),
      hostname,
      isLearner: false,
      peerUrls: [],
      clientUrls: [],
    }));
  const status = (id: bigint, leader: bigint, errors: string[] = []) => ({
    memberId: id,
    leader,
    raftIndex: 100n,
    raftAppliedIndex: 99n,
    isLearner: false,
    dbSize: 1n,
    errors,
  });
  const nodes = ['cp-1', 'cp-2', 'cp-3', 'cp-4'].map((name, i) => ({
    name,
    address: `10.0.0.${String(i + 1)}`,
  }));

  it('streams from a healthy member other than the node to disrupt, followers first, the node itself last', () => {
    const observation = {
      members: members('cp-1', 'cp-2', 'cp-3', 'cp-4'),
      statuses: new Map<bigint, ReturnType<typeof status> | { error: string }>([
        [1n, status(1n, 2n)],
        [2n, status(2n, 2n)],
        [3n, { error: 'connection refused' }],
        [4n, status(4n, 2n)],
      ]),
      alarms: [],
    };
    const { sources, why } = snapshotSources(observation, nodes, 'cp-1');
    assert.deepEqual(
      sources.map((s) => s.node.name),
      ['cp-4', 'cp-2', 'cp-1'],
    );
    assert.equal(sources[0]?.raftIndex, 99n, 'the applied index, read before');
    assert.deepEqual(why, ['cp-3 is unreachable: connection refused']);
    const none = snapshotSources(
      { ...observation, statuses: new Map([[1n, status(1n, 0n, ['no leader'])]]) },
      nodes,
      'cp-1',
    );
    assert.equal(none.sources.length, 0);
    assert.match(none.why.join('; '), /cp-1 is unhealthy: no leader; cp-2: its status was not read/);
  });

  it("checks etcd's trailing SHA-256 however the stream is cut, and holds the trailer back", () => {
    const db = Buffer.from(Array.from({ length: 5000 }, (_, i) => i % 251));
    const file = Buffer.concat([db, createHash('sha256').update(db).digest()]);
    for (const size of [1, 7, 31, 32, 33, 1024, 4999, 6000]) {
      const digest = new SnapshotDigest();
      const passed: Buffer[] = [];
      for (let i = 0; i < file.length; i += size) passed.push(digest.update(file.subarray(i, i + size)));
      const done = digest.finish();
      assert.ok(!('error' in done), `chunks of ${String(size)}`);
      assert.deepEqual(Buffer.concat([...passed, done.trailer]), file);
      assert.equal(
        Buffer.concat(passed).length,
        db.length,
        'nothing of the trailer passed on before the check',
      );
      assert.equal(done.sha256, createHash('sha256').update(file).digest('hex'));
      assert.equal(digest.size, file.length);
    }
    const damaged = Buffer.from(file);
    damaged[100] = (damaged[100] ?? 0) ^ 1;
    const bad = new SnapshotDigest();
    bad.update(damaged);
    assert.match(JSON.stringify(bad.finish()), /are not the SHA-256 of the 5000 before them/);
    const short = new SnapshotDigest();
    short.update(Buffer.alloc(10));
    assert.match(JSON.stringify(short.finish()), /too short to be an etcd snapshot/);
  });

  it('keeps the newest `keep` in the catalogue and names the rest for deletion', () => {
    const entry = (n: number): EtcdSnapshotEntry => ({
      name: `s${String(n)}`,
      url: `http://store/s${String(n)}`,
      time: at(n).toISOString(),
      node: 'cp-1',
      action: 'a',
      member: 'cp-2',
      size: 1,
      sha256: 'x',
    });
    const { entries, beyond } = catalogueWith([entry(3), entry(1), entry(2)], entry(4), 2);
    assert.deepEqual(
      entries.map((e) => e.name),
      ['s4', 's3', 's2', 's1'],
    );
    assert.deepEqual(
      beyond.map((e) => e.name),
      ['s2', 's1'],
    );
    assert.equal(catalogueWith([entry(1)], entry(1), 5).entries.length, 1, 'the same URL once');
  });
});

describe('gatehouse actions describe: the etcd snapshot', () => {
  it('says what was taken, or why not', () => {
    const taken = describeText(
      action(
        { nodeName: 'cp-1' },
        {
          phase: 'Approved',
          etcdSnapshot: {
            phase: 'Taken',
            policy: 'cp',
            startTime: T0.toISOString(),
            attempts: 2,
            name: 'etcd-x.db',
            size: 2097184,
            sha256: 'ab'.repeat(32),
            member: 'cp-2',
            raftIndex: 42,
            pruned: ['etcd-old.db'],
          },
        },
      ),
      undefined,
      T0,
      makeStyle(false),
    );
    assert.match(
      taken,
      /etcd snapshot: +Taken etcd-x\.db \(2097184 bytes, sha256 abababababababab…, from member cp-2, raft index 42, 2 attempts; ActionPolicy cp\); pruned etcd-old\.db/,
    );
    const failed = describeText(
      action(
        { nodeName: 'cp-1' },
        {
          phase: 'RunningPreHooks',
          etcdSnapshot: {
            phase: 'Failed',
            policy: 'cp',
            startTime: T0.toISOString(),
            attempts: 1,
            message: 'the store refused PUT',
          },
        },
      ),
      undefined,
      T0,
      makeStyle(false),
    );
    assert.match(failed, /etcd snapshot: +Failed \(ActionPolicy cp\): the store refused PUT/);
  });
});
