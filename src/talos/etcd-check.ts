// The etcd guard's read, for the reconciler (src/actions/reconciler.ts) and /v1/health:
// etcd as the Talos API shows it now, judged for one node (etcd-health.ts), through the
// executor's client. Without a talosconfig nothing can be read, and the state says so
// (checked: false) rather than passing or failing silently; what that means for an
// action is the decision core's (src/actions/etcd-guard.ts).
import { CONTROL_PLANE_LABEL } from '../api/names.ts';
import type { KubeObject } from '../kube/informer.ts';
import { redactURLs } from '../redact.ts';
import { errorMessage } from '../wait.ts';
import type { TalosClient } from './client.ts';
import type { EtcdCheckState, EtcdDisruption } from './etcd-health.ts';
import { readEtcd, type ControlPlaneNode } from './etcd.ts';

/** How long a read answers /v1/health (anonymous: it must not be a way to load etcd). */
export const ETCD_HEALTH_CACHE_MS = 10_000;

export const NO_TALOSCONFIG =
  'etcd was not checked: this controller has no talosconfig (--talosconfig, $TALOSCONFIG or the in-cluster one), so it cannot read etcd through the Talos API';

export interface EtcdCheckOptions {
  /** Runs a read with the Talos client in use; undefined without credentials (TalosExecutor.withClient). */
  withClient: <T>(fn: (client: TalosClient) => Promise<T>) => Promise<{ value: T } | undefined>;
  /** Every Node, as the controller's cache shows them. */
  nodes: () => readonly KubeObject[];
  timeoutMs?: number;
}

interface NodeObject extends KubeObject {
  status?: { addresses?: { type: string; address: string }[] };
}

/** The control-plane Nodes with an InternalIP: the `node`s etcd is asked through. */
export function controlPlaneNodes(nodes: readonly KubeObject[]): ControlPlaneNode[] {
  return nodes.flatMap((n) => {
    if (n.metadata.labels?.[CONTROL_PLANE_LABEL] === undefined) return [];
    const address = (n as NodeObject).status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
    return address ? [{ name: n.metadata.name, address }] : [];
  });
}

export class EtcdCheck {
  private readonly o: EtcdCheckOptions;
  private cache: { at: number; states: Map<string, Promise<EtcdCheckState>> } | undefined;

  constructor(options: EtcdCheckOptions) {
    this.o = options;
  }

  /**
   * Reads etcd now and judges whether node `target`'s member may go down, counting the
   * members of the nodes in `away` as down (evaluateEtcdHealth). Never throws: a read
   * that fails is an unhealthy state naming why (fail closed).
   */
  async check(
    target: string,
    away: ReadonlyMap<string, string> = new Map(),
    disruption: EtcdDisruption = 'down',
  ): Promise<EtcdCheckState> {
    const controlPlanes = controlPlaneNodes(this.o.nodes());
    try {
      const read = await this.o.withClient((client) =>
        readEtcd(client, controlPlanes, target, { away, disruption, timeoutMs: this.o.timeoutMs ?? 10_000 }),
      );
      if (!read)
        return { at: new Date(), checked: false, healthy: false, spareable: true, message: NO_TALOSCONFIG };
      const { healthy, message, spareable } = read.value;
      return { at: new Date(), checked: true, healthy, spareable, message };
    } catch (error) {
      return {
        at: new Date(),
        checked: true,
        healthy: false,
        spareable: true,
        // Shown on /v1/health, anonymously: no URL credential from an error goes there.
        message: `etcd could not be read: ${redactURLs(errorMessage(error))}`,
      };
    }
  }

  /**
   * What /v1/health answers for `target`: a read at most ETCD_HEALTH_CACHE_MS old, made
   * for whoever asks first and shared by everyone asking meanwhile.
   */
  cached(target: string): Promise<EtcdCheckState> {
    const now = Date.now();
    if (!this.cache || now - this.cache.at >= ETCD_HEALTH_CACHE_MS)
      this.cache = { at: now, states: new Map() };
    let state = this.cache.states.get(target);
    if (!state) {
      state = this.check(target);
      this.cache.states.set(target, state);
    }
    return state;
  }
}
