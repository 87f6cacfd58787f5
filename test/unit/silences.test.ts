// When gatehouse holds, renews and releases Alertmanager silences (src/silences/plan.ts):
// the pure decision, table-driven, with the calls' outcomes as facts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ActionDecision } from '../../src/actions/decide.ts';
import { holdSilences } from '../../src/actions/silences.ts';
import type { ActionPolicySpec } from '../../src/api/action-policy.ts';
import type { NodeActionStatus, SilenceRecord, ObservedNodeAction } from '../../src/api/node-action.ts';
import type { PolicyFacts } from '../../src/policies/evaluate.ts';
import {
  RENEW_MS,
  RETRY_MAX_MS,
  retryDelayMs,
  silenceKey,
  silenceTargets,
  type SilenceCallFacts,
  type SilenceInput,
  LEASE_MS,
} from '../../src/silences/plan.ts';
import { action, at, T0 } from './action-fixtures.ts';

const AM = 'http://am.monitoring:9093';
const AM2 = 'http://am2.monitoring:9093';
const KEY = silenceKey({ url: AM, nodeLabel: 'node' });
const LABELS = { 'kubernetes.io/hostname': 'w1', pool: 'storage' };
const HOUR = 3_600_000;

function policy(name: string, spec: Partial<ActionPolicySpec> = {}): PolicyFacts {
  return { name, spec: { alertmanagerSilence: { url: AM }, ...spec } };
}

const POLICIES = [policy('storage', { nodeSelector: { matchLabels: { pool: 'storage' } } })];

/** The status of an action approved at T0, in `phase`, holding `silences`. */
function approved(phase: NodeActionStatus['phase'], silences?: SilenceRecord[]): NodeActionStatus {
  return {
    phase,
    approvalTime: T0.toISOString(),
    phaseTime: T0.toISOString(),
    ...(silences ? { silences } : {}),
  };
}

function record(
  state: SilenceRecord['state'],
  endsAt: Date,
  extra: Partial<SilenceRecord> = {},
): SilenceRecord {
  return {
    url: AM,
    nodeLabel: 'node',
    state,
    endsAt: endsAt.toISOString(),
    ...(state === 'Pending' ? {} : { id: 'sil-1' }),
    ...extra,
  };
}

function fact(
  op: SilenceCallFacts['op'],
  state: SilenceCallFacts['state'],
  when: Date,
  extra: Partial<SilenceCallFacts> = {},
): SilenceCallFacts {
  return { op, state, at: when, failures: state === 'failed' ? 1 : 0, ...extra };
}

const UNREACHABLE = {
  message: 'Alertmanager at http://am.monitoring:9093 unreachable: fetch failed (connect ECONNREFUSED)',
  unreachable: true,
};

interface Row {
  name: string;
  /** The status as observed (before this pass); `decided` defaults to it. */
  observed: NodeActionStatus;
  decided?: NodeActionStatus;
  now?: Date;
  deleted?: boolean;
  facts?: Record<string, SilenceCallFacts>;
  policies?: PolicyFacts[];
  nodeLabels?: Record<string, string> | null;
  /** decide()'s own verdict on the finalizer. */
  removeFinalizer?: boolean;
  expect: {
    calls: string[];
    records?: [string, SilenceRecord['state']][];
    condition?: [string, string] | null;
    events?: string[];
    removeFinalizer?: boolean;
    requeueAfterMs?: number | null;
  };
}

function run(row: Row): { d: ActionDecision; a: ObservedNodeAction } {
  const a = action({}, row.observed, row.deleted ? { deletionTimestamp: T0.toISOString() } : {});
  const decision: ActionDecision = {
    status: structuredClone(row.decided ?? row.observed),
    addFinalizer: false,
    removeFinalizer: row.removeFinalizer ?? false,
    effects: [],
  };
  const input: SilenceInput = {
    now: row.now ?? at(1),
    policies: row.policies ?? POLICIES,
    nodeLabels: row.nodeLabels === null ? undefined : (row.nodeLabels ?? LABELS),
    facts: new Map(Object.entries(row.facts ?? {})),
  };
  return { d: holdSilences(decision, a, input), a };
}

function calls(d: ActionDecision): string[] {
  return d.effects.flatMap((e) =>
    e.type === 'silence'
      ? [
          e.op === 'hold'
            ? `hold ${e.nodeLabel}@${e.url} notAfter ${e.notAfter}`
            : `release ${e.nodeLabel}@${e.url}`,
        ]
      : [],
  );
}

