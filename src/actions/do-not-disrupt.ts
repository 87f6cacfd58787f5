// A workload owner's "not now" (issue 27, item 3). A Pod — a six-hour batch job, a
// backup — or a Node carrying talos.dev/do-not-disrupt: "true" or a duration ("6h")
// holds, at the health gate, every action that would take its node away, beside the
// health checks (as builtin:do-not-disrupt in status.checks, naming the Pods).
//
// Bounded whoever wrote it: each hold is counted from when the action first met one
// (status.doNotDisruptSince) and lasts at most its duration and at most the governing
// ActionPolicies' doNotDisruptMax (the shortest; 24h without one; 0s: ignored). A value
// that is neither "true", "false" nor a duration holds as "true": its writer meant
// something, and the cap bounds it. A bypass of the health checks passes it, recorded
// with the Pods it passed. Pure: the Pods are read for the gate (action-pass.ts).
import type { ActionPolicySpec } from '../api/action-policy.ts';
import type { NodeActionSpec, NodeActionStatus, ObservedNodeAction } from '../api/node-action.ts';
import { formatDuration, parseDuration } from '../duration.ts';
import { governingPolicies, type PolicyFacts } from '../policies/evaluate.ts';
import type { DoNotDisruptHolder } from './neighbours.ts';

export type { DoNotDisruptHolder } from './neighbours.ts';

export const DO_NOT_DISRUPT_CHECK = 'builtin:do-not-disrupt';

/** The cap without a policy that says otherwise (ActionPolicy doNotDisruptMax's default). */
export const DEFAULT_DO_NOT_DISRUPT_MAX_MS = 24 * 3_600_000;

/** The longest an action waits for do-not-disrupt annotations, and who said so. */
export interface DoNotDisruptCap {
  ms: number;
  /** "ActionPolicy NAME", or "the default" (no governing policy sets it). */
  by: string;
}

type CheckResult = NonNullable<NodeActionStatus['checks']>[number];

/**
 * How much longer than deadlines.waitingForHealth the health gate may hold an action that
 * a do-not-disrupt held: the cap, so that an owner's "not now" does not fail the action.
 */
export function doNotDisruptAllowance(input: {
  action: ObservedNodeAction;
  doNotDisruptCap?: DoNotDisruptCap;
}): number {
  if (input.action.status?.doNotDisruptSince === undefined) return 0;
  return input.doNotDisruptCap?.ms ?? DEFAULT_DO_NOT_DISRUPT_MAX_MS;
}

/** The shortest doNotDisruptMax of the policies governing the action on a node with these labels. */
export function doNotDisruptCap(
  policies: readonly PolicyFacts[],
  spec: Pick<NodeActionSpec, 'action' | 'nodeName'>,
  labels: Record<string, string>,
): DoNotDisruptCap {
  let cap: DoNotDisruptCap = { ms: DEFAULT_DO_NOT_DISRUPT_MAX_MS, by: 'the default' };
  let governed = false;
  for (const p of governingPolicies(policies, spec, labels)) {
    const ms = capOf(p.spec);
    if (!governed || ms < cap.ms) cap = { ms, by: `ActionPolicy ${p.name}` };
    governed = true;
  }
  return cap;
}

function capOf(spec: ActionPolicySpec): number {
  try {
    return spec.doNotDisruptMax === undefined
      ? DEFAULT_DO_NOT_DISRUPT_MAX_MS
      : parseDuration(spec.doNotDisruptMax);
  } catch {
    return DEFAULT_DO_NOT_DISRUPT_MAX_MS; // the CRD refuses it; a policy from before keeps the default
  }
}

/** How long a holder's value asks for, in ms (Infinity: "true"); undefined: it asks for nothing ("false"). */
function asked(value: string): { ms: number; understood: boolean } | undefined {
  const v = value.trim().toLowerCase();
  if (v === 'false') return undefined;
  if (v === 'true') return { ms: Infinity, understood: true };
  try {
    const ms = parseDuration(v);
    return ms > 0 ? { ms, understood: true } : undefined;
  } catch {
    return { ms: Infinity, understood: false };
  }
}

export interface DoNotDisruptJudgement {
  /** Whether something still holds the action. */
  held: boolean;
  /** For status.checks; undefined when nothing asks now and nothing asked before. */
  result?: CheckResult;
  /** When the hold began (status.doNotDisruptSince), once something asked. */
  since?: string;
  /** When the next hold ends, for the wake-up. */
  nextEndMs?: number;
  /** The holders whose hold ended at the cap this time (for a Warning). */
  capped: string[];
}

