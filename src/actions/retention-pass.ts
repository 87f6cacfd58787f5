// Retention: finished actions past their retention deleted (planRetention, retention.ts,
// decides which), each conditional on its UID, and the pass run again at the next expiry.
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import { isConflict } from '../kube/reconciler.ts';
import type { ReconcileResult } from '../kube/workqueue.ts';
import type { ActionContext } from './context.ts';
import { planRetention } from './retention.ts';

const RETENTION_INTERVAL_MS = 10 * 60_000;

export async function retentionPass(c: ActionContext): Promise<ReconcileResult> {
  const { o, log } = c;
  const plan = planRetention(o.actions.list(), new Date(), o.retention);
  for (const action of plan.expired) {
    if (!o.isLeader()) break;
    try {
      await o.rest.request(`${NODE_ACTIONS_PATH}/${action.metadata.name}`, {
        method: 'DELETE',
        body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid: action.metadata.uid } },
      });
      log.info(
        { action: action.metadata.name, node: action.spec.nodeName, phase: action.status?.phase },
        'deleted a finished action past its retention',
      );
    } catch (error) {
      if (!isConflict(error)) throw error;
    }
  }
  return { requeueAfterMs: Math.min(plan.nextExpiryMs ?? RETENTION_INTERVAL_MS, RETENTION_INTERVAL_MS) };
}