function events(d: ActionDecision): string[] {
  return d.effects.flatMap((e) => (e.type === 'event' ? [`${e.eventType}:${e.reason}`] : []));
}

const holdAM = (notAfter = new Date(T0.getTime() + HOUR)) =>
  `hold node@${AM} notAfter ${notAfter.toISOString()}`;

const ROWS: Row[] = [
  {
    name: 'before approval: nothing',
    observed: { phase: 'RunningPreHooks' },
    expect: { calls: [], records: [], condition: null, events: [] },
  },
  {
    name: 'approved in this pass: a Pending record (written first), then the hold, never past approval + duration',
    observed: { phase: 'RunningPreHooks' },
    decided: approved('Approved'),
    now: T0,
    expect: {
      calls: [holdAM()],
      records: [[AM, 'Pending']],
      condition: ['Unknown', 'Silencing'],
      events: [],
    },
  },
  {
    name: 'a hold under way: wait for it',
    observed: approved('Approved', [record('Pending', at(600))]),
    facts: { [KEY]: fact('hold', 'running', T0) },
    expect: {
      calls: [],
      records: [[AM, 'Pending']],
      condition: ['Unknown', 'Silencing'],
      requeueAfterMs: null,
    },
  },
  {
    name: 'Alertmanager confirmed it: Active, an Event, and a renewal in a third of the lease',
    observed: approved('Approved', [record('Pending', at(600))]),
    facts: { [KEY]: fact('hold', 'succeeded', at(1), { id: 'sil-1', endsAt: at(601).toISOString() }) },
    now: at(2),
    expect: {
      calls: [],
      records: [[AM, 'Active']],
      condition: ['True', 'Silenced'],
      events: ['Normal:Silenced'],
      requeueAfterMs: RENEW_MS - 1000,
    },
  },
  {
    name: 'a third of the lease later: renewed',
    observed: approved('WaitingForNode', [record('Active', at(601))]),
    facts: { [KEY]: fact('hold', 'succeeded', at(1), { id: 'sil-1', endsAt: at(601).toISOString() }) },
    now: new Date(at(1).getTime() + RENEW_MS),
    expect: { calls: [holdAM()], records: [[AM, 'Active']], condition: ['True', 'Silenced'], events: [] },
  },
  {
    name: 'after a restart (no facts): renewed at once (the client finds the same silence by the action UID)',
    observed: approved('Executing', [record('Active', at(601))]),
    now: at(60),
    expect: { calls: [holdAM()], records: [[AM, 'Active']], condition: ['True', 'Silenced'], events: [] },
  },
  {
    name: 'capped at approval + duration: nothing left to renew',
    observed: approved('WaitingForNode', [record('Active', at(60))]),
    policies: [policy('short', { alertmanagerSilence: { url: AM, duration: '1m' } })],
    facts: { [KEY]: fact('hold', 'succeeded', at(1), { id: 'sil-1', endsAt: at(60).toISOString() }) },
    now: at(30),
    expect: { calls: [], records: [[AM, 'Active']], condition: ['True', 'Silenced'], requeueAfterMs: null },
  },
  {
    name: 'its duration ran out while the action runs: it ended by itself',
    observed: approved('WaitingForNode', [record('Active', at(60))]),
    policies: [policy('short', { alertmanagerSilence: { url: AM, duration: '1m' } })],
    facts: { [KEY]: fact('hold', 'succeeded', at(1), { id: 'sil-1', endsAt: at(60).toISOString() }) },
    now: at(61),
    expect: {
      calls: [],
      records: [[AM, 'Lapsed']],
      condition: ['False', 'DurationElapsed'],
      events: ['Normal:SilenceEnded'],
    },
  },
  {
    name: 'Alertmanager unreachable: the action is untouched; False, a Warning, a retry after backoff',
    observed: approved('Approved', [record('Pending', at(600))]),
    facts: { [KEY]: fact('hold', 'failed', at(1), UNREACHABLE) },
    now: at(1),
    expect: {
      calls: [],
      records: [[AM, 'Pending']],
      condition: ['False', 'AlertmanagerUnreachable'],
      events: ['Warning:SilenceFailed'],
      requeueAfterMs: 5000,
    },
  },
  {
    name: 'Alertmanager answering with an error: AlertmanagerError',
    observed: approved('Approved', [record('Pending', at(600))]),
    facts: { [KEY]: fact('hold', 'failed', at(1), { message: 'answered 500', unreachable: false }) },
    now: at(1),
    expect: { calls: [], condition: ['False', 'AlertmanagerError'], events: ['Warning:SilenceFailed'] },
  },
  {
    name: 'the retry is due: held again, and no second Warning',
    observed: {
      ...approved('Approved', [record('Pending', at(600))]),
      conditions: [
        {
          type: 'Silenced',
          status: 'False',
          reason: 'AlertmanagerUnreachable',
          message: 'x',
          lastTransitionTime: T0.toISOString(),
        },
      ],
    },
    facts: { [KEY]: fact('hold', 'failed', at(1), { ...UNREACHABLE, failures: 3 }) },
    now: at(21),
    expect: {
      calls: [holdAM()],
      records: [[AM, 'Pending']],
      condition: ['False', 'AlertmanagerUnreachable'],
      events: [],
    },
  },
  {
    name: 'a renewal failing while the silence still holds: True, RenewalFailing, a Warning',
    observed: approved('WaitingForNode', [record('Active', at(601))]),
    facts: { [KEY]: fact('hold', 'failed', at(201), UNREACHABLE) },
    now: at(201),
    expect: {
      calls: [],
      records: [[AM, 'Active']],
      condition: ['True', 'RenewalFailing'],
      events: ['Warning:SilenceRenewalFailed'],
      requeueAfterMs: 5000,
    },
  },
  {
    name: 'renewals failed until the lease ran out: Lapsed, so held again (a new Pending record) once due',
    observed: approved('WaitingForNode', [record('Active', at(601))]),
    facts: { [KEY]: fact('hold', 'failed', at(590), { ...UNREACHABLE, failures: 4 }) },
    now: at(630),
    expect: {
      calls: [holdAM()],
      records: [[AM, 'Pending']],
      condition: ['False', 'AlertmanagerUnreachable'],
      events: ['Warning:SilenceFailed'],
    },
  },
  {
    name: 'Succeeded: released; the finalizer waits for it',
    observed: approved('Succeeded', [record('Active', at(601))]),
    facts: { [KEY]: fact('hold', 'succeeded', at(1), { id: 'sil-1', endsAt: at(601).toISOString() }) },
    removeFinalizer: true,
    expect: {
      calls: [`release node@${AM}`],
      records: [[AM, 'Active']],
      condition: ['Unknown', 'Expiring'],
      removeFinalizer: false,
    },
  },
  {
    name: 'released: Expired, an Event, and the finalizer may go',
    observed: approved('Succeeded', [record('Active', at(601))]),
    facts: { [KEY]: fact('release', 'succeeded', at(100)) },
    now: at(100),
    removeFinalizer: true,
    expect: {
      calls: [],
      records: [[AM, 'Expired']],
      condition: ['False', 'ActionEnded'],
      events: ['Normal:SilenceExpired'],
      removeFinalizer: true,
    },
  },
  {
    name: 'finished, and the release failed: retried with backoff while the silence may last',
    observed: approved('Failed', [record('Active', at(601))]),
    facts: { [KEY]: fact('release', 'failed', at(100), UNREACHABLE) },
    now: at(100),
    removeFinalizer: true,
    expect: {
      calls: [],
      records: [[AM, 'Active']],
      condition: ['Unknown', 'AlertmanagerUnreachable'],
      events: ['Warning:SilenceFailed'],
      removeFinalizer: false,
      requeueAfterMs: 5000,
    },
  },
  {
    name: 'finished after its silence ended by itself: Lapsed, no call',
    observed: approved('Succeeded', [record('Active', at(601))]),
    now: at(700),
    removeFinalizer: true,
    expect: {
      calls: [],
      records: [[AM, 'Lapsed']],
      condition: ['False', 'ActionEnded'],
      removeFinalizer: true,
    },
  },
  {
    name: 'deleted mid-action: released at once (even while a hold is backing off)',
    observed: approved('Cancelled', [record('Pending', at(600))]),
    facts: { [KEY]: fact('hold', 'failed', at(1), { ...UNREACHABLE, failures: 5 }) },
    deleted: true,
    removeFinalizer: true,
    expect: { calls: [`release node@${AM}`], removeFinalizer: false },
  },
  {
    name: 'deleted, release under way: the finalizer waits for it',
    observed: approved('Cancelled', [record('Active', at(601))]),
    facts: { [KEY]: fact('release', 'running', at(1)) },
    deleted: true,
    removeFinalizer: true,
    expect: { calls: [], condition: ['Unknown', 'Expiring'], removeFinalizer: false },
  },
  {
    name: 'deleted, and Alertmanager unreachable: retried with backoff for a little while',
    observed: approved('Cancelled', [record('Active', at(601))]),
    facts: { [KEY]: fact('release', 'failed', at(2), UNREACHABLE) },
    deleted: true,
    now: at(2),
    removeFinalizer: true,
    expect: {
      calls: [],
      records: [[AM, 'Active']],
      condition: ['Unknown', 'AlertmanagerUnreachable'],
      removeFinalizer: false,
      requeueAfterMs: 5000,
    },
  },
  {
    name: 'deleted, and Alertmanager still unreachable after the grace: the deletion waits no longer; the lease ends it',
    observed: approved('Cancelled', [record('Active', at(601))]),
    facts: { [KEY]: fact('release', 'failed', at(30), { ...UNREACHABLE, failures: 3 }) },
    deleted: true,
    now: at(30),
    removeFinalizer: true,
    expect: {
      calls: [],
      records: [[AM, 'Lapsed']],
      events: ['Warning:SilenceLapsed'],
      removeFinalizer: true,
    },
  },
  {
    name: 'finished long ago, all settled (a restart): no call, nothing changes',
    observed: {
      ...approved('Succeeded', [record('Expired', at(100))]),
      conditions: [
        {
          type: 'Silenced',
          status: 'False',
          reason: 'ActionEnded',
          message: `the silence of node="w1" in ${AM} was expired at ${at(100).toISOString()}`,
          lastTransitionTime: at(100).toISOString(),
        },
      ],
    },
    now: at(9000),
    removeFinalizer: true,
    expect: {
      calls: [],
      records: [[AM, 'Expired']],
      events: [],
      removeFinalizer: true,
      requeueAfterMs: null,
    },
  },
  {
    name: 'no governing policy asks any more: released mid-action',
    observed: approved('WaitingForNode', [record('Active', at(601))]),
    policies: [policy('other', { nodeSelector: { matchLabels: { pool: 'compute' } } })],
    expect: { calls: [`release node@${AM}`], condition: ['Unknown', 'Expiring'] },
  },
  {
    name: 'the node gone mid-action: what is held stays as it is',
    observed: approved('WaitingForNode', [record('Active', at(601))]),
    nodeLabels: null,
    expect: { calls: [], records: [[AM, 'Active']] },
  },
  {
    name: 'two Alertmanagers, one down: one silence held, the other reported',
    observed: approved('Approved', [
      record('Active', at(601)),
      record('Pending', at(600), { url: AM2, nodeLabel: 'instance' }),
    ]),
    policies: [policy('a'), policy('b', { alertmanagerSilence: { url: `${AM2}/`, nodeLabel: 'instance' } })],
    facts: {
      [KEY]: fact('hold', 'succeeded', at(1), { id: 'sil-1', endsAt: at(601).toISOString() }),
      [silenceKey({ url: AM2, nodeLabel: 'instance' })]: fact('hold', 'failed', at(1), UNREACHABLE),
    },
    now: at(2),
    expect: {
      calls: [],
      records: [
        [AM2, 'Pending'],
        [AM, 'Active'],
      ],
      condition: ['False', 'AlertmanagerUnreachable'],
      events: ['Warning:SilenceFailed'],
      requeueAfterMs: 4000,
    },
  },
];

