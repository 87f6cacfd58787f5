// What a person sees while an action goes through the gate: the live block on a
// terminal, the appended lines elsewhere, and the line that stays at the end — as pure
// functions of what was observed, checked line by line.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ActionObject, NodeView, Progress } from '../../src/cli/backend.ts';
import { LiveDisplay, truncateVisible } from '../../src/cli/display.ts';
import { hookLine, nodeLine, outcomeLine, progressEvents, progressLines } from '../../src/cli/progress.ts';
import { PLAIN, makeStyle, visibleLength } from '../../src/cli/style.ts';

// Escape sequences, built so that no regular expression literal holds a control character.
const ESCAPES = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, 'g');

const NOW = new Date('2026-01-10T12:00:30Z');

type Status = NonNullable<ActionObject['status']>;

function action(status: Status | undefined, overrides: Partial<ActionObject['spec']> = {}): ActionObject {
  return {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'NodeAction',
    metadata: { name: 'worker-1-reboot-abcde', uid: 'u1', creationTimestamp: '2026-01-10T12:00:00Z' },
    spec: {
      nodeName: 'worker-1',
      action: 'Reboot',
      requestedBy: 'alice',
      execution: 'External',
      ...overrides,
    },
    ...(status ? { status } : {}),
  };
}

const node: NodeView = {
  name: 'worker-1',
  exists: true,
  ready: 'True',
  bootID: '1a2b3c4d-0000',
  osImage: 'Talos (v1.13.0)',
  unschedulable: false,
  preready: false,
};

const waitingForHealth: Status = {
  phase: 'WaitingForHealth',
  phaseTime: '2026-01-10T12:00:18Z',
  message: 'waiting for 1 of 2 health checks: ceph',
  checks: [
    {
      name: 'ceph',
      healthy: false,
      probeTime: '2026-01-10T12:00:27Z',
      message: 'HEALTH_WARN: noout flag(s) set',
    },
    { name: 'nodes-ready', healthy: true, probeTime: '2026-01-10T12:00:27Z', message: '3 of 3 Ready' },
  ],
};

const runningHooks: Status = {
  phase: 'RunningPreHooks',
  phaseTime: '2026-01-10T12:00:25Z',
  message: 'running 1 pre-action hook',
  bootIDBefore: '1a2b3c4d-0000',
  checks: [
    { name: 'ceph', healthy: true, probeTime: '2026-01-10T12:00:24Z' },
    { name: 'nodes-ready', healthy: true, probeTime: '2026-01-10T12:00:24Z' },
  ],
  hooks: [
    {
      kind: 'PreRebootJob',
      namespace: 'rook-ceph',
      name: 'set-noout',
      attempt: 1,
      jobName: 'set-noout-u1-1',
      phase: 'Running',
      startTime: '2026-01-10T12:00:25Z',
    },
  ],
};

