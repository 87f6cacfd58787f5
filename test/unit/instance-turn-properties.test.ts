// Invariants 3 and 7 over two controller instances at once: their admissions, and their
// control-plane approvals (the etcd guard's read, then the approval written on it), run
// only under the turn (src/kube/turn.ts), whose Lease the model passes between them with
// the protocol's own decisions (turnStep, holdsTurn, mayBegin) over compare-and-swap
// writes, lagging watches of the Lease and of the actions, a clock that jumps (renewals
// missed, leases expiring), and the admission's cache rules (admission-read.ts).
//
// Rules checked across both instances after every write: never two actions holding slots
// on one node (invariant 3 as the rule that counts every instance's slots; the
// control-plane rule counts them the same way), and never two control-plane actions
// approved at once (invariant 7, the etcd guard on its own: the model admits with the
// one-node rule only, so that two control-plane actions do reach their approvals).
// "Can fail" controls show the model catches steps run without the turn, a quorum read
// trusted across a change of turn, and other instances' slots read from their (lagging)
// informer alone.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  afterWrite,
  cacheShowsEverySlot,
  foreignUnfinished,
  type AdmissionReadState,
} from '../../src/actions/admission-read.ts';
import { etcdAway } from '../../src/actions/etcd-guard.ts';
import {
  DEFAULT_TURN_TIMING,
  holdsTurn,
  mayBegin,
  turnStep,
  type TurnRecord,
  type TurnView,
} from '../../src/kube/turn.ts';

const NODES = ['cp-1', 'cp-2', 'w-1'] as const;
type NodeName = (typeof NODES)[number];
const isCp = (n: string) => n.startsWith('cp-');

interface Action {
  metadata: { name: string; resourceVersion: string };
  instance: 0 | 1;
  node: NodeName;
  phase: 'Holding' | 'Approved' | 'Done';
}

interface Lease extends TurnRecord {
  rv: number;
  /** The spec as written (holder, renewal): what the others' expiry watches. */
  record: number;
}

interface Instance {
  identity: string;
  /** The lease as this instance's watch last delivered it (or its own write returned). */
  seen: Lease | undefined;
  observedAt: number;
  renewedAt?: number;
  wanting: boolean;
  epoch: number;
  held: boolean;
  /** A step in flight under the turn: what it read, and under which holding. */
  step?: { kind: 'admit' | 'approve'; epoch: number; node: NodeName; view: Action[]; target?: string };
  read: AdmissionReadState;
  foreignAtQuorum: { items: Action[]; resourceVersion?: string };
  /** How far each watch (own instance's actions, the other's) has delivered the history. */
  own: number;
  foreign: number;
}

type Step =
  | { type: 'lease'; i: 0 | 1 }
  | { type: 'see-lease'; i: 0 | 1 }
  | { type: 'begin'; i: 0 | 1; kind: 'admit' | 'approve'; node: NodeName }
  | { type: 'write'; i: 0 | 1 }
  | { type: 'deliver'; i: 0 | 1; which: 'own' | 'foreign'; count: number }
  | { type: 'finish'; pick: number }
  | { type: 'tick'; ms: number }
  /** A pass that nothing interleaves with: begin, then write. */
  | { type: 'pass'; i: 0 | 1; kind: 'admit' | 'approve'; node: NodeName }
  /** Instance i asks for the turn, and the protocol runs both sides once each way. */
  | { type: 'turn'; i: 0 | 1 };

const who = fc.constantFrom(0 as const, 1 as const);
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ type: fc.constant('lease' as const), i: who }) },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('see-lease' as const), i: who }) },
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant('begin' as const),
      i: who,
      kind: fc.constantFrom('admit' as const, 'approve' as const),
      node: fc.constantFrom(...NODES),
    }),
  },
  { weight: 4, arbitrary: fc.record({ type: fc.constant('write' as const), i: who }) },
  {
    weight: 3,
    arbitrary: fc.record({
      type: fc.constant('deliver' as const),
      i: who,
      which: fc.constantFrom('own' as const, 'foreign' as const),
      count: fc.integer({ min: 1, max: 3 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('finish' as const), pick: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({ type: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 6000 }) }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant('pass' as const),
      i: who,
      kind: fc.constantFrom('admit' as const, 'approve' as const),
      node: fc.constantFrom(...NODES),
    }),
  },
  { weight: 3, arbitrary: fc.record({ type: fc.constant('turn' as const), i: who }) },
);

/** What a model leaves out of the controller, for the "can fail" controls. */
interface Flaws {
  /** Steps run whether or not the turn is ours. */
  noTurn?: boolean;
  /** What a quorum read showed is trusted across a change of turn. */
  keepReadAcrossTurns?: boolean;
  /** Other instances' slots come from their informer alone, not from the last quorum read. */
  foreignFromInformerOnly?: boolean;
}

