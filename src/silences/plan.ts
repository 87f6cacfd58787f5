// Alertmanager silences while an action runs (ActionPolicy spec.alertmanagerSilence):
// when to hold, renew and release them, as a pure function of the action's decided
// status, the policies, the node's labels, what this process knows of its calls to
// Alertmanager, and the time. The action reconciler adds the plan to its decision after
// decide() (src/actions/silences.ts) and makes the calls (leases.ts).
//
// A silence is a courtesy, never a gate: nothing here holds back or fails an action.
// Alertmanager being down shows in the Silenced condition and a Warning Event, and the
// calls are retried with backoff. Each silence is a lease (src/silences/client.ts):
// renewed every RENEW_MS to end LEASE_MS later, never past approval + the policy's
// duration, so a silence that gatehouse cannot expire (it died, Alertmanager was down)
// lapses by itself within minutes.
//
// Records in status.silences, one per distinct (url, nodeLabel):
//   Pending ─(Alertmanager confirms)→ Active ─(renewals)→ … ─(the action ends)→ Expired
//   and Lapsed when it ended by itself at endsAt (its duration ran out; or Alertmanager
//   could not be reached to expire it). A Pending record is written with the approval,
//   before the first call, so a controller that restarts knows to look for the silence.
import { SILENCED_CONDITION } from '../api/names.ts';
import type {
  NodeActionStatus,
  SilenceRecord,
  SilenceState,
  ObservedNodeAction,
} from '../api/node-action.ts';
import { APPROVED_PHASES } from '../api/phases.ts';
import { parseDuration } from '../duration.ts';
import { findCondition, setCondition } from '../kube/conditions.ts';
import { policyMatches, type ActionRef, type PolicyFacts } from '../policies/evaluate.ts';
import { redactURL } from '../redact.ts';

/** How long a silence lasts past each hold or renewal (client.ts asks Alertmanager for it). */
export const LEASE_MS = 10 * 60_000;

/** The form in which gatehouse keeps an Alertmanager URL: without trailing slashes. */
export function normalizeAlertmanagerURL(url: string): string {
  return url.replace(/\/+$/, '');
}

/** How often a held silence is renewed: a third of its lease, so two renewals may fail before it lapses. */
export const RENEW_MS = LEASE_MS / 3;
/** First retry after a failed call; doubled on each further failure, up to RETRY_MAX_MS. */
export const RETRY_BASE_MS = 5000;
/** Below the renewal interval, so that an outage shorter than a lease leaves no gap. */
export const RETRY_MAX_MS = 2 * 60_000;

/**
 * How long a deleted action's finalizer waits for Alertmanager to expire its silence
 * (retrying with backoff) before letting go and leaving the silence to its lease: long
 * enough for a blip, short enough that `kubectl delete` does not hang on an outage.
 */
export const RELEASE_GRACE_MS = 30_000;

const DEFAULT_NODE_LABEL = 'node';
const DEFAULT_DURATION = '1h';

/** One silence the action should hold: where, on which label, and until when at the latest. */
export interface SilenceTarget {
  url: string;
  nodeLabel: string;
  /** Approval + the policy's duration: the silence never lasts past this. */
  notAfter: Date;
}

export function silenceKey(t: { url: string; nodeLabel: string }): string {
  return `${t.nodeLabel} ${t.url}`;
}

/** What this process knows of its latest call about one silence of one action; lost on restart. */
export interface SilenceCallFacts {
  op: 'hold' | 'release';
  state: 'running' | 'succeeded' | 'failed';
  /** When the call started (running) or ended. */
  at: Date;
  /** Consecutive failed calls for this silence: before this one while it runs, then with it (0 after a success). */
  failures: number;
  /** The error of a failed call; while a retry runs, the error it retries. */
  message?: string;
  /** The failed call (or the one a retry retries) got no answer at all (refused, timed out). */
  unreachable?: boolean;
  /** A hold's result: the silence as Alertmanager now has it. */
  id?: string;
  endsAt?: string;
}

export type SilenceEffect =
  | { type: 'silence'; op: 'hold'; url: string; nodeLabel: string; notAfter: string }
  | { type: 'silence'; op: 'release'; url: string; nodeLabel: string };

