import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  allowedConcurrent,
  evaluatePolicies,
  reportPolicy,
  type ActionRef,
  type PolicyFacts,
} from '../../src/policies/evaluate.ts';
import { compileWindow, windowState } from '../../src/policies/window.ts';
import { windowFit } from '../../src/rollouts/decide.ts';

const CP = { 'node-role.kubernetes.io/control-plane': '' };
const nodes = new Map<string, Record<string, string>>([
  ['cp-1', { ...CP }],
  ['cp-2', { ...CP }],
  ['w1', { pool: 'storage' }],
  ['w2', { pool: 'storage' }],
  ['w3', { pool: 'storage' }],
  ['w4', { pool: 'compute' }],
]);
const now = new Date('2026-03-04T10:30:00Z'); // a Wednesday

const ref = (node: string, action: ActionRef['action'] = 'Reboot', name = `a-${node}`): ActionRef => ({
  name,
  node,
  action,
});
const storage: PolicyFacts = {
  name: 'storage',
  spec: { nodeSelector: { matchLabels: { pool: 'storage' } }, maxConcurrent: 2 },
};

describe('maintenance windows', () => {
  it('is open from each start for its duration, in its time zone', () => {
    // 11:00 in Berlin (UTC+1 in March) is 10:00 UTC.
    const window = { schedule: '0 11 * * *', duration: '1h', timeZone: 'Europe/Berlin' };
    const open = windowState([window], now);
    assert.equal(open.open, true);
    assert.equal(open.closesAt?.toISOString(), '2026-03-04T11:00:00.000Z');
    assert.equal(open.nextStart?.toISOString(), '2026-03-05T10:00:00.000Z');
    const closed = windowState([{ ...window, duration: '30m' }], new Date('2026-03-04T10:30:00Z'));
    assert.equal(closed.open, false, 'closes at 10:30 UTC exactly');
    assert.equal(
      windowState([window], new Date('2026-03-04T10:00:00Z')).open,
      true,
      'open at its first minute',
    );
    assert.equal(windowState([window], new Date('2026-03-04T09:59:59Z')).open, false);
  });

  it('follows daylight saving time: 02:00 local is 01:00 UTC in winter and 00:00 UTC in summer', () => {
    const window = { schedule: '0 2 * * *', duration: '10m', timeZone: 'Europe/Berlin' };
    assert.equal(windowState([window], new Date('2026-01-15T01:05:00Z')).open, true);
    assert.equal(windowState([window], new Date('2026-07-15T00:05:00Z')).open, true);
    assert.equal(windowState([window], new Date('2026-07-15T01:05:00Z')).open, false);
  });

  it('understands day-of-week names, ranges and macros, and windows that span midnight', () => {
    const friday = { schedule: '0 22 * * FRI', duration: '8h' };
    assert.equal(windowState([friday], new Date('2026-03-07T05:00:00Z')).open, true, 'Saturday 05:00');
    assert.equal(windowState([friday], new Date('2026-03-07T06:00:00Z')).open, false, 'Saturday 06:00');
    assert.equal(
      windowState([{ schedule: '@daily', duration: '2h' }], new Date('2026-03-07T01:59:00Z')).open,
      true,
    );
    assert.equal(windowState([{ schedule: '0 9-17 * * MON-FRI', duration: '45m' }], now).open, true);
  });

  it('is open if any window is, and always without windows', () => {
    assert.equal(windowState(undefined, now).open, true);
    assert.equal(windowState([], now).open, true);
    const two = windowState(
      [
        { schedule: '0 0 1 1 *', duration: '1h' },
        { schedule: '0 10 * * *', duration: '1h' },
      ],
      now,
    );
    assert.equal(two.open, true);
  });

  it('never opens a window it cannot understand, and says what is wrong', () => {
    const bad = windowState([{ schedule: '0 2 * * *', duration: '1h', timeZone: 'Mars/Olympus' }], now);
    assert.equal(bad.open, false);
    assert.match(bad.problems[0] ?? '', /windows\[0\]: timeZone "Mars\/Olympus" is not an IANA time zone/);
    const invalid = compileWindow({ schedule: '61 2 * * *', duration: '1h' });
    assert.equal(typeof invalid, 'string');
    assert.match(invalid as string, /schedule "61 2 \* \* \*": .*minute/);
  });

  it('reports a schedule no date matches (31 February) as a window that never opens, naming it', () => {
    for (const schedule of ['0 0 31 2 *', '0 3 31 4,6,9,11 *']) {
      const never = windowState([{ schedule, duration: '1h' }], now);
      assert.equal(never.open, false);
      assert.equal(never.nextStart, undefined);
      assert.equal(never.problems.length, 1);
      assert.ok(
        never.problems[0]?.startsWith(`windows[0]: schedule ${JSON.stringify(schedule)} never opens`),
      );
      assert.match(never.problems[0] ?? '', /fix spec\.windows\[0\]\.schedule/);
    }
    // Beside a window that does open, only the one that never does is reported.
    const mixed = windowState(
      [
        { schedule: '0 10 * * *', duration: '1h' },
        { schedule: '0 0 30 2 *', duration: '1h' },
      ],
      now,
    );
    assert.equal(mixed.open, true);
    assert.deepEqual(
      mixed.problems.map((p) => p.slice(0, 12)),
      ['windows[1]: '],
    );
  });

  it('reports a window whose next opening is more than 366 days away (29 February), but not while it is open', () => {
    const leap = { schedule: '0 0 29 2 *', duration: '6h' };
    const far = windowState([leap], now); // 2026: the next 29 February is in 2028
    assert.equal(far.open, false);
    assert.match(
      far.problems[0] ?? '',
      /never opens within the next 366 days \(next at 2028-02-29T00:00:00.000Z\)/,
    );
    const soon = windowState([leap], new Date('2027-06-01T00:00:00Z'));
    assert.deepEqual(soon.problems, [], 'within 366 days of its next opening it is a window like any');
    assert.equal(soon.nextStart?.toISOString(), '2028-02-29T00:00:00.000Z');
    const during = windowState([leap], new Date('2028-02-29T01:00:00Z'));
    assert.equal(during.open, true);
    assert.deepEqual(during.problems, []);
  });
});

