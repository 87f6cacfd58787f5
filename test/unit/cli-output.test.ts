// The CLI's machine-readable output, its usage errors and its rolling through nodes,
// against a backend that plays the controller: exact JSON, exact refusals, and exit
// codes for success, failure, cancellation and Ctrl-C.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type {
  ActionObject,
  Backend,
  CheckSummary,
  PolicyObject,
  Progress,
  RequestSpec,
} from '../../src/cli/backend.ts';
import { describeText } from '../../src/cli/actions.ts';
import { LiveDisplay } from '../../src/cli/display.ts';
import { CliError, EXIT } from '../../src/cli/exit.ts';
import { commonSpec } from '../../src/cli/node-actions.ts';
import { formatDocument } from '../../src/cli/output.ts';
import { rollout, worstCode } from '../../src/cli/rollout.ts';
import { selectActions, statusDocument, statusText } from '../../src/cli/status.ts';
import { PLAIN } from '../../src/cli/style.ts';
import { age, table } from '../../src/cli/table.ts';

function act(name: string, phase: string | undefined, created: string, node = 'worker-1'): ActionObject {
  return {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'NodeAction',
    metadata: { name, uid: `uid-${name}`, creationTimestamp: created },
    spec: { nodeName: node, action: 'Reboot', requestedBy: 'alice' },
    ...(phase ? { status: { phase, message: `${name} is ${phase}` } } : {}),
  } as ActionObject;
}

const check: CheckSummary = {
  name: 'ceph',
  healthy: false,
  state: 'Unhealthy',
  reason: 'ProbeFailed',
  message: 'HEALTH_WARN',
  probe: 'resource',
  consecutiveSuccesses: 0,
  consecutiveFailures: 3,
  lastProbeTime: '2026-01-10T12:00:00Z',
  lastTransitionTime: '2026-01-10T11:00:00Z',
};

const policy: PolicyObject = {
  metadata: { name: 'workers' },
  spec: { maxConcurrent: '25%' },
  status: { matchingNodes: 8, activeActions: 1, windowOpen: false, nextWindowStart: '2026-01-11T02:00:00Z' },
};

/** A backend whose answers the test scripts; `follow` replays phases one by one. */
class FakeBackend implements Backend {
  readonly mode = 'kubernetes';
  readonly target = 'fake';
  readonly created: RequestSpec[] = [];
  readonly cancelled: string[] = [];
  list: ActionObject[] = [];
  /** Phases each created action goes through, by node. */
  /** 'hang' waits for the interrupt. */
  script = new Map<string, string[]>();
  refuse = new Map<string, CliError>();

  whoami = () => Promise.resolve('alice');
  checks = () => Promise.resolve([{ ...check, name: 'zz-last' }, check]);
  check = () => Promise.resolve(undefined);
  policies = () => Promise.resolve([policy]);
  actions = () => Promise.resolve(this.list);
  action = () => Promise.resolve(undefined);
  node = () => Promise.resolve(undefined);
  markExecuted = () => Promise.reject(new Error('not scripted'));
  release = () => Promise.reject(new Error('not scripted'));
  approve = () => Promise.reject(new Error('not scripted'));

  createAction(spec: RequestSpec): Promise<ActionObject> {
    const refusal = this.refuse.get(spec.nodeName);
    if (refusal) return Promise.reject(refusal);
    this.created.push(spec);
    return Promise.resolve(
      act(`${spec.nodeName}-reboot-x`, undefined, '2026-01-10T12:00:00Z', spec.nodeName),
    );
  }

  cancel(name: string): Promise<void> {
    this.cancelled.push(name);
    return Promise.resolve();
  }

  async follow(
    name: string,
    onProgress: (p: Progress) => void,
    options: { until?: (p: Progress) => boolean; signal?: AbortSignal },
  ): Promise<Progress> {
    const node = name.replace(/-reboot-x$/, '');
    const phases = this.cancelled.includes(name) ? ['Cancelled'] : (this.script.get(node) ?? ['Succeeded']);
    let last: Progress = { action: undefined, node: undefined };
    for (const phase of phases) {
      if (phase === 'hang') {
        await new Promise((_, reject) => {
          options.signal?.addEventListener('abort', () => reject(options.signal?.reason as Error), {
            once: true,
          });
        });
      }
      last = { action: act(name, phase, '2026-01-10T12:00:00Z', node), node: undefined };
      onProgress(last);
      if (options.until?.(last)) break;
      await new Promise((r) => setImmediate(r));
    }
    return last;
  }
}

function quietDisplay(): LiveDisplay {
  return new LiveDisplay({ write: () => true }, { live: false, style: PLAIN });
}

