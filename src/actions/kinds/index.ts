// Every action kind's descriptor (kind.ts), and the tables derived from them: nothing
// about a kind is written anywhere else.
import type { Action } from '../../api/common.ts';
import type { PreActionHookKind } from '../../api/hooks.ts';
import type { ExecutionRecord, NodeActionSpec, NodeActionStatus } from '../../api/node-action.ts';
import { configChange } from './config-change.ts';
import { etcdLeave } from './etcd-leave.ts';
import { maintenance } from './maintenance.ts';
import type { ActionKind, ActionKinds, Completion } from './kind.ts';
import { reboot } from './reboot.ts';
import { reset } from './reset.ts';
import { shutdown } from './shutdown.ts';
import { upgrade } from './upgrade.ts';

export type { ActionKind, ActionWords, Completion, Performer } from './kind.ts';

export const ACTION_KINDS: ActionKinds = {
  Upgrade: upgrade,
  Reboot: reboot,
  Shutdown: shutdown,
  Reset: reset,
  ConfigChange: configChange,
  EtcdLeave: etcdLeave,
  Maintenance: maintenance,
};

/** The kinds in the order the API lists them. */
export const ACTION_KIND_NAMES = Object.keys(ACTION_KINDS) as Action[];

/** The descriptor of an action's kind. */
export function kindOf(spec: Pick<NodeActionSpec, 'action'>): ActionKind {
  return ACTION_KINDS[spec.action];
}

/** The hook kind that runs before each action. */
export const PRE_HOOK_KIND = Object.fromEntries(
  ACTION_KIND_NAMES.map((a) => [a, ACTION_KINDS[a].preHookKind]),
) as Readonly<Record<Action, PreActionHookKind>>;

/** Every pre-action hook kind some action runs. */
export const PRE_ACTION_HOOK_KINDS: readonly PreActionHookKind[] = [...new Set(Object.values(PRE_HOOK_KIND))];

/** How the action finishes (see ActionKind.completion). */
export function completionOf(
  spec: NodeActionSpec,
  execution?: ExecutionRecord,
  osImage?: string,
): Completion {
  return kindOf(spec).completion(spec, execution, osImage);
}

/**
 * Whether a Managed action cordons and drains the node (running `osImage`) before its
 * work: unless spec.drain.enabled is false, whenever its kind does (ActionKind.noDrain),
 * as decided in `status` (a ConfigChange's class; without it, the most its mode allows).
 */
export function drainsBeforeCall(spec: NodeActionSpec, osImage?: string, status?: NodeActionStatus): boolean {
  if (spec.drain?.enabled === false) return false;
  return kindOf(spec).noDrain(spec, osImage, status) === undefined;
}
