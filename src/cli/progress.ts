// What a person following an action sees, as pure functions of what was observed:
//
// - progressLines(): the live block on a terminal — the phase and how long it has been
//   in it, the checks it waits on and why, each hook's Job state and duration, the
//   node's readiness and boot — redrawn as things change;
// - progressEvents(): the same story as appended lines, one per change, for logs and
//   pipes (nothing is ever redrawn there);
// - outcomeLine(): the one line that stays once an action is over.
import { blockedCount, blockedSince, blockerWords, drainHoldWords } from '../actions/drain-hold.ts';
import { isTerminal } from '../api/phases.ts';
import { isBootHookKind } from '../boots/record.ts';
import type { ActionObject, NodeView, Progress } from './backend.ts';
import { PLAIN, type Style } from './style.ts';
import { elapsed, oneLine } from './table.ts';

type Status = NonNullable<ActionObject['status']>;
type Phase = NonNullable<Status['phase']>;
type HookRunRecord = NonNullable<Status['hooks']>[number];

function since(iso: string | undefined, now: Date): string {
  if (!iso) return '';
  const ms = now.getTime() - Date.parse(iso);
  return Number.isFinite(ms) ? elapsed(ms) : '';
}

function between(start: string | undefined, end: string | undefined): string {
  if (!start || !end) return '';
  const ms = Date.parse(end) - Date.parse(start);
  return Number.isFinite(ms) ? elapsed(ms) : '';
}

export function phaseStyle(phase: Phase | undefined, style: Style): (text: string) => string {
  switch (phase) {
    case 'Succeeded':
      return style.good;
    case 'Failed':
    case 'Denied':
      return style.bad;
    case 'Cancelled':
      return style.warn;
    default:
      return style.busy;
  }
}

function shortBoot(bootID: string | undefined): string {
  return bootID ? bootID.slice(0, 8) : '?';
}

/** The node, in one line: readiness, boot (and whether it changed), cordon, preready taint. */
export function nodeLine(node: NodeView | undefined, action: ActionObject | undefined, style: Style): string {
  if (!node) return '';
  if (!node.exists) return `node ${node.name}: ${style.warn('gone')} (no Node object)`;
  const parts = [
    node.ready === 'True'
      ? style.good('Ready')
      : style.bad(node.ready === 'False' ? 'NotReady' : 'Ready unknown'),
  ];
  const before = action?.status?.bootIDBefore;
  if (before && node.bootID && node.bootID !== before) {
    parts.push(`boot ${shortBoot(before)} → ${style.good(shortBoot(node.bootID))}`);
  } else {
    parts.push(`boot ${shortBoot(node.bootID)}`);
  }
  if (node.unschedulable) parts.push(style.warn('cordoned'));
  if (node.preready) parts.push(style.warn('held by preready hooks'));
  if (node.osImage) parts.push(style.dim(node.osImage));
  return `node ${node.name}: ${parts.join(' · ')}`;
}

function hookName(h: HookRunRecord): string {
  return `${h.kind} ${h.namespace}/${h.name}`;
}

/**
 * One hook attempt, with its Job and how long it ran (or has been running); `what` is
 * `undo of` for the run that undoes a pre-action hook (status.undo.runs).
 */
export function hookLine(
  h: HookRunRecord,
  now: Date,
  style: Style,
  what: 'hook' | 'undo of' = 'hook',
): string {
  const icon =
    h.phase === 'Succeeded'
      ? style.good('✓')
      : h.phase === 'Failed'
        ? style.bad('✗')
        : h.phase === 'Bypassed'
          ? style.warn('–')
          : style.busy('●');
  const duration = h.completionTime ? between(h.startTime, h.completionTime) : since(h.startTime, now);
  const phase =
    h.phase === 'Succeeded' ? style.good(h.phase) : h.phase === 'Failed' ? style.bad(h.phase) : h.phase;
  const details = [
    h.jobName
      ? `job ${h.jobName}`
      : h.runs === 'Approval'
        ? 'a person’s approval'
        : h.runs === 'Readiness'
          ? 'readiness preset'
          : 'webhook',
    ...(h.attempt > 1 ? [`attempt ${String(h.attempt)}`] : []),
    // An undo run is recorded with failurePolicy Ignore (its failure stops nothing), yet
    // a failed one is a Warning and a condition: "failures ignored" would say otherwise.
    ...(h.failurePolicy === 'Ignore' && what === 'hook' ? ['failures ignored'] : []),
  ];
  const message = h.message && h.phase !== 'Succeeded' ? `: ${oneLine(h.message, 120)}` : '';
  return `${icon} ${what} ${hookName(h)} ${phase}${duration ? ` ${duration}` : ''} (${details.join(', ')})${message}`;
}