function spec(node: string): RequestSpec {
  return { nodeName: node, action: 'Reboot' };
}

describe('gatehouse status -o json', () => {
  it('prints checks, policies and actions with fixed fields, exactly', async () => {
    const backend = new FakeBackend();
    backend.list = [
      act('old-done', 'Succeeded', '2026-01-10T10:00:00Z'),
      act('running', 'WaitingForHealth', '2026-01-10T11:00:00Z'),
      act('fresh', undefined, '2026-01-10T11:30:00Z'),
    ];
    const text = formatDocument('json', await statusDocument(backend));
    assert.equal(
      text,
      `{
  "checks": [
    {
      "name": "ceph",
      "state": "Unhealthy",
      "healthy": false,
      "probe": "resource",
      "message": "HEALTH_WARN",
      "lastProbeTime": "2026-01-10T12:00:00Z"
    },
    {
      "name": "zz-last",
      "state": "Unhealthy",
      "healthy": false,
      "probe": "resource",
      "message": "HEALTH_WARN",
      "lastProbeTime": "2026-01-10T12:00:00Z"
    }
  ],
  "policies": [
    {
      "name": "workers",
      "maxConcurrent": "25%",
      "matchingNodes": 8,
      "activeActions": 1,
      "windowOpen": false,
      "nextWindowStart": "2026-01-11T02:00:00Z"
    }
  ],
  "actions": [
    {
      "name": "running",
      "node": "worker-1",
      "action": "Reboot",
      "phase": "WaitingForHealth",
      "execution": "Managed",
      "requestedBy": "alice",
      "createdAt": "2026-01-10T11:00:00Z",
      "message": "running is WaitingForHealth"
    },
    {
      "name": "fresh",
      "node": "worker-1",
      "action": "Reboot",
      "phase": "New",
      "execution": "Managed",
      "requestedBy": "alice",
      "createdAt": "2026-01-10T11:30:00Z",
      "message": ""
    },
    {
      "name": "old-done",
      "node": "worker-1",
      "action": "Reboot",
      "phase": "Succeeded",
      "execution": "Managed",
      "requestedBy": "alice",
      "createdAt": "2026-01-10T10:00:00Z",
      "message": "old-done is Succeeded"
    }
  ]
}
`,
    );
  });

  it('shows every unfinished action and only the latest finished ones', () => {
    const finished = Array.from({ length: 15 }, (_, i) =>
      act(
        `done-${String(i).padStart(2, '0')}`,
        'Succeeded',
        `2026-01-10T10:${String(i).padStart(2, '0')}:00Z`,
      ),
    );
    const names = selectActions([...finished, act('open', 'Pending', '2026-01-09T00:00:00Z')], 3).map(
      (a) => a.metadata.name,
    );
    assert.deepEqual(names, ['open', 'done-14', 'done-13', 'done-12']);
  });

  it('prints tables without colour when asked for none', async () => {
    const backend = new FakeBackend();
    const text = statusText(await statusDocument(backend), new Date('2026-01-10T12:00:30Z'), PLAIN);
    assert.ok(!text.includes('\x1b'), text);
    assert.equal(
      text,
      [
        'CHECKS',
        'NAME      STATE       PROBE      PROBED   MESSAGE',
        'ceph      Unhealthy   resource   30s      HEALTH_WARN',
        'zz-last   Unhealthy   resource   30s      HEALTH_WARN',
        '',
        'POLICIES',
        'NAME      MAX   NODES   ACTIVE   WINDOW',
        'workers   25%   8       1        closed until 2026-01-11T02:00:00Z',
        '',
        'ACTIONS: none',
        '',
      ].join('\n'),
    );
  });
});

describe('gatehouse actions describe', () => {
  it("lists the action's silences with their state, matcher and end", () => {
    const action = act('worker-1-reboot-x', 'Executing', '2026-11-30T10:00:00Z');
    action.status = {
      ...action.status,
      silences: [
        {
          url: 'http://alertmanager:9093',
          nodeLabel: 'node',
          state: 'Active',
          id: 'a1b2',
          endsAt: '2026-11-30T10:10:00Z',
        },
        { url: 'http://other:9093', nodeLabel: 'instance', state: 'Pending' },
      ],
    };
    const text = describeText(action, undefined, new Date('2026-11-30T10:01:00Z'), PLAIN);
    assert.match(
      text,
      /\nSilences:\n {2}Active node="worker-1" in http:\/\/alertmanager:9093 until 2026-11-30T10:10:00Z \(id a1b2\)\n {2}Pending instance="worker-1" in http:\/\/other:9093\n/,
    );
  });
});