describe('progressLines: the live block', () => {
  it('shows which checks the action waits on, and why', () => {
    assert.deepEqual(
      progressLines('worker-1-reboot-abcde', { action: action(waitingForHealth), node }, NOW),
      [
        '▶ worker-1 Reboot WaitingForHealth 12s (worker-1-reboot-abcde)',
        '  waiting for 1 of 2 checks:',
        '    ✗ check ceph (probed 3s ago): HEALTH_WARN: noout flag(s) set',
        '    ✓ check nodes-ready healthy',
        '  node worker-1: Ready · boot 1a2b3c4d · Talos (v1.13.0)',
        '  waiting for 1 of 2 health checks: ceph',
      ],
    );
  });

  it("shows each hook's Job, state and how long it has run", () => {
    assert.deepEqual(progressLines('worker-1-reboot-abcde', { action: action(runningHooks), node }, NOW), [
      '▶ worker-1 Reboot RunningPreHooks 5s (worker-1-reboot-abcde)',
      '  ✓ 2 checks held',
      '  ● hook PreRebootJob rook-ceph/set-noout Running 5s (job set-noout-u1-1)',
      '  node worker-1: Ready · boot 1a2b3c4d · Talos (v1.13.0)',
      '  running 1 pre-action hook',
    ]);
  });

  it("shows the node's boot changing and its readiness", () => {
    const back: NodeView = {
      ...node,
      ready: 'False',
      bootID: '9f8e7d6c-1111',
      unschedulable: true,
      preready: true,
    };
    const lines = progressLines(
      'n',
      { action: action({ ...runningHooks, phase: 'WaitingForNode', hooks: [] }), node: back },
      NOW,
    );
    assert.equal(
      lines.find((l) => l.includes('node worker-1')),
      '  node worker-1: NotReady · boot 1a2b3c4d → 9f8e7d6c · cordoned · held by preready hooks · Talos (v1.13.0)',
    );
  });

  it('says when the action is gone', () => {
    assert.deepEqual(progressLines('x', { action: undefined, node: undefined }, NOW), ['– x: deleted']);
  });

  it('colours only with a style that has colour', () => {
    const coloured = progressLines('n', { action: action(waitingForHealth), node }, NOW, makeStyle(true));
    assert.ok(coloured.some((l) => l.includes('\x1b[')));
    assert.equal(
      coloured.map((l) => l.replace(ESCAPES, '')).join('\n'),
      progressLines('n', { action: action(waitingForHealth), node }, NOW).join('\n'),
    );
  });
});

describe('hookLine and nodeLine', () => {
  it('gives a finished hook its duration, and a failed one its message', () => {
    const h = {
      kind: 'PreRebootJob' as const,
      namespace: 'ns',
      name: 'h',
      attempt: 2,
      jobName: 'h-1-2',
      phase: 'Failed' as const,
      failurePolicy: 'Ignore' as const,
      startTime: '2026-01-10T12:00:00Z',
      completionTime: '2026-01-10T12:01:05Z',
      message: 'Job h-1-2 failed: BackoffLimitExceeded',
    };
    assert.equal(
      hookLine(h, NOW, PLAIN),
      '✗ hook PreRebootJob ns/h Failed 1m05s (job h-1-2, attempt 2, failures ignored): Job h-1-2 failed: BackoffLimitExceeded',
    );
    assert.equal(
      hookLine(
        { ...h, jobName: undefined, phase: 'Succeeded', attempt: 1, failurePolicy: 'Fail' },
        NOW,
        PLAIN,
      ),
      '✓ hook PreRebootJob ns/h Succeeded 1m05s (webhook)',
    );
  });

  it('reports a node that is gone (reset)', () => {
    assert.equal(
      nodeLine({ ...node, exists: false }, undefined, PLAIN),
      'node worker-1: gone (no Node object)',
    );
  });
});

