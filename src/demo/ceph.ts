// A stand-in for Rook's CephCluster in the demo: the real CRD's group, version and kind
// (so the shipped Rook examples apply unchanged), with a status the demo sets itself.
import { serverSideApply, waitForEstablished } from '../kube/apply.ts';
import type { RestClient } from '../kube/rest.ts';

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
