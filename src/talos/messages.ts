// The Talos API messages gatehouse uses, declared from the wire protocol's facts:
// the protobuf packages `machine` and `common` (plus google.protobuf.Empty/Duration and
// google.rpc.Status), their message names and field numbers. Only the fields gatehouse
// reads or writes are declared; the decoder skips the rest.
import { message, type Fields, type Message, type MessageInit } from './protobuf.ts';

// --- google.* --------------------------------------------------------------------

export const Empty = message('google.protobuf.Empty', {});

export const Duration = message('google.protobuf.Duration', {
  seconds: { no: 1, kind: 'int64' },
  nanos: { no: 2, kind: 'int32' },
});

export const RpcStatus = message('google.rpc.Status', {
  code: { no: 1, kind: 'int32' },
  message: { no: 2, kind: 'string' },
});

// --- common ----------------------------------------------------------------------

/** Nested in every reply; the apid proxy fills `hostname`, and `error` when the upstream failed. */
export const Metadata = message('common.Metadata', {
  hostname: { no: 1, kind: 'string' },
  error: { no: 2, kind: 'string' },
  status: { no: 3, kind: 'message', type: RpcStatus },
});

export const ContainerDriver = { CONTAINERD: 0, CRI: 1 } as const;
export const ContainerdNamespace = { NS_UNKNOWN: 0, NS_SYSTEM: 1, NS_CRI: 2 } as const;

export const ContainerdInstance = message('common.ContainerdInstance', {
  driver: { no: 1, kind: 'enum' },
  namespace: { no: 2, kind: 'enum' },
});

// --- machine.MachineService: Version ---------------------------------------------

export const VersionInfo = message('machine.VersionInfo', {
  tag: { no: 1, kind: 'string' },
  sha: { no: 2, kind: 'string' },
  built: { no: 3, kind: 'string' },
  goVersion: { no: 4, kind: 'string' },
  os: { no: 5, kind: 'string' },
  arch: { no: 6, kind: 'string' },
});

export const PlatformInfo = message('machine.PlatformInfo', {
  name: { no: 1, kind: 'string' },
  mode: { no: 2, kind: 'string' },
});

export const FeaturesInfo = message('machine.FeaturesInfo', {
  rbac: { no: 1, kind: 'bool' },
});

export const Version = message('machine.Version', {
  metadata: { no: 1, kind: 'message', type: Metadata },
  version: { no: 2, kind: 'message', type: VersionInfo },
  platform: { no: 3, kind: 'message', type: PlatformInfo },
  features: { no: 4, kind: 'message', type: FeaturesInfo },
});

export const VersionResponse = message('machine.VersionResponse', {
  messages: { no: 1, kind: 'message', type: Version, repeated: true },
});

// --- Reboot ----------------------------------------------------------------------

export const RebootMode = { DEFAULT: 0, POWERCYCLE: 1 } as const;

export const RebootRequest = message('machine.RebootRequest', {
  mode: { no: 1, kind: 'enum' },
});

export const Reboot = message('machine.Reboot', {
  metadata: { no: 1, kind: 'message', type: Metadata },
  actorId: { no: 2, kind: 'string' },
});

export const RebootResponse = message('machine.RebootResponse', {
  messages: { no: 1, kind: 'message', type: Reboot, repeated: true },
});

// --- Shutdown --------------------------------------------------------------------

export const ShutdownRequest = message('machine.ShutdownRequest', {
  force: { no: 1, kind: 'bool' },
});

export const Shutdown = message('machine.Shutdown', {
  metadata: { no: 1, kind: 'message', type: Metadata },
  actorId: { no: 2, kind: 'string' },
});

export const ShutdownResponse = message('machine.ShutdownResponse', {
  messages: { no: 1, kind: 'message', type: Shutdown, repeated: true },
});

// --- Reset -----------------------------------------------------------------------

export const ResetWipeMode = { ALL: 0, SYSTEM_DISK: 1, USER_DISKS: 2 } as const;

export const ResetPartitionSpec = message('machine.ResetPartitionSpec', {
  label: { no: 1, kind: 'string' },
  wipe: { no: 2, kind: 'bool' },
});

export const ResetRequest = message('machine.ResetRequest', {
  graceful: { no: 1, kind: 'bool' },
  reboot: { no: 2, kind: 'bool' },
  systemPartitionsToWipe: { no: 3, kind: 'message', type: ResetPartitionSpec, repeated: true },
  userDisksToWipe: { no: 4, kind: 'string', repeated: true },
  mode: { no: 5, kind: 'enum' },
});

export const Reset = message('machine.Reset', {
  metadata: { no: 1, kind: 'message', type: Metadata },
  actorId: { no: 2, kind: 'string' },
});

export const ResetResponse = message('machine.ResetResponse', {
  messages: { no: 1, kind: 'message', type: Reset, repeated: true },
});

