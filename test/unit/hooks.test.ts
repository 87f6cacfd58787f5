import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import type { HookRun } from '../../src/api/hooks.ts';
import {
  buildHookJob,
  hookJobName,
  jobFacts,
  jobImpostor,
  runIdentity,
  type HookSubject,
} from '../../src/hooks/job.ts';
import {
  planHookStage,
  WEBHOOK_CALL_BUDGET,
  WEBHOOK_ERROR_BACKOFF_MS,
  WEBHOOK_MIN_RETRY_MS,
} from '../../src/hooks/plan.ts';
import { orderGroups, selectHooks } from '../../src/hooks/select.ts';
import { withHookRun } from '../../src/hooks/status.ts';
import { hookRequest, parseHookAnswer, webhookText } from '../../src/hooks/protocol.ts';
import { callWebhook } from '../../src/hooks/webhook.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { T0, at, hook, webhookHook } from './action-fixtures.ts';

const upgrade = {
  name: 'upgrade-w1',
  uid: 'uid-a',
  action: 'Upgrade' as const,
  parameters: { upgrade: { image: 'factory.talos.dev/installer/x:v1.13.1' } },
  targetImage: 'factory.talos.dev/installer/x:v1.13.1',
};
const subject: HookSubject = {
  node: 'w1',
  bootID: 'boot-1',
  action: upgrade,
  owner: {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'NodeAction',
    name: 'upgrade-w1',
    uid: 'uid-a',
    controller: true,
    blockOwnerDeletion: true,
  },
};