function run(
  steps: readonly Step[],
  flaws: Flaws = {},
): { violations: string[]; writes: number; approvals: number; handovers: number } {
  const timing = DEFAULT_TURN_TIMING;
  let now = 0;
  let rev = 100n;
  let lease: Lease | undefined;
  /** Every version of every action, in revision order: what the watches deliver. */
  const history: Action[] = [];
  const actions = new Map<string, Action>();
  const violations: string[] = [];
  let writes = 0;
  let approvals = 0;
  let handovers = 0;
  let count = 0;
  const inst: [Instance, Instance] = [0, 1].map((i): Instance => ({
    identity: `i${String(i)}/replica`,
    seen: undefined,
    observedAt: 0,
    wanting: false,
    epoch: 0,
    held: false,
    read: {},
    foreignAtQuorum: { items: [] },
    own: 0,
    foreign: 0,
  })) as [Instance, Instance];

  const view = (me: Instance): TurnView => ({
    identity: me.identity,
    active: true,
    wanting: me.wanting,
    busy: me.step !== undefined,
    lease: me.seen,
    observedAt: me.observedAt,
    ...(me.renewedAt !== undefined ? { renewedAt: me.renewedAt } : {}),
    now,
    timing,
  });
  const forget = (me: Instance) => {
    if (!flaws.keepReadAcrossTurns) me.read = { ...me.read, quorum: undefined };
  };
  const settle = (me: Instance) => {
    const held = holdsTurn(view(me));
    if (held === me.held) return;
    me.held = held;
    if (held) {
      me.epoch++;
      me.wanting = false;
    }
    forget(me);
  };
  const see = (me: Instance, l: Lease | undefined) => {
    if (l && me.seen?.record !== l.record) me.observedAt = now;
    me.seen = l && { ...l };
    if (l?.holder !== me.identity) me.renewedAt = undefined;
    settle(me);
  };
  const write = (a: Action, by: Instance) => {
    rev++;
    const v = { ...a, metadata: { ...a.metadata, resourceVersion: String(rev) } };
    actions.set(a.metadata.name, v);
    history.push(v);
    by.read = afterWrite(by.read, String(rev));
    writes++;
    const live = [...actions.values()].filter((x) => x.phase !== 'Done');
    for (const x of live)
      for (const y of live) {
        const [xn, yn] = [x.metadata.name, y.metadata.name];
        if (xn >= yn) continue;
        if (x.node === y.node) violations.push(`${xn} and ${yn} both hold ${x.node}`);
        else if (isCp(x.node) && isCp(y.node) && x.phase === 'Approved' && y.phase === 'Approved')
          violations.push(`control-plane ${xn} and ${yn} both approved (invariant 7)`);
      }
  };
  /** The actions a watch has delivered, latest version of each, filtered by instance. */
  const cached = (upTo: number, mine: (a: Action) => boolean) => {
    const out = new Map<string, Action>();
    for (const a of history.slice(0, upTo)) if (mine(a)) out.set(a.metadata.name, a);
    return [...out.values()];
  };
  const watched = (upTo: number) =>
    upTo === 0 ? '100' : (history[upTo - 1]?.metadata.resourceVersion ?? '100');
  const unfinished = (list: Action[]) => list.filter((a) => a.phase !== 'Done');

  const apply = (s: Step): void => {
    switch (s.type) {
      case 'pass':
        apply({ type: 'begin', i: s.i, kind: s.kind, node: s.node });
        apply({ type: 'write', i: s.i });
        break;
      case 'turn': {
        const other = s.i === 0 ? 1 : 0;
        inst[s.i].wanting = true;
        for (const [i, kind] of [
          [s.i, 'see-lease'],
          [s.i, 'lease'],
          [other, 'see-lease'],
          [other, 'lease'],
          [s.i, 'see-lease'],
          [s.i, 'lease'],
        ] as const)
          apply(kind === 'lease' ? { type: 'lease', i } : { type: 'see-lease', i });
        break;
      }
      case 'tick':
        now += s.ms;
        for (const x of inst) settle(x);
        break;
      case 'see-lease':
        see(inst[s.i], lease);
        break;
      case 'lease': {
        const m = inst[s.i];
        const next = turnStep(view(m));
        if (next.type === 'wait') break;
        if (next.type === 'create' ? lease !== undefined : lease?.rv !== m.seen?.rv) {
          see(m, lease); // 409: read again
          break;
        }
        const rv = (lease?.rv ?? 0) + 1;
        const record = rv; // every spec write changes the record
        if (next.type === 'ask') {
          if (lease) lease = { ...lease, rv, wanted: m.identity };
        } else if (next.type === 'handOver') {
          lease = { rv, record, durationMs: next.to ? timing.leaseDurationMs : 1000, holder: next.to };
          handovers++;
          m.renewedAt = undefined;
        } else {
          const wanted = lease?.wanted === m.identity ? undefined : lease?.wanted;
          lease = {
            rv,
            record,
            durationMs: timing.leaseDurationMs,
            holder: m.identity,
            ...(wanted ? { wanted } : {}),
          };
          m.renewedAt = now;
        }
        see(m, lease);
        break;
      }
      case 'begin': {
        const m = inst[s.i];
        if (m.step) break;
        if (!flaws.noTurn && !mayBegin(view(m))) {
          m.wanting = true;
          break;
        }
        const mine = (a: Action) => a.instance === s.i;
        let everyone: Action[];
        if (s.kind === 'admit' && cacheShowsEverySlot(m.read, watched(m.own))) {
          const foreignCache = cached(m.foreign, (a) => !mine(a));
          const theirs = flaws.foreignFromInformerOnly
            ? unfinished(foreignCache)
            : foreignUnfinished(
                m.foreignAtQuorum,
                { items: foreignCache, watched: watched(m.foreign) },
                (a) => a.phase === 'Done',
              );
          everyone = [...unfinished(cached(m.own, mine)), ...theirs];
        } else {
          // A quorum read: the admission's, or the etcd guard's (always one).
          everyone = unfinished([...actions.values()]);
          if (s.kind === 'admit') {
            m.read = { ...m.read, quorum: rev };
            m.foreignAtQuorum = { items: everyone.filter((a) => !mine(a)), resourceVersion: String(rev) };
          }
        }
        const target =
          s.kind === 'approve'
            ? everyone.find((a) => a.instance === s.i && a.node === s.node && a.phase === 'Holding')?.metadata
                .name
            : undefined;
        m.step = {
          kind: s.kind,
          epoch: m.epoch,
          node: s.node,
          view: everyone,
          ...(target ? { target } : {}),
        };
        break;
      }
      case 'write': {
        const m = inst[s.i];
        const st = m.step;
        if (!st) break;
        m.step = undefined;
        if (!flaws.noTurn && !(st.epoch === m.epoch && holdsTurn(view(m)))) {
          forget(m);
          break;
        }
        if (st.kind === 'admit') {
          // The rules that count every instance: one node, one control-plane node (for
          // the etcd part of the model, control-plane admissions count the node alone).
          if (st.view.some((a) => a.node === st.node)) break;
          const name = `a${String(count++)}`;
          write(
            { metadata: { name, resourceVersion: '' }, instance: s.i, node: st.node, phase: 'Holding' },
            m,
          );
        } else if (st.target && isCp(st.node)) {
          const self = actions.get(st.target);
          if (!self || self.phase !== 'Holding') break;
          // The etcd guard's read, as the reconciler hands it to etcdAway(): any other
          // control-plane node going down holds the approval.
          const away = etcdAway(
            st.view.map((a) => ({
              metadata: { name: a.metadata.name, uid: a.metadata.name },
              spec: { nodeName: a.node, action: 'Reboot' as const, requestedBy: 'x' },
              status: {
                phase: a.phase === 'Approved' ? ('Approved' as const) : ('WaitingForHealth' as const),
              },
            })),
            {
              metadata: { name: self.metadata.name, uid: self.metadata.name },
              spec: { nodeName: self.node, action: 'Reboot', requestedBy: 'x' },
            },
          );
          if ([...away.keys()].some(isCp)) break;
          write({ ...self, phase: 'Approved' }, m);
          approvals++;
        }
        break;
      }
      case 'deliver': {
        const m = inst[s.i];
        m[s.which] = Math.min(history.length, m[s.which] + s.count);
        break;
      }
      case 'finish': {
        const live = [...actions.values()].filter((a) => a.phase !== 'Done');
        const a = live[s.pick % Math.max(1, live.length)];
        if (a) write({ ...a, phase: 'Done' }, inst[a.instance]);
        break;
      }
    }
  };
  for (const s of steps) apply(s);
  return { violations, writes, approvals, handovers };
}

