// The checker Job of a `job` probe: what gatehouse builds from the template, and the
// verdict it takes from the Job and its pods — only pods the Job controls that run the
// template's containers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import {
  buildCheckerJob,
  checkerJobName,
  checkerVerdict,
  foreignJob,
  lastLine,
  MAX_CHECKER_MESSAGE,
  type JobProbeSpec,
} from '../../src/checks/checker-job.ts';

const check = { name: 'ceph-osd-ok-to-stop', uid: 'uid-1', generation: 2 };
const node = { name: 'worker-2', ip: '10.0.0.2', object: { metadata: { name: 'worker-2' } } };
const spec: JobProbeSpec = {
  namespace: 'rook-ceph',
  template: {
    spec: {
      backoffLimit: 6,
      ttlSecondsAfterFinished: 5,
      template: {
        spec: {
          restartPolicy: 'OnFailure',
          containers: [
            {
              name: 'ok-to-stop',
              image: 'rook/ceph',
              command: ['bash', '-c', 'ceph osd ok-to-stop'],
              env: [{ name: 'GATEHOUSE_NODE', value: 'forged' }],
            },
          ],
        },
      },
    },
  },
};

test('the Job: named per check, generation and node; one verdict per run; bounded by the timeout', () => {
  const job = buildCheckerJob(spec, check, node, 120_000);
  assert.equal(job.metadata?.name, checkerJobName(check, 'worker-2'));
  assert.match(job.metadata.name, /^ceph-osd-ok-to-stop-[0-9a-f]{10}$/);
  assert.notEqual(checkerJobName(check, 'worker-1'), checkerJobName(check, 'worker-2'));
  assert.notEqual(checkerJobName({ ...check, generation: 3 }, 'worker-2'), job.metadata.name);
  assert.equal(job.metadata.namespace, 'rook-ceph');
  assert.deepEqual(
    job.metadata.ownerReferences?.map((o) => [o.kind, o.uid]),
    [['ClusterHealthCheck', 'uid-1']],
  );
  assert.equal(job.spec?.backoffLimit, 0);
  assert.equal(job.spec.activeDeadlineSeconds, 120);
  assert.equal(job.spec.ttlSecondsAfterFinished, 3600);
  const pod = job.spec.template.spec;
  assert.equal(pod?.restartPolicy, 'Never');
  const env = pod.containers[0]?.env?.map((e) => [e.name, e.value]);
  assert.deepEqual(env, [
    ['GATEHOUSE_CHECK', 'ceph-osd-ok-to-stop'],
    ['GATEHOUSE_NODE', 'worker-2'],
    ['GATEHOUSE_NODE_IP', '10.0.0.2'],
  ]);
  assert.equal(pod.containers[0]?.terminationMessagePolicy, 'FallbackToLogsOnError');
  assert.equal(pod.affinity, undefined, 'Anywhere by default');
  assert.equal(job.spec.template.metadata?.labels?.['talos.dev/check-uid'], 'uid-1');
  assert.equal(job.spec.template.metadata.labels['talos.dev/node'], 'worker-2');
  // The template is not changed in place.
  assert.equal(spec.template.spec?.backoffLimit, 6);
});

test('placement pins a Node-scoped checker Job on or away from the node', () => {
  const away = buildCheckerJob({ ...spec, placement: 'AwayFromTarget' }, check, node, 60_000);
  const terms =
    away.spec?.template.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  assert.deepEqual(terms?.nodeSelectorTerms, [
    { matchFields: [{ key: 'metadata.name', operator: 'NotIn', values: ['worker-2'] }] },
  ]);
  const cluster = buildCheckerJob(spec, check, undefined, 60_000);
  assert.deepEqual(
    cluster.spec?.template.spec?.containers[0]?.env?.map((e) => e.name),
    ['GATEHOUSE_NODE', 'GATEHOUSE_CHECK'],
    'a Cluster-scoped check adds no node (and keeps the template own variables)',
  );
});

