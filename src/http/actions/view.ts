// A NodeAction as the actions API shows it, and what it reads of one.
import type { ActionObject } from '../../api/node-action.ts';
import type { NodeActionPhase } from '../../api/node-action.ts';
import type { ResourceAttributes } from '../auth.ts';
import { objectView } from '../objects.ts';
import { isActionName } from './names.ts';

/** Roles named in a 403, so the caller knows what to ask for. */
export const REQUESTER_ROLE = 'gatehouse:requester';
export const READER_ROLE = 'gatehouse:view or gatehouse:requester';

/** The action as the API returns it. */
export function actionView(action: ActionObject): Record<string, unknown> {
  return objectView({ ...action, kind: action.kind ?? 'NodeAction' });
}

/** The action's phase; a new action the controller has not looked at yet is Pending. */
export function phaseOf(action: ActionObject): NodeActionPhase {
  return action.status?.phase ?? 'Pending';
}

/** What the caller needs to be allowed to `verb` the action `name` (a name that cannot be one is left out). */
export function onAction(verb: string, name: string): ResourceAttributes {
  return { verb, resource: 'nodeactions', ...(isActionName(name) ? { name } : {}) };
}