// --- ApplyConfiguration ----------------------------------------------------------

export const ApplyMode = { REBOOT: 0, AUTO: 1, NO_REBOOT: 2, STAGED: 3, TRY: 4 } as const;

export const ApplyConfigurationRequest = message('machine.ApplyConfigurationRequest', {
  data: { no: 1, kind: 'bytes' },
  mode: { no: 4, kind: 'enum' },
  dryRun: { no: 5, kind: 'bool' },
  tryModeTimeout: { no: 6, kind: 'message', type: Duration },
});

export const ApplyConfiguration = message('machine.ApplyConfiguration', {
  metadata: { no: 1, kind: 'message', type: Metadata },
  warnings: { no: 2, kind: 'string', repeated: true },
  /** The mode the node actually chose (AUTO resolves to one of the others). */
  mode: { no: 3, kind: 'enum' },
  modeDetails: { no: 4, kind: 'string' },
});

export const ApplyConfigurationResponse = message('machine.ApplyConfigurationResponse', {
  messages: { no: 1, kind: 'message', type: ApplyConfiguration, repeated: true },
});

// --- Upgrade (legacy, MachineService) --------------------------------------------

export const UpgradeRequest = message('machine.UpgradeRequest', {
  image: { no: 1, kind: 'string' },
  preserve: { no: 2, kind: 'bool' },
  stage: { no: 3, kind: 'bool' },
  force: { no: 4, kind: 'bool' },
  rebootMode: { no: 5, kind: 'enum' },
});

export const Upgrade = message('machine.Upgrade', {
  metadata: { no: 1, kind: 'message', type: Metadata },
  ack: { no: 2, kind: 'string' },
  actorId: { no: 3, kind: 'string' },
});

export const UpgradeResponse = message('machine.UpgradeResponse', {
  messages: { no: 1, kind: 'message', type: Upgrade, repeated: true },
});

// --- machine.ImageService: Pull (server-streaming) ----------------------------------

export const ImageServicePullRequest = message('machine.ImageServicePullRequest', {
  containerd: { no: 1, kind: 'message', type: ContainerdInstance },
  imageRef: { no: 3, kind: 'string' },
});

export const LayerPullStatus = {
  DOWNLOADING: 0,
  DOWNLOAD_COMPLETE: 1,
  EXTRACTING: 2,
  EXTRACT_COMPLETE: 3,
  ALREADY_EXISTS: 4,
} as const;

export const ImageServicePullLayerProgress = message('machine.ImageServicePullLayerProgress', {
  status: { no: 1, kind: 'enum' },
  elapsed: { no: 2, kind: 'message', type: Duration },
  offset: { no: 3, kind: 'int64' },
  total: { no: 4, kind: 'int64' },
});

export const ImageServicePullProgress = message('machine.ImageServicePullProgress', {
  layerId: { no: 1, kind: 'string' },
  progress: { no: 2, kind: 'message', type: ImageServicePullLayerProgress },
});

/** oneof response: intermediate `pullProgress` updates, then the pulled image's `name`. */
export const ImageServicePullResponse = message('machine.ImageServicePullResponse', {
  name: { no: 1, kind: 'string', explicit: true },
  pullProgress: { no: 2, kind: 'message', type: ImageServicePullProgress },
});

// --- machine.LifecycleService: Upgrade (server-streaming, Talos >= 1.13) ----------

export const InstallArtifactsSource = message('machine.InstallArtifactsSource', {
  imageName: { no: 1, kind: 'string' },
});

export const UpgradeOptions = message('machine.UpgradeOptions', {
  extraKernelArgs: { no: 1, kind: 'string', repeated: true },
});

export const LifecycleServiceUpgradeRequest = message('machine.LifecycleServiceUpgradeRequest', {
  containerd: { no: 1, kind: 'message', type: ContainerdInstance },
  source: { no: 2, kind: 'message', type: InstallArtifactsSource },
  options: { no: 3, kind: 'message', type: UpgradeOptions },
});

/** oneof response: progress `message` lines, then the installer's `exitCode`. */
export const LifecycleServiceInstallProgress = message('machine.LifecycleServiceInstallProgress', {
  message: { no: 1, kind: 'string', explicit: true },
  exitCode: { no: 2, kind: 'int32', explicit: true },
});

export const LifecycleServiceUpgradeResponse = message('machine.LifecycleServiceUpgradeResponse', {
  progress: { no: 1, kind: 'message', type: LifecycleServiceInstallProgress },
});

// Shorthands for the decoded and to-be-encoded forms.
type FieldsOf<T> = T extends { fields: infer F extends Fields } ? F : never;
export type Decoded<T> = Message<FieldsOf<T>>;
export type Init<T> = MessageInit<FieldsOf<T>>;