/**
 * What holds the drain (status.drain), at most `listed` pods named: how long it has
 * waited, then each pod refused. Once the action is over, how long it was held.
 */
export function drainLines(status: Status, now: Date, style: Style, listed = 5): string[] {
  const record = status.drain;
  const blockers = record?.blockers ?? [];
  const [first, ...others] = blockers;
  if (!first) return [];
  const over = isTerminal(status.phase);
  const waited = over
    ? between(blockedSince(record), status.completionTime)
    : since(blockedSince(record), now);
  const lines = [
    `${style.bad('✗')} drain ${over ? 'was held' : 'waiting'}${waited ? ` ${waited}` : ''}: ${blockerWords(first)}`,
  ];
  for (const b of others.slice(0, listed - 1)) {
    const refused = over ? '' : style.dim(` (refused ${since(b.since, now)})`);
    lines.push(`    ${blockerWords(b)}${refused}`);
  }
  const rest = blockedCount(record) - Math.min(listed, blockers.length);
  if (rest > 0) lines.push(`    and ${String(rest)} more pod${rest === 1 ? '' : 's'} refused`);
  return lines;
}

/**
 * The undo of the pre-action hooks (status.undo): each run; without runs, why nothing
 * is undone, when a pre-action hook had run (`always`: even when none had).
 */
export function undoLines(status: Status, now: Date, style: Style, always = false): string[] {
  const undo = status.undo;
  if (!undo) return [];
  const runs = undo.runs ?? [];
  if (runs.length > 0) return runs.map((r) => hookLine(r, now, style, 'undo of'));
  const hooksRan = (status.hooks ?? []).some((h) => !isBootHookKind(h.kind) && h.phase !== 'Bypassed');
  if (!always && !hooksRan) return [];
  const reason = undo.reason.startsWith('nothing undone') ? undo.reason : `nothing undone: ${undo.reason}`;
  return [`${style.warn('–')} ${oneLine(reason, 160)}`];
}

/** The live block of one action on a terminal: a header and indented details. */
export function progressLines(name: string, progress: Progress, now: Date, style: Style = PLAIN): string[] {
  const { action, node } = progress;
  if (!action) return [`${style.warn('–')} ${name}: deleted`];
  const status = action.status ?? {};
  const phase = status.phase;
  const paint = phaseStyle(phase, style);
  const inPhase = since(status.phaseTime ?? status.startTime ?? action.metadata.creationTimestamp, now);
  const lines = [
    `${paint(isTerminal(phase) ? '■' : '▶')} ${style.bold(action.spec.nodeName)} ${action.spec.action} ${paint(phase ?? 'New')}${inPhase ? ` ${inPhase}` : ''} ${style.dim(`(${name})`)}`,
  ];
  const checks = status.checks ?? [];
  // The etcd guard (builtin:etcd) may hold an action after its pre-hooks too, at approval.
  const held = checks.some((c) => !c.healthy && !c.bypassed);
  if (
    phase === 'WaitingForHealth' ||
    ((phase === 'Failed' || phase === 'Denied' || phase === 'RunningPreHooks') && held)
  ) {
    const failing = checks.filter((c) => !c.healthy && !c.bypassed);
    if (checks.length === 0) lines.push(`  waiting for the health checks to be evaluated`);
    else if (failing.length > 0) {
      lines.push(`  waiting for ${String(failing.length)} of ${String(checks.length)} checks:`);
    }
    for (const c of checks) {
      if (c.bypassed) lines.push(`    ${style.warn('–')} check ${c.name} bypassed`);
      else if (c.notChecked && c.healthy)
        lines.push(`    ${style.warn('–')} check ${c.name} not checked: ${oneLine(c.message ?? '', 160)}`);
      else if (c.healthy) lines.push(`    ${style.good('✓')} check ${c.name} healthy`);
      else {
        const probed = c.probeTime ? ` (probed ${since(c.probeTime, now)} ago)` : '';
        lines.push(
          // The probe's age first: a long message is what a narrow terminal cuts.
          `    ${style.bad('✗')} check ${c.name}${style.dim(probed)}: ${oneLine(c.message ?? 'unhealthy', 160)}`,
        );
      }
    }
  } else if (checks.length > 0) {
    const bypassed = checks.filter((c) => c.bypassed).length;
    const unchecked = checks.filter((c) => c.notChecked && !c.bypassed);
    lines.push(
      `  ${style.good('✓')} ${String(checks.length - bypassed - unchecked.length)} checks held${bypassed ? `, ${String(bypassed)} bypassed` : ''}`,
    );
    for (const c of unchecked)
      lines.push(`    ${style.warn('–')} check ${c.name} not checked: ${oneLine(c.message ?? '', 160)}`);
  }
  for (const h of status.hooks ?? []) lines.push(`  ${hookLine(h, now, style)}`);
  for (const l of drainLines(status, now, style)) lines.push(`  ${l}`);
  for (const l of undoLines(status, now, style)) lines.push(`  ${l}`);
  const nodeText = nodeLine(node, action, style);
  if (nodeText) lines.push(`  ${nodeText}`);
  if (status.message) lines.push(`  ${style.dim(oneLine(status.message, 200))}`);
  return lines;
}