describe('progressEvents: one line per change', () => {
  it('tells the whole story of an action, and nothing twice', () => {
    const steps: Progress[] = [
      { action: action(undefined), node },
      { action: action(waitingForHealth), node },
      { action: action(waitingForHealth), node },
      {
        action: action({
          ...waitingForHealth,
          checks: [
            { name: 'ceph', healthy: true, probeTime: '2026-01-10T12:00:28Z' },
            ...(waitingForHealth.checks?.slice(1) ?? []),
          ],
        }),
        node,
      },
      { action: action(runningHooks), node },
      {
        action: action({
          ...runningHooks,
          phase: 'Approved',
          message: 'approved',
          hooks: [
            {
              kind: 'PreRebootJob',
              namespace: 'rook-ceph',
              name: 'set-noout',
              attempt: 1,
              jobName: 'set-noout-u1-1',
              phase: 'Succeeded',
              startTime: '2026-01-10T12:00:25Z',
              completionTime: '2026-01-10T12:00:29Z',
            },
          ],
        }),
        node,
      },
      {
        action: action({ ...runningHooks, phase: 'WaitingForNode', hooks: [] }),
        node: { ...node, ready: 'False' },
      },
      {
        action: action({ ...runningHooks, phase: 'WaitingForNode', hooks: [] }),
        node: { ...node, ready: 'True', bootID: '9f8e7d6c-1111' },
      },
      {
        action: action({ ...runningHooks, phase: 'Succeeded', hooks: [], message: 'done' }),
        node: { ...node, ready: 'True', bootID: '9f8e7d6c-1111' },
      },
    ];
    const lines = steps.flatMap((step, i) => progressEvents(steps[i - 1], step));
    assert.deepEqual(lines, [
      'worker-1: worker-1-reboot-abcde: Reboot (External) requested by alice',
      'worker-1: node worker-1 Ready',
      'worker-1: phase WaitingForHealth',
      'worker-1: check ceph unhealthy: HEALTH_WARN: noout flag(s) set',
      'worker-1: check nodes-ready healthy',
      'worker-1: check ceph healthy',
      'worker-1: phase RunningPreHooks',
      'worker-1: hook PreRebootJob rook-ceph/set-noout Running (job set-noout-u1-1)',
      'worker-1: hook PreRebootJob rook-ceph/set-noout Succeeded after 4s (job set-noout-u1-1)',
      'worker-1: phase Approved',
      'worker-1: node worker-1 NotReady',
      'worker-1: phase WaitingForNode',
      'worker-1: node worker-1 Ready',
      'worker-1: node worker-1 booted again (boot 9f8e7d6c)',
      'worker-1: phase Succeeded: done',
    ]);
  });

  it('reports the wait of a Pending action as its reason changes', () => {
    const pending = (message: string) => ({ action: action({ phase: 'Pending', message }), node });
    const first = pending('waiting for a slot: worker-2 holds it');
    assert.deepEqual(progressEvents({ action: action(undefined), node }, first), [
      'worker-1: phase Pending: waiting for a slot: worker-2 holds it',
    ]);
    assert.deepEqual(progressEvents(first, pending('the maintenance window opens at 02:00')), [
      'worker-1: the maintenance window opens at 02:00',
    ]);
  });

  it('tells of a reboot that happened before the first look, from the boot the action was approved at', () => {
    const back = { ...node, bootID: '9f8e7d6c-1111' };
    const first = { action: action({ ...runningHooks, phase: 'WaitingForNode', hooks: [] }), node: back };
    assert.deepEqual(progressEvents(undefined, first), [
      'worker-1: worker-1-reboot-abcde: Reboot (External) requested by alice',
      'worker-1: node worker-1 Ready',
      'worker-1: node worker-1 booted again (boot 9f8e7d6c)',
      'worker-1: phase WaitingForNode',
      'worker-1: check ceph healthy',
      'worker-1: check nodes-ready healthy',
    ]);
  });

  it('reports a deletion', () => {
    assert.deepEqual(
      progressEvents({ action: action(runningHooks), node }, { action: undefined, node: undefined }),
      ['worker-1: worker-1-reboot-abcde deleted'],
    );
  });
});

describe('outcomeLine', () => {
  it('says how it ended, how long it took, and why when it did not succeed', () => {
    const done = action({ phase: 'Succeeded', completionTime: '2026-01-10T12:02:05Z', message: 'rebooted' });
    assert.equal(outcomeLine('a', { action: done, node }), '✓ worker-1 Reboot Succeeded after 2m05s (a)');
    const rebooted = action({
      phase: 'Succeeded',
      completionTime: '2026-01-10T12:02:05Z',
      bootIDBefore: '1a2b3c4d-0000',
      bootIDAfter: '9f8e7d6c-1111',
    });
    assert.equal(
      outcomeLine('a', { action: rebooted, node }),
      '✓ worker-1 Reboot Succeeded after 2m05s (a): boot 1a2b3c4d → 9f8e7d6c',
    );
    const failed = action({
      phase: 'Failed',
      completionTime: '2026-01-10T12:00:40Z',
      message: 'hook failed',
    });
    assert.equal(
      outcomeLine('a', { action: failed, node }),
      '✗ worker-1 Reboot Failed after 40s (a): hook failed',
    );
    const approved = action({ phase: 'Approved', approvalTime: '2026-01-10T12:00:09Z', message: 'go' });
    assert.equal(outcomeLine('a', { action: approved, node }), '✓ worker-1 Reboot Approved after 9s (a): go');
    assert.equal(outcomeLine('a', { action: undefined, node }), '– a was deleted before it finished');
  });
});

