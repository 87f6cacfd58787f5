// kwok's configuration for the sandbox: which nodes it manages and the stages that
// move simulated nodes and pods through their lives. kwok has no built-in stages when
// run on its own, so every behaviour the tests rely on is spelled out here.
import { stringify } from 'yaml';

/** Nodes carrying this annotation are simulated by kwok. */
export const KWOK_NODE_ANNOTATION = 'kwok.x-k8s.io/node';
export const KWOK_NODE_ANNOTATION_VALUE = 'fake';

/**
 * Annotations that steer a simulated pod owned by a Job. Tests and the demo put them
 * on a hook's pod template to choose what the "container" does.
 */
export const POD_OUTCOME_ANNOTATION = 'sandbox.gatehouse.dev/outcome'; // Succeeded (default) | Failed | Hang
export const POD_RUN_DURATION_ANNOTATION = 'sandbox.gatehouse.dev/run-duration'; // Go duration, default 1s
/** What the simulated containers leave as their termination message (a checker Job's message). */
export const POD_TERMINATION_MESSAGE_ANNOTATION = 'sandbox.gatehouse.dev/termination-message';

/**
 * A simulated node carrying this annotation with the value `off` is powered off: kwok
 * reports it NotReady and leaves it so (the Talos simulator sets and clears it around
 * a reboot, shutdown or reset). Without it, kwok turns any node Ready within a second.
 */
export const NODE_POWER_ANNOTATION = 'sandbox.gatehouse.dev/power';
export const NODE_POWER_OFF = 'off';

const notDeleted = { key: '.metadata.deletionTimestamp', operator: 'DoesNotExist' };
const ownedByJob = { key: '.metadata.ownerReferences.[].kind', operator: 'In', values: ['Job'] };
const phase = (...values: string[]) => ({ key: '.status.phase', operator: 'In', values });
const outcome = (operator: 'In' | 'NotIn', values: string[]) => ({
  key: `.metadata.annotations["${POD_OUTCOME_ANNOTATION}"]`,
  operator,
  values,
});
const readyStatus = (operator: 'In' | 'NotIn', values: string[]) => ({
  key: '.status.conditions.[] | select( .type == "Ready" ) | .status',
  operator,
  values,
});
const power = (operator: 'In' | 'NotIn') => ({
  key: `.metadata.annotations["${NODE_POWER_ANNOTATION}"]`,
  operator,
  values: [NODE_POWER_OFF],
});
const runDuration = {
  durationMilliseconds: 1000,
  durationFrom: { expressionFrom: `.metadata.annotations["${POD_RUN_DURATION_ANNOTATION}"]` },
};

const nodeConditions = `
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}`;

const nodeReady = `${nodeConditions}
addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
- address: {{ NodeIP | Quote }}
  type: InternalIP
{{ end }}
allocatable:
{{ with .status.allocatable }}
{{ YAML . 1 }}
{{ else }}
  cpu: "32"
  memory: 128Gi
  pods: "110"
{{ end }}
capacity:
{{ with .status.capacity }}
{{ YAML . 1 }}
{{ else }}
  cpu: "32"
  memory: 128Gi
  pods: "110"
{{ end }}
{{ with .status.nodeInfo }}
nodeInfo:
{{ YAML . 1 }}
{{ end }}
phase: Running
`;

// What the node lifecycle controller reports for a node whose kubelet went silent.
const nodePoweredOff = `
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: "Kubelet stopped posting node status."
  reason: NodeStatusUnknown
  status: "Unknown"
  type: {{ .type | Quote }}
{{ end }}
`;

const podRunning = `
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
`;

function podTerminated(exitCode: number, reason: string, phaseName: string): string {
  return `
{{ $now := Now }}
{{ $started := or .status.startTime $now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: PodCompleted
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: PodCompleted
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: ${exitCode}
      reason: ${reason}
{{ with $.metadata.annotations }}{{ with index . "${POD_TERMINATION_MESSAGE_ANNOTATION}" }}
      message: {{ . | Quote }}
{{ end }}{{ end }}
      startedAt: {{ $started | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: ${phaseName}
`;
}