describe('hook Jobs', () => {
  it('have a deterministic name from (run, hook uid, attempt), at most 63 characters', () => {
    const h = hook('PreUpgradeJob', 'ceph.set-noout-with-a-very-long-name-that-goes-on-and-on-and-on');
    const name = hookJobName(subject, h, 1);
    assert.equal(name, hookJobName(subject, h, 1));
    assert.notEqual(name, hookJobName(subject, h, 2));
    assert.notEqual(name, hookJobName({ ...subject, action: { ...upgrade, uid: 'uid-b' } }, h, 1));
    assert.notEqual(name, hookJobName(subject, { ...h, metadata: { ...h.metadata, uid: 'other' } }, 1));
    assert.ok(name.length <= 63, name);
    assert.match(name, /^ceph-set-noout-with-a-very-long-name-th[a-z-]*-[0-9a-f]{10}-1$/);
    assert.equal(runIdentity({ node: 'w1', bootID: 'b' }), 'boot/w1/b');
  });

  it('are the template with gatehouse labels, environment, placement, deadline and owner', () => {
    const h = hook('PreUpgradeJob', 'noout', {
      timeout: '10m',
      placement: 'AwayFromTarget',
      template: {
        metadata: { labels: { team: 'storage' } },
        spec: {
          backoffLimit: 2,
          activeDeadlineSeconds: 3600,
          ttlSecondsAfterFinished: 0,
          template: {
            metadata: { labels: { app: 'noout' } },
            spec: {
              restartPolicy: 'Never',
              containers: [
                {
                  name: 'ceph',
                  image: 'rook/ceph',
                  env: [
                    { name: 'GATEHOUSE_NODE', value: 'spoofed' },
                    { name: 'KEEP', value: '1' },
                  ],
                },
              ],
              initContainers: [{ name: 'wait', image: 'busybox' }],
              affinity: {
                nodeAffinity: {
                  requiredDuringSchedulingIgnoredDuringExecution: {
                    nodeSelectorTerms: [
                      { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] },
                      { matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }] },
                    ],
                  },
                },
              },
            },
          },
        },
      },
    });
    const job = buildHookJob(h, subject, 1);
    assert.equal(job.metadata?.namespace, 'rook-ceph');
    assert.deepEqual(job.metadata.labels, {
      team: 'storage',
      'app.kubernetes.io/managed-by': 'gatehouse',
      'talos.dev/hook-kind': 'PreUpgradeJob',
      'talos.dev/hook-uid': h.metadata.uid,
      'talos.dev/attempt': '1',
      'talos.dev/hook': 'noout',
      'talos.dev/node': 'w1',
      'talos.dev/action': 'upgrade-w1',
      'talos.dev/action-uid': 'uid-a',
      'talos.dev/boot-id': 'boot-1',
    });
    assert.equal(job.spec?.template.metadata?.labels?.app, 'noout');
    assert.equal(job.spec.template.metadata.labels['talos.dev/action-uid'], 'uid-a');
    assert.deepEqual(job.metadata.ownerReferences, [subject.owner]);
    assert.equal(job.spec.activeDeadlineSeconds, 600, 'no longer than the hook timeout');
    assert.equal(job.spec.backoffLimit, 2);
    assert.equal(
      'ttlSecondsAfterFinished' in (job.spec ?? {}),
      false,
      'the Job stays as the record of the attempt',
    );
    const env = job.spec.template.spec?.containers[0]?.env?.map((e) => [e.name, e.value]);
    assert.deepEqual(env, [
      ['KEEP', '1'],
      ['GATEHOUSE_NODE', 'w1'],
      ['GATEHOUSE_ACTION', 'Upgrade'],
      ['GATEHOUSE_ACTION_NAME', 'upgrade-w1'],
      ['GATEHOUSE_BOOT_ID', 'boot-1'],
      ['GATEHOUSE_TARGET_IMAGE', 'factory.talos.dev/installer/x:v1.13.1'],
    ]);
    assert.equal(job.spec.template.spec?.initContainers?.[0]?.env?.length, 5);
    const terms =
      job.spec.template.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution
        ?.nodeSelectorTerms;
    const away = { key: 'metadata.name', operator: 'NotIn', values: ['w1'] };
    assert.deepEqual(terms, [
      { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }], matchFields: [away] },
      { matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }], matchFields: [away] },
    ]);
    assert.equal(h.spec.template?.spec?.ttlSecondsAfterFinished, 0, 'the hook itself is not modified');
  });

  it('place OnTarget on the node, Anywhere anywhere, and let NodePrereadyJobs tolerate the preready taint', () => {
    const on = buildHookJob(
      hook('NodePrereadyJob', 'p', { placement: 'OnTarget' }),
      { node: 'w1', bootID: 'b2' },
      1,
    );
    assert.deepEqual(
      on.spec?.template.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution
        ?.nodeSelectorTerms,
      [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['w1'] }] }],
    );
    assert.deepEqual(on.spec.template.spec.tolerations, [
      { key: 'talos.dev/preready', operator: 'Exists', effect: 'NoSchedule' },
    ]);
    assert.equal(on.metadata?.ownerReferences, undefined);
    const env = Object.fromEntries(
      on.spec.template.spec.containers[0]?.env?.map((e) => [e.name, e.value]) ?? [],
    );
    assert.deepEqual(env, {
      GATEHOUSE_NODE: 'w1',
      GATEHOUSE_ACTION: '',
      GATEHOUSE_ACTION_NAME: '',
      GATEHOUSE_BOOT_ID: 'b2',
    });
    const anywhere = buildHookJob(hook('PreRebootJob', 'a', { placement: 'Anywhere' }), subject, 1);
    assert.equal(anywhere.spec?.template.spec?.affinity, undefined);
    assert.equal(anywhere.spec?.template.spec?.tolerations, undefined);
  });

  it('are read as Pending, Running, Succeeded or Failed from their status', () => {
    const meta = { name: 'j', namespace: 'ns' };
    assert.equal(jobFacts({ metadata: meta }).phase, 'Pending');
    assert.equal(jobFacts({ metadata: meta, status: { active: 1, startTime: 'x' } }).phase, 'Running');
    const done = jobFacts({
      metadata: meta,
      status: { completionTime: '2026-01-01T00:00:05Z', conditions: [{ type: 'Complete', status: 'True' }] },
    });
    assert.deepEqual([done.phase, done.completionTime], ['Succeeded', '2026-01-01T00:00:05Z']);
    const failed = jobFacts({
      metadata: { ...meta, deletionTimestamp: 'now' },
      status: {
        conditions: [
          {
            type: 'FailureTarget',
            status: 'True',
            reason: 'BackoffLimitExceeded',
            message: 'Job has reached the specified backoff limit',
          },
        ],
      },
    });
    assert.equal(failed.phase, 'Failed');
    assert.equal(failed.deleting, true);
    assert.equal(
      failed.message,
      'Job ns/j failed: BackoffLimitExceeded: Job has reached the specified backoff limit',
    );
  });
});

