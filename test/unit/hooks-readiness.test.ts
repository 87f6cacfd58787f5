// The readiness preset of NodePrereadyJob: a run that the node's critical DaemonSet Pods
// and CSI drivers decide, followed by planHookStage and by the boot decision.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Readiness } from '../../src/api/hooks.ts';
import { decideBoot } from '../../src/boots/decide.ts';
import type { HookSubject } from '../../src/hooks/job.ts';
import { planHookStage, type HookRunRecord, type StageInput } from '../../src/hooks/plan.ts';
import {
  READINESS_PODS_SETTLE_MS,
  READINESS_POLL_MS,
  readinessPodOf,
  readinessStep,
  wantsReadinessFacts,
  type NodeReadinessFacts,
  type ReadinessPod,
} from '../../src/hooks/readiness.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import { T0, at, hook } from './action-fixtures.ts';
import { bootInput, bootNode } from './boots-fixtures.ts';

const subject: HookSubject = { node: 'w1', bootID: 'boot-1' };
const CEPH_RBD = 'rook-ceph.rbd.csi.ceph.com';

function readinessHook(readiness: Readiness, spec: Partial<HookObject['spec']> = {}): HookObject {
  const h = hook('NodePrereadyJob', 'critical', { ...spec, readiness }, 'kube-system');
  delete h.spec.template;
  return h;
}

const critical = readinessHook({
  daemonSets: { priorityClassNames: ['system-node-critical'] },
  csiDrivers: [CEPH_RBD],
});

function pod(name: string, ready: boolean, extra: Partial<ReadinessPod> = {}): ReadinessPod {
  return {
    namespace: 'kube-system',
    name,
    labels: {},
    priorityClassName: 'system-node-critical',
    daemonSet: name.replace(/-[a-z0-9]{5}$/, ''),
    ready,
    ...extra,
  };
}

function facts(pods: ReadinessPod[], csiDrivers: string[] | undefined = [CEPH_RBD]): NodeReadinessFacts {
  return { pods, csiDrivers };
}

function stage(h: HookObject, partial: Partial<StageInput>) {
  return planHookStage({
    now: T0,
    subject,
    hooks: [h],
    kinds: ['NodePrereadyJob'],
    records: [],
    jobs: new Map(),
    webhooks: new Map(),
    ...partial,
  });
}

/** The run as the first pass recorded it, started at T0. */
function started(h: HookObject, f: NodeReadinessFacts): HookRunRecord[] {
  return stage(h, { readiness: f }).records;
}