describe('maxConcurrent', () => {
  it('takes whole numbers as they are and percentages of the governed nodes, rounded down, at least 1', () => {
    assert.equal(allowedConcurrent(3, 10), 3);
    assert.equal(allowedConcurrent('25%', 10), 2);
    assert.equal(allowedConcurrent('25%', 3), 1);
    assert.equal(allowedConcurrent('100%', 7), 7);
    assert.equal(allowedConcurrent(undefined, 10), 1);
    assert.equal(allowedConcurrent('lots', 10), 1, 'anything invalid is the safe side');
  });
});

describe('evaluatePolicies', () => {
  const judge = (candidate: ActionRef, holders: ActionRef[], policies: PolicyFacts[] = [storage]) =>
    evaluatePolicies({ candidate, holders, policies, nodes, now });

  it('allows up to maxConcurrent on the nodes a policy governs', () => {
    assert.equal(judge(ref('w1'), [ref('w2')]).allowed, true);
    const full = judge(ref('w1'), [ref('w2'), ref('w3')]);
    assert.equal(full.allowed, false);
    assert.match(
      full.reasons[0] ?? '',
      /ActionPolicy storage allows 2 at once and 2 are in progress \(a-w2 on w2, a-w3 on w3\)/,
    );
    assert.deepEqual(full.governedBy, ['storage']);
  });

  it('ignores holders a policy does not govern, and counts holders on vanished nodes against it', () => {
    assert.equal(judge(ref('w1'), [ref('w4'), ref('w2')]).allowed, true);
    assert.equal(judge(ref('w1'), [ref('gone'), ref('w2')]).allowed, false);
  });

  it('applies only to its actions', () => {
    const upgrades: PolicyFacts = { name: 'upgrades', spec: { actions: ['Upgrade'], maxConcurrent: 1 } };
    assert.equal(judge(ref('w1', 'Upgrade'), [ref('w2', 'Upgrade')], [upgrades]).allowed, false);
    const reboot = judge(ref('w1', 'Reboot'), [ref('w4', 'Upgrade')], [upgrades]);
    assert.equal(reboot.allowed, false, 'not governed: the default, one at a time');
    assert.match(reboot.reasons[0] ?? '', /no ActionPolicy governs Reboot on w1, so the default applies/);
  });

  it('needs every matching policy to allow it', () => {
    const tight: PolicyFacts = {
      name: 'tight',
      spec: { nodeSelector: { matchLabels: { pool: 'storage' } }, maxConcurrent: 1 },
    };
    const verdict = judge(ref('w1'), [ref('w2')], [storage, tight]);
    assert.equal(verdict.allowed, false);
    assert.deepEqual(verdict.governedBy, ['storage', 'tight']);
    assert.equal(verdict.reasons.length, 1);
  });

  it('without policies: one action at a time cluster-wide', () => {
    assert.equal(judge(ref('w1'), [], []).allowed, true);
    assert.equal(judge(ref('w1'), [ref('w4')], []).allowed, false);
  });

  it('never two control-plane nodes, whatever the policies say', () => {
    const all: PolicyFacts = { name: 'all', spec: { maxConcurrent: '100%' } };
    assert.equal(judge(ref('cp-1'), [ref('w1')], [all]).allowed, true);
    const verdict = judge(ref('cp-1'), [ref('cp-2')], [all]);
    assert.equal(verdict.allowed, false);
    assert.match(verdict.reasons[0] ?? '', /never two control-plane nodes at once: a-cp-2 on cp-2/);
  });

  it('never two actions on one node', () => {
    const all: PolicyFacts = { name: 'all', spec: { maxConcurrent: 5 } };
    const verdict = judge(ref('w1', 'Upgrade', 'second'), [ref('w1')], [all]);
    assert.equal(verdict.allowed, false);
    assert.match(verdict.reasons[0] ?? '', /another action on w1 is in progress/);
  });

  it('holds outside maintenance windows, saying when the next opens', () => {
    const nightly: PolicyFacts = {
      name: 'nightly',
      spec: { windows: [{ schedule: '0 2 * * *', duration: '2h' }], maxConcurrent: 3 },
    };
    const verdict = judge(ref('w1'), [], [nightly]);
    assert.equal(verdict.allowed, false);
    assert.match(
      verdict.reasons[0] ?? '',
      /ActionPolicy nightly: no maintenance window is open \(the next opens at 2026-03-05T02:00:00\.000Z\)/,
    );
    assert.equal(verdict.nextWindowStart?.toISOString(), '2026-03-05T02:00:00.000Z');
  });

  it('holds under a window that never opens, saying which schedule and that it never will', () => {
    const february: PolicyFacts = {
      name: 'february',
      spec: { windows: [{ schedule: '0 0 31 2 *', duration: '2h' }], maxConcurrent: 3 },
    };
    const verdict = judge(ref('w1'), [], [february]);
    assert.equal(verdict.allowed, false);
    assert.equal(verdict.nextWindowStart, undefined);
    assert.match(
      verdict.reasons[0] ?? '',
      /^ActionPolicy february: no maintenance window is open, and none ever will: windows\[0\]: schedule "0 0 31 2 \*" never opens: no date matches it .*\(InvalidWindow\)$/,
    );
    assert.match(
      reportPolicy(february.spec, [], nodes, now).problems[0] ?? '',
      /schedule "0 0 31 2 \*" never opens/,
    );
  });

  it('refuses a node that does not exist', () => {
    assert.equal(judge(ref('nowhere'), []).allowed, false);
  });

  it('reports how a policy applies now', () => {
    assert.deepEqual(reportPolicy(storage.spec, [ref('w1'), ref('w4')], nodes, now), {
      matchingNodes: 3,
      allowedConcurrent: 2,
      activeActions: 1,
      windowOpen: true,
      problems: [],
    });
  });
});