function stage(name: string, kind: 'Node' | 'Pod', spec: Record<string, unknown>) {
  return {
    apiVersion: 'kwok.x-k8s.io/v1alpha1',
    kind: 'Stage',
    metadata: { name },
    spec: { resourceRef: { apiGroup: 'v1', kind }, ...spec },
  };
}

export const stages = [
  // A node that is not Ready (and not powered off) becomes Ready with the conditions a
  // healthy kubelet reports; its nodeInfo (Talos osImage, bootID) is kept as it is.
  stage('node-initialize', 'Node', {
    selector: { matchExpressions: [readyStatus('NotIn', ['True']), power('NotIn')] },
    next: { statusTemplate: nodeReady },
  }),
  // A powered-off node goes silent: every condition Unknown, as the node lifecycle
  // controller would mark it. Selecting only nodes not yet Unknown keeps it from looping.
  stage('node-power-off', 'Node', {
    selector: { matchExpressions: [power('In'), readyStatus('NotIn', ['Unknown'])] },
    next: { statusTemplate: nodePoweredOff },
  }),
  // No heartbeat stage: liveness comes from the node Leases kwok renews, and a kubelet
  // rewrites an unchanged status only every few minutes anyway. A delayed heartbeat is
  // also played from the object as it was when scheduled: one that fired as the simulator
  // powered the node off wrote Ready=True over the power-off for a moment.
  stage('pod-ready', 'Pod', {
    selector: {
      matchExpressions: [
        notDeleted,
        phase('Pending'),
        {
          key: '.status.conditions.[] | select( .type == "Ready" ) | .status',
          operator: 'NotIn',
          values: ['True'],
        },
      ],
    },
    next: { statusTemplate: podRunning },
  }),
  // Pods of Jobs run for a while and then exit, as the annotations on them say.
  stage('pod-complete', 'Pod', {
    selector: {
      matchExpressions: [notDeleted, phase('Running'), ownedByJob, outcome('NotIn', ['Failed', 'Hang'])],
    },
    delay: runDuration,
    next: { statusTemplate: podTerminated(0, 'Completed', 'Succeeded') },
  }),
  stage('pod-fail', 'Pod', {
    selector: { matchExpressions: [notDeleted, phase('Running'), ownedByJob, outcome('In', ['Failed'])] },
    delay: runDuration,
    next: { statusTemplate: podTerminated(1, 'Error', 'Failed') },
  }),
  stage('pod-delete', 'Pod', {
    selector: { matchExpressions: [{ key: '.metadata.deletionTimestamp', operator: 'Exists' }] },
    next: { finalizers: { empty: true }, delete: true },
  }),
];

export function kwokConfiguration(options: { serverAddress: string }): string {
  const configuration = {
    apiVersion: 'config.kwok.x-k8s.io/v1alpha1',
    kind: 'KwokConfiguration',
    metadata: { name: 'gatehouse-sandbox' },
    options: {
      manageAllNodes: false,
      manageNodesWithAnnotationSelector: `${KWOK_NODE_ANNOTATION}=${KWOK_NODE_ANNOTATION_VALUE}`,
      serverAddress: options.serverAddress,
      cidr: '10.244.0.0/16',
      nodeLeaseDurationSeconds: 40,
      // kwok leaves these at 0 (and refuses to start) when its configuration comes from a file.
      nodeLeaseParallelism: 4,
      podPlayStageParallelism: 4,
      nodePlayStageParallelism: 4,
      podsOnNodeSyncParallelism: 2,
    },
  };
  // kwok reads YAML 1.1, where a bare off, on, yes or no is a boolean: write 1.1 so that
  // such strings (the power annotation's value) come out quoted.
  return [configuration, ...stages]
    .map((doc) => stringify(doc, { lineWidth: 0, version: '1.1' }))
    .join('---\n');
}
