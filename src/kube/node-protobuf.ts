// A Node's protobuf encoding (k8s.io/api core/v1 generated.proto, Kubernetes 1.36), as
// tables for the interpreter in protobuf.ts: field numbers from generated.proto, JSON names
// and when JSON leaves a field out from the Go types' tags (types.go). A field added by a
// later Kubernetes is not here: the decoder then refuses the page, and the Node informer
// lists in JSON from then on (informer.ts).
import {
  ALWAYS,
  OBJECT_META,
  POINTER,
  bool,
  int,
  list,
  message,
  quantityMap,
  string,
  strings,
  struct,
  time,
  type ProtobufList,
} from './protobuf.ts';

const TAINT = message('Taint', {
  1: string('key', ALWAYS),
  2: string('value'),
  3: string('effect', ALWAYS),
  4: time('timeAdded', POINTER),
});

const CONFIG_MAP_NODE_CONFIG_SOURCE = message('ConfigMapNodeConfigSource', {
  1: string('namespace', ALWAYS),
  2: string('name', ALWAYS),
  3: string('uid'),
  4: string('resourceVersion'),
  5: string('kubeletConfigKey', ALWAYS),
});

const NODE_CONFIG_SOURCE = message('NodeConfigSource', {
  2: struct('configMap', CONFIG_MAP_NODE_CONFIG_SOURCE, POINTER),
});

const NODE_SPEC = message('NodeSpec', {
  1: string('podCIDR'),
  2: string('externalID'),
  3: string('providerID'),
  4: bool('unschedulable'),
  5: list('taints', TAINT),
  6: struct('configSource', NODE_CONFIG_SOURCE, POINTER),
  7: strings('podCIDRs'),
});

const NODE_CONDITION = message('NodeCondition', {
  1: string('type', ALWAYS),
  2: string('status', ALWAYS),
  // Struct members with `omitempty`: encoding/json keeps them, null when zero.
  3: time('lastHeartbeatTime', ALWAYS),
  4: time('lastTransitionTime', ALWAYS),
  5: string('reason'),
  6: string('message'),
});

const NODE_ADDRESS = message('NodeAddress', { 1: string('type', ALWAYS), 2: string('address', ALWAYS) });

const DAEMON_ENDPOINT = message('DaemonEndpoint', { 1: int('Port', ALWAYS) });

const NODE_DAEMON_ENDPOINTS = message('NodeDaemonEndpoints', {
  1: struct('kubeletEndpoint', DAEMON_ENDPOINT),
});

const NODE_SWAP_STATUS = message('NodeSwapStatus', { 1: int('capacity', POINTER) });

const NODE_SYSTEM_INFO = message('NodeSystemInfo', {
  1: string('machineID', ALWAYS),
  2: string('systemUUID', ALWAYS),
  3: string('bootID', ALWAYS),
  4: string('kernelVersion', ALWAYS),
  5: string('osImage', ALWAYS),
  6: string('containerRuntimeVersion', ALWAYS),
  7: string('kubeletVersion', ALWAYS),
  8: string('kubeProxyVersion', ALWAYS),
  9: string('operatingSystem', ALWAYS),
  10: string('architecture', ALWAYS),
  11: struct('swap', NODE_SWAP_STATUS, POINTER),
});

const CONTAINER_IMAGE = message('ContainerImage', { 1: strings('names'), 2: int('sizeBytes') });

const ATTACHED_VOLUME = message('AttachedVolume', {
  1: string('name', ALWAYS),
  2: string('devicePath', ALWAYS),
});

const NODE_CONFIG_STATUS = message('NodeConfigStatus', {
  1: struct('assigned', NODE_CONFIG_SOURCE, POINTER),
  2: struct('active', NODE_CONFIG_SOURCE, POINTER),
  3: struct('lastKnownGood', NODE_CONFIG_SOURCE, POINTER),
  4: string('error'),
});

const NODE_RUNTIME_HANDLER_FEATURES = message('NodeRuntimeHandlerFeatures', {
  1: bool('recursiveReadOnlyMounts', POINTER),
  2: bool('userNamespaces', POINTER),
});

const NODE_RUNTIME_HANDLER = message('NodeRuntimeHandler', {
  1: string('name', ALWAYS),
  2: struct('features', NODE_RUNTIME_HANDLER_FEATURES, POINTER),
});

const NODE_FEATURES = message('NodeFeatures', { 1: bool('supplementalGroupsPolicy', POINTER) });

const NODE_STATUS = message('NodeStatus', {
  1: quantityMap('capacity'),
  2: quantityMap('allocatable'),
  3: string('phase'),
  4: list('conditions', NODE_CONDITION),
  5: list('addresses', NODE_ADDRESS),
  6: struct('daemonEndpoints', NODE_DAEMON_ENDPOINTS),
  7: struct('nodeInfo', NODE_SYSTEM_INFO),
  8: list('images', CONTAINER_IMAGE),
  9: strings('volumesInUse'),
  10: list('volumesAttached', ATTACHED_VOLUME),
  11: struct('config', NODE_CONFIG_STATUS, POINTER),
  12: list('runtimeHandlers', NODE_RUNTIME_HANDLER),
  13: struct('features', NODE_FEATURES, POINTER),
  14: strings('declaredFeatures'),
});

const NODE = message('Node', {
  1: struct('metadata', OBJECT_META),
  2: struct('spec', NODE_SPEC),
  3: struct('status', NODE_STATUS),
});

/**
 * A NodeList page, for ProtobufListDecoder and the Node informer (InformerOptions.protobuf).
 *
 * @example
 * new ProtobufListDecoder(NODE_LIST, onNode, { omit: [['metadata', 'managedFields'], ...NODE_UNREAD] });
 */
export const NODE_LIST: ProtobufList = { kind: 'NodeList', item: NODE };