describe('holdSilences', () => {
  for (const row of ROWS) {
    it(row.name, () => {
      const { d } = run(row);
      assert.deepEqual(calls(d), row.expect.calls, 'calls');
      if (row.expect.records)
        assert.deepEqual(
          (d.status.silences ?? []).map((r) => [r.url, r.state]),
          row.expect.records,
          'records',
        );
      if (row.expect.condition !== undefined) {
        const c = d.status.conditions?.find((x) => x.type === 'Silenced');
        assert.deepEqual(
          c ? [c.status, c.reason] : null,
          row.expect.condition,
          `condition: ${c?.message ?? ''}`,
        );
      }
      if (row.expect.events) assert.deepEqual(events(d), row.expect.events, 'events');
      if (row.expect.removeFinalizer !== undefined)
        assert.equal(d.removeFinalizer, row.expect.removeFinalizer, 'removeFinalizer');
      if (row.expect.requeueAfterMs !== undefined)
        assert.equal(d.requeueAfterMs, row.expect.requeueAfterMs ?? undefined, 'requeueAfterMs');
      // A courtesy, never a gate: the phase is decide()'s alone.
      assert.equal(d.status.phase, (row.decided ?? row.observed).phase);
    });
  }

  it('records, before the first call, the end it asks for: a lease, capped at approval + duration', () => {
    const { d } = run({
      name: '',
      observed: { phase: 'RunningPreHooks' },
      decided: approved('Approved'),
      now: T0,
      expect: { calls: [] },
    });
    assert.deepEqual(d.status.silences, [
      {
        url: AM,
        nodeLabel: 'node',
        state: 'Pending',
        endsAt: new Date(T0.getTime() + LEASE_MS).toISOString(),
      },
    ]);
  });

  it('shows a retry under way like the failure it retries, so the condition does not flap', () => {
    const failed = run({
      name: '',
      observed: approved('Approved', [record('Pending', at(600))]),
      facts: { [KEY]: fact('hold', 'failed', at(1), UNREACHABLE) },
      now: at(1),
      expect: { calls: [] },
    }).d;
    const retrying = run({
      name: '',
      observed: failed.status,
      facts: { [KEY]: fact('hold', 'running', at(6), { ...UNREACHABLE, failures: 1 }) },
      now: at(6),
      expect: { calls: [] },
    }).d;
    assert.deepEqual(retrying.status.conditions, failed.status.conditions);
    assert.deepEqual(events(retrying), []);
  });

  it('leaves a decision that adds the finalizer alone, and actions no policy silences', () => {
    const adding: ActionDecision = { status: {}, addFinalizer: true, removeFinalizer: false, effects: [] };
    const input = { now: T0, policies: POLICIES, nodeLabels: LABELS, facts: new Map() };
    assert.equal(holdSilences(adding, action(), input), adding);
    const plain: ActionDecision = {
      status: approved('Approved'),
      addFinalizer: false,
      removeFinalizer: false,
      effects: [],
    };
    assert.equal(holdSilences(plain, action(), { ...input, policies: [{ name: 'p', spec: {} }] }), plain);
  });

  it('never takes the finalizer that decide() keeps', () => {
    const { d } = run({
      name: '',
      observed: approved('Succeeded', [record('Expired', at(100))]),
      removeFinalizer: false,
      expect: { calls: [] },
    });
    assert.equal(d.removeFinalizer, false);
  });
});