test('a Job under the name that does not claim to be the check is foreign', () => {
  const ours = buildCheckerJob(spec, check, node, 60_000);
  assert.equal(foreignJob(ours, check), undefined);
  const unlabelled: V1Job = { metadata: { name: ours.metadata?.name ?? '' } };
  assert.match(foreignJob(unlabelled, check) ?? '', /label app.kubernetes.io\/managed-by is missing/);
  const unowned: V1Job = { metadata: Object.assign({}, ours.metadata, { ownerReferences: [] }) };
  assert.match(foreignJob(unowned, check) ?? '', /not owned by ClusterHealthCheck ceph-osd-ok-to-stop/);
});

function finished(job: V1Job, type: string, reason?: string): V1Job {
  return Object.assign({}, job, {
    status: { conditions: [{ type, status: 'True', ...(reason ? { reason } : {}) }] },
  });
}

function podOf(
  job: V1Job,
  exitCode: number,
  message?: string,
  overrides: Partial<V1Pod['spec']> = {},
): V1Pod {
  const pod: V1Pod = {
    metadata: {
      name: 'p',
      namespace: 'rook-ceph',
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'j', uid: 'job-uid', controller: true }],
    },
    spec: Object.assign({}, job.spec?.template.spec, overrides),
    status: {
      containerStatuses: [
        {
          name: 'ok-to-stop',
          image: 'rook/ceph',
          imageID: '',
          ready: false,
          restartCount: 0,
          state: { terminated: { exitCode, ...(message ? { message } : {}) } },
        },
      ],
    },
  };
  return pod;
}

test('exit 0 is healthy, anything else unhealthy; the message is the last line of the termination message', () => {
  const job = buildCheckerJob(spec, check, node, 60_000);
  assert.equal(checkerVerdict(job, 'job-uid', []), undefined, 'still running');
  const ok = checkerVerdict(finished(job, 'Complete'), 'job-uid', [podOf(job, 0, 'OSDs 3 4 ok to stop\n')]);
  assert.deepEqual(ok, { healthy: true, message: 'OSDs 3 4 ok to stop' });
  const held = checkerVerdict(finished(job, 'Failed', 'BackoffLimitExceeded'), 'job-uid', [
    podOf(job, 1, 'Error EBUSY\nok-to-stop: 2 PGs would become inactive'),
  ]);
  assert.deepEqual(held, { healthy: false, message: 'ok-to-stop: 2 PGs would become inactive' });
  const silent = checkerVerdict(finished(job, 'Failed', 'DeadlineExceeded'), 'job-uid', []);
  assert.match(
    silent?.message ?? '',
    /^checker Job rook-ceph\/ceph-osd-ok-to-stop-\w+ ran past its deadline$/,
  );
  assert.equal(lastLine('x'.repeat(5000)).length, MAX_CHECKER_MESSAGE);
});

test('a pod claiming the Job but running something else refuses the verdict (fail closed)', () => {
  const job = buildCheckerJob(spec, check, node, 60_000);
  const forged = podOf(job, 0, 'all good', {
    containers: [{ name: 'ok-to-stop', image: 'busybox', command: ['true'] }],
  });
  const verdict = checkerVerdict(finished(job, 'Complete'), 'job-uid', [forged]);
  assert.equal(verdict?.healthy, false);
  assert.match(verdict.message, /verdict refused: pod rook-ceph\/p claims the checker Job but does not run/);
  // A pod controlled by another Job is not this Job's at all: ignored.
  const other = podOf(job, 1, 'not mine');
  other.metadata = Object.assign({}, other.metadata, {
    ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'x', uid: 'other', controller: true }],
  });
  assert.deepEqual(checkerVerdict(finished(job, 'Complete'), 'job-uid', [other]), {
    healthy: true,
    message: `checker Job rook-ceph/${job.metadata?.name ?? ''} succeeded`,
  });
});