const SHOWN = 5;

function listed(items: readonly string[]): string {
  const shown = items.slice(0, SHOWN).join(', ');
  return items.length > SHOWN ? `${shown} and ${String(items.length - SHOWN)} more` : shown;
}

/**
 * Judges the do-not-disrupt holders of the action's node now: which still hold it, and
 * the record for status.checks.
 */
export function judgeDoNotDisrupt(input: {
  holders: readonly DoNotDisruptHolder[];
  /** Set when the node's Pods could not be read. */
  readError?: string;
  status: NodeActionStatus;
  cap: DoNotDisruptCap;
  now: Date;
  nodeName: string;
}): DoNotDisruptJudgement {
  const { holders, status, cap, now, nodeName } = input;
  if (input.readError !== undefined && cap.ms > 0) {
    // Fail closed, for this action only: a Pod may be asking, and nobody could tell.
    const message = `the Pods of node ${nodeName} could not be read for talos.dev/do-not-disrupt: ${input.readError}`;
    return {
      held: true,
      capped: [],
      ...(status.doNotDisruptSince ? { since: status.doNotDisruptSince } : {}),
      result: {
        name: DO_NOT_DISRUPT_CHECK,
        healthy: false,
        probeTime: now.toISOString(),
        message: message.slice(0, 4096),
      },
    };
  }
  const asking = holders.flatMap((h) => {
    const a = asked(h.value);
    return a ? [{ ...h, ...a }] : [];
  });
  const recorded = status.checks?.find((c) => c.name === DO_NOT_DISRUPT_CHECK);
  if (cap.ms === 0 || asking.length === 0) {
    if (!status.doNotDisruptSince) return { held: false, capped: [] };
    const why =
      cap.ms === 0
        ? `${cap.by} ignores talos.dev/do-not-disrupt (doNotDisruptMax 0s)`
        : `nothing on node ${nodeName} asks not to be disrupted any more`;
    return { held: false, capped: [], since: status.doNotDisruptSince, result: passed(why, now) };
  }
  const since = status.doNotDisruptSince ?? now.toISOString();
  const start = Date.parse(since);
  const waited = now.getTime() - start;
  const holding: string[] = [];
  const ended: string[] = [];
  let nextEndMs: number | undefined;
  for (const h of asking) {
    const limit = Math.min(h.ms, cap.ms);
    const left = limit - waited;
    const shown = `${h.what} (${JSON.stringify(h.value)}${h.understood ? '' : ', not a duration: held as "true"'})`;
    if (left > 0) {
      holding.push(`${shown} until ${new Date(start + limit).toISOString()}`);
      nextEndMs = Math.min(nextEndMs ?? Infinity, left);
    } else if (h.ms > cap.ms) ended.push(h.what);
  }
  if (holding.length > 0) {
    const message = `${listed(holding)} ask${holding.length === 1 ? 's' : ''} not to be disrupted; waited ${formatDuration(waited)}, at most ${formatDuration(cap.ms)} (doNotDisruptMax of ${cap.by})`;
    return {
      held: true,
      since,
      capped: [],
      ...(nextEndMs !== undefined ? { nextEndMs } : {}),
      result: {
        name: DO_NOT_DISRUPT_CHECK,
        healthy: false,
        probeTime: now.toISOString(),
        message: message.slice(0, 4096),
      },
    };
  }
  const why =
    ended.length > 0
      ? `waited ${formatDuration(waited)} for ${listed(ended)}: the most ${cap.by} allows (doNotDisruptMax ${formatDuration(cap.ms)})`
      : `the do-not-disrupt durations on node ${nodeName} are over`;
  // A Warning once, when the cap ends a hold that held the action until now.
  const capped = recorded !== undefined && !recorded.healthy && ended.length > 0 ? ended : [];
  return { held: false, since, capped, result: passed(why, now) };
}

function passed(message: string, now: Date): CheckResult {
  return {
    name: DO_NOT_DISRUPT_CHECK,
    healthy: true,
    probeTime: now.toISOString(),
    message: message.slice(0, 4096),
  };
}

/** The Pods and the Node that ask not to be disrupted, in words, for a bypass's record; undefined: none. */
export function bypassedHolders(holders: readonly DoNotDisruptHolder[]): string | undefined {
  const asking = holders.filter((h) => asked(h.value) !== undefined).map((h) => h.what);
  return asking.length > 0 ? listed(asking) : undefined;
}
