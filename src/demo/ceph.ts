// A stand-in for Rook's CephCluster in the demo: the real CRD's group, version and kind
// (so the shipped Rook examples apply unchanged), with a status the demo sets itself.
import { serverSideApply, waitForEstablished } from '../kube/apply.ts';
import { Informer, type KubeObject } from '../kube/informer.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';

export const CEPH_NAMESPACE = 'rook-ceph';
export const CEPH_CLUSTER = 'rook-ceph';

const crd = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'cephclusters.ceph.rook.io' },
  spec: {
    group: 'ceph.rook.io',
    scope: 'Namespaced',
    names: { plural: 'cephclusters', singular: 'cephcluster', kind: 'CephCluster' },
    versions: [
      {
        name: 'v1',
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
      },
    ],
  },
};

export type CephHealth = 'HEALTH_OK' | 'HEALTH_WARN' | 'HEALTH_ERR';

export async function installCephCluster(client: RestClient): Promise<void> {
  await serverSideApply(
    client,
    [crd, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: CEPH_NAMESPACE } }],
    'gatehouse-demo',
  );
  await waitForEstablished(client, [crd.metadata.name]);
  await serverSideApply(
    client,
    [
      {
        apiVersion: 'ceph.rook.io/v1',
        kind: 'CephCluster',
        metadata: { name: CEPH_CLUSTER, namespace: CEPH_NAMESPACE },
        spec: {},
      },
    ],
    'gatehouse-demo',
  );
  await setCephHealth(client, 'HEALTH_OK');
}

/** Sets the health Rook would report, with a detail naming the cause (as Ceph's health detail does). */
export async function setCephHealth(
  client: RestClient,
  health: CephHealth,
  detail?: { code: string; message: string },
): Promise<void> {
  await client.request(
    `/apis/ceph.rook.io/v1/namespaces/${CEPH_NAMESPACE}/cephclusters/${CEPH_CLUSTER}/status`,
    {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: {
        status: {
          phase: 'Ready',
          ceph: {
            health,
            lastChecked: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
            details: detail ? { [detail.code]: { severity: health, message: detail.message } } : null,
          },
        },
      },
    },
  );
}

interface NodeLike extends KubeObject {
  spec?: { unschedulable?: boolean };
  status?: { conditions?: { type: string; status: string }[] };
}

function isReady(node: NodeLike): boolean {
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export interface CephChange {
  at: Date;
  health: CephHealth;
  /** Ceph's health detail in one line, e.g. "OSD_DOWN: 1 osds down (osd.0 on worker-1)". */
  detail: string;
}

/**
 * What Rook would report while nodes come and go, for the demo: one OSD per worker;
 * an OSD whose node is not Ready is down (HEALTH_WARN, OSD_DOWN), and once every node
 * is back the placement groups recover for `recoveryMs` (HEALTH_WARN, PG_DEGRADED)
 * before HEALTH_OK. That recovery is what the gate waits out before the next node.
 */
export class CephStandIn {
  readonly changes: CephChange[] = [];
  private readonly client: RestClient;
  private readonly nodes: Informer<NodeLike>;
  private readonly osds: readonly string[];
  private readonly recoveryMs: number;
  private readonly log: Logger;
  private recovering: NodeJS.Timeout | undefined;
  private reported = '';
  private writes: Promise<void> = Promise.resolve();

  constructor(options: { client: RestClient; log: Logger; osdNodes: readonly string[]; recoveryMs: number }) {
    this.client = options.client;
    this.osds = options.osdNodes;
    this.recoveryMs = options.recoveryMs;
    this.log = options.log;
    this.nodes = new Informer<NodeLike>({ rest: options.client, log: options.log, path: '/api/v1/nodes' });
    this.nodes.on('add', () => this.observe());
    this.nodes.on('update', () => this.observe());
  }

  async start(): Promise<void> {
    this.nodes.start();
    await this.nodes.waitForSync();
    this.observe();
  }

  async stop(): Promise<void> {
    clearTimeout(this.recovering);
    await this.nodes.stop();
    await this.writes;
  }

  /** Resolves once Ceph reports HEALTH_OK (at once if it does). */
  async recovered(signal?: AbortSignal): Promise<void> {
    while (!this.reported.startsWith('HEALTH_OK')) {
      signal?.throwIfAborted();
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  private observe(): void {
    // The initial list arrives one node at a time: judge only the whole picture.
    if (!this.nodes.synced) return;
    const down = this.osds
      .map((name, osd) => ({ name, osd, node: this.nodes.get(name) }))
      .filter((o) => !o.node || !isReady(o.node));
    if (down.length > 0) {
      clearTimeout(this.recovering);
      this.recovering = undefined;
      const which = down.map((o) => `osd.${String(o.osd)} on ${o.name}`).join(', ');
      this.report('HEALTH_WARN', {
        code: 'OSD_DOWN',
        message: `${String(down.length)} osds down (${which})`,
      });
      return;
    }
    if (this.reported.startsWith('HEALTH_WARN OSD_DOWN')) {
      this.report('HEALTH_WARN', {
        code: 'PG_DEGRADED',
        message: 'Degraded data redundancy: placement groups recovering',
      });
      this.recovering = setTimeout(() => {
        this.recovering = undefined;
        this.report('HEALTH_OK');
      }, this.recoveryMs);
    } else if (!this.recovering) this.report('HEALTH_OK');
  }

  private report(health: CephHealth, detail?: { code: string; message: string }): void {
    const key = `${health} ${detail?.code ?? ''} ${detail?.message ?? ''}`;
    if (key === this.reported) return;
    this.reported = key;
    this.changes.push({
      at: new Date(),
      health,
      detail: detail ? `${detail.code}: ${detail.message}` : 'all OSDs up, all placement groups clean',
    });
    // In order: the last health reported is the one the CephCluster keeps.
    this.writes = this.writes
      .then(() => setCephHealth(this.client, health, detail))
      .catch((error: unknown) => {
        this.log.warn({ err: errorMessage(error), health }, 'could not report Ceph health');
      });
  }
}
