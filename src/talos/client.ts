// A Talos API client: gRPC over mutual TLS with a talosconfig's credentials, through
// one of its endpoints (apid), to the node named by the `node` metadata — apid
// proxies the call there, as it does for talosctl.
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { isIP } from 'node:net';
import {
  Client,
  credentials,
  Metadata,
  status as GrpcStatus,
  type ClientOptions,
  type ServiceError,
  type StatusObject,
} from '@grpc/grpc-js';
import type { TalosContext } from './config.ts';
import {
  diagnoseConnection,
  statusError,
  TalosApiError,
  TalosUpgradeFailedError,
  type TalosErrorDetails,
} from './errors.ts';
import { fromBinary, type DescMessage, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import {
  ContainerDriver,
  ContainerdNamespace,
  type Metadata as ReplyMetadata,
} from './gen/gatehouse/talos/common_pb.ts';
import {
  ApplyConfigurationRequest_Mode as ApplyModeNumber,
  ImageServicePullLayerProgress_Status as LayerStatus,
  RebootRequest_Mode as RebootModeNumber,
  ResetRequest_WipeMode as WipeModeNumber,
  SequenceEvent_Action as SequenceActionNumber,
  SequenceEventSchema,
  UpgradeRequest_RebootMode as UpgradeRebootModeNumber,
} from './gen/gatehouse/talos/machine_pb.ts';
import { MachineConfigSpecSchema } from './gen/gatehouse/talos/config_pb.ts';
import { installerExit } from './installer-exit.ts';
import { xidTime, type NodeEventHistory, type SequenceEventInfo } from './events.ts';
import {
  CosiState,
  deserializer,
  ImageService,
  LifecycleService,
  MachineService,
  serializer,
  type Method,
} from './services.ts';

export interface TalosClientOptions {
  /** Deadline of a unary call unless the call says otherwise; default 60s. */
  timeoutMs?: number;
  /** Deadline of a streaming call (image pull, install); default 30 minutes. */
  streamTimeoutMs?: number;
  /** Endpoints to use instead of the context's (host or host:port). */
  endpoints?: string[];
}

export interface CallOptions {
  /** The node to act on (its address, as in `talosctl -n`); without it the endpoint answers for itself. */
  node?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export type RebootMode = 'default' | 'powercycle' | 'force';
export type WipeMode = 'all' | 'system-disk' | 'user-disks';
export type ApplyMode = 'reboot' | 'auto' | 'no-reboot' | 'staged' | 'try';

export interface TalosVersion {
  /**
   * The replying machine's hostname when the reply carries common.Metadata (only a
   * fan-out to several `nodes` fills it); empty for a call addressed with `node`.
   */
  hostname: string;
  tag: string;
  sha: string;
  built: string;
  goVersion: string;
  os: string;
  arch: string;
  platform: { name: string; mode: string };
}

/** One etcd member as EtcdMemberList reports it. IDs are 64-bit: kept as bigint. */
export interface EtcdMemberInfo {
  id: bigint;
  hostname: string;
  isLearner: boolean;
  peerUrls: string[];
  clientUrls: string[];
}

/** One member's own view (EtcdStatus of the node it runs on). */
export interface EtcdMemberStatusInfo {
  memberId: bigint;
  /** The member this one believes leads; 0 when it knows of none. */
  leader: bigint;
  raftIndex: bigint;
  raftAppliedIndex: bigint;
  isLearner: boolean;
  dbSize: bigint;
  errors: string[];
}

export interface EtcdAlarmInfo {
  memberId: bigint;
  alarm: 'NOSPACE' | 'CORRUPT' | 'UNKNOWN';
}

export interface ImagePullProgress {
  layerId: string;
  status: 'downloading' | 'download-complete' | 'extracting' | 'extract-complete' | 'already-exists';
  offset: number;
  total: number;
}

const REBOOT_MODES: Record<RebootMode, RebootModeNumber> = {
  default: RebootModeNumber.DEFAULT,
  powercycle: RebootModeNumber.POWERCYCLE,
  force: RebootModeNumber.FORCE,
};
const UPGRADE_REBOOT_MODES: Record<Exclude<RebootMode, 'force'>, UpgradeRebootModeNumber> = {
  default: UpgradeRebootModeNumber.DEFAULT,
  powercycle: UpgradeRebootModeNumber.POWERCYCLE,
};
const WIPE_MODES: Record<WipeMode, WipeModeNumber> = {
  all: WipeModeNumber.ALL,
  'system-disk': WipeModeNumber.SYSTEM_DISK,
  'user-disks': WipeModeNumber.USER_DISKS,
};
const APPLY_MODES: Record<ApplyMode, ApplyModeNumber> = {
  reboot: ApplyModeNumber.REBOOT,
  auto: ApplyModeNumber.AUTO,
  'no-reboot': ApplyModeNumber.NO_REBOOT,
  staged: ApplyModeNumber.STAGED,
  try: ApplyModeNumber.TRY,
};
const LAYER_STATUS: Record<number, ImagePullProgress['status']> = {
  [LayerStatus.DOWNLOADING]: 'downloading',
  [LayerStatus.DOWNLOAD_COMPLETE]: 'download-complete',
  [LayerStatus.EXTRACTING]: 'extracting',
  [LayerStatus.EXTRACT_COMPLETE]: 'extract-complete',
  [LayerStatus.ALREADY_EXISTS]: 'already-exists',
};

/** The containerd instance Talos installs from: system namespace, CRI driver (talosctl's default). */
const SYSTEM_CONTAINERD = { driver: ContainerDriver.CRI, namespace: ContainerdNamespace.NS_SYSTEM };

// TLS forbids an IP address as server name (RFC 6066) and Node warns when asked to
// send one. apid does not choose its certificate by server name, so any name will do;
// the certificate is still checked against the IP (see `channel`).
const SERVER_NAME_FOR_IP = 'talos-api';

interface Endpoint {
  address: string;
  host: string;
  port: number;
  client: Client;
  servername: string | undefined;
}

function splitAddress(address: string): { host: string; port: number } {
  const match = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  if (!match?.[1] || !match[2]) throw new Error(`endpoint "${address}" is not host:port`);
  return { host: match[1], port: Number(match[2]) };
}

function isServiceError(error: unknown): error is ServiceError {
  return error instanceof Error && typeof (error as Partial<ServiceError>).code === 'number';
}

/** gRPC's word for "the request never left": no transport could be set up. */
function neverConnected(error: ServiceError): boolean {
  return (
    error.code === GrpcStatus.UNAVAILABLE &&
    /No connection established|Failed to connect/i.test(error.details)
  );
}

export class TalosClient {
  readonly context: TalosContext;
  private readonly timeoutMs: number;
  private readonly streamTimeoutMs: number;
  private readonly addresses: string[];
  private readonly endpoints = new Map<string, Endpoint>();
  /** The endpoint that last worked; tried first. */
  private preferred = 0;

  constructor(context: TalosContext, options: TalosClientOptions = {}) {
    this.context = context;
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.streamTimeoutMs = options.streamTimeoutMs ?? 30 * 60_000;
    this.addresses = options.endpoints ?? context.endpoints;
    if (this.addresses.length === 0) throw new Error(`talosconfig ${context.source} gives no endpoint`);
  }

  /** MachineService.Version: the Talos version of the node (or of the endpoint itself). */
  async version(options: CallOptions = {}): Promise<TalosVersion> {
    const reply = await this.unary(MachineService.Version, {}, options);
    const v = this.only(MachineService.Version, reply.messages, options);
    return {
      hostname: v.metadata?.hostname ?? '',
      tag: v.version?.tag ?? '',
      sha: v.version?.sha ?? '',
      built: v.version?.built ?? '',
      goVersion: v.version?.goVersion ?? '',
      os: v.version?.os ?? '',
      arch: v.version?.arch ?? '',
      platform: { name: v.platform?.name ?? '', mode: v.platform?.mode ?? '' },
    };
  }

  /** MachineService.Reboot. Talos acknowledges, then reboots. */
  async reboot(options: CallOptions & { mode?: RebootMode } = {}): Promise<{ actorId: string }> {
    const reply = await this.unary(
      MachineService.Reboot,
      { mode: REBOOT_MODES[options.mode ?? 'default'] },
      options,
    );
    return { actorId: this.only(MachineService.Reboot, reply.messages, options).actorId };
  }

  /**
   * MachineService.EtcdLeaveCluster: the node's member leaves etcd for good (Talos removes
   * it, stops etcd and empties its data). Answers once it has.
   */
  async etcdLeaveCluster(options: CallOptions = {}): Promise<void> {
    const reply = await this.unary(MachineService.EtcdLeaveCluster, {}, options);
    this.only(MachineService.EtcdLeaveCluster, reply.messages, options);
  }

  /** MachineService.EtcdRemoveMemberByID: removes the member with this ID, whichever node it is. */
  async etcdRemoveMemberById(memberId: bigint, options: CallOptions = {}): Promise<void> {
    const reply = await this.unary(MachineService.EtcdRemoveMemberByID, { memberId }, options);
    this.only(MachineService.EtcdRemoveMemberByID, reply.messages, options);
  }

  /** MachineService.Shutdown; `force` skips Talos' own cordon and drain. */
  async shutdown(options: CallOptions & { force?: boolean } = {}): Promise<{ actorId: string }> {
    const reply = await this.unary(MachineService.Shutdown, { force: options.force ?? false }, options);
    return { actorId: this.only(MachineService.Shutdown, reply.messages, options).actorId };
  }

  /** MachineService.Reset: wipe the node (leaving etcd first when graceful), then reboot or halt. */
  async reset(
    options: CallOptions & {
      graceful?: boolean;
      reboot?: boolean;
      wipeMode?: WipeMode;
      /** System partitions (by label, e.g. STATE, EPHEMERAL) to wipe; all when empty. */
      systemPartitionsToWipe?: { label: string; wipe: boolean }[];
      userDisksToWipe?: string[];
    } = {},
  ): Promise<{ actorId: string }> {
    const reply = await this.unary(
      MachineService.Reset,
      {
        graceful: options.graceful ?? true,
        reboot: options.reboot ?? false,
        mode: WIPE_MODES[options.wipeMode ?? 'all'],
        systemPartitionsToWipe: options.systemPartitionsToWipe ?? [],
        userDisksToWipe: options.userDisksToWipe ?? [],
      },
      options,
    );
    return { actorId: this.only(MachineService.Reset, reply.messages, options).actorId };
  }

  /** MachineService.ApplyConfiguration: the node's full machine configuration. */
  async applyConfiguration(
    options: CallOptions & {
      data: string | Uint8Array;
      mode: ApplyMode;
      dryRun?: boolean;
      /** How long a `try` lasts before the node rolls back. */
      tryModeTimeoutMs?: number;
    },
  ): Promise<{ mode: ApplyMode; modeDetails: string; warnings: string[] }> {
    const data = typeof options.data === 'string' ? new TextEncoder().encode(options.data) : options.data;
    const timeout = options.tryModeTimeoutMs;
    const reply = await this.unary(
      MachineService.ApplyConfiguration,
      {
        data,
        mode: APPLY_MODES[options.mode],
        dryRun: options.dryRun ?? false,
        ...(timeout !== undefined
          ? {
              tryModeTimeout: {
                seconds: BigInt(Math.floor(timeout / 1000)),
                nanos: Math.round((timeout % 1000) * 1e6),
              },
            }
          : {}),
      },
      options,
    );
    const applied = this.only(MachineService.ApplyConfiguration, reply.messages, options);
    const mode = (Object.entries(APPLY_MODES).find(([, n]) => n === applied.mode)?.[0] ??
      options.mode) as ApplyMode;
    return { mode, modeDetails: applied.modeDetails, warnings: applied.warnings };
  }

  /**
   * MachineService.Upgrade, the legacy upgrade (Talos < 1.13, deprecated after): the
   * node pulls the installer, installs and reboots by itself.
   */
  async upgrade(
    options: CallOptions & {
      image: string;
      preserve?: boolean;
      stage?: boolean;
      force?: boolean;
      rebootMode?: Exclude<RebootMode, 'force'>;
    },
  ): Promise<{ ack: string; actorId: string }> {
    const reply = await this.unary(
      MachineService.Upgrade,
      {
        image: options.image,
        preserve: options.preserve ?? false,
        stage: options.stage ?? false,
        force: options.force ?? false,
        rebootMode: UPGRADE_REBOOT_MODES[options.rebootMode ?? 'default'],
      },
      options,
    );
    const upgrade = this.only(MachineService.Upgrade, reply.messages, options);
    return { ack: upgrade.ack, actorId: upgrade.actorId };
  }

  /** MachineService.EtcdMemberList, through a control-plane node (linearizable: needs a quorum). */
  async etcdMemberList(options: CallOptions = {}): Promise<EtcdMemberInfo[]> {
    const reply = await this.unary(MachineService.EtcdMemberList, { queryLocal: false }, options);
    return this.only(MachineService.EtcdMemberList, reply.messages, options).members.map((m) => ({
      id: m.id,
      hostname: m.hostname,
      isLearner: m.isLearner,
      peerUrls: m.peerUrls,
      clientUrls: m.clientUrls,
    }));
  }

  /** MachineService.EtcdStatus: the status of the member on the node the call is addressed to. */
  async etcdStatus(options: CallOptions = {}): Promise<EtcdMemberStatusInfo> {
    const reply = await this.unary(MachineService.EtcdStatus, {}, options);
    const s = this.only(MachineService.EtcdStatus, reply.messages, options).memberStatus;
    if (!s)
      return this.throwStatus(MachineService.EtcdStatus, options, GrpcStatus.INTERNAL, 'no member status');
    return {
      memberId: s.memberId,
      leader: s.leader,
      raftIndex: s.raftIndex,
      raftAppliedIndex: s.raftAppliedIndex,
      isLearner: s.isLearner,
      dbSize: s.dbSize,
      errors: s.errors,
    };
  }

  /** MachineService.EtcdAlarmList: the alarms raised in the cluster. */
  async etcdAlarmList(options: CallOptions = {}): Promise<EtcdAlarmInfo[]> {
    const reply = await this.unary(MachineService.EtcdAlarmList, {}, options);
    const names: Record<number, EtcdAlarmInfo['alarm']> = { 1: 'NOSPACE', 2: 'CORRUPT' };
    return this.only(MachineService.EtcdAlarmList, reply.messages, options)
      .memberAlarms.filter((a) => a.alarm !== 0)
      .map((a) => ({ memberId: a.memberId, alarm: names[a.alarm] ?? 'UNKNOWN' }));
  }

  /**
   * MachineService.EtcdForfeitLeadership: the member of the addressed node hands
   * leadership to another member if it leads. `member` names the member leadership
   * moved TO; empty when the addressed member did not lead. Talos refuses it outright
   * in an etcd of one member ("only one member"), leader or not.
   */
  async etcdForfeitLeadership(options: CallOptions = {}): Promise<{ member: string }> {
    const reply = await this.unary(MachineService.EtcdForfeitLeadership, {}, options);
    return { member: this.only(MachineService.EtcdForfeitLeadership, reply.messages, options).member };
  }

  /**
   * MachineService.EtcdSnapshot: the database of the member on the addressed node,
   * streamed in chunks (Talos sends at most 1 KiB a message) — as etcd sends it, so its
   * last 32 bytes are the SHA-256 of the rest. Each chunk is handed to `onChunk`, and
   * the next is read only once it is done with (a slow destination slows the stream,
   * nothing piles up in memory). Talos answers UNIMPLEMENTED on a node that is not a
   * control-plane node.
   */
  async etcdSnapshot(
    options: CallOptions & { onChunk: (bytes: Uint8Array) => void | Promise<void> },
  ): Promise<void> {
    const def = MachineService.EtcdSnapshot;
    const timeoutMs = options.timeoutMs ?? this.streamTimeoutMs;
    await this.through(def, options, timeoutMs, async (endpoint, deadline) => {
      options.signal?.throwIfAborted();
      const call = endpoint.client.makeServerStreamRequest(
        def.path,
        serializer(def.request),
        deserializer(def.response),
        {},
        this.metadata(options),
        { deadline },
      );
      const cancel = () => call.cancel();
      options.signal?.addEventListener('abort', cancel, { once: true });
      try {
        for await (const reply of call as AsyncIterable<MessageShape<typeof def.response>>)
          await options.onChunk(reply.bytes);
      } catch (error) {
        call.cancel();
        throw error;
      } finally {
        options.signal?.removeEventListener('abort', cancel);
      }
    });
  }

  /**
   * What the node still keeps of its events (MachineService.Events from the start,
   * `tail_events -1`): its sequence events, how many events of any kind it sent, and when
   * the oldest was published. Read until, after the first event (Talos sends an empty one
   * as soon as the stream starts), the node has sent nothing for `quietMs`: the stream
   * then follows new events, which are not waited for. Talos keeps the last 990 at most
   * (events.ts): a short history is all there was since boot, a full one may not be.
   */
  async eventHistory(options: CallOptions & { quietMs?: number } = {}): Promise<NodeEventHistory> {
    const sequences: SequenceEventInfo[] = [];
    let kept = 0;
    let oldest: Date | undefined;
    const quiet = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, quiet.signal]) : quiet.signal;
    let timer: NodeJS.Timeout | undefined;
    const hush = () => {
      clearTimeout(timer);
      timer = setTimeout(() => quiet.abort(), options.quietMs ?? 1000);
    };
    try {
      await this.stream(
        MachineService.Events,
        { tailEvents: -1 },
        { ...options, signal, timeoutMs: options.timeoutMs ?? this.timeoutMs },
        (event) => {
          hush();
          const data = event.data;
          // The empty first event says the stream started; it is no event of the node's.
          if (!data || data.typeUrl === '') return;
          kept += 1;
          oldest ??= xidTime(event.id);
          if (!data.typeUrl.endsWith('machine.SequenceEvent')) return;
          const sequence = fromBinary(SequenceEventSchema, data.value);
          sequences.push({
            id: event.id,
            sequence: sequence.sequence,
            action:
              sequence.action === SequenceActionNumber.START
                ? 'start'
                : sequence.action === SequenceActionNumber.STOP
                  ? 'stop'
                  : 'noop',
            ...(sequence.error ? { error: sequence.error.message } : {}),
          });
        },
      );
    } catch (error) {
      // Cancelled by the quiet period: every past event has come.
      if (!(quiet.signal.aborted && !options.signal?.aborted)) throw error;
    } finally {
      clearTimeout(timer);
    }
    return { sequences, kept, oldest };
  }

  /**
   * MachineService.Rollback: the node's boot loader goes back to the previous
   * installation, and the node reboots into it. Answers before the node is back.
   */
  async rollback(options: CallOptions = {}): Promise<void> {
    const reply = await this.unary(MachineService.Rollback, {}, options);
    this.only(MachineService.Rollback, reply.messages, options);
  }

  /**
   * The machine configuration the node runs, as it was applied (the COSI resource
   * MachineConfigs.config.talos.dev `v1alpha1` in namespace `config`, as `talosctl get
   * machineconfig` reads it).
   */
  async machineConfiguration(options: CallOptions = {}): Promise<string> {
    const reply = await this.unary(
      CosiState.Get,
      { namespace: 'config', type: 'MachineConfigs.config.talos.dev', id: 'v1alpha1' },
      options,
    );
    const spec = reply.resource?.spec;
    if (spec?.protoSpec.length)
      return new TextDecoder().decode(fromBinary(MachineConfigSpecSchema, spec.protoSpec).yamlMarshalled);
    if (spec?.yamlSpec) return spec.yamlSpec;
    return this.throwStatus(
      CosiState.Get,
      options,
      GrpcStatus.INTERNAL,
      'the machine configuration has no spec',
    );
  }

  /** ImageService.Pull into the system containerd (Talos >= 1.13 upgrades install from there). */
  async pullImage(
    options: CallOptions & { image: string; onProgress?: (progress: ImagePullProgress) => void },
  ): Promise<{ name: string }> {
    let name: string | undefined;
    await this.stream(
      ImageService.Pull,
      { containerd: SYSTEM_CONTAINERD, imageRef: options.image },
      options,
      (reply) => {
        const r = reply.response;
        if (r.case === 'name') name = r.value;
        if (r.case === 'pullProgress' && options.onProgress)
          options.onProgress({
            layerId: r.value.layerId,
            status: LAYER_STATUS[r.value.progress?.status ?? 0] ?? 'downloading',
            offset: Number(r.value.progress?.offset ?? 0n),
            total: Number(r.value.progress?.total ?? 0n),
          });
      },
    );
    if (name === undefined)
      throw new TalosApiError(
        this.details(ImageService.Pull, options, 'the stream ended without naming the pulled image'),
        'the stream ended without naming the pulled image',
      );
    return { name };
  }

  /**
   * LifecycleService.Upgrade (Talos >= 1.13): installs the pulled installer image to
   * the boot disk; the node runs it on its next reboot. Streams the installer's output
   * and throws a TalosUpgradeFailedError when it exits non-zero.
   */
  async installUpgrade(
    options: CallOptions & {
      image: string;
      onProgress?: (line: string) => void;
    },
  ): Promise<{ output: string[] }> {
    const output: string[] = [];
    let exitCode: number | undefined;
    await this.stream(
      LifecycleService.Upgrade,
      { containerd: SYSTEM_CONTAINERD, source: { imageName: options.image } },
      options,
      (reply) => {
        const progress = reply.progress?.response;
        if (progress?.case === 'message') {
          output.push(progress.value);
          options.onProgress?.(progress.value);
        }
        if (progress?.case === 'exitCode') exitCode = progress.value;
      },
    );
    const call = this.callName(LifecycleService.Upgrade);
    const endpoint = this.currentEndpoint();
    if (exitCode === undefined)
      throw new TalosApiError(
        { call, node: options.node, endpoint, failure: 'status', talosMessage: 'no exit code' },
        'the installer stream ended without an exit code',
      );
    if (exitCode !== 0)
      throw new TalosUpgradeFailedError(
        { call, node: options.node, endpoint },
        exitCode,
        output,
        installerExit(exitCode, options.image),
      );
    return { output };
  }

  close(): void {
    for (const endpoint of this.endpoints.values()) endpoint.client.close();
    this.endpoints.clear();
  }

  // --- plumbing ---------------------------------------------------------------------

  private callName(def: Method): string {
    return `${def.service.replace(/^machine\./, '')}.${def.name}`;
  }

  private currentEndpoint(): string {
    return this.addresses[this.preferred] ?? this.addresses[0] ?? '';
  }

  private details(def: Method, options: CallOptions, talosMessage: string): TalosErrorDetails {
    return {
      call: this.callName(def),
      node: options.node,
      endpoint: this.currentEndpoint(),
      failure: 'status',
      talosMessage,
    };
  }

  /**
   * The one reply of a call to one node. apid reports a failure of the proxied call
   * in the reply's metadata rather than as a status when it multiplexes; honour both.
   */
  private only<T extends { metadata?: ReplyMetadata | undefined }>(
    def: Method,
    messages: T[],
    options: CallOptions,
  ): T {
    const failed = messages.find((msg) => msg.metadata?.error);
    if (failed?.metadata) {
      const code = failed.metadata.status?.code;
      return this.throwStatus(def, options, code ?? GrpcStatus.UNKNOWN, failed.metadata.error);
    }
    const first = messages[0];
    if (!first) return this.throwStatus(def, options, GrpcStatus.INTERNAL, 'Talos sent an empty reply');
    return first;
  }

  private throwStatus(def: Method, options: CallOptions, code: number, message: string): never {
    throw statusError(
      { ...this.details(def, options, message), code },
      options.timeoutMs ?? this.timeoutMs,
      false,
    );
  }

  private channel(address: string): Endpoint {
    let endpoint = this.endpoints.get(address);
    if (endpoint) return endpoint;
    const { host, port } = splitAddress(address);
    const ip = isIP(host) !== 0;
    const creds = credentials.createSsl(
      Buffer.from(this.context.ca),
      Buffer.from(this.context.key),
      Buffer.from(this.context.crt),
      { checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(host, cert) },
    );
    const options: ClientOptions = ip ? { 'grpc.ssl_target_name_override': SERVER_NAME_FOR_IP } : {};
    endpoint = {
      address,
      host,
      port,
      client: new Client(ip && host.includes(':') ? `ipv6:${address}` : address, creds, options),
      servername: ip ? SERVER_NAME_FOR_IP : host,
    };
    this.endpoints.set(address, endpoint);
    return endpoint;
  }

  private metadata(options: CallOptions): Metadata {
    const md = new Metadata();
    if (options.node) md.set('node', options.node);
    return md;
  }

  /**
   * Runs `attempt` through the endpoints, starting with the one that last worked,
   * moving on only when a connection could not be made (the request never left, so
   * trying elsewhere cannot repeat an action).
   */
  private async through<T>(
    def: Method,
    options: CallOptions,
    timeoutMs: number,
    attempt: (endpoint: Endpoint, deadline: Date) => Promise<T>,
  ): Promise<T> {
    const deadline = new Date(Date.now() + timeoutMs);
    const order = this.addresses.map((_, i) => (this.preferred + i) % this.addresses.length);
    let lastError: unknown;
    let lastEndpoint: Endpoint | undefined;
    for (const index of order) {
      const endpoint = this.channel(this.addresses[index] as string);
      try {
        const result = await attempt(endpoint, deadline);
        this.preferred = index;
        return result;
      } catch (error) {
        lastError = error;
        lastEndpoint = endpoint;
        if (isServiceError(error) && neverConnected(error) && Date.now() < deadline.getTime()) continue;
        break;
      }
    }
    throw await this.explain(def, options, timeoutMs, lastEndpoint, lastError);
  }

  private async explain(
    def: Method,
    options: CallOptions,
    timeoutMs: number,
    endpoint: Endpoint | undefined,
    error: unknown,
  ): Promise<Error> {
    if (error instanceof TalosApiError || !isServiceError(error) || !endpoint) return error as Error;
    const base = { call: this.callName(def), node: options.node, endpoint: endpoint.address };
    if (neverConnected(error)) {
      const diagnosis = await diagnoseConnection(endpoint.host, endpoint.port, {
        ca: this.context.ca,
        cert: this.context.crt,
        key: this.context.key,
        ...(endpoint.servername ? { servername: endpoint.servername } : {}),
        checkServerIdentity: (_name, cert) => checkServerIdentity(endpoint.host, cert),
      });
      switch (diagnosis.failure) {
        case 'tls-server-certificate':
          return new TalosApiError(
            { ...base, failure: diagnosis.failure, code: error.code, talosMessage: diagnosis.detail },
            `TLS handshake failed: the endpoint's certificate is not trusted by the talosconfig's CA (${diagnosis.detail}); is ${this.context.source} for this cluster?`,
            { cause: error },
          );
        case 'tls-client-certificate':
          return new TalosApiError(
            { ...base, failure: diagnosis.failure, code: error.code, talosMessage: diagnosis.detail },
            `TLS handshake failed: the endpoint refused our client certificate (${diagnosis.detail}); the crt in ${this.context.source} must be signed by this cluster's Talos CA`,
            { cause: error },
          );
        case 'unreachable':
          return new TalosApiError(
            { ...base, failure: 'unreachable', code: error.code, talosMessage: diagnosis.detail },
            `cannot connect to the endpoint: ${diagnosis.detail}`,
            { cause: error },
          );
        case 'none':
          break;
      }
    }
    return statusError(
      { ...base, code: error.code, talosMessage: error.details || error.message },
      timeoutMs,
      options.signal?.aborted ?? false,
      error,
    );
  }

  private unary<Req extends DescMessage, Res extends DescMessage>(
    def: Method<Req, Res>,
    request: MessageInitShape<Req>,
    options: CallOptions,
  ): Promise<MessageShape<Res>> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    return this.through(def, options, timeoutMs, (endpoint, deadline) => {
      options.signal?.throwIfAborted();
      return new Promise<MessageShape<Res>>((resolve, reject) => {
        const call = endpoint.client.makeUnaryRequest(
          def.path,
          serializer(def.request),
          deserializer(def.response),
          request,
          this.metadata(options),
          { deadline },
          (error, value) => {
            options.signal?.removeEventListener('abort', cancel);
            if (error) reject(error);
            else if (value === undefined) reject(new Error(`${def.path}: no reply`));
            else resolve(value);
          },
        );
        const cancel = () => call.cancel();
        options.signal?.addEventListener('abort', cancel, { once: true });
      });
    });
  }

  private stream<Req extends DescMessage, Res extends DescMessage>(
    def: Method<Req, Res>,
    request: MessageInitShape<Req>,
    options: CallOptions,
    onReply: (reply: MessageShape<Res>) => void,
  ): Promise<void> {
    const timeoutMs = options.timeoutMs ?? this.streamTimeoutMs;
    return this.through(def, options, timeoutMs, (endpoint, deadline) => {
      options.signal?.throwIfAborted();
      return new Promise<void>((resolve, reject) => {
        const call = endpoint.client.makeServerStreamRequest(
          def.path,
          serializer(def.request),
          deserializer(def.response),
          request,
          this.metadata(options),
          { deadline },
        );
        const cancel = () => call.cancel();
        options.signal?.addEventListener('abort', cancel, { once: true });
        let failed = false;
        call.on('data', (reply: MessageShape<Res>) => {
          if (failed) return;
          try {
            onReply(reply);
          } catch (error) {
            failed = true;
            call.cancel();
            reject(error instanceof Error ? error : new Error(String(error)));
          }
        });
        call.on('error', (error: ServiceError) => {
          options.signal?.removeEventListener('abort', cancel);
          if (!failed) reject(error);
          failed = true;
        });
        call.on('status', (status: StatusObject) => {
          options.signal?.removeEventListener('abort', cancel);
          if (status.code === GrpcStatus.OK && !failed) resolve();
        });
      });
    });
  }
}