describe('gatehouse actions describe: the drain and the undo', () => {
  it('lists every pod that held the drain, and each undo run with its hook, state, Job and message', () => {
    const action = act('worker-1-reboot-x', 'Failed', '2026-11-30T10:00:00Z');
    const blockers = Array.from({ length: 10 }, (_, n) => ({
      namespace: 'rook-ceph',
      pod: `rook-ceph-osd-${String(n)}`,
      podDisruptionBudget: 'rook-ceph-osd',
      disruptionsAllowed: 0,
      since: '2026-11-30T10:00:10Z',
    }));
    action.status = {
      ...action.status,
      completionTime: '2026-11-30T10:10:10Z',
      drain: { blockers, moreBlockers: 2 },
      undo: {
        decisionTime: '2026-11-30T10:10:10Z',
        nodeDisrupted: false,
        reason: 'the node was not disrupted: undoing 1 pre-action hook',
        runs: [
          {
            kind: 'PreRebootJob',
            namespace: 'rook-ceph',
            name: 'noout',
            attempt: 1,
            jobName: 'noout-undo-1',
            phase: 'Failed',
            startTime: '2026-11-30T10:10:11Z',
            completionTime: '2026-11-30T10:10:20Z',
            message: 'Job failed: BackoffLimitExceeded',
          },
        ],
      },
    };
    const text = describeText(action, undefined, new Date('2026-11-30T10:11:00Z'), PLAIN);
    assert.match(
      text,
      /\nDrain \(condition DrainBlocked\):\n {2}✗ drain was held 10m00s: rook-ceph-osd-0 blocked by PodDisruptionBudget rook-ceph\/rook-ceph-osd \(0 disruptions allowed\)\n/,
    );
    assert.match(
      text,
      /\n {6}rook-ceph-osd-9 blocked by PodDisruptionBudget rook-ceph\/rook-ceph-osd \(0 disruptions allowed\)\n {6}and 2 more pods refused\n/,
    );
    assert.match(
      text,
      /\nUndo \(decided 2026-11-30T10:10:10Z, node undisrupted\):\n {2}the node was not disrupted: undoing 1 pre-action hook\n {2}✗ undo of PreRebootJob rook-ceph\/noout Failed 9s \(job noout-undo-1\): Job failed: BackoffLimitExceeded\n/,
    );
  });
});

describe('tables', () => {
  it('aligns columns and trims the last', () => {
    assert.equal(
      table(
        ['A', 'LONGER'],
        [
          ['xyz', ''],
          ['x', 'y'],
        ],
      ),
      'A     LONGER\nxyz\nx     y\n',
    );
  });

  it('gives ages in the largest unit that fits', () => {
    const now = new Date('2026-01-10T12:00:00Z');
    assert.equal(age('2026-01-10T11:59:15Z', now), '45s');
    assert.equal(age('2026-01-10T11:48:00Z', now), '12m');
    assert.equal(age('2026-01-10T07:00:00Z', now), '5h');
    assert.equal(age('2026-01-07T12:00:00Z', now), '3d');
    assert.equal(age(null, now), '-');
  });
});