describe('LiveDisplay', () => {
  function stream(isTTY: boolean) {
    const chunks: string[] = [];
    return { chunks, isTTY, columns: 40, write: (text: string) => chunks.push(text) };
  }

  it('appends timestamped lines and never a control character when not on a terminal', () => {
    const out = stream(false);
    const display = new LiveDisplay(out, { live: false, style: PLAIN, now: () => NOW });
    display.update('a', { action: action(undefined), node });
    display.update('a', { action: action(waitingForHealth), node });
    display.finish('a', 'done');
    display.close();
    const text = out.chunks.join('');
    assert.ok(!text.includes('\x1b'), text);
    const lines = text.trimEnd().split('\n');
    assert.ok(
      lines.every((l) => /^\d\d:\d\d:\d\d /.test(l)),
      text,
    );
    assert.match(lines.at(-1) ?? '', / done$/);
  });

  it('redraws its block in place on a terminal, within the width', async () => {
    const out = stream(true);
    const display = new LiveDisplay(out, { live: true, style: PLAIN, now: () => NOW });
    display.update('a', { action: action(waitingForHealth), node });
    await new Promise((r) => setTimeout(r, 150));
    display.update('a', { action: action(runningHooks), node });
    await new Promise((r) => setTimeout(r, 150));
    display.finish('a', 'finished line');
    display.close();
    const text = out.chunks.join('');
    // The second draw erased the six lines of the first: up six lines, clear to the end.
    assert.ok(text.includes('\r\x1b[6A\x1b[J'), JSON.stringify(text));
    const drawn = text.split(
      new RegExp(`\\r${String.fromCharCode(27)}\\[\\d+A${String.fromCharCode(27)}\\[J`),
    );
    for (const part of drawn) {
      for (const line of part.split('\n')) assert.ok(visibleLength(line) <= 39, `too wide: ${line}`);
    }
    assert.ok((drawn.at(-1) ?? '').startsWith('finished line\n'));
  });

  it('truncates keeping escape sequences whole', () => {
    assert.equal(truncateVisible('abcdef', 3), 'abc');
    assert.equal(truncateVisible('\x1b[31mabcdef\x1b[39m', 2), '\x1b[31mab\x1b[0m');
    assert.equal(truncateVisible('ab', 5), 'ab');
  });
});