describe('change freezes', () => {
  const freeze = (
    start: string,
    end: string,
    extra: Partial<{ actions: ActionRef['action'][]; reason: string }> = {},
  ) => ({
    start,
    end,
    ...extra,
  });
  const frozen = (freezes: ReturnType<typeof freeze>[]): PolicyFacts => ({
    name: 'holidays',
    spec: { nodeSelector: { matchLabels: { pool: 'storage' } }, maxConcurrent: 2, freezes },
  });
  // A window open now, which the freeze overrides.
  const alwaysOpen = { schedule: '0 0 * * *', duration: '168h' };

  it('holds every governed action while one is in force, whatever the windows, and names when it ends', () => {
    const policy = frozen([
      freeze('2026-03-04T00:00:00Z', '2026-03-05T00:00:00Z', { reason: 'release week' }),
    ]);
    policy.spec.windows = [alwaysOpen];
    const verdict = evaluatePolicies({ candidate: ref('w1'), holders: [], policies: [policy], nodes, now });
    assert.equal(verdict.allowed, false);
    assert.deepEqual(verdict.reasons, [
      'ActionPolicy holidays: frozen until 2026-03-05T00:00:00.000Z (release week), whatever the windows',
    ]);
    assert.equal(
      verdict.nextWindowStart?.toISOString(),
      '2026-03-05T00:00:00.000Z',
      'looked at again when it ends',
    );
    // A node the policy does not govern is not frozen by it.
    assert.equal(
      evaluatePolicies({ candidate: ref('w4'), holders: [], policies: [policy], nodes, now }).allowed,
      true,
    );
  });

  it('starts at its start and ends at its end; one scoped to upgrades lets a reboot through', () => {
    const at = (
      start: string,
      end: string,
      action: ActionRef['action'] = 'Reboot',
      actions?: ActionRef['action'][],
    ) =>
      evaluatePolicies({
        candidate: ref('w1', action),
        holders: [],
        policies: [frozen([freeze(start, end, actions ? { actions } : {})])],
        nodes,
        now,
      }).allowed;
    assert.equal(at('2026-03-04T10:30:00Z', '2026-03-04T11:00:00Z'), false, 'in force from its start');
    assert.equal(at('2026-03-04T10:00:00Z', '2026-03-04T10:30:00Z'), true, 'over at its end');
    assert.equal(at('2026-03-04T10:31:00Z', '2026-03-05T00:00:00Z'), true, 'not yet');
    assert.equal(at('2026-03-04T00:00:00Z', '2026-03-05T00:00:00Z', 'Reboot', ['Upgrade']), true);
    assert.equal(at('2026-03-04T00:00:00Z', '2026-03-05T00:00:00Z', 'Upgrade', ['Upgrade']), false);
  });

  it('is reported on the policy, and holds a rollout node until it ends', () => {
    const policy = frozen([
      freeze('2026-03-04T00:00:00Z', '2026-03-04T12:00:00Z'),
      freeze('2026-03-04T06:00:00Z', '2026-03-06T00:00:00Z', { actions: ['Upgrade'] }),
    ]);
    assert.equal(
      reportPolicy(policy.spec, [], nodes, now).frozenUntil?.toISOString(),
      '2026-03-06T00:00:00.000Z',
    );
    const fit = windowFit(
      {
        rollout: { metadata: { name: 'r' }, spec: { action: 'Reboot' } } as never,
        nodes: [],
        actions: [],
        policies: [policy],
        history: [],
        now,
      },
      { name: 'w1', labels: { pool: 'storage' } },
      new Set(['w1']),
      'Reboot',
    );
    assert.equal(fit.fits, false);
    assert.equal(
      fit.retryAt?.toISOString(),
      '2026-03-04T12:00:00.000Z',
      'the reboot waits only for the freeze that holds reboots',
    );
    assert.match(
      fit.message ?? '',
      /frozen until 2026-03-04T12:00:00.000Z, whatever the windows: w1 not started/,
    );
  });
});