describe('readiness preset: readinessStep', () => {
  it('names the critical Pods not Ready and the CSI drivers not registered', () => {
    const step = readinessStep(
      critical,
      facts([pod('cilium-abcde', false), pod('kube-proxy-fghij', true)], ['other.csi']),
      1000,
    );
    assert.deepEqual(step, {
      state: 'waiting',
      message:
        'kube-system/cilium-abcde not Ready (1 of 2 critical DaemonSet Pods); CSI driver rook-ceph.rbd.csi.ceph.com not registered',
      wakeMs: READINESS_POLL_MS,
    });
  });

  it('says so when the node has no CSINode yet', () => {
    const step = readinessStep(critical, { pods: [pod('cilium-abcde', true)], csiDrivers: undefined }, 1000);
    assert.equal(step.state, 'waiting');
    assert.equal(
      step.message,
      'CSI driver rook-ceph.rbd.csi.ceph.com not registered (the node has no CSINode yet); 1 critical DaemonSet Pod Ready',
    );
  });

  it('is ready once every critical Pod is Ready and every driver registered', () => {
    const step = readinessStep(
      critical,
      facts([pod('cilium-abcde', true), pod('csi-rbdplugin-xyz12', true)]),
      0,
    );
    assert.deepEqual(step, {
      state: 'ready',
      message: '2 critical DaemonSet Pods Ready; CSI driver rook-ceph.rbd.csi.ceph.com registered',
    });
  });

  it('ignores Pods not owned by a DaemonSet and Pods of other priority classes', () => {
    const others = [
      pod('static-etcd', false, { daemonSet: undefined }),
      pod('deployment-pod', false, { daemonSet: undefined, priorityClassName: 'system-node-critical' }),
      pod('logging-abcde', false, { priorityClassName: 'low' }),
      pod('cilium-abcde', true),
    ];
    assert.equal(readinessStep(critical, facts(others), 0).state, 'ready');
  });

  it('takes Pods by selector as well as by priority class', () => {
    const h = readinessHook({
      daemonSets: {
        priorityClassNames: ['system-node-critical'],
        selector: { matchLabels: { 'node.gardener.cloud/critical-component': 'true' } },
      },
    });
    const labelled = pod('fluent-abcde', false, {
      priorityClassName: undefined,
      labels: { 'node.gardener.cloud/critical-component': 'true' },
    });
    const step = readinessStep(h, facts([pod('cilium-abcde', true), labelled]), 0);
    assert.match(step.message, /^kube-system\/fluent-abcde not Ready \(1 of 2 critical DaemonSet Pods\)$/);
  });

  it('waits a while for a first critical Pod to exist, then goes on without one', () => {
    const h = readinessHook({ daemonSets: { priorityClassNames: ['system-node-critical'] } });
    const early = readinessStep(h, facts([]), 10_000);
    assert.deepEqual(early, {
      state: 'waiting',
      message: 'no critical DaemonSet Pod on the node yet',
      wakeMs: READINESS_POLL_MS,
    });
    const late = readinessStep(h, facts([]), READINESS_PODS_SETTLE_MS - 1000);
    assert.equal(late.state === 'waiting' && late.wakeMs, 1000);
    assert.deepEqual(readinessStep(h, facts([]), READINESS_PODS_SETTLE_MS), {
      state: 'ready',
      message: 'no critical DaemonSet Pod on the node (none to wait for)',
    });
  });

  it('lists at most five names, and says how many more', () => {
    const pods = Array.from({ length: 8 }, (_, i) => pod(`ds${String(i)}-abcde`, false));
    const step = readinessStep(critical, facts(pods), 0);
    assert.match(step.message, /ds4-abcde and 3 more not Ready \(8 of 8 critical DaemonSet Pods\)/);
  });

  it('waits while the facts were not read', () => {
    assert.equal(readinessStep(critical, undefined, 0).state, 'waiting');
  });
});

describe('readiness preset: readinessPodOf', () => {
  it('reads the controlling DaemonSet, the priority class and the Ready condition', () => {
    const p = readinessPodOf({
      metadata: {
        name: 'cilium-abcde',
        namespace: 'kube-system',
        ownerReferences: [{ kind: 'DaemonSet', name: 'cilium', controller: true }],
      },
      spec: { priorityClassName: 'system-node-critical' },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    });
    assert.deepEqual(p, {
      namespace: 'kube-system',
      name: 'cilium-abcde',
      labels: {},
      priorityClassName: 'system-node-critical',
      daemonSet: 'cilium',
      ready: true,
    });
  });

  it('does not take a non-controlling DaemonSet owner, nor a Pod being deleted as Ready', () => {
    const p = readinessPodOf({
      metadata: {
        name: 'x',
        namespace: 'ns',
        deletionTimestamp: T0.toISOString(),
        ownerReferences: [{ kind: 'DaemonSet', name: 'cilium' }],
      },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    });
    assert.equal(p.daemonSet, undefined);
    assert.equal(p.ready, false);
  });
});