function hookKey(h: HookRunRecord): string {
  return `${h.kind}/${h.namespace}/${h.name}/${String(h.attempt)}`;
}

/** The changes from one observation to the next, as lines for a log (no colour, no redraws). */
export function progressEvents(previous: Progress | undefined, next: Progress): string[] {
  const events: string[] = [];
  const before = previous?.action;
  const after = next.action;
  if (!after) {
    if (before) events.push(`${before.spec.nodeName}: ${before.metadata.name} deleted`);
    return events;
  }
  const node = after.spec.nodeName;
  const say = (text: string) => events.push(`${node}: ${text}`);
  const status = after.status ?? {};
  if (!before) {
    say(
      `${after.metadata.name}: ${after.spec.action} (${after.spec.execution ?? 'Managed'}) requested by ${after.spec.requestedBy}`,
    );
  }
  const oldStatus = before?.status ?? {};
  // What finished (a check that holds, a hook that is done) led to the phase change and
  // is told before it; what is still going on (a failing check, a running hook) after.
  const finished: string[] = [];
  const ongoing: string[] = [];
  const oldChecks = new Map((oldStatus.checks ?? []).map((c) => [c.name, c]));
  for (const c of status.checks ?? []) {
    const old = oldChecks.get(c.name);
    const changed =
      !old ||
      old.healthy !== c.healthy ||
      old.bypassed !== c.bypassed ||
      (!c.healthy && old.message !== c.message);
    if (!changed) continue;
    const settled = old ? finished : ongoing;
    if (c.bypassed) settled.push(`check ${c.name} bypassed`);
    else if (c.healthy) settled.push(`check ${c.name} healthy`);
    else ongoing.push(`check ${c.name} unhealthy: ${oneLine(c.message ?? '', 200)}`);
  }
  const oldHooks = new Map((oldStatus.hooks ?? []).map((h) => [hookKey(h), h]));
  for (const h of status.hooks ?? []) {
    const old = oldHooks.get(hookKey(h));
    if (old && old.phase === h.phase) continue;
    const job = h.jobName ? ` (job ${h.jobName})` : '';
    const took = h.completionTime ? ` after ${between(h.startTime, h.completionTime)}` : '';
    const attempt = h.attempt > 1 ? ` attempt ${String(h.attempt)}` : '';
    const message =
      h.message && h.phase !== 'Succeeded' && h.phase !== 'Running' ? `: ${oneLine(h.message, 200)}` : '';
    const line = `hook ${hookName(h)}${attempt} ${h.phase}${took}${job}${message}`;
    (h.phase === 'Pending' || h.phase === 'Running' ? ongoing : finished).push(line);
  }
  const hold = JSON.stringify(status.drain ?? null);
  if (hold !== JSON.stringify(oldStatus.drain ?? null)) {
    if (status.drain) ongoing.push(`drain waiting: ${drainHoldWords(status.drain)}`);
    else if (oldStatus.drain && !isTerminal(status.phase))
      finished.push('drain proceeds: the refused evictions went through');
  }
  const oldUndo = new Map((oldStatus.undo?.runs ?? []).map((r) => [hookKey(r), r]));
  if (status.undo && !oldStatus.undo && !status.undo.runs?.length) {
    const line = undoLines(status, new Date(), PLAIN)[0];
    if (line) ongoing.push(line.replace(/^– /, ''));
  }
  for (const r of status.undo?.runs ?? []) {
    if (oldUndo.get(hookKey(r))?.phase === r.phase) continue;
    const job = r.jobName ? ` (job ${r.jobName})` : '';
    const message = r.message && r.phase === 'Failed' ? `: ${oneLine(r.message, 200)}` : '';
    ongoing.push(`undo of ${hookName(r)} ${r.phase}${job}${message}`);
  }
  finished.forEach(say);
  // The node's changes usually cause the phase change (it went down, it came back).
  const oldNode = previous?.node;
  const n = next.node;
  if (n) {
    if (!n.exists && (oldNode?.exists ?? true)) say(`node ${n.name} is gone`);
    if (n.exists) {
      if (!oldNode || oldNode.ready !== n.ready)
        say(`node ${n.name} ${n.ready === 'True' ? 'Ready' : 'NotReady'}`);
      // Against the boot last seen, or on a first look the boot the action was approved at.
      const lastBoot = oldNode?.bootID ?? status.bootIDBefore;
      if (lastBoot && n.bootID && lastBoot !== n.bootID) {
        say(`node ${n.name} booted again (boot ${shortBoot(n.bootID)})`);
      }
      if (oldNode && oldNode.unschedulable !== n.unschedulable) {
        say(`node ${n.name} ${n.unschedulable ? 'cordoned' : 'uncordoned'}`);
      }
      if (oldNode && oldNode.preready !== n.preready) {
        say(`node ${n.name} ${n.preready ? 'held by preready hooks' : 'released by preready hooks'}`);
      }
      if (oldNode?.osImage && n.osImage && oldNode.osImage !== n.osImage)
        say(`node ${n.name} runs ${n.osImage}`);
    }
  }
  if (status.phase !== oldStatus.phase && status.phase) {
    const ended = isTerminal(status.phase);
    const message =
      status.message && (ended || status.phase === 'Pending') ? `: ${oneLine(status.message, 200)}` : '';
    say(`phase ${status.phase}${message}`);
  } else if (status.phase === 'Pending' && status.message && status.message !== oldStatus.message) {
    say(oneLine(status.message, 200));
  }
  ongoing.forEach(say);
  return events;
}