describe('per-kind limits', () => {
  const weekends = { schedule: '0 0 * * SAT', duration: '48h' }; // closed on a Wednesday
  const policy: PolicyFacts = {
    name: 'storage',
    spec: {
      nodeSelector: { matchLabels: { pool: 'storage' } },
      maxConcurrent: 3,
      perAction: [{ actions: ['Upgrade'], maxConcurrent: 1, windows: [weekends] }],
    },
  };
  const judge = (candidate: ActionRef, holders: ActionRef[]) =>
    evaluatePolicies({ candidate, holders, policies: [policy], nodes, now });

  it('lets a reboot through any time while an upgrade waits for its own window, saying which limit holds it', () => {
    assert.equal(judge(ref('w1', 'Reboot'), []).allowed, true);
    const upgrade = judge(ref('w1', 'Upgrade'), []);
    assert.equal(upgrade.allowed, false);
    assert.deepEqual(upgrade.reasons, [
      'ActionPolicy storage: no maintenance window for Upgrade is open (the next opens at 2026-03-07T00:00:00.000Z)',
    ]);
    assert.equal(upgrade.nextWindowStart?.toISOString(), '2026-03-07T00:00:00.000Z');
  });

  it('counts a kind budget over its kinds only, and the policy-wide budget over all: the most restrictive wins', () => {
    const open = {
      ...policy,
      spec: { ...policy.spec, perAction: [{ actions: ['Upgrade' as const], maxConcurrent: 1 }] },
    };
    const at = (candidate: ActionRef, holders: ActionRef[]) =>
      evaluatePolicies({ candidate, holders, policies: [open], nodes, now });
    // One upgrade in progress: a second waits, a reboot does not.
    const second = at(ref('w2', 'Upgrade'), [ref('w1', 'Upgrade')]);
    assert.equal(second.allowed, false);
    assert.match(
      second.reasons.join('\n'),
      /ActionPolicy storage allows 1 Upgrade at once and 1 is in progress \(a-w1 on w1\)/,
    );
    assert.equal(at(ref('w2', 'Reboot'), [ref('w1', 'Upgrade')]).allowed, true);
    // Reboots do not use the upgrade budget; three of anything use the policy's.
    assert.equal(at(ref('w3', 'Upgrade'), [ref('w1', 'Reboot'), ref('w2', 'Reboot')]).allowed, true);
    const full = at(ref('w3', 'Reboot'), [ref('w1', 'Reboot'), ref('w2', 'Reboot'), ref('cp-1', 'Reboot')]);
    assert.equal(full.allowed, true, 'cp-1 is not governed by the storage policy');
  });

  it('holds a rollout node of that kind for its window, and reports a kind window that never opens', () => {
    const fit = (action: ActionRef['action']) =>
      windowFit(
        {
          rollout: { metadata: { name: 'r' }, spec: { action } },
          nodes: [],
          actions: [],
          policies: [policy],
          history: [],
          now,
        } as never,
        { name: 'w1', labels: { pool: 'storage' } },
        new Set(['w1']),
        action,
      );
    assert.equal(fit('Reboot').fits, true);
    assert.equal(fit('Upgrade').fits, false);
    assert.equal(fit('Upgrade').retryAt?.toISOString(), '2026-03-07T00:00:00.000Z');
    const never = {
      ...policy.spec,
      perAction: [{ actions: ['Upgrade' as const], windows: [{ schedule: '0 3 31 2 *', duration: '1h' }] }],
    };
    assert.match(
      reportPolicy(never, [], nodes, now).problems.join(),
      /^perAction\[0\]\.windows\[0\]: schedule "0 3 31 2 \*" never opens/,
    );
  });
});
