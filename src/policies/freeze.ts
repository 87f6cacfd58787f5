// Change freezes (ActionPolicy spec.freezes): date ranges in which no governed action is
// approved, whatever the windows say — the holidays, a release weekend. Pure.
import type { Action } from '../api/common.ts';
import type { ActionPolicySpec } from '../api/action-policy.ts';

export type FreezeSpec = NonNullable<ActionPolicySpec['freezes']>[number];

/** The freeze in force at `now` for `action` (any action when undefined): the one that ends last, or undefined. */
export function activeFreeze(
  freezes: readonly FreezeSpec[] | undefined,
  action: Action | undefined,
  now: Date,
): { freeze: FreezeSpec; end: Date } | undefined {
  let found: { freeze: FreezeSpec; end: Date } | undefined;
  for (const freeze of freezes ?? []) {
    const start = Date.parse(freeze.start);
    const end = Date.parse(freeze.end);
    if (Number.isNaN(start) || Number.isNaN(end)) continue;
    if (now.getTime() < start || now.getTime() >= end) continue;
    if (action !== undefined && freeze.actions?.length && !freeze.actions.includes(action)) continue;
    if (!found || end > found.end.getTime()) found = { freeze, end: new Date(end) };
  }
  return found;
}

/** How a freeze holds an action, in words. */
export function frozenMessage(policy: string, frozen: { freeze: FreezeSpec; end: Date }): string {
  return `ActionPolicy ${policy}: frozen until ${frozen.end.toISOString()}${frozen.freeze.reason ? ` (${frozen.freeze.reason})` : ''}, whatever the windows`;
}