/** An Event on the action about its silences. */
export interface SilenceEvent {
  type: 'event';
  eventType: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

/** What the silences add to an action's decision. */
export interface SilencePlan {
  /** The decided status, with status.silences and the Silenced condition. */
  status: NodeActionStatus;
  /** Calls to make, after the status is written; and Events. */
  effects: (SilenceEffect | SilenceEvent)[];
  /** When to look again for the silences' sake (a renewal, a retry). */
  wakeAfterMs?: number;
  /** No silence is held or being released any more: the finalizer may go. */
  settled: boolean;
}

export interface SilenceInput {
  now: Date;
  /** The ActionPolicies in force (not being deleted). */
  policies: readonly PolicyFacts[];
  /** The node's labels; undefined: the node is gone, so which policies govern it is unknown. */
  nodeLabels: Record<string, string> | undefined;
  /** This process's latest call per silence of the action, by silenceKey(). */
  facts: ReadonlyMap<string, SilenceCallFacts>;
}

/**
 * The silences an action approved at `approvalTime` should hold: one per distinct
 * (url, nodeLabel) among the policies that govern it. When several policies name the
 * same one, the shortest duration wins: each policy's duration is a longest.
 */
export function silenceTargets(
  policies: readonly PolicyFacts[],
  ref: ActionRef,
  labels: Record<string, string>,
  approvalTime: Date,
): SilenceTarget[] {
  const targets = new Map<string, SilenceTarget>();
  for (const policy of policies) {
    const silence = policy.spec.alertmanagerSilence;
    if (!silence || !policyMatches(policy.spec, ref, labels)) continue;
    let durationMs: number;
    try {
      durationMs = parseDuration(silence.duration ?? DEFAULT_DURATION);
    } catch {
      // The CRD refuses such a value; an object from before that rule gets the default.
      durationMs = parseDuration(DEFAULT_DURATION);
    }
    const target: SilenceTarget = {
      url: normalizeAlertmanagerURL(silence.url),
      nodeLabel: silence.nodeLabel ?? DEFAULT_NODE_LABEL,
      notAfter: new Date(approvalTime.getTime() + durationMs),
    };
    const key = silenceKey(target);
    const known = targets.get(key);
    if (!known || target.notAfter < known.notAfter) targets.set(key, target);
  }
  return [...targets.values()].sort((a, b) => silenceKey(a).localeCompare(silenceKey(b)));
}

export function retryDelayMs(failures: number): number {
  return Math.min(RETRY_BASE_MS * 2 ** Math.max(0, failures - 1), RETRY_MAX_MS);
}

const SETTLED: ReadonlySet<SilenceState> = new Set(['Expired', 'Lapsed']);

/** How one silence stands, for the Silenced condition; worst first. */
type Standing =
  | { kind: 'failing'; text: string; unreachable: boolean }
  | { kind: 'releasing'; text: string }
  | { kind: 'pending'; text: string }
  | { kind: 'elapsed'; text: string }
  | { kind: 'renewalFailing'; text: string; unreachable: boolean }
  | { kind: 'active'; text: string }
  | { kind: 'expired'; text: string }
  | { kind: 'lapsed'; text: string };

const ORDER: readonly Standing['kind'][] = [
  'failing',
  'releasing',
  'pending',
  'elapsed',
  'renewalFailing',
  'active',
  'lapsed',
  'expired',
];

/**
 * The silences of an action whose next status was decided as `decided`: the records and
 * the Silenced condition in its status, the calls to make (made after the status is
 * written, so a Pending record is persisted before its silence can exist), Events, when
 * to look again, and whether the finalizer may go. The finalizer waits for releases
 * until the silence would have ended by itself or, for an action being deleted,
 * RELEASE_GRACE_MS at most: deleting an action never hangs on an unreachable
 * Alertmanager. Undefined: the action has, had and is asked for no silence.
 */
export function planSilences(
  decided: NodeActionStatus,
  action: ObservedNodeAction,
  input: SilenceInput,
): SilencePlan | undefined {
  const { now, facts } = input;
  const observed = new Map((action.status?.silences ?? []).map((r) => [silenceKey(r), r]));
  if (observed.size === 0 && facts.size === 0 && input.policies.every((p) => !p.spec.alertmanagerSilence))
    return undefined;

  const status: NodeActionStatus = { ...decided };
  const effects: SilencePlan['effects'] = [];
  const node = action.spec.nodeName;
  const deleted = action.metadata.deletionTimestamp !== undefined;
  const deletedAt = Date.parse(action.metadata.deletionTimestamp ?? '') || now.getTime();
  const running = status.phase !== undefined && APPROVED_PHASES.has(status.phase) && !deleted;
  const approvalTime = status.approvalTime ? new Date(status.approvalTime) : undefined;

  // The silences wanted now. Without the node's labels, the ones held are kept as they
  // are (no renewal) until the action ends, which it soon does without its node.
  const wanted = new Map<string, SilenceTarget | undefined>();
  if (running && approvalTime) {
    if (input.nodeLabels) {
      const ref = { name: action.metadata.name, node, action: action.spec.action };
      for (const t of silenceTargets(input.policies, ref, input.nodeLabels, approvalTime))
        wanted.set(silenceKey(t), t);
    } else {
      for (const [key, r] of observed) if (!SETTLED.has(r.state)) wanted.set(key, undefined);
    }
  }

  let wakeMs: number | undefined;
  const pass: SilencePass = {
    now,
    node,
    deleted,
    deletedAt,
    records: [],
    standings: [],
    effects,
    settled: true,
    wake: (ms: number) => {
      const m = Math.max(0, Math.ceil(ms));
      wakeMs = wakeMs === undefined ? m : Math.min(wakeMs, m);
    },
    event: (eventType: 'Normal' | 'Warning', reason: string, message: string) =>
      effects.push({ type: 'event', eventType, reason, message }),
  };
  const { records, standings, event } = pass;
  const keys = [...new Set([...observed.keys(), ...wanted.keys(), ...facts.keys()])].sort();
  for (const key of keys) {
    const f = facts.get(key);
    const target = wanted.get(key);
    let r: SilenceRecord | undefined = observed.get(key);

    // What the latest call found out is the truth about Alertmanager, as far as we know.
    if (f?.state === 'succeeded' && f.op === 'hold' && f.id && f.endsAt) {
      const url = r?.url ?? target?.url;
      const nodeLabel = r?.nodeLabel ?? target?.nodeLabel;
      if (url !== undefined && nodeLabel !== undefined)
        r = { url, nodeLabel, state: 'Active', id: f.id, endsAt: f.endsAt };
    } else if (f?.state === 'succeeded' && f.op === 'release' && r && !SETTLED.has(r.state)) {
      r = { ...r, state: 'Expired', endsAt: f.at.toISOString() };
    }
    // And time: a silence past its end has ended, whoever was to renew or expire it.
    if (r && !SETTLED.has(r.state) && r.endsAt !== undefined && Date.parse(r.endsAt) <= now.getTime()) {
      if (f?.state !== 'running') r = { ...r, state: 'Lapsed' };
    }

    if (f?.state === 'running') whileCalling(pass, f, r, target);
    else if (wanted.has(key)) hold(pass, f, r, target);
    else if (r) release(pass, f, r);
  }
  const settled = pass.settled;

  // Events for what changed since the observed status.
  for (const r of records) {
    const before = observed.get(silenceKey(r));
    if (before?.state === r.state) continue;
    const where = `${r.nodeLabel}="${node}" in ${redactURL(r.url)}`;
    if (r.state === 'Active')
      event(
        'Normal',
        'Silenced',
        `silenced alerts with ${where} until ${r.endsAt ?? '?'} (silence ${r.id ?? '?'}), renewed while the action runs`,
      );
    else if (r.state === 'Expired') event('Normal', 'SilenceExpired', `expired the silence of ${where}`);
    else if (r.state === 'Lapsed' && before && !deleted)
      event('Normal', 'SilenceEnded', `the silence of ${where} ended at ${r.endsAt ?? '?'}`);
  }

  if (records.length > 0 || status.silences !== undefined) status.silences = records;
  if (standings.length > 0) {
    const previous = findCondition(status.conditions, SILENCED_CONDITION);
    const next = silencedCondition(standings, running);
    const generation = action.metadata.generation;
    status.conditions = setCondition(
      status.conditions,
      { ...next, ...(generation !== undefined ? { observedGeneration: generation } : {}) },
      now,
    );
    const failed = next.reason === 'AlertmanagerUnreachable' || next.reason === 'AlertmanagerError';
    if ((failed || next.reason === 'RenewalFailing') && previous?.reason !== next.reason)
      event(
        'Warning',
        next.reason === 'RenewalFailing' ? 'SilenceRenewalFailed' : 'SilenceFailed',
        next.message,
      );
  }

  return { status, effects, settled, ...(wakeMs !== undefined ? { wakeAfterMs: wakeMs } : {}) };
}

/** One planning pass over an action's silences: what it collects, silence by silence. */
interface SilencePass {
  now: Date;
  node: string;
  deleted: boolean;
  deletedAt: number;
  records: SilenceRecord[];
  standings: Standing[];
  effects: SilencePlan['effects'];
  /** No silence is held or being released: cleared by any that is. */
  settled: boolean;
  wake: (ms: number) => void;
  event: (eventType: 'Normal' | 'Warning', reason: string, message: string) => void;
}

type Place = { url: string; nodeLabel: string };

function place(node: string, x: Place): string {
  return `${x.nodeLabel}="${node}" in ${redactURL(x.url)}`;
}

/** A call about the silence is under way: it is shown, and nothing else is done. */
function whileCalling(
  p: SilencePass,
  f: SilenceCallFacts,
  r: SilenceRecord | undefined,
  target: SilenceTarget | undefined,
): void {
  const where = (x: Place) => place(p.node, x);
  if (f.op === 'hold' || (r && !SETTLED.has(r.state))) p.settled = false;
  if (r) p.records.push(r);
  // A retry keeps showing the failure it retries, so the condition does not flap.
  const x = r ?? target;
  const subject = x ? where(x) : 'the node';
  const error = f.failures > 0 ? (f.message ?? 'failed') : undefined;
  const unreachable = f.unreachable ?? false;
  if (f.op === 'hold' && r?.state === 'Active') {
    const until = `${where(r)} until ${r.endsAt ?? '?'} (silence ${r.id ?? '?'})`;
    p.standings.push(
      error
        ? { kind: 'renewalFailing', unreachable, text: `silenced ${until}, but renewing it failed: ${error}` }
        : { kind: 'active', text: `silenced ${until}` },
    );
  } else if (f.op === 'hold') {
    p.standings.push(
      error
        ? { kind: 'failing', unreachable, text: `no silence of ${subject}: ${error}` }
        : { kind: 'pending', text: `asking ${subject} for a silence` },
    );
  } else {
    p.standings.push(
      error
        ? {
            kind: 'failing',
            unreachable,
            text: `could not expire the silence of ${subject} yet (${error}); it ends by itself at ${r?.endsAt ?? '?'} at the latest`,
          }
        : { kind: 'releasing', text: `expiring the silence of ${subject}` },
    );
  }
}

/** When a call that failed may be tried again (now, without a failure), and its error. */
function retryOf(p: SilencePass, f: SilenceCallFacts | undefined): { retryAt: number; failure?: string } {
  return f?.state === 'failed'
    ? { retryAt: f.at.getTime() + retryDelayMs(f.failures), failure: f.message ?? 'failed' }
    : { retryAt: p.now.getTime() };
}

/** A silence wanted now: held, renewed when due, retried after a failure. Undefined target: the node is gone. */
function hold(
  p: SilencePass,
  f: SilenceCallFacts | undefined,
  observed: SilenceRecord | undefined,
  target: SilenceTarget | undefined,
): void {
  const { now } = p;
  const where = (x: Place) => place(p.node, x);
  let r = observed;
  const { retryAt, failure } = retryOf(p, f);
  p.settled = false;
  if (!target) {
    // Node gone: held as it is.
    if (r) p.records.push(r);
    return;
  }
  const notAfter = target.notAfter.getTime();
  if (now.getTime() >= notAfter) {
    if (r) p.records.push(r);
    p.standings.push({
      kind: 'elapsed',
      text: `the silence of ${where(target)} ended at ${target.notAfter.toISOString()}, its policy's duration after approval`,
    });
    return;
  }
  let due: number | undefined;
  if (!r || SETTLED.has(r.state) || r.state === 'Pending') due = retryAt;
  else if (r.endsAt !== undefined && Date.parse(r.endsAt) >= notAfter)
    due = undefined; // Already lasts as long as it may: nothing to renew.
  else if (f?.state === 'succeeded' && f.op === 'hold') due = f.at.getTime() + RENEW_MS;
  else due = f ? retryAt : now.getTime(); // No call yet in this process (a restart): renew now.

  if (due !== undefined && due <= now.getTime()) {
    p.effects.push({
      type: 'silence',
      op: 'hold',
      url: target.url,
      nodeLabel: target.nodeLabel,
      notAfter: target.notAfter.toISOString(),
    });
    if (!r || r.state !== 'Active') {
      // Recorded before the call, with the end it asks for: the latest it could last.
      const endsAt = new Date(Math.min(now.getTime() + LEASE_MS, notAfter)).toISOString();
      r = { url: target.url, nodeLabel: target.nodeLabel, state: 'Pending', endsAt };
    }
  } else if (due !== undefined) {
    p.wake(due - now.getTime());
  }
  if (r) p.records.push(r);
  if (r?.state === 'Active') {
    const until = `${where(r)} until ${r.endsAt ?? '?'} (silence ${r.id ?? '?'})`;
    p.standings.push(
      failure && f
        ? {
            kind: 'renewalFailing',
            unreachable: f.unreachable ?? false,
            text: `silenced ${until}, but renewing it failed: ${failure}`,
          }
        : { kind: 'active', text: `silenced ${until}` },
    );
  } else if (failure && f) {
    p.standings.push({
      kind: 'failing',
      unreachable: f.unreachable ?? false,
      text: `no silence of ${where(target)}: ${failure}`,
    });
  } else {
    p.standings.push({ kind: 'pending', text: `asking ${where(target)} for a silence` });
  }
}

/** A silence not wanted (the action ended, or no policy asks for it any more): released. */
function release(p: SilencePass, f: SilenceCallFacts | undefined, observed: SilenceRecord): void {
  const { now, event } = p;
  const where = (x: Place) => place(p.node, x);
  let r = observed;
  if (SETTLED.has(r.state)) {
    p.records.push(r);
    p.standings.push(
      r.state === 'Expired'
        ? { kind: 'expired', text: `the silence of ${where(r)} was expired at ${r.endsAt ?? '?'}` }
        : { kind: 'lapsed', text: `the silence of ${where(r)} ended by itself at ${r.endsAt ?? '?'}` },
    );
    return;
  }
  const { retryAt, failure } = retryOf(p, f);
  const releaseFailed = f?.state === 'failed' && f.op === 'release';
  if (releaseFailed && p.deleted && now.getTime() >= p.deletedAt + RELEASE_GRACE_MS) {
    // The action is going away, and its deletion waits no longer on Alertmanager: the
    // lease ends the silence by itself, soon.
    r = { ...r, state: 'Lapsed' };
    p.records.push(r);
    event(
      'Warning',
      'SilenceLapsed',
      `could not expire the silence of ${where(r)} (${failure ?? 'failed'}); it ends by itself at ${r.endsAt ?? 'the end of its lease'}`,
    );
    p.standings.push({
      kind: 'lapsed',
      text: `the silence of ${where(r)} ends by itself at ${r.endsAt ?? '?'}`,
    });
    return;
  }
  p.settled = false;
  p.records.push(r);
  // A failed release is retried with backoff; the first release goes out at once.
  if (!releaseFailed || retryAt <= now.getTime()) {
    p.effects.push({ type: 'silence', op: 'release', url: r.url, nodeLabel: r.nodeLabel });
    p.standings.push({ kind: 'releasing', text: `expiring the silence of ${where(r)}` });
  } else {
    p.wake(retryAt - now.getTime());
    p.standings.push({
      kind: 'failing',
      unreachable: f.unreachable ?? false,
      text: `could not expire the silence of ${where(r)} yet (${failure ?? 'failed'}); it ends by itself at ${r.endsAt ?? '?'} at the latest`,
    });
  }
}

function silencedCondition(
  standings: readonly Standing[],
  running: boolean,
): { type: string; status: 'True' | 'False' | 'Unknown'; reason: string; message: string } {
  const sorted = [...standings].sort((a, b) => ORDER.indexOf(a.kind) - ORDER.indexOf(b.kind));
  const worst = sorted[0] as Standing;
  const message = sorted.map((s) => s.text).join('; ');
  const courtesy = 'the action goes on without it; retrying';
  switch (worst.kind) {
    case 'failing':
      return {
        type: SILENCED_CONDITION,
        status: running ? 'False' : 'Unknown',
        reason: worst.unreachable ? 'AlertmanagerUnreachable' : 'AlertmanagerError',
        message: running ? `${message} (${courtesy})` : message,
      };
    case 'releasing':
      return { type: SILENCED_CONDITION, status: 'Unknown', reason: 'Expiring', message };
    case 'pending':
      return { type: SILENCED_CONDITION, status: 'Unknown', reason: 'Silencing', message };
    case 'elapsed':
      return { type: SILENCED_CONDITION, status: 'False', reason: 'DurationElapsed', message };
    case 'renewalFailing':
      return {
        type: SILENCED_CONDITION,
        status: 'True',
        reason: 'RenewalFailing',
        message: `${message} (retrying before it ends)`,
      };
    case 'active':
      return { type: SILENCED_CONDITION, status: 'True', reason: 'Silenced', message };
    case 'lapsed':
    case 'expired':
      return {
        type: SILENCED_CONDITION,
        status: 'False',
        reason: running ? 'NotRequested' : 'ActionEnded',
        message: running ? `no governing policy asks for a silence any more: ${message}` : message,
      };
  }
}
