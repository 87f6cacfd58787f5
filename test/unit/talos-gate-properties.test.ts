// Invariant 10 as a property of the gate's decision (src/talos-gate/decide.ts) and its
// conditional claim, in a simulated world: several gate replicas deciding on reads that
// may be stale, a controller approving, writing status and finishing actions, deletions
// and repeated calls. Whatever fast-check chooses:
//   - a call is forwarded only on an Approved, unexecuted External action of the same
//     caller, node and action (a Reboot also on the caller's Approved, installed Upgrade);
//   - each action lets one disruptive call through, at most.
// Two careless rules are shown caught: a claim written without the resourceVersion
// precondition, and a decision that does not skip executed actions.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { EXECUTED_ANNOTATION } from '../../src/api/names.ts';
import type { NodeActionPhase, ObservedNodeAction } from '../../src/api/node-action.ts';
import type { ActionAsk } from '../../src/talos-gate/classify.ts';
import {
  decideGatedCall,
  GATE_INSTALLED_ANNOTATION,
  parametersMatch,
  type GatedCall,
  type GateDecision,
} from '../../src/talos-gate/decide.ts';

const CALLERS = ['jane', 'bob'];
const NODES = ['w1'];
const ASKS: ActionAsk[] = [
  { action: 'Reboot', reboot: { mode: 'Default' } },
  { action: 'Reboot', reboot: { mode: 'PowerCycle' } },
  { action: 'Shutdown' },
  { action: 'Upgrade', upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.2' } },
];

type Step =
  | {
      kind: 'call';
      replica: number;
      lag: number;
      caller: number;
      node: number;
      ask: number;
      install: boolean;
    }
  | { kind: 'approve'; pick: number }
  | { kind: 'status'; pick: number }
  | { kind: 'finish'; pick: number }
  | { kind: 'delete'; pick: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('call' as const),
      replica: fc.integer({ min: 0, max: 2 }),
      lag: fc.oneof(
        { weight: 4, arbitrary: fc.constant(0) },
        { weight: 1, arbitrary: fc.integer({ min: 1, max: 4 }) },
      ),
      caller: fc.integer({ min: 0, max: CALLERS.length - 1 }),
      node: fc.integer({ min: 0, max: NODES.length - 1 }),
      ask: fc.integer({ min: 0, max: ASKS.length - 1 }),
      install: fc.boolean(),
    }),
  },
  { weight: 4, arbitrary: fc.nat(20).map((pick) => ({ kind: 'approve' as const, pick })) },
  { weight: 2, arbitrary: fc.nat(20).map((pick) => ({ kind: 'status' as const, pick })) },
  { weight: 1, arbitrary: fc.nat(20).map((pick) => ({ kind: 'finish' as const, pick })) },
  { weight: 1, arbitrary: fc.nat(20).map((pick) => ({ kind: 'delete' as const, pick })) },
);

type Decide = (call: GatedCall, actions: readonly ObservedNodeAction[]) => GateDecision;

interface Outcome {
  /** Disruptive calls let through per action. */
  forwarded: Map<string, number>;
  /** Broken promises seen. */
  violations: string[];
  passes: number;
}