describe('action flags', () => {
  const base = { concurrency: 1, drain: true, output: 'text' as const };

  it('turns bypass flags into a recorded bypass, and refuses one without a reason', () => {
    assert.deepEqual(
      commonSpec({ ...base, skipChecks: true, reason: ' ceph is fine, probe is broken ' }, ['a']),
      {
        bypass: { healthChecks: true, reason: 'ceph is fine, probe is broken' },
      },
    );
    for (const flags of [{ skipChecks: true }, { skipHooks: true, reason: '  ' }]) {
      const error = (() => {
        try {
          commonSpec({ ...base, ...flags }, ['a']);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      assert.ok(error instanceof CliError);
      assert.equal(error.code, EXIT.usage);
      assert.match(error.message, /--reason/);
    }
  });

  it('refuses what cannot work together', () => {
    const refused = (flags: Partial<Parameters<typeof commonSpec>[0]>, nodes: string[], pattern: RegExp) =>
      assert.throws(
        () => commonSpec({ ...base, ...flags }, nodes),
        (e: unknown) => e instanceof CliError && e.code === EXIT.usage && pattern.test(e.message),
      );
    refused({ reason: 'why' }, ['a'], /--reason goes with --skip-checks or --skip-hooks/);
    refused({ external: true }, ['a', 'b'], /--external takes one node/);
    refused({ external: true, drain: false }, ['a'], /--no-drain and --drain-timeout are for Managed/);
    refused({}, ['a', 'b', 'a'], /node a is named twice/);
  });

  it('builds External and drain settings', () => {
    assert.deepEqual(commonSpec({ ...base, external: true }, ['a']), { execution: 'External' });
    assert.deepEqual(commonSpec({ ...base, drain: false }, ['a']), { drain: { enabled: false } });
    assert.deepEqual(commonSpec({ ...base, drainTimeout: '5m' }, ['a']), { drain: { timeout: '5m' } });
  });
});

describe('rolling through nodes', () => {
  it('goes one node at a time and succeeds when every action does', async () => {
    const backend = new FakeBackend();
    const result = await rollout({
      backend,
      specs: ['a', 'b', 'c'].map(spec),
      concurrency: 1,
      external: false,
      display: quietDisplay(),
      style: PLAIN,
      interrupt: new AbortController().signal,
    });
    assert.equal(result.code, EXIT.ok);
    assert.deepEqual(
      backend.created.map((s) => s.nodeName),
      ['a', 'b', 'c'],
    );
  });

  it('starts no new node after a failure, and exits 1', async () => {
    const backend = new FakeBackend();
    backend.script.set('b', ['WaitingForHealth', 'Failed']);
    const result = await rollout({
      backend,
      specs: ['a', 'b', 'c'].map(spec),
      concurrency: 1,
      external: false,
      display: quietDisplay(),
      style: PLAIN,
      interrupt: new AbortController().signal,
    });
    assert.equal(result.code, EXIT.failed);
    assert.deepEqual(
      backend.created.map((s) => s.nodeName),
      ['a', 'b'],
    );
    assert.equal(result.outcomes[2]?.note, 'not started');
  });

  it('stops at Approved with --external', async () => {
    const backend = new FakeBackend();
    backend.script.set('a', ['WaitingForHealth', 'RunningPreHooks', 'Approved', 'WaitingForNode']);
    const result = await rollout({
      backend,
      specs: [spec('a')],
      concurrency: 1,
      external: true,
      display: quietDisplay(),
      style: PLAIN,
      interrupt: new AbortController().signal,
    });
    assert.equal(result.code, EXIT.ok);
    assert.equal(result.outcomes[0]?.progress?.action?.status?.phase, 'Approved');
  });

  it('exits 3 when someone else cancels an action, and with the refusal code when one is refused', async () => {
    const backend = new FakeBackend();
    backend.script.set('a', ['Pending', 'Cancelled']);
    const common = { concurrency: 1, external: false, display: quietDisplay(), style: PLAIN };
    const cancelled = await rollout({
      ...common,
      backend,
      specs: [spec('a')],
      interrupt: new AbortController().signal,
    });
    assert.equal(cancelled.code, EXIT.cancelled);
    const refused = new FakeBackend();
    refused.refuse.set('a', new CliError('spec.nodeName: Invalid value', EXIT.usage));
    const invalid = await rollout({
      ...common,
      backend: refused,
      specs: [spec('a'), spec('b')],
      interrupt: new AbortController().signal,
    });
    assert.equal(invalid.code, EXIT.usage);
    assert.deepEqual(refused.created, []);
  });

  it('cancels the actions in flight on Ctrl-C and exits 130', async () => {
    const backend = new FakeBackend();
    backend.script.set('a', ['WaitingForHealth', 'hang']);
    backend.script.set('b', ['RunningPreHooks', 'hang']);
    const interrupt = new AbortController();
    const running = rollout({
      backend,
      specs: ['a', 'b', 'c'].map(spec),
      concurrency: 2,
      external: false,
      display: quietDisplay(),
      style: PLAIN,
      interrupt: interrupt.signal,
    });
    await new Promise((r) => setTimeout(r, 20));
    interrupt.abort(new Error('interrupted'));
    const result = await running;
    assert.equal(result.code, EXIT.interrupted);
    assert.deepEqual(backend.cancelled.sort(), ['a-reboot-x', 'b-reboot-x']);
    assert.deepEqual(backend.created.map((s) => s.nodeName).sort(), ['a', 'b'], 'c never started');
    assert.deepEqual(
      result.outcomes.map((o) => o.progress?.action?.status?.phase),
      ['Cancelled', 'Cancelled', undefined],
    );
  });

  it('ranks exit codes: interrupted, unreachable, usage, failed, cancelled, ok', () => {
    assert.equal(worstCode([EXIT.ok, EXIT.cancelled, EXIT.failed]), EXIT.failed);
    assert.equal(worstCode([EXIT.cancelled, EXIT.ok]), EXIT.cancelled);
    assert.equal(worstCode([EXIT.failed, EXIT.unreachable]), EXIT.unreachable);
    assert.equal(worstCode([]), EXIT.ok);
  });
});