describe('hook selection and order', () => {
  it('selects by kind and node labels, ordered by order then namespace and name, grouped by order', () => {
    const hooks = [
      hook('PreRebootJob', 'z', { order: 0 }),
      hook('PreRebootJob', 'a', { order: 0 }),
      hook('PreRebootJob', 'late', { order: 5 }),
      hook('PreRebootJob', 'early', { order: -3 }),
      hook('PreUpgradeJob', 'up'),
      hook('PreRebootJob', 'gpu', { nodeSelector: { matchLabels: { gpu: 'true' } } }),
    ];
    const selected = selectHooks(hooks, 'PreRebootJob', { pool: 'storage' });
    assert.deepEqual(
      selected.map((h) => h.metadata.name),
      ['early', 'a', 'z', 'late'],
    );
    assert.deepEqual(
      orderGroups(selected).map((g) => g.map((h) => h.metadata.name)),
      [['early'], ['a', 'z'], ['late']],
    );
  });
});

describe('hook Job adoption', () => {
  const h = hook('PreUpgradeJob', 'noout');
  const ours = buildHookJob(h, subject, 1);
  const record = {
    uid: h.metadata.uid,
    attempt: 1,
    templateHash: ours.metadata?.annotations?.['talos.dev/template-hash'] ?? '',
  };
  type Meta = {
    name: string;
    labels: Record<string, string>;
    annotations: Record<string, string>;
    ownerReferences: { uid: string }[];
  };
  const meta = (): Meta => ({
    name: ours.metadata?.name ?? '',
    labels: { ...ours.metadata?.labels },
    annotations: { ...ours.metadata?.annotations },
    ownerReferences: (ours.metadata?.ownerReferences ?? []).map((o) => ({ uid: o.uid })),
  });
  const observed = (metadata: Meta) => jobFacts({ metadata }).provenance;

  it('adopt the Job gatehouse built for the run', () => {
    assert.match(record.templateHash, /^[0-9a-f]{32}$/);
    const provenance = observed(meta());
    assert.ok(provenance);
    assert.equal(jobImpostor(provenance, subject, record), undefined);
  });

  it('refuse a Job under the same name without the labels, owner or hash of the run', () => {
    const variants: [string, (m: Meta) => void, RegExp][] = [
      ['no labels', (m) => (m.labels = {}), /label app.kubernetes.io\/managed-by is missing/],
      [
        'another hook',
        (m) => (m.labels['talos.dev/hook-uid'] = 'other'),
        /label talos.dev\/hook-uid is "other"/,
      ],
      [
        'another attempt',
        (m) => (m.labels['talos.dev/attempt'] = '2'),
        /label talos.dev\/attempt is "2", not "1"/,
      ],
      [
        'another action',
        (m) => (m.labels['talos.dev/action-uid'] = 'uid-b'),
        /label talos.dev\/action-uid is "uid-b"/,
      ],
      ['no owner', (m) => (m.ownerReferences = []), /not owned by NodeAction upgrade-w1 \(uid uid-a\)/],
      [
        'another template',
        (m) => (m.annotations['talos.dev/template-hash'] = 'f'.repeat(32)),
        /template-hash is "f{32}", not that of the Job gatehouse built/,
      ],
      ['no hash', (m) => delete m.annotations['talos.dev/template-hash'], /template-hash is missing/],
    ];
    for (const [what, change, problem] of variants) {
      const m = meta();
      change(m);
      const provenance = observed(m);
      assert.ok(provenance);
      assert.match(jobImpostor(provenance, subject, record) ?? 'adopted', problem, what);
    }
  });

  it('fail the run naming the Job that is not its own, and never record a completion before the start', () => {
    const first = planHookStage({
      now: T0,
      subject,
      hooks: [h],
      records: [],
      jobs: new Map(),
      webhooks: new Map(),
    });
    const name = first.records[0]?.jobName ?? '';
    const impostor = jobFacts({
      metadata: { name, namespace: h.metadata.namespace },
      status: { completionTime: '2000-01-01T00:00:00Z', conditions: [{ type: 'Complete', status: 'True' }] },
    });
    const next = planHookStage({
      now: at(5),
      subject,
      hooks: [h],
      records: first.records,
      jobs: new Map([[`${h.metadata.namespace}/${name}`, impostor]]),
      webhooks: new Map(),
    });
    assert.equal(next.outcome, 'Failed');
    assert.match(
      next.records[0]?.message ?? '',
      new RegExp(`Job ${h.metadata.namespace}/${name} was not created by gatehouse for this run`),
    );
    assert.ok(!next.effects.some((e) => e.type === 'deleteJob'), 'a Job that is not ours is left alone');
    const real = jobFacts({
      metadata: {
        name,
        namespace: h.metadata.namespace,
        labels: ours.metadata?.labels ?? {},
        annotations: ours.metadata?.annotations ?? {},
        ownerReferences: ours.metadata?.ownerReferences ?? [],
      },
      status: { completionTime: '2000-01-01T00:00:00Z', conditions: [{ type: 'Complete', status: 'True' }] },
    });
    const done = planHookStage({
      now: at(5),
      subject,
      hooks: [h],
      records: first.records,
      jobs: new Map([[`${h.metadata.namespace}/${name}`, real]]),
      webhooks: new Map(),
    });
    assert.equal(done.outcome, 'Succeeded');
    assert.equal(done.records[0]?.completionTime, first.records[0]?.startTime);
  });
});