describe('silenceTargets', () => {
  const ref = { name: 'reboot-w1', node: 'w1', action: 'Reboot' as const };
  const cases: { name: string; policies: PolicyFacts[]; expect: [string, string, number][] }[] = [
    {
      name: 'no policy asks for a silence',
      policies: [{ name: 'p', spec: { maxConcurrent: 2 } }],
      expect: [],
    },
    {
      name: 'defaults: label node, one hour, the URL without its trailing slash',
      policies: [policy('p', { alertmanagerSilence: { url: `${AM}/` } })],
      expect: [[AM, 'node', HOUR]],
    },
    {
      name: 'only the policies that govern the action: its node and its action',
      policies: [
        policy('other-pool', { nodeSelector: { matchLabels: { pool: 'compute' } } }),
        policy('upgrades', { actions: ['Upgrade'] }),
        policy('reboots', { actions: ['Reboot'], alertmanagerSilence: { url: AM2, duration: '30m' } }),
      ],
      expect: [[AM2, 'node', HOUR / 2]],
    },
    {
      name: 'one per (url, nodeLabel); the shortest duration of those naming it',
      policies: [
        policy('a', { alertmanagerSilence: { url: AM, duration: '2h' } }),
        policy('b', { alertmanagerSilence: { url: AM, duration: '20m' } }),
        policy('c', { alertmanagerSilence: { url: AM, nodeLabel: 'instance' } }),
      ],
      expect: [
        [AM, 'instance', HOUR],
        [AM, 'node', HOUR / 3],
      ],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const targets = silenceTargets(c.policies, ref, LABELS, T0);
      assert.deepEqual(
        targets.map((t) => [t.url, t.nodeLabel, t.notAfter.getTime() - T0.getTime()]),
        c.expect,
      );
    });
  }
});

describe('retryDelayMs', () => {
  it('doubles from 5s up to its cap, below the renewal interval', () => {
    assert.deepEqual([1, 2, 3, 4, 5].map(retryDelayMs), [5000, 10_000, 20_000, 40_000, 80_000]);
    assert.equal(retryDelayMs(20), RETRY_MAX_MS);
    assert.ok(RETRY_MAX_MS < RENEW_MS);
  });
});