describe('what holds the drain, and what is undone', () => {
  const managed = { execution: 'Managed' as const };
  const osd = (n: number, since: string) => ({
    namespace: 'rook-ceph',
    pod: `rook-ceph-osd-${String(n)}`,
    podDisruptionBudget: `rook-ceph-osd-host-worker-${String(n)}`,
    disruptionsAllowed: 0,
    since,
  });
  const held: Status = {
    phase: 'Executing',
    phaseTime: '2026-01-10T11:55:00Z',
    message: 'draining node worker-1: waiting for evictions: ...',
    drain: {
      blockers: [osd(2, '2026-01-10T11:57:18Z'), osd(5, '2026-01-10T11:59:30Z')],
      moreBlockers: 4,
    },
  };

  it('shows how long the drain has waited, which pods block it and which budget, and counts the rest', () => {
    const lines = progressLines('worker-1-reboot-abcde', { action: action(held, managed), node }, NOW);
    assert.ok(
      lines.includes(
        '  ✗ drain waiting 3m12s: rook-ceph-osd-2 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd-host-worker-2 (0 disruptions allowed)',
      ),
      lines.join('\n'),
    );
    assert.ok(
      lines.includes(
        '      rook-ceph-osd-5 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd-host-worker-5 (0 disruptions allowed) (refused 1m00s)',
      ),
      lines.join('\n'),
    );
    assert.ok(lines.includes('      and 4 more pods refused'), lines.join('\n'));
  });

  it('tells in a log when the drain is held, when the hold changes, and when it proceeds', () => {
    const before: Progress = { action: action({ ...held, drain: undefined }, managed), node };
    const blocked: Progress = { action: action(held, managed), node };
    assert.deepEqual(progressEvents(before, blocked), [
      'worker-1: drain waiting: rook-ceph-osd-2 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd-host-worker-2 (0 disruptions allowed); rook-ceph-osd-5 blocked by PodDisruptionBudget rook-ceph/rook-ceph-osd-host-worker-5 (0 disruptions allowed); and 4 more pods',
    ]);
    assert.deepEqual(progressEvents(blocked, { action: action(held, managed), node }), [], 'unchanged');
    assert.deepEqual(progressEvents(blocked, before), [
      'worker-1: drain proceeds: the refused evictions went through',
    ]);
  });

  const noout = {
    kind: 'PreRebootJob' as const,
    namespace: 'rook-ceph',
    name: 'noout',
    attempt: 1,
    jobName: 'noout-u1-1',
    phase: 'Succeeded' as const,
    startTime: '2026-01-10T11:50:00Z',
    completionTime: '2026-01-10T11:50:04Z',
  };
  const cancelled: Status = {
    phase: 'Cancelled',
    completionTime: '2026-01-10T12:00:20Z',
    message: 'cancelled',
    hooks: [noout],
    undo: {
      decisionTime: '2026-01-10T12:00:20Z',
      nodeDisrupted: false,
      reason: 'the node was not disrupted: undoing 1 pre-action hook',
      runs: [
        {
          ...noout,
          // As src/actions/phases/undo.ts records it: an undo's failure stops nothing.
          failurePolicy: 'Ignore' as const,
          jobName: 'noout-undo-u1-1',
          phase: 'Running',
          startTime: '2026-01-10T12:00:21Z',
          completionTime: undefined,
        },
      ],
    },
  };

  it('shows each undo run with its hook, state and Job, in the live block and in a log', () => {
    const lines = progressLines('worker-1-reboot-abcde', { action: action(cancelled, managed), node }, NOW);
    assert.ok(
      lines.includes('  ● undo of PreRebootJob rook-ceph/noout Running 9s (job noout-undo-u1-1)'),
      lines.join('\n'),
    );
    const [run] = cancelled.undo?.runs ?? [];
    assert.ok(run && cancelled.undo);
    const failed = { ...run, phase: 'Failed' as const, message: 'Job failed: BackoffLimitExceeded' };
    const ended: Status = { ...cancelled, undo: { ...cancelled.undo, runs: [failed] } };
    assert.deepEqual(
      progressEvents({ action: action(cancelled, managed), node }, { action: action(ended, managed), node }),
      [
        'worker-1: undo of PreRebootJob rook-ceph/noout Failed (job noout-undo-u1-1): Job failed: BackoffLimitExceeded',
      ],
    );
  });

  it('says why nothing is undone when a pre-action hook had run', () => {
    const unknown: Status = {
      ...cancelled,
      phase: 'Failed',
      undo: {
        decisionTime: '2026-01-10T12:00:20Z',
        nodeDisrupted: true,
        reason: "nothing undone: whether it reached the node is unknown; the node's boot hooks clean up",
      },
    };
    const lines = progressLines('worker-1-reboot-abcde', { action: action(unknown, managed), node }, NOW);
    assert.ok(
      lines.includes(
        "  – nothing undone: whether it reached the node is unknown; the node's boot hooks clean up",
      ),
      lines.join('\n'),
    );
    const noHooks = { ...unknown, hooks: [] };
    assert.ok(
      !progressLines('x', { action: action(noHooks, managed), node }, NOW).some((l) => l.includes('undone')),
      'nothing to say when no hook had run',
    );
  });
});