describe('a hook gone while it runs', () => {
  it('has its run closed, saying so, and its Job deleted; runs of other stages are left alone', () => {
    const gone = hook('PreUpgradeJob', 'gone');
    const stays = hook('PreUpgradeJob', 'stays');
    const first = planHookStage({
      now: T0,
      subject,
      hooks: [gone, stays],
      records: [],
      jobs: new Map(),
      webhooks: new Map(),
    });
    const other = {
      ...(first.records[0] as NonNullable<(typeof first.records)[0]>),
      kind: 'NodeReadyJob' as const,
      name: 'elsewhere',
    };
    const next = planHookStage({
      now: at(5),
      subject,
      hooks: [stays],
      kinds: ['PreUpgradeJob'],
      records: [...first.records, other],
      jobs: new Map(),
      webhooks: new Map(),
    });
    const closed = next.records.find((r) => r.name === 'gone');
    assert.equal(closed?.phase, 'Failed');
    assert.match(
      closed.message ?? '',
      /PreUpgradeJob .*\/gone was deleted, or no longer selects node w1, while it ran: its run is closed and its Job deleted/,
    );
    assert.ok(next.effects.some((e) => e.type === 'deleteJob' && e.name === closed.jobName));
    assert.equal(next.records.find((r) => r.name === 'elsewhere')?.phase, 'Pending', "another stage's run");
    assert.equal(next.outcome, 'Running', 'the hook that stays still runs');
  });
});

