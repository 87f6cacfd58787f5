// Following a NodeRollout (`rollout status -w`, `rollout create -w`, `upgrade --rollout`)
// with the node commands' progress: each running node's NodeAction as a live block on a
// terminal (its checks, hooks, drain, node), or one line per change in a pipe, through
// the same LiveDisplay; the rollout's own changes (counts, message, a node held for its
// window, skipped, vanished, halted, complete) as lines that stay above it.
import type { ObservedNodeRollout, RolloutNode } from '../api/node-rollout.ts';
import { NODE_ROLLOUTS_PATH } from '../api/paths.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { RestClient } from '../kube/rest.ts';
import { ObjectWatch } from '../kube/watch.ts';
import type { Backend } from './backend.ts';
import type { LiveDisplay } from './display.ts';
import { EXIT, type ExitCode } from './exit.ts';
import { outcomeLine } from './progress.ts';
import { PLAIN, type Style } from './style.ts';
import { oneLine } from './table.ts';

type Rollout = ObservedNodeRollout;

const condition = (r: Rollout | undefined, type: string) =>
  r?.status?.conditions?.find((c) => c.type === type);

/** What the exit code of a rollout that stopped moving is: 0 done without failures, 1 halted, failed or nodes left quarantined. */
export function rolloutCode(r: Rollout): ExitCode | undefined {
  const halted = condition(r, 'Halted');
  if (
    halted?.status === 'True' &&
    (halted.reason === 'FailureBudgetExhausted' || halted.reason === 'TooManyNodes')
  )
    return EXIT.failed;
  if (condition(r, 'Complete')?.status === 'True')
    // Nodes left quarantined need a person, as failed ones do.
    return (r.status?.counts?.failed ?? 0) + (r.status?.counts?.quarantined ?? 0) > 0 ? EXIT.failed : EXIT.ok;
  return undefined;
}

export function countsLine(r: Rollout): string | undefined {
  const c = r.status?.counts;
  if (!c) return undefined;
  const parts = [
    `${String(c.succeeded)} succeeded`,
    `${String(c.running)} running`,
    `${String(c.pending)} pending`,
    `${String(c.failed)} failed`,
    `${String(c.skipped)} skipped`,
    ...(c.vanished ? [`${String(c.vanished)} vanished`] : []),
    ...(c.quarantined ? [`${String(c.quarantined)} quarantined`] : []),
  ];
  return parts.join(', ');
}

/** A node's change in a rollout's words; undefined when a followed action's own lines tell it. */
function nodeEvent(before: RolloutNode | undefined, n: RolloutNode, followed: boolean): string | undefined {
  const message = n.message ? `: ${oneLine(n.message, 200)}` : '';
  switch (n.phase) {
    case 'Waiting':
      return before?.phase !== 'Waiting' || before.message !== n.message
        ? `${n.node} waiting${message}`
        : undefined;
    case 'Skipped':
    case 'Vanished':
    case 'Quarantined':
      return before?.phase !== n.phase ? `${n.node} ${n.phase.toLowerCase()}${message}` : undefined;
    case 'Running':
      return before?.phase !== 'Running' ? `${n.node} started (${n.action ?? '?'})` : undefined;
    case 'Succeeded':
    case 'Failed':
      // A followed action ends with its own outcome line.
      return before?.phase !== n.phase && !followed
        ? `${n.node} ${n.phase.toLowerCase()}${n.phase === 'Failed' ? message : ''}`
        : undefined;
    case 'Pending':
      return undefined;
  }
}

/**
 * The lines a rollout's change from one observation to the next tells (no colour, no
 * redraws): on the first one its target and counts, then each change of its counts,
 * message, nodes and conditions. `followed`: nodes whose action is followed on its own.
 */
