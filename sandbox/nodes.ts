// Simulated nodes that look like Talos nodes to anything reading the Node API.
import { randomBytes, randomUUID } from 'node:crypto';
import type { CoreV1Api, V1Node } from '@kubernetes/client-node';
import { waitFor } from '../src/wait.ts';
import { KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE } from './kwok-config.ts';

export const TALOS_VERSION = 'v1.13.0';
export const CONTROL_PLANE_LABEL = 'node-role.kubernetes.io/control-plane';

export interface NodeSpec {
  name: string;
  role: 'control-plane' | 'worker';
  internalIP: string;
  talosVersion?: string;
}

/**
 * `cp-1..` then `worker-1..`, addressed like a Talos docker cluster (10.5.0.2 onwards).
 * With `talosVersions` (e.g. `['1.12.6', '1.13.9', '1.14.0']`) the nodes run them in
 * turn, for a cluster of mixed versions; otherwise all run TALOS_VERSION.
 */
export function defaultNodeSpecs(total: number, controlPlanes = 1, talosVersions: string[] = []): NodeSpec[] {
  const versions = talosVersions.map(normalTalosVersion);
  return Array.from({ length: total }, (_, i) => {
    const controlPlane = i < controlPlanes;
    const talosVersion = versions.length > 0 ? versions[i % versions.length] : undefined;
    return {
      name: controlPlane ? `cp-${i + 1}` : `worker-${i - controlPlanes + 1}`,
      role: controlPlane ? 'control-plane' : 'worker',
      internalIP: `10.5.0.${i + 2}`,
      ...(talosVersion ? { talosVersion } : {}),
    };
  });
}

/** `1.13.9` or `v1.13.9` as `v1.13.9`; throws for anything that is no Talos version. */
export function normalTalosVersion(text: string): string {
  const version = /^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$/.exec(text.trim());
  if (!version?.[1]) throw new Error(`"${text}" is not a Talos version (like 1.13.9)`);
  return `v${version[1]}`;
}

export function talosOsImage(version: string): string {
  return `Talos (${version})`;
}

export function talosNode(spec: NodeSpec, kubeletVersion: string): V1Node {
  const controlPlane = spec.role === 'control-plane';
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: spec.name,
      annotations: { [KWOK_NODE_ANNOTATION]: KWOK_NODE_ANNOTATION_VALUE },
      labels: {
        'kubernetes.io/hostname': spec.name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
        type: 'kwok',
        ...(controlPlane ? { [CONTROL_PLANE_LABEL]: '' } : {}),
      },
    },
    spec: controlPlane ? { taints: [{ key: CONTROL_PLANE_LABEL, effect: 'NoSchedule' }] } : {},
    status: {
      addresses: [
        { type: 'InternalIP', address: spec.internalIP },
        { type: 'Hostname', address: spec.name },
      ],
      capacity: { cpu: '4', memory: '16Gi', pods: '110', 'ephemeral-storage': '100Gi' },
      allocatable: { cpu: '4', memory: '16Gi', pods: '110', 'ephemeral-storage': '100Gi' },
      nodeInfo: {
        architecture: 'amd64',
        bootID: randomUUID(),
        machineID: randomBytes(16).toString('hex'),
        systemUUID: randomUUID(),
        kernelVersion: '6.18.1-talos',
        containerRuntimeVersion: 'containerd://2.1.5',
        kubeletVersion,
        kubeProxyVersion: '',
        operatingSystem: 'linux',
        osImage: talosOsImage(spec.talosVersion ?? TALOS_VERSION),
      },
    },
  };
}

export function isReady(node: V1Node): boolean {
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** Creates the nodes (status included, as a kubelet registers) and waits until kwok reports them Ready. */
export async function createNodes(
  core: CoreV1Api,
  specs: NodeSpec[],
  kubeletVersion: string,
): Promise<V1Node[]> {
  await Promise.all(specs.map((spec) => core.createNode({ body: talosNode(spec, kubeletVersion) })));
  return Promise.all(
    specs.map((spec) =>
      waitFor(
        `node ${spec.name} to become Ready`,
        async (observe) => {
          const node = await core.readNode({ name: spec.name });
          observe(JSON.stringify(node.status?.conditions?.map((c) => `${c.type}=${c.status}`) ?? []));
          return isReady(node) ? node : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 200 },
      ),
    ),
  );
}
