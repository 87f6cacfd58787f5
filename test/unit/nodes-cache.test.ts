// The controller caches Nodes without their images and volumes; everything it decides on
// must read the same from the trimmed Node as from the whole one.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { talosNode } from '../../sandbox/nodes.ts';
import { nodeFacts } from '../../src/actions/observations.ts';
import { nodeView } from '../../src/http/node-view.ts';
import type { KubeObject } from '../../src/kube/informer.ts';
import { slimNode } from '../../src/kube/nodes.ts';

/** A busy worker as a kubelet reports it: 50 images, volumes in use, a preready taint. */
function busyNode() {
  const node = talosNode({ name: 'worker-7', role: 'worker', internalIP: '10.5.0.9' }, 'v1.36.3');
  const metadata = node.metadata ?? {};
  metadata.annotations = { 'kwok.x-k8s.io/node': 'fake', 'talos.dev/cordoned-by': 'gatehouse' };
  node.spec = {
    unschedulable: true,
    taints: [{ key: 'talos.dev/preready', effect: 'NoSchedule' }],
  };
  const status = node.status ?? {};
  Object.assign(status, {
    conditions: [
      { type: 'MemoryPressure', status: 'False', reason: 'KubeletHasSufficientMemory', message: 'ok' },
      { type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'kubelet is posting ready status' },
    ],
    images: Array.from({ length: 50 }, (_, i) => ({
      names: [
        `registry.example.com/team-${String(i)}/service@sha256:${'ab'.repeat(32)}`,
        `registry.example.com/team-${String(i)}/service:v1.${String(i)}.0`,
      ],
      sizeBytes: 100_000_000 + i,
    })),
    volumesInUse: Array.from(
      { length: 20 },
      (_, i) => `kubernetes.io/csi/rook-ceph.rbd.csi.ceph.com^vol-${String(i)}`,
    ),
    volumesAttached: Array.from({ length: 20 }, (_, i) => ({
      name: `kubernetes.io/csi/rook-ceph.rbd.csi.ceph.com^vol-${String(i)}`,
      devicePath: '',
    })),
  });
  return node as KubeObject & typeof node;
}

it('keeps everything gatehouse decides on, and drops images and volumes', () => {
  const whole = busyNode();
  const slim = slimNode(structuredClone(whole));
  assert.deepEqual(nodeFacts(slim), nodeFacts(whole));
  assert.deepEqual(nodeView('worker-7', slim), nodeView('worker-7', whole));
  assert.deepEqual(slim.metadata, whole.metadata);
  assert.deepEqual(slim.spec, whole.spec);
  assert.deepEqual(
    slim.status?.addresses,
    whole.status?.addresses,
    'the Talos executor dials the InternalIP',
  );
  assert.deepEqual(slim.status?.nodeInfo, whole.status?.nodeInfo);
  assert.deepEqual(slim.status?.conditions, whole.status?.conditions);
  assert.equal(slim.status?.images, undefined);
  assert.equal(slim.status?.volumesInUse, undefined);
  assert.equal(slim.status?.volumesAttached, undefined);
  const ratio = JSON.stringify(slim).length / JSON.stringify(whole).length;
  assert.ok(ratio < 0.3, `the trimmed node is ${ratio.toFixed(2)} of the whole one`);
});

it('leaves a Node without status, or a bookmark, as it is', () => {
  const bookmark = { metadata: { name: '', resourceVersion: '42' } };
  assert.deepEqual(slimNode(structuredClone(bookmark)), bookmark);
});