function run(steps: Step[], options: { decide?: Decide; blindClaim?: boolean } = {}): Outcome {
  const decide = options.decide ?? decideGatedCall;
  let rv = 0;
  const store = new Map<string, ObservedNodeAction>();
  const history: ObservedNodeAction[][] = [[]];
  const snapshot = () => history.push([...store.values()].map((a) => structuredClone(a)));
  const forwarded = new Map<string, number>();
  const violations: string[] = [];
  let created = 0;
  let passes = 0;
  const write = (a: ObservedNodeAction) => {
    a.metadata.resourceVersion = String(++rv);
    store.set(a.metadata.name, a);
  };
  const pick = (n: number) => [...store.values()][n % Math.max(1, store.size)];
  for (const s of steps) {
    switch (s.kind) {
      case 'call': {
        const ask = ASKS[s.ask] as ActionAsk;
        const call: GatedCall = {
          caller: CALLERS[s.caller] as string,
          node: NODES[s.node] as string,
          ask,
          step: ask.action === 'Upgrade' && s.install ? 'install' : 'disrupt',
        };
        // A replica reads what its cache or a lagging read shows.
        const seen = history[Math.max(0, history.length - 1 - s.lag)] ?? [];
        const decision = decide(call, seen);
        if (decision.kind === 'create') {
          write({
            metadata: {
              name: `a${String(++created)}`,
              uid: `u${String(created)}`,
              creationTimestamp: String(created).padStart(6, '0'),
            },
            spec: {
              nodeName: call.node,
              execution: 'External',
              requestedBy: call.caller,
              ...ask,
            },
            status: { phase: 'Pending' },
          });
        } else if (decision.kind === 'forward') {
          const current = store.get(decision.action.metadata.name);
          const fresh = current?.metadata.resourceVersion === decision.action.metadata.resourceVersion;
          if (!current || (!fresh && !options.blindClaim)) break; // the conditional claim is refused
          // What the claim is written on: the stored action, as the API server holds it.
          const phase: NodeActionPhase | undefined = current.status?.phase;
          const mine = current.spec.requestedBy === call.caller && current.spec.nodeName === call.node;
          const rebootOfUpgrade =
            ask.action === 'Reboot' &&
            current.spec.action === 'Upgrade' &&
            current.metadata.annotations?.[GATE_INSTALLED_ANNOTATION] !== undefined;
          if (phase !== 'Approved')
            violations.push(`${current.metadata.name} forwarded while ${String(phase)}`);
          if (!mine) violations.push(`${current.metadata.name} forwarded for someone else's call`);
          if (!parametersMatch(current, ask) && !rebootOfUpgrade)
            violations.push(`${current.metadata.name} forwarded for another action`);
          current.metadata.annotations = { ...current.metadata.annotations, ...decision.claim };
          write(current);
          passes++;
          if (call.step === 'disrupt') {
            const n = (forwarded.get(current.metadata.name) ?? 0) + 1;
            forwarded.set(current.metadata.name, n);
            if (n > 1) violations.push(`${current.metadata.name} let ${String(n)} disruptive calls through`);
          }
        }
        break;
      }
      case 'approve': {
        const a = pick(s.pick);
        if (a?.status?.phase === 'Pending') {
          a.status = { ...a.status, phase: 'Approved' };
          write(a);
        }
        break;
      }
      case 'status': {
        const a = pick(s.pick);
        if (a) write(a);
        break;
      }
      case 'finish': {
        const a = pick(s.pick);
        if (a?.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true') {
          a.status = { ...a.status, phase: 'Succeeded' };
          write(a);
        }
        break;
      }
      case 'delete': {
        const a = pick(s.pick);
        if (a) store.delete(a.metadata.name);
        break;
      }
    }
    snapshot();
  }
  return { forwarded, violations, passes };
}

const SEED = Number(process.env.FC_SEED ?? 20261203);

describe('the Talos API gate: invariant 10 over replicas, stale reads and repeated calls', () => {
  it('forwards only on an Approved action of the caller, node and action, and each at most once', () => {
    let passes = 0;
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 60 }), (steps) => {
        const outcome = run(steps);
        passes += outcome.passes;
        assert.deepEqual(outcome.violations, []);
      }),
      { numRuns: 3000, seed: SEED },
    );
    assert.ok(passes > 150, `calls were forwarded (${String(passes)})`);
  });

  it('is broken by a claim written without the resourceVersion decided upon', () => {
    const found = fc.check(
      fc.property(
        fc.array(step, { minLength: 1, maxLength: 60 }),
        (steps) => run(steps, { blindClaim: true }).violations.length === 0,
      ),
      { numRuns: 3000, seed: SEED },
    );
    assert.equal(found.failed, true, 'the model catches a blind claim');
  });

  it('is broken by a decision that forgets the executed mark', () => {
    const forgetful: Decide = (call, actions) =>
      decideGatedCall(
        call,
        actions.map((a) => ({
          ...a,
          metadata: {
            ...a.metadata,
            annotations: { ...a.metadata.annotations, [EXECUTED_ANNOTATION]: 'false' },
          },
        })),
      );
    const found = fc.check(
      fc.property(
        fc.array(step, { minLength: 1, maxLength: 60 }),
        (steps) => run(steps, { decide: forgetful }).violations.length === 0,
      ),
      { numRuns: 3000, seed: SEED },
    );
    assert.equal(found.failed, true, 'the model catches a decision that lets an executed action pass again');
  });
});
