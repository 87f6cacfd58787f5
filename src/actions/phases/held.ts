// Held: a Maintenance's node is out of service — cordoned and drained, its slot in every
// budget kept, its etcd member counted away — until someone releases it (the annotation
// talos.dev/released, which the admission policy lets only the requester or a bypass
// holder set) or its maintenance.maxDuration ends the hold with a Warning. Released, the
// node's NodeReadyJobs run (running-post-hooks.ts), then the action's cordon is lifted.
import { RELEASED_ANNOTATION } from '../../api/names.ts';
import { formatDuration, parseDuration } from '../../duration.ts';
import type { DecisionBuilder } from '../decision.ts';
import { isReleaseMarked } from '../subject.ts';

export function held(b: DecisionBuilder): void {
  const { spec, node, nodeName, now, status, condition, event } = b;
  const since = Date.parse(status.phaseTime ?? now.toISOString());
  const maxDuration = spec.maintenance?.maxDuration;
  const maxMs = maxDuration === undefined ? undefined : parseDuration(maxDuration);
  const released = isReleaseMarked(b.action);
  const expired = maxMs !== undefined && now.getTime() - since >= maxMs;
  if (!released && !expired) {
    const why = spec.maintenance?.reason ? ` for ${spec.maintenance.reason}` : '';
    const until =
      maxMs === undefined
        ? ''
        : `, or until ${new Date(since + maxMs).toISOString()} (maintenance.maxDuration)`;
    if (maxMs !== undefined) b.wake(since + maxMs - now.getTime());
    b.say(
      `node ${nodeName} is held out of service${why} until released: gatehouse maintenance release ${nodeName}, or the annotation ${RELEASED_ANNOTATION}: "true"${until}`,
    );
    return;
  }
  if (!node) {
    b.end('Failed', `node ${nodeName} is gone: it was removed while held for maintenance`);
    return;
  }
  const how = released
    ? `released (${RELEASED_ANNOTATION})`
    : `held for maintenance.maxDuration (${formatDuration(maxMs ?? 0)}) without a release`;
  condition('Released', 'True', released ? 'Released' : 'MaxDurationReached', how);
  if (!released)
    event('Warning', 'MaxDurationReached', `Maintenance of node ${nodeName}: ${how}; releasing it`);
  // A boot while held has its boot hooks run by the boot reconciler, to be waited for;
  // without one the action runs the node's NodeReadyJobs itself (running-post-hooks.ts).
  status.bootIDAfter = node.bootID;
  b.transition('RunningPostHooks', `${how}; running the NodeReadyJobs of node ${nodeName}`);
}
