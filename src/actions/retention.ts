// Which finished actions to garbage-collect: those finished longer ago than the
// retention period, except the last few of each node, which always stay as its record.
import type { ObservedNodeAction } from '../api/node-action.ts';
import { isTerminal } from '../api/phases.ts';

export interface RetentionPolicy {
  /** How long a finished action is kept (DESIGN.md: 7 days by default). */
  retentionMs: number;
  /** The most recent finished actions of each node, kept whatever their age. */
  keepPerNode: number;
}

export const DEFAULT_RETENTION: RetentionPolicy = { retentionMs: 7 * 24 * 3_600_000, keepPerNode: 3 };

function finishedAt(action: ObservedNodeAction): number {
  return Date.parse(action.status?.completionTime ?? action.metadata.creationTimestamp ?? '') || 0;
}

export interface RetentionPlan {
  expired: ObservedNodeAction[];
  /** When the next kept action expires, if any may. */
  nextExpiryMs?: number;
}

export function planRetention(
  actions: readonly ObservedNodeAction[],
  now: Date,
  policy: RetentionPolicy = DEFAULT_RETENTION,
): RetentionPlan {
  const byNode = new Map<string, ObservedNodeAction[]>();
  for (const action of actions) {
    if (!isTerminal(action.status?.phase) || action.metadata.deletionTimestamp) continue;
    const list = byNode.get(action.spec.nodeName) ?? [];
    list.push(action);
    byNode.set(action.spec.nodeName, list);
  }
  const expired: ObservedNodeAction[] = [];
  let nextExpiryMs: number | undefined;
  for (const list of byNode.values()) {
    list.sort((a, b) => finishedAt(b) - finishedAt(a) || b.metadata.name.localeCompare(a.metadata.name));
    for (const action of list.slice(policy.keepPerNode)) {
      const expiresAt = finishedAt(action) + policy.retentionMs;
      if (expiresAt <= now.getTime()) expired.push(action);
      else nextExpiryMs = Math.min(nextExpiryMs ?? Infinity, expiresAt - now.getTime());
    }
  }
  return { expired, ...(nextExpiryMs !== undefined ? { nextExpiryMs } : {}) };
}