describe('webhook hooks', () => {
  it('read answers as the callback protocol says', () => {
    assert.deepEqual(parseHookAnswer('POST x', 200, '{"status":"Success","message":"ok"}'), {
      outcome: 'Success',
      message: 'ok',
      retryAfterMs: 0,
    });
    assert.deepEqual(
      parseHookAnswer('POST x', 200, '{"status":"Success","retryAfterSeconds":30,"message":"later"}'),
      {
        outcome: 'NotYet',
        message: 'later',
        retryAfterMs: 30_000,
      },
    );
    assert.equal(parseHookAnswer('POST x', 200, '{"status":"Failure","message":"no"}').outcome, 'Failure');
    assert.match(
      parseHookAnswer('POST x', 503, 'overloaded').message,
      /POST x answered HTTP 503: overloaded/,
    );
    assert.equal(parseHookAnswer('POST x', 200, 'not json').outcome, 'Error');
    assert.match(
      parseHookAnswer('POST x', 200, '{"status":"Maybe"}').message,
      /without status Success or Failure/,
    );
  });

  it('treat every field outside the protocol as an error that says what was wrong', () => {
    const cases: [string, RegExp][] = [
      ['{"status":"Success","retryAfterSeconds":"30"}', /retryAfterSeconds is "30", not an integer ≥ 0/],
      ['{"status":"Success","retryAfterSeconds":0.0001}', /retryAfterSeconds is 0.0001, not an integer ≥ 0/],
      ['{"status":"Success","retryAfterSeconds":-1}', /retryAfterSeconds is -1, not an integer ≥ 0/],
      ['{"status":"Success","retryAfterSeconds":1e9}', /retryAfterSeconds is 1000000000, more than 3600/],
      ['{"status":"Success","retryAfterSeconds":null}', /retryAfterSeconds is null/],
      ['{"status":"Success","message":{"a":1}}', /message is a object, not a string/],
      ['{"status":"success"}', /without status Success or Failure \(status: "success"\)/],
      ['[{"status":"Success"}]', /not a JSON object/],
      ['"Success"', /not a JSON object/],
      ['null', /not a JSON object/],
    ];
    for (const [body, problem] of cases) {
      const answer = parseHookAnswer('POST x', 200, body);
      assert.equal(answer.outcome, 'Error', body);
      assert.match(answer.message, problem, body);
    }
    // Integers ≥ 0 are the protocol; other fields are ignored, and only the message is kept.
    assert.deepEqual(
      parseHookAnswer('POST x', 200, '{"status":"Success","retryAfterSeconds":0,"extra":"secret"}'),
      { outcome: 'Success', message: 'POST x answered Success', retryAfterMs: 0 },
    );
    const long = parseHookAnswer(
      'POST x',
      200,
      JSON.stringify({ status: 'Failure', message: `a\nb\u0000${'x'.repeat(5000)}` }),
    );
    assert.ok(long.message.length <= 1024, `${long.message.length} characters kept`);
    assert.ok(long.message.startsWith('a b x'), long.message.slice(0, 10));
    assert.equal(webhookText('\u2028line\u0007 two\r\n'), 'line two');
  });

  it('wait at least a second between calls, and stop calling after the budget', () => {
    const w = webhookHook('PreRebootJob', 'cb');
    const first = planHookStage({
      now: T0,
      subject,
      hooks: [w],
      records: [],
      jobs: new Map(),
      webhooks: new Map(),
    });
    const key = first.effects.find((e) => e.type === 'callWebhook');
    assert.ok(key);
    const notYet = (calls: number, retryAfterMs: number) =>
      new Map([
        [
          key.key,
          {
            inFlight: false,
            calls,
            last: { outcome: 'NotYet' as const, message: 'wait', retryAfterMs, at: T0 },
          },
        ],
      ]);
    const soon = planHookStage({
      now: new Date(T0.getTime() + WEBHOOK_MIN_RETRY_MS - 1),
      subject,
      hooks: [w],
      records: first.records,
      jobs: new Map(),
      webhooks: notYet(1, 1),
    });
    assert.ok(!soon.effects.some((e) => e.type === 'callWebhook'), 'asked again sooner than a second');
    const spent = planHookStage({
      now: at(10),
      subject,
      hooks: [w],
      records: first.records,
      jobs: new Map(),
      webhooks: notYet(WEBHOOK_CALL_BUDGET, 1000),
    });
    assert.ok(!spent.effects.some((e) => e.type === 'callWebhook'));
    assert.equal(spent.outcome, 'Failed');
    assert.match(
      spent.message,
      new RegExp(`was called ${WEBHOOK_CALL_BUDGET} times without answering Success or Failure: wait`),
    );
  });

  it('ask again after an error, not at once', () => {
    const w = webhookHook('PreRebootJob', 'cb');
    const first = planHookStage({
      now: T0,
      subject,
      hooks: [w],
      records: [],
      jobs: new Map(),
      webhooks: new Map(),
    });
    const key = first.effects.find((e) => e.type === 'callWebhook');
    assert.ok(key);
    const failing = new Map([
      [
        key.key,
        {
          inFlight: false,
          last: { outcome: 'Error' as const, message: 'refused', retryAfterMs: 0, at: at(1) },
        },
      ],
    ]);
    const soon = planHookStage({
      now: at(2),
      subject,
      hooks: [w],
      records: first.records,
      jobs: new Map(),
      webhooks: failing,
    });
    assert.ok(!soon.effects.some((e) => e.type === 'callWebhook'));
    assert.equal(soon.requeueAfterMs, WEBHOOK_ERROR_BACKOFF_MS - 1000);
    assert.match(soon.message, /refused; calling again/);
    const later = planHookStage({
      now: at(6),
      subject,
      hooks: [w],
      records: soon.records,
      jobs: new Map(),
      webhooks: failing,
    });
    assert.ok(later.effects.some((e) => e.type === 'callWebhook'));
    const busy = new Map([[key.key, { inFlight: true }]]);
    assert.ok(
      !planHookStage({
        now: at(6),
        subject,
        hooks: [w],
        records: soon.records,
        jobs: new Map(),
        webhooks: busy,
      }).effects.some((e) => e.type === 'callWebhook'),
    );
  });

  it('POST the HookRequest to the Service and report what it answered', async () => {
    let received: unknown;
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received = {
          method: req.method,
          url: req.url,
          host: req.headers.host,
          body: JSON.parse(body) as unknown,
        };
        res.writeHead(200).end('{"status":"Success","retryAfterSeconds":5,"message":"waiting for PGs"}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    try {
      // A controller outside the cluster reaches the Service through the API: here an ExternalName to localhost.
      const rest = {
        request: (path: string) => {
          assert.equal(path, '/api/v1/namespaces/rook-ceph/services/hooks');
          return Promise.resolve({ spec: { type: 'ExternalName', externalName: '127.0.0.1' } });
        },
      } as unknown as RestClient;
      const w = webhookHook('PreRebootJob', 'cb');
      w.spec.webhook = { service: { name: 'hooks', port }, path: '/osd', scheme: 'HTTP' };
      const request = hookRequest(w, subject);
      const answer = await callWebhook(w, request, {
        rest,
        serviceResolution: 'endpoints',
        namespace: 'gatehouse-system',
      });
      assert.deepEqual(answer, { outcome: 'NotYet', message: 'waiting for PGs', retryAfterMs: 5000 });
      assert.deepEqual(received, {
        method: 'POST',
        url: '/osd',
        host: `hooks.rook-ceph.svc:${port}`,
        body: request,
      });
      assert.deepEqual(request, {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'HookRequest',
        action: {
          name: 'upgrade-w1',
          uid: 'uid-a',
          action: 'Upgrade',
          node: 'w1',
          bootID: 'boot-1',
          parameters: { upgrade: { image: 'factory.talos.dev/installer/x:v1.13.1' } },
        },
        hook: { kind: 'PreRebootJob', namespace: 'rook-ceph', name: 'cb' },
      });
      server.close();
      const down = await callWebhook(w, request, {
        rest,
        serviceResolution: 'endpoints',
        namespace: 'gatehouse-system',
      });
      assert.equal(down.outcome, 'Error');
      assert.match(down.message, new RegExp(`POST http://hooks\\.rook-ceph\\.svc:${port}/osd: `));
    } finally {
      server.close();
    }
  });
});