const steps = fc.array(step, { minLength: 10, maxLength: 150, size: 'max' });
const SEED = Number(process.env.FC_SEED ?? 20261203);

function fails(flaws: Flaws): boolean {
  return fc.check(
    fc.property(steps, (s) => run(s, flaws).violations.length === 0),
    { numRuns: 4000, seed: SEED },
  ).failed;
}

describe('two controller instances under the turn: invariants 3 and 7', () => {
  it('never two slots on one node, never two control-plane approvals, across both instances', () => {
    const seen = { writes: 0, approvals: 0, handovers: 0 };
    fc.assert(
      fc.property(steps, (s) => {
        const r = run(s);
        seen.writes += r.writes;
        seen.approvals += r.approvals;
        seen.handovers += r.handovers;
        assert.deepEqual(r.violations, []);
      }),
      { numRuns: 4000, seed: SEED },
    );
    // Not vacuous: both instances admitted, approved control-plane actions, passed the turn.
    assert.ok(seen.writes > 5000 && seen.approvals > 300 && seen.handovers > 1000, JSON.stringify(seen));
  });

  it('can fail: steps run without the turn', () => {
    assert.equal(fails({ noTurn: true }), true, 'the model catches instances not taking turns');
  });

  it('can fail: a quorum read trusted across a change of turn', () => {
    assert.equal(fails({ keepReadAcrossTurns: true }), true, 'the model catches a read kept across turns');
  });

  it("can fail: other instances' slots taken from their lagging informer alone", () => {
    assert.equal(fails({ foreignFromInformerOnly: true }), true, 'the model catches a lagging foreign cache');
  });
});
