// The etcd snapshot an action recorded (status.etcdSnapshot), in one line for
// `gatehouse actions describe` and `gatehouse explain`.
import type { EtcdSnapshotRecord } from '../api/node-action.ts';
import { oneLine } from './table.ts';

export function etcdSnapshotLine(s: EtcdSnapshotRecord): string {
  const tries = s.attempts !== undefined && s.attempts > 1 ? `, ${String(s.attempts)} attempts` : '';
  if (s.phase === 'Taken')
    return `Taken ${s.name ?? ''} (${String(s.size ?? 0)} bytes, sha256 ${(s.sha256 ?? '').slice(0, 16)}…, from member ${s.member ?? '?'}, raft index ${String(s.raftIndex ?? '?')}${tries}; ActionPolicy ${s.policy})${s.pruned?.length ? `; pruned ${s.pruned.join(', ')}` : ''}`;
  return `${s.phase} (ActionPolicy ${s.policy}${tries})${s.message ? `: ${oneLine(s.message, 300)}` : ''}`;
}