describe('hook status', () => {
  const run = (phase: HookRun['phase'], attempt = 1): HookRun => ({
    action: 'a',
    node: 'w1',
    attempt,
    phase,
    message: phase,
  });

  it('keeps the newest runs first, counts each finished run once, and reports the last outcome', () => {
    let status = withHookRun(undefined, run('Pending'), 2, T0);
    assert.deepEqual([status.active, status.succeeded, status.failed], [1, 0, 0]);
    status = withHookRun(status, run('Succeeded'), 2, T0);
    assert.deepEqual([status.active, status.succeeded, status.failed], [0, 1, 0]);
    status = withHookRun(status, run('Succeeded'), 2, T0);
    assert.equal(status.succeeded, 1, 'the same run again counts nothing');
    status = withHookRun(status, run('Failed', 2), 2, at(1));
    assert.deepEqual(
      status.lastRuns?.map((r) => [r.attempt, r.phase]),
      [
        [2, 'Failed'],
        [1, 'Succeeded'],
      ],
    );
    assert.equal(status.failed, 1);
    assert.equal(status.observedGeneration, 2);
    assert.equal(status.conditions?.[0]?.type, 'LastRunSucceeded');
    assert.equal(status.conditions[0].status, 'False');
    for (let i = 3; i < 20; i++) status = withHookRun(status, run('Succeeded', i), 2, T0);
    assert.equal(status.lastRuns?.length, 10);
  });
});