/** The line that stays once an action is over (or, with --external, approved). */
export function outcomeLine(name: string, progress: Progress, style: Style = PLAIN): string {
  const action = progress.action;
  if (!action) return `${style.warn('–')} ${name} was deleted before it finished`;
  const status = action.status ?? {};
  const phase = status.phase;
  const took = between(action.metadata.creationTimestamp, status.completionTime ?? status.approvalTime);
  const paint = phaseStyle(phase, style);
  const icon =
    phase === 'Succeeded' || phase === 'Approved' || phase === 'Held'
      ? style.good('✓')
      : phase === 'Cancelled'
        ? style.warn('–')
        : style.bad('✗');
  const message = phase !== 'Succeeded' && status.message ? `: ${oneLine(status.message, 200)}` : '';
  // The proof that the node went through it: the boot it had, and the one it came back with.
  const { bootIDBefore, bootIDAfter } = status;
  const boots =
    phase === 'Succeeded' && bootIDBefore && bootIDAfter && bootIDBefore !== bootIDAfter
      ? `: boot ${shortBoot(bootIDBefore)} → ${shortBoot(bootIDAfter)}`
      : '';
  return `${icon} ${action.spec.nodeName} ${action.spec.action} ${paint(phase ?? 'New')}${took ? ` after ${took}` : ''} (${name})${message}${boots}`;
}