describe('readiness preset: planHookStage', () => {
  it('keeps the run Running, naming what is not ready, and looks again soon', () => {
    const plan = stage(critical, { readiness: facts([pod('cilium-abcde', false)]) });
    assert.equal(plan.outcome, 'Running');
    const [run] = plan.records;
    assert.equal(run?.phase, 'Running');
    assert.equal(run.jobName, undefined);
    assert.match(run.message ?? '', /^kube-system\/cilium-abcde not Ready/);
    assert.match(plan.message, /cilium-abcde not Ready/);
    assert.equal(plan.requeueAfterMs, READINESS_POLL_MS);
    assert.deepEqual(
      plan.effects.map((e) => e.type),
      ['hookRun', 'hookRun'],
      'no Job, no webhook call: only the hook status (Pending, then Running)',
    );
  });

  it('succeeds once everything is ready', () => {
    const records = started(critical, facts([pod('cilium-abcde', false)]));
    const plan = stage(critical, { now: at(20), records, readiness: facts([pod('cilium-abcde', true)]) });
    assert.equal(plan.outcome, 'Succeeded');
    assert.equal(plan.records[0]?.phase, 'Succeeded');
    assert.equal(plan.records[0].completionTime, at(20).toISOString());
    assert.equal(plan.requeueAfterMs, undefined);
  });

  it('a missing CSI driver keeps it Running; registered, it succeeds', () => {
    const records = started(critical, facts([pod('cilium-abcde', true)], []));
    assert.equal(records[0]?.phase, 'Running');
    assert.match(records[0].message ?? '', /^CSI driver rook-ceph.rbd.csi.ceph.com not registered/);
    const plan = stage(critical, { now: at(5), records, readiness: facts([pod('cilium-abcde', true)]) });
    assert.equal(plan.outcome, 'Succeeded');
  });

  it('fails at the timeout, saying what was still not ready', () => {
    const h = readinessHook({ csiDrivers: [CEPH_RBD] }, { timeout: '2m' });
    const records = started(h, facts([], []));
    const before = stage(h, { now: at(119), records, readiness: facts([], []) });
    assert.equal(before.outcome, 'Running');
    assert.equal(before.requeueAfterMs, 1000, 'wakes at the timeout when it comes before the next read');
    const plan = stage(h, { now: at(120), records, readiness: facts([], []) });
    assert.equal(plan.outcome, 'Failed');
    assert.equal(
      plan.records[0]?.message,
      'NodePrereadyJob kube-system/critical timed out after 2m: CSI driver rook-ceph.rbd.csi.ceph.com not registered',
    );
  });

  it('under failurePolicy Ignore, a timeout lets the stage go on', () => {
    const h = readinessHook({ csiDrivers: [CEPH_RBD] }, { timeout: '1m', failurePolicy: 'Ignore' });
    const records = started(h, facts([], []));
    const plan = stage(h, { now: at(60), records, readiness: facts([], []) });
    assert.equal(plan.outcome, 'Succeeded');
    assert.match(plan.message, /failures ignored/);
  });
});

describe('readiness preset: the boot decision', () => {
  it('keeps the preready taint while a critical Pod is not Ready, and removes it once it is', () => {
    const node = bootNode({ tainted: true });
    const waiting = decideBoot(
      bootInput({ node, hooks: [critical], readiness: facts([pod('cilium-abcde', false)]) }),
    );
    assert.equal(waiting.change?.taint, undefined, 'the taint stays');
    assert.equal(waiting.change?.record?.preready.phase, 'Running');
    assert.match(waiting.message, /cilium-abcde not Ready/);
    assert.equal(waiting.requeueAfterMs, READINESS_POLL_MS);

    const record = waiting.change.record;
    const ready = decideBoot(
      bootInput({
        now: at(5),
        node: bootNode({ tainted: true, record }),
        hooks: [critical],
        readiness: facts([pod('cilium-abcde', true)]),
      }),
    );
    assert.equal(ready.change?.taint, false);
    assert.equal(ready.change.record?.preready.phase, 'Succeeded');
  });

  it('asks for the facts only while a readiness hook has no finished run', () => {
    const job = hook('NodePrereadyJob', 'job');
    assert.equal(wantsReadinessFacts([job], []), false);
    assert.equal(wantsReadinessFacts([job, critical], []), true);
    const running = started(critical, facts([pod('cilium-abcde', false)]));
    assert.equal(wantsReadinessFacts([critical], running), true);
    const done = running.map((r) => ({ ...r, phase: 'Succeeded' as const }));
    assert.equal(wantsReadinessFacts([critical], done), false);
  });
});