export function rolloutEvents(
  previous: Rollout | undefined,
  next: Rollout,
  followed: ReadonlySet<string> = new Set(),
): string[] {
  const events: string[] = [];
  const name = next.metadata.name;
  if (!previous) {
    const target = next.spec.upgrade ? ` to ${next.spec.upgrade.image}` : '';
    events.push(`NodeRollout ${name}: ${next.spec.action}${target}${next.spec.paused ? ' (paused)' : ''}`);
  } else if (previous.spec.paused !== next.spec.paused) {
    events.push(`NodeRollout ${name} ${next.spec.paused ? 'paused' : 'resumed'}`);
  }
  const beforeNodes = new Map((previous?.status?.nodes ?? []).map((n) => [n.node, n]));
  for (const n of next.status?.nodes ?? []) {
    const line = nodeEvent(beforeNodes.get(n.node), n, followed.has(n.node));
    if (line) events.push(line);
  }
  const counts = countsLine(next);
  if (counts && counts !== (previous ? countsLine(previous) : undefined)) events.push(counts);
  else if (!counts && !previous) events.push('not processed by the controller yet');
  const message = next.status?.message;
  const newMessage = message && message !== previous?.status?.message ? message : undefined;
  let said = false;
  const conditionEvents: string[] = [];
  for (const type of ['Halted', 'Complete']) {
    const now = condition(next, type);
    const was = condition(previous, type);
    if (now?.status === 'True' && (was?.status !== 'True' || was.reason !== now.reason)) {
      // The condition's message is often the rollout's: said once, with the condition.
      const why = now.message ? `: ${oneLine(now.message, 200)}` : '';
      if (now.message === newMessage) said = true;
      conditionEvents.push(`${type === 'Halted' ? 'halted' : 'complete'} (${now.reason})${why}`);
    } else if (type === 'Halted' && was?.status === 'True' && now?.status !== 'True') {
      conditionEvents.push('no longer halted');
    }
  }
  if (newMessage && !said) events.push(oneLine(newMessage, 200));
  events.push(...conditionEvents);
  return events.map((e) => `rollout ${name}: ${e}`);
}

/** The NodeActions to follow: the running nodes' actions. */
export function runningActions(r: Rollout): { node: string; action: string }[] {
  return (r.status?.nodes ?? []).flatMap((n) =>
    n.phase === 'Running' && n.action ? [{ node: n.node, action: n.action }] : [],
  );
}

export interface FollowRolloutOptions {
  rest: RestClient;
  backend: Backend;
  display: LiveDisplay;
  style?: Style;
  signal: AbortSignal;
  /** Test hooks: the rollout watch's timing. */
  watchTimeoutSeconds?: number;
}

/**
 * Follows a rollout until it is complete or halted on failures: its changes as lines,
 * its running actions through `display`. Resolves with the exit code (3 if the rollout
 * is deleted, 130 when `signal` aborts — the rollout goes on).
 */
export async function followRollout(name: string, o: FollowRolloutOptions): Promise<ExitCode> {
  const style = o.style ?? PLAIN;
  const stop = new AbortController();
  const signal = AbortSignal.any([o.signal, stop.signal]);
  const ended = Promise.withResolvers<ExitCode>();
  const end = (code: ExitCode) => {
    if (stop.signal.aborted) return;
    stop.abort();
    ended.resolve(code);
  };
  const onAbort = () => end(EXIT.interrupted);
  o.signal.addEventListener('abort', onAbort, { once: true });
  const followed = new Set<string>();
  const follows: Promise<unknown>[] = [];
  let last: Rollout | undefined;

  const followAction = (node: string, action: string) => {
    followed.add(node);
    follows.push(
      o.backend
        .follow(action, (p) => o.display.update(action, p), { signal })
        .then(
          (p) => o.display.finish(action, outcomeLine(action, p, style)),
          (error: unknown) => {
            // Stopped along with the rollout's follow: nothing to tell.
            if (!signal.aborted) o.display.finish(action, `${action}: cannot follow: ${String(error)}`);
          },
        ),
    );
  };

  const watch = new ObjectWatch<Rollout & KubeObject>({
    rest: o.rest,
    path: NODE_ROLLOUTS_PATH,
    name,
    ...(o.watchTimeoutSeconds !== undefined ? { watchTimeoutSeconds: o.watchTimeoutSeconds } : {}),
    onVersion: (r) => {
      if (stop.signal.aborted) return;
      if (!r) {
        o.display.note(`rollout ${name}: ${last ? 'deleted' : 'not found'}`);
        end(last ? EXIT.cancelled : EXIT.failed);
        return;
      }
      for (const { node, action } of runningActions(r)) if (!followed.has(node)) followAction(node, action);
      for (const line of rolloutEvents(last, r, followed)) o.display.note(line);
      last = r;
      const code = rolloutCode(r);
      if (code !== undefined) void Promise.allSettled(follows).then(() => end(code));
    },
  });
  const watching = watch.run(signal).catch((error: unknown) => {
    if (!stop.signal.aborted) {
      stop.abort();
      ended.reject(error);
    }
  });
  try {
    return await ended.promise;
  } finally {
    stop.abort();
    o.signal.removeEventListener('abort', onAbort);
    await Promise.allSettled([watching, ...follows]);
  }
}
