// Reads what the etcd guard judges (etcd-health.ts) through the Talos API: the member
// list through a control-plane node, each member's status from its own node (apid
// proxies there by the `node` metadata), and the alarms. A status that cannot be read
// is recorded as such, never left out, so the judgement fails closed.
import { errorMessage } from '../wait.ts';
import type { EtcdMemberStatusInfo, TalosClient } from './client.ts';
import {
  evaluateEtcdHealth,
  type EtcdDisruption,
  type EtcdObservation,
  type EtcdVerdict,
} from './etcd-health.ts';

export interface ControlPlaneNode {
  /** The Node's name: the hostname etcd lists the member under. */
  name: string;
  /** Its InternalIP, the `node` to address. */
  address: string;
}

/**
 * Gathers the etcd observation through the control-plane nodes other than `target`
 * first (the member going down is the last one to ask about the cluster), then judges
 * (`away`: see evaluateEtcdHealth). The member list taken is the first that lists
 * `target`, else the first answered: a node whose list lacks the target's member is
 * of another etcd cluster, or the target has left. Throws when no control-plane node
 * answers the member list.
 */
export async function readEtcd(
  client: TalosClient,
  controlPlanes: ControlPlaneNode[],
  target: string,
  options: {
    signal?: AbortSignal;
    timeoutMs?: number;
    away?: ReadonlyMap<string, string>;
    disruption?: EtcdDisruption;
  } = {},
): Promise<EtcdVerdict & { observation: EtcdObservation }> {
  const call = (node: string) => ({
    node,
    ...(options.signal ? { signal: options.signal } : {}),
    timeoutMs: options.timeoutMs ?? 10_000,
  });
  const order = [...controlPlanes].sort((a, b) => Number(a.name === target) - Number(b.name === target));
  let members: Awaited<ReturnType<TalosClient['etcdMemberList']>> | undefined;
  let via: ControlPlaneNode | undefined;
  const failures: string[] = [];
  for (const node of order) {
    try {
      const listed = await client.etcdMemberList(call(node.address));
      if (!members) [members, via] = [listed, node];
      if (listed.some((m) => m.hostname === target)) {
        [members, via] = [listed, node];
        break;
      }
    } catch (error) {
      failures.push(`${node.name}: ${errorMessage(error)}`);
    }
  }
  if (!members || !via)
    throw new Error(`cannot list the etcd members through any control-plane node (${failures.join('; ')})`);
  const addresses = new Map(controlPlanes.map((n) => [n.name, n.address]));
  const statuses = new Map<bigint, EtcdMemberStatusInfo | { error: string }>();
  await Promise.all(
    members.map(async (m) => {
      const address = addresses.get(m.hostname);
      if (!address) {
        statuses.set(m.id, { error: `no control-plane Node named ${m.hostname}` });
        return;
      }
      try {
        statuses.set(m.id, await client.etcdStatus(call(address)));
      } catch (error) {
        statuses.set(m.id, { error: errorMessage(error) });
      }
    }),
  );
  const alarms = await client.etcdAlarmList(call(via.address));
  const observation = { members, statuses, alarms };
  return { ...evaluateEtcdHealth(observation, target, options.away, options.disruption), observation };
}
