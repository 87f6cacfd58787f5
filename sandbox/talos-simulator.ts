// A Talos API simulator for the sandbox: serves the Talos gRPC API (MachineService
// Version, Reboot, Shutdown, Reset, ApplyConfiguration, Upgrade, Rollback, Events, the etcd
// methods and EtcdSnapshot; ImageService.Pull; LifecycleService.Upgrade; the COSI
// State.Get of the machine configuration) over mutual TLS like apid, routes each call
// by its `node` metadata to the kwok Node with that InternalIP (or name), and plays the
// call on that Node through the Kubernetes API, as the Talos version in the Node's
// osImage would — no kinder than such a node (each behaviour names the Talos source it
// follows, in this file and in talos-machine-config.ts, talos-reset.ts, talos-events.ts,
// talos-etcd.ts):
//
//   reboot   → acknowledged; the Node goes NotReady (powered off), gets a new bootID
//              (and the new osImage after an upgrade), and turns Ready after the boot delay
//   shutdown → NotReady, and stays down
//   reset    → acknowledged first; then, in its sequence, a graceful control-plane node
//              leaves etcd (failing the sequence, the node left up, when etcd cannot let
//              it go), the disks and partitions asked for are wiped, and the node halts,
//              or with `reboot` boots again (into maintenance mode when its STATE was
//              wiped). A reset never deletes the Node, as on a real cluster.
//   apply    → per version (talos-machine-config.ts): ≤ 1.13 applies live only what its
//              CanApplyImmediate allows (NO_REBOOT and TRY of anything else refused, AUTO
//              reboots); 1.14 applies everything live (AUTO is NO_REBOOT, REBOOT refused),
//              restarting CRI — every container on the node, the Node staying Ready — when
//              CRI's configuration changes; TRY reverts at its timeout unless another apply
//              comes first
//
// Per version: ImageService and LifecycleService exist from 1.13 (UNIMPLEMENTED
// before); the installer exits with a code per kind of failure from 1.14 (1 before). The
// legacy MachineService.Upgrade installs and reboots by itself (a `stageUpgrade`
// sequence when staged), and refuses a control-plane node whose etcd fails Talos's
// checks (unless `force`). Like a real node answering a call addressed with `node`, no
// reply carries common.Metadata: errors are gRPC statuses.
//
// Events replays what the node published since its boot (the last 990 at most, as
// Talos's ring keeps them), after an empty first event, then holds the stream open.
//
// The control-plane Nodes form one simulated etcd cluster (talos-etcd.ts); etcd calls on
// any other node answer UNIMPLEMENTED, as Talos does on workers.
//
// State lives on the Node (annotations), so a restarted simulator carries on where
// the last one stopped; only pulled images are kept in memory. Faults are injected per
// node (see talos-faults.ts). Every call that reaches a node is counted on it, by
// method (TALOS_CALLS_ANNOTATION), so tests in other processes can tell how often a
// node was asked to do something. Not simulated: Talos' own cordon and drain around a
// reboot or shutdown (gatehouse drains itself), and power-cycle mode (a reboot like
// any other).
import { createHash, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import {
  Metadata,
  Server,
  ServerCredentials,
  status as GrpcStatus,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServerWritableStream,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { KubeConfig } from '@kubernetes/client-node';
import { parseDuration } from '../src/duration.ts';
import { KubeApiError, RestClient } from '../src/kube/rest.ts';
import {
  create,
  toBinary,
  type DescMessage,
  type MessageInitShape,
  type MessageShape,
} from '@bufbuild/protobuf';
import {
  Code as ErrorCode,
  ContainerDriver,
  ContainerdNamespace,
  type ContainerdInstance,
} from '../src/talos/gen/gatehouse/talos/common_pb.ts';
import {
  ApplyConfigurationRequest_Mode as ApplyMode,
  ImageServicePullLayerProgress_Status as LayerStatus,
  RebootRequest_Mode as RebootMode,
  SequenceEvent_Action as SequenceAction,
  SequenceEventSchema,
  EventSchema,
  ApplyConfigurationSchema,
  VersionSchema,
  type ApplyConfigurationRequest,
} from '../src/talos/gen/gatehouse/talos/machine_pb.ts';
import { MachineConfigSpecSchema } from '../src/talos/gen/gatehouse/talos/config_pb.ts';
import {
  CosiState,
  ImageService,
  LifecycleService,
  MachineService,
  serviceDefinition,
  type Method,
} from '../src/talos/services.ts';
import { imageRepository, normalizeImageReference } from '../src/talos/image-reference.ts';
import {
  formatTalosVersion,
  hasForceReboot,
  hasInstallerExitCodes,
  hasLifecycleUpgrade,
  installerVersion,
  osImageOf,
  talosVersionFromOsImage,
  type TalosVersionNumber,
} from '../src/talos/version.ts';
import { errorMessage, sleep } from '../src/wait.ts';
import { KWOK_NODE_ANNOTATION, NODE_POWER_ANNOTATION, NODE_POWER_OFF } from './kwok-config.ts';
import { TALOS_VERSION } from './nodes.ts';
import {
  BOOT_DELAY_ANNOTATION,
  DEFAULT_FAULT_MESSAGE,
  SHUTDOWN_DELAY_ANNOTATION,
  faultFor,
  parseFaults,
  TALOS_FAULT_ANNOTATION,
  TALOS_FAULT_MESSAGE_ANNOTATION,
  type TalosFault,
} from './talos-faults.ts';
import {
  etcdDatabase,
  SNAPSHOT_CHUNK,
  ETCD_LEADER_ANNOTATION,
  ETCD_LEFT_ANNOTATION,
  etcdClusterOf,
  etcdLeader,
  etcdMembers,
  isControlPlane,
  alarmListReply,
  memberListReply,
  statusReply,
  etcdUpgradeProblem,
  transferee,
  type EtcdNode,
  type SimulatedMember,
} from './talos-etcd.ts';
import {
  EVENT_HISTORY,
  EVENTS_ANNOTATION,
  bootEvents,
  nodeEvents,
  published,
  xidAt,
  type EventRecord,
} from './talos-events.ts';
import {
  decideApply,
  defaultMachineConfig,
  goDuration,
  parseMachineConfig,
  type ParsedMachineConfig,
} from './talos-machine-config.ts';
import { planReset, WIPED_ANNOTATION, type ResetMode } from './talos-reset.ts';
import { upgradePathProblem } from './talos-installer.ts';
import { talosPkiPaths } from './talos-pki.ts';
import { mergeFanOut } from './talos-fan-out.ts';
import { WIRE_METHODS, wireService, type WireRecorder } from './talos-wire.ts';

export { EVENTS_ANNOTATION, nodeEvents } from './talos-events.ts';

/** When a powered-off node boots (RFC 3339); absent while it stays down. */
export const BOOT_AT_ANNOTATION = 'sandbox.gatehouse.dev/boot-at';
/** The osImage the node boots into next (set by an upgrade). */
export const STAGED_OS_IMAGE_ANNOTATION = 'sandbox.gatehouse.dev/staged-os-image';
/** sha256 of the machine configuration the node runs, once one was applied. */
export const MACHINE_CONFIG_ANNOTATION = 'sandbox.gatehouse.dev/machine-config';
/** The machine configuration the node runs (its text), once one was applied. */
export const MACHINE_CONFIG_TEXT_ANNOTATION = 'sandbox.gatehouse.dev/machine-config-text';
/**
 * The configuration the node boots with next, when it differs from the one it runs
 * (applied STAGED, or a TRY not yet confirmed): Talos's persisted configuration.
 */
export const PERSISTED_CONFIG_TEXT_ANNOTATION = 'sandbox.gatehouse.dev/persisted-machine-config-text';
/** When a configuration applied in TRY mode is reverted (RFC 3339), unless another apply comes first. */
export const TRY_REVERT_AT_ANNOTATION = 'sandbox.gatehouse.dev/try-revert-at';
/** How often CRI restarted on this node without a reboot (Talos ≥ 1.14 on a change of its configuration). */
export const CRI_RESTARTS_ANNOTATION = 'sandbox.gatehouse.dev/cri-restarts';
/** Set (Talos ≤ 1.13) from an apply that reboots until the reboot: further applies are refused. */
export const APPLY_REBOOTING_ANNOTATION = 'sandbox.gatehouse.dev/apply-rebooting';
/** The installer's exit code for the next LifecycleService.Upgrade on this node (a fault; ≥ 1.14 installers only). */
export const INSTALLER_EXIT_ANNOTATION = 'sandbox.gatehouse.dev/installer-exit-code';
/** Set when a reset wiped the node's configuration: it boots into maintenance mode, NotReady for good. */
export const MAINTENANCE_ANNOTATION = 'sandbox.gatehouse.dev/maintenance';
/** How the last reboot or shutdown went: `graceful` or `force` (FORCE, or Shutdown force). */
export const LAST_POWER_OFF_ANNOTATION = 'sandbox.gatehouse.dev/last-power-off';
/**
 * The osImage the node boots if it rolls back (MachineService.Rollback): the one it ran
 * before its last upgrade, recorded by the upgrade.
 */
export const PREVIOUS_OS_IMAGE_ANNOTATION = 'sandbox.gatehouse.dev/previous-os-image';

/** How many calls of each method reached the node, as JSON: `{"Reboot":1,"ImagePull":2}`. */
export const TALOS_CALLS_ANNOTATION = 'sandbox.gatehouse.dev/talos-calls';

/** The calls counted on a Node (TALOS_CALLS_ANNOTATION), by the simulator's method names. */
export function talosCallCounts(annotations: Record<string, string> | undefined): Record<string, number> {
  const text = annotations?.[TALOS_CALLS_ANNOTATION];
  if (!text) return {};
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new Error(`${TALOS_CALLS_ANNOTATION} is not a JSON object: ${text}`);
  return Object.fromEntries(
    Object.entries(parsed as Record<string, unknown>).filter(
      (e): e is [string, number] => typeof e[1] === 'number',
    ),
  );
}

export interface TalosSimulatorOptions {
  kubeConfig: KubeConfig;
  /** PEM files: the Talos CA (which must have signed every client) and apid's serving certificate. */
  tls: { ca: string; cert: string; key: string };
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** How long a rebooting node stays down before it is Ready again; default 2s. */
  bootDelayMs?: number;
  /** How long after acknowledging a reboot, shutdown or reset the node goes down; default 200ms. */
  shutdownDelayMs?: number;
  log?: (line: string) => void;
  /** Told the bytes of every call to the raw methods (talos-wire.ts), when it ends. */
  onWire?: WireRecorder;
}

interface NodeObject {
  metadata: {
    name: string;
    uid: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  status?: {
    addresses?: { type: string; address: string }[];
    nodeInfo?: { osImage?: string; architecture?: string; bootID?: string };
  };
}

interface PodObject {
  metadata: {
    name: string;
    namespace: string;
    deletionTimestamp?: string;
    ownerReferences?: { kind: string }[];
  };
  status?: {
    phase?: string;
    containerStatuses?: { name: string; restartCount?: number; [key: string]: unknown }[];
  };
}

/** An event as MachineService.Events sends it: a SequenceEvent, or an event of another kind (empty). */
function eventMessage(e: EventRecord): MessageInitShape<typeof EventSchema> {
  if (e.sequence === undefined)
    return {
      id: e.id,
      actorId: '',
      data: { typeUrl: `talos/runtime/machine.${e.type ?? 'ServiceStateEvent'}`, value: new Uint8Array() },
    };
  const action =
    e.action === 'start'
      ? SequenceAction.START
      : e.action === 'stop'
        ? SequenceAction.STOP
        : SequenceAction.NOOP;
  return {
    id: e.id,
    actorId: '',
    data: {
      typeUrl: 'talos/runtime/machine.SequenceEvent',
      value: toBinary(
        SequenceEventSchema,
        create(SequenceEventSchema, {
          sequence: e.sequence,
          action,
          ...(e.error !== undefined ? { error: { code: ErrorCode.FATAL, message: e.error } } : {}),
        }),
      ),
    },
  };
}

/** The message a fault on the machine's Node asks for (TALOS_FAULT_MESSAGE_ANNOTATION), or the default. */
function faultMessageOf(machine: { node: NodeObject }): string {
  return machine.node.metadata.annotations?.[TALOS_FAULT_MESSAGE_ANNOTATION]?.trim() || DEFAULT_FAULT_MESSAGE;
}

/** The simulated machine a call is for. */
interface Machine {
  node: NodeObject;
  name: string;
  address: string;
  version: TalosVersionNumber;
  faults: TalosFault[];
}

type MethodName =
  | 'Version'
  | 'Reboot'
  | 'Shutdown'
  | 'Reset'
  | 'ApplyConfiguration'
  | 'Upgrade'
  | 'ImagePull'
  | 'LifecycleUpgrade'
  | 'EtcdMemberList'
  | 'EtcdStatus'
  | 'EtcdAlarmList'
  | 'EtcdForfeitLeadership'
  | 'EtcdLeaveCluster'
  | 'EtcdRemoveMemberByID'
  | 'EtcdSnapshot'
  | 'Rollback'
  | 'MachineConfigGet'
  | 'Events';

/** A call's outcome as a gRPC status with Talos' message. */
class CallError extends Error {
  readonly code: GrpcStatus;
  constructor(code: GrpcStatus, message: string) {
    super(message);
    this.code = code;
  }
}

/** The call must never be answered (a hang fault). */
const HANG = Symbol('hang');

const internalIP = (node: NodeObject) =>
  node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
const sha256 = (data: Uint8Array) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

export class TalosSimulator {
  readonly host: string;
  // apid is a grpc-go server: its flow-control window starts at 64 KiB and grows with the
  // bandwidth-delay product it measures, up to 16 MiB, as long as a sender keeps it full
  // (grpc-go's BDP estimator). grpc-js keeps 64 KiB for good unless told, which would make a
  // long upload (EtcdRecover) a round trip per 64 KiB where apid lets it run: given the
  // ceiling grpc-go reaches, as a node's apid ends up with under a stream that fills it.
  private readonly server = new Server({ 'grpc-node.flow_control_window': 16 * 1024 * 1024 });
  private readonly rest: RestClient;
  private readonly bootDelayMs: number;
  private readonly shutdownDelayMs: number;
  private readonly log: (line: string) => void;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly injected = new Map<string, TalosFault[]>();
  /** The Node name of each address (and name) seen in the last LIST (findNode). */
  private readonly nodeNames = new Map<string, string>();
  /** Images each machine has pulled, by `<Node uid>/<containerd namespace>`: name (as asked or pinned) → reference asked. */
  private readonly pulled = new Map<string, Map<string, string>>();
  private boundPort = 0;
  private stopped = false;

  private constructor(options: TalosSimulatorOptions) {
    this.host = options.host ?? '127.0.0.1';
    this.rest = new RestClient(options.kubeConfig);
    this.bootDelayMs = options.bootDelayMs ?? 2000;
    this.shutdownDelayMs = options.shutdownDelayMs ?? 200;
    this.log = options.log ?? (() => undefined);
  }

  static async start(options: TalosSimulatorOptions): Promise<TalosSimulator> {
    const simulator = new TalosSimulator(options);
    const [ca, cert, key] = await Promise.all([
      readFile(options.tls.ca),
      readFile(options.tls.cert),
      readFile(options.tls.key),
    ]);
    simulator.server.addService(serviceDefinition(MachineService), simulator.machineService());
    simulator.server.addService(serviceDefinition(ImageService), simulator.imageService());
    simulator.server.addService(serviceDefinition(LifecycleService), simulator.lifecycleService());
    simulator.server.addService(serviceDefinition(CosiState), simulator.cosiState());
    simulator.server.addService(
      WIRE_METHODS,
      wireService((node) => simulator.roleOf(node), options.onWire),
    );
    // Clients must present a certificate signed by the Talos CA, as apid demands.
    const credentials = ServerCredentials.createSsl(ca, [{ cert_chain: cert, private_key: key }], true);
    simulator.boundPort = await new Promise<number>((resolve, reject) =>
      simulator.server.bindAsync(
        `${simulator.host}:${String(options.port ?? 0)}`,
        credentials,
        (error, port) => (error ? reject(error) : resolve(port)),
      ),
    );
    await simulator.resumeBoots();
    simulator.log(`Talos API simulator serving on ${simulator.endpoint}`);
    return simulator;
  }

  get port(): number {
    return this.boundPort;
  }

  /** host:port, as a talosconfig lists endpoints. */
  get endpoint(): string {
    return `${this.host}:${String(this.boundPort)}`;
  }

  /** Injects a fault for the node with this address or name, until cleared. */
  injectFault(node: string, fault: TalosFault): void {
    this.injected.set(node, [...(this.injected.get(node) ?? []), fault]);
  }

  /** Clears the faults injected for one node (or all). Annotation faults stay on their Nodes. */
  clearFaults(node?: string): void {
    if (node === undefined) this.injected.clear();
    else this.injected.delete(node);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.server.forceShutdown();
    await Promise.resolve();
  }

  // --- services ---------------------------------------------------------------------

  private machineService(): UntypedServiceImplementation {
    const ack = () => ({ messages: [{ actorId: randomUUID() }] });
    return {
      Version: this.unary('Version', MachineService.Version, (machine) => ({
        messages: [this.versionOf(machine)],
      })),
      Reboot: this.unary('Reboot', MachineService.Reboot, async (machine, request) => {
        if (request.mode === RebootMode.FORCE && !hasForceReboot(machine.version))
          throw new CallError(GrpcStatus.INVALID_ARGUMENT, `unknown reboot mode ${String(request.mode)}`);
        if (
          !([RebootMode.DEFAULT, RebootMode.POWERCYCLE, RebootMode.FORCE] as number[]).includes(request.mode)
        )
          throw new CallError(GrpcStatus.INVALID_ARGUMENT, `unknown reboot mode ${String(request.mode)}`);
        await this.publish(machine.name, { sequence: 'reboot', action: 'start' });
        this.reboot(machine, 'reboot', request.mode === RebootMode.FORCE);
        return ack();
      }),
      Shutdown: this.unary('Shutdown', MachineService.Shutdown, async (machine, request) => {
        await this.publish(machine.name, { sequence: 'shutdown', action: 'start' });
        // force: no graceful stop of the services first.
        this.later(request.force ? 0 : this.shutdownDelayMs, () =>
          this.powerOff(machine.name, undefined, request.force),
        );
        return ack();
      }),
      Reset: this.unary('Reset', MachineService.Reset, async (machine, request) => {
        const mode = (['ALL', 'SYSTEM_DISK', 'USER_DISKS'] as const)[request.mode];
        if (mode === undefined)
          throw new CallError(GrpcStatus.INVALID_ARGUMENT, `unknown wipe mode ${String(request.mode)}`);
        const plan = this.validated(() =>
          planReset(machine.version, machine.node.metadata.annotations ?? {}, {
            mode,
            userDisks: request.userDisksToWipe,
            partitions: request.systemPartitionsToWipe,
          }),
        );
        // Acknowledged first: the sequence (leaving etcd included) runs after the answer.
        await this.publish(machine.name, { sequence: 'reset', action: 'start' });
        this.later(this.shutdownDelayMs, () => this.resetSequence(machine, request, mode, plan));
        return ack();
      }),
      ApplyConfiguration: this.unary(
        'ApplyConfiguration',
        MachineService.ApplyConfiguration,
        async (machine, request) => ({
          messages: [await this.applyConfiguration(machine, request)],
        }),
      ),
      Upgrade: this.unary('Upgrade', MachineService.Upgrade, async (machine, request) => {
        // Talos pulls and validates the installer image before anything else.
        const target = this.installerTarget(request.image);
        const fault = faultFor(machine.faults, 'upgrade-error', 'Upgrade');
        if (fault) throw new CallError(GrpcStatus.UNKNOWN, fault.message);
        // Holds etcd's upgrade lock and checks it first, unless forced (or preserving).
        if (!request.force && !request.preserve && isControlPlane(this.etcdNode(machine.node))) {
          const problem = etcdUpgradeProblem(await this.members(machine));
          if (problem)
            throw new CallError(GrpcStatus.UNKNOWN, `error validating etcd for upgrade: ${problem}`);
        }
        await this.setAnnotations(machine.name, {
          [STAGED_OS_IMAGE_ANNOTATION]: osImageOf(target),
          [PREVIOUS_OS_IMAGE_ANNOTATION]: osImageOf(machine.version),
        });
        // A staged upgrade is a sequence of its own: `stageUpgrade`, which reboots.
        await this.publish(machine.name, {
          sequence: request.stage ? 'stageUpgrade' : 'upgrade',
          action: 'start',
        });
        this.reboot(
          machine,
          `upgrade to ${formatTalosVersion(target)}${request.stage ? ' (staged)' : ''}${request.rebootMode === 1 ? ' (power cycle)' : ''}`,
        );
        return { messages: [{ ack: 'Upgrade request received', actorId: randomUUID() }] };
      }),
      // Reverts the boot loader to the previous installation, then reboots into it
      // (a `reboot` sequence); answers before the node is back.
      Rollback: this.unary('Rollback', MachineService.Rollback, async (machine) => {
        const previous = machine.node.metadata.annotations?.[PREVIOUS_OS_IMAGE_ANNOTATION];
        if (!previous)
          throw new CallError(
            GrpcStatus.UNKNOWN,
            'failed to revert bootloader: cannot rollback to the previous version: no previous installation',
          );
        await this.setAnnotations(machine.name, {
          [STAGED_OS_IMAGE_ANNOTATION]: previous,
          [PREVIOUS_OS_IMAGE_ANNOTATION]: null,
        });
        await this.publish(machine.name, { sequence: 'reboot', action: 'start' });
        this.reboot(machine, `rollback to ${previous}`);
        return { messages: [{}] };
      }),
      ...this.etcdService(),
      // An empty first event (Talos's "hello": the stream has started), then what the
      // node keeps of this boot (tail_events -1: all; N: the last N), then the stream
      // stays open for new ones, as Talos's does, until the client goes.
      Events: this.serverStream(
        'Events',
        MachineService.Events,
        async (machine, request, send) => {
          await send({ id: xidAt(), actorId: '', data: { typeUrl: '', value: new Uint8Array() } });
          const events = nodeEvents(machine.node.metadata.annotations).slice(-EVENT_HISTORY);
          const tail = request.tailEvents < 0 ? events : events.slice(events.length - request.tailEvents);
          for (const e of request.tailEvents === 0 ? [] : tail) await send(eventMessage(e));
          return HANG;
        },
        0,
      ),
    };
  }

  /** Runs Talos's validation of a request: its Error is Talos's plain error, gRPC code UNKNOWN. */
  private validated<T>(work: () => T): T {
    try {
      return work();
    } catch (error) {
      throw new CallError(GrpcStatus.UNKNOWN, errorMessage(error));
    }
  }

  /**
   * Publishes events on the node (EVENTS_ANNOTATION), before the call that causes them is
   * answered, as Talos publishes a sequence's START as soon as it begins.
   */
  private async publish(name: string, ...events: Omit<EventRecord, 'id'>[]): Promise<void> {
    await this.rewriteAnnotation(name, EVENTS_ANNOTATION, 'publish its events', (annotations) =>
      JSON.stringify(published(nodeEvents(annotations), ...events)),
    );
  }

  /**
   * The reset sequence after the answer: a graceful control-plane node leaves etcd (Talos
   * retries for five minutes while etcd refuses, then fails the sequence: the node stays
   * up, its sequence ended with an error), then the wipe, then halt or reboot.
   */
  private async resetSequence(
    machine: Machine,
    request: { graceful: boolean; reboot: boolean },
    mode: ResetMode,
    plan: ReturnType<typeof planReset>,
  ): Promise<void> {
    if (request.graceful && isControlPlane(this.etcdNode(machine.node))) {
      const members = await this.members(machine);
      const voting = members.filter((m) => !m.learner);
      const others = voting.filter((m) => m.hostname !== machine.name && !m.down && !m.unhealthy);
      const remaining = voting.filter((m) => m.hostname !== machine.name).length;
      if (remaining === 0 || others.length < Math.floor(remaining / 2) + 1) {
        this.log(`${machine.name}: reset failed: could not leave etcd (no quorum without it)`);
        await this.publish(
          machine.name,
          { sequence: 'reset', action: 'stop' },
          {
            sequence: 'reset',
            action: 'noop',
            error:
              'sequence failed: failed to leave cluster: failed to remove member: etcdserver: unhealthy cluster',
          },
        );
        return;
      }
      await this.setAnnotations(machine.name, {
        [ETCD_LEFT_ANNOTATION]: 'true',
        [ETCD_LEADER_ANNOTATION]: null,
      });
    }
    await this.setAnnotations(machine.name, {
      [WIPED_ANNOTATION]: JSON.stringify({ mode, disks: plan.disks, partitions: plan.partitions }),
    });
    if (!request.reboot) {
      this.log(`${machine.name}: reset done, halted`);
      await this.powerOff(machine.name, undefined);
      return;
    }
    if (plan.maintenance) {
      // A wiped configuration boots into maintenance mode: no kubelet, NotReady for good.
      this.log(`${machine.name}: reset done, booting into maintenance mode`);
      await this.setAnnotations(machine.name, { [MAINTENANCE_ANNOTATION]: 'true' });
      await this.powerOff(machine.name, undefined);
      return;
    }
    this.reboot(machine, 'reset (configuration kept), rebooting', false, 0);
  }

  /**
   * Rewrites one annotation of a Node from what it holds now: read, compute, write back
   * conditionally on the version read; a conflict reads again.
   */
  private async rewriteAnnotation(
    name: string,
    key: string,
    what: string,
    value: (annotations: Record<string, string> | undefined) => string,
  ): Promise<void> {
    for (let attempt = 0; attempt < 10; attempt++) {
      const node = await this.rest.request<NodeObject>(this.nodePath(name));
      try {
        await this.rest.request(this.nodePath(name), {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: {
            metadata: {
              resourceVersion: node.metadata.resourceVersion,
              annotations: { [key]: value(node.metadata.annotations) },
            },
          },
        });
        return;
      } catch (error) {
        if (!(error instanceof KubeApiError && error.code === 409)) throw error;
      }
    }
    throw new Error(`node ${name}: could not ${what}, its Node kept changing`);
  }

  // --- etcd -------------------------------------------------------------------------

  private etcdNode(node: NodeObject): EtcdNode {
    const annotations = node.metadata.annotations ?? {};
    return {
      name: node.metadata.name,
      uid: node.metadata.uid,
      labels: node.metadata.labels ?? {},
      annotations,
      down: annotations[NODE_POWER_ANNOTATION] === NODE_POWER_OFF,
    };
  }

  /** The members of the etcd cluster the machine's Node belongs to. */
  private async members(machine: Machine): Promise<SimulatedMember[]> {
    const list = await this.rest.request<{ items: NodeObject[] }>('/api/v1/nodes');
    return etcdMembers(
      list.items
        .filter((n) => n.metadata.annotations?.[KWOK_NODE_ANNOTATION] !== undefined)
        .map((n) => this.etcdNode(n)),
      etcdClusterOf(this.etcdNode(machine.node)),
    );
  }

  /**
   * The etcd member on the machine's node. Talos serves the etcd methods on control-plane
   * nodes only: anywhere else they answer UNIMPLEMENTED, naming the API (`what`). A
   * control-plane node whose member left has no etcd running.
   */
  private async memberOf(
    machine: Machine,
    what: string,
  ): Promise<{ member: SimulatedMember; members: SimulatedMember[] }> {
    if (!isControlPlane(this.etcdNode(machine.node)))
      throw new CallError(GrpcStatus.UNIMPLEMENTED, `${what} is only available on control plane nodes`);
    const members = await this.members(machine);
    const member = members.find((m) => m.hostname === machine.name);
    if (!member)
      throw new CallError(
        GrpcStatus.UNAVAILABLE,
        'failed to create etcd client: etcd is not running: this node left the etcd cluster',
      );
    return { member, members };
  }

  /**
   * Removes `leaving` from etcd as Talos's client does (internal/pkg/etcd): through the
   * leader, refused while there is none; refused as etcd's strict reconfiguration check
   * refuses a removal that leaves fewer healthy voting members than a quorum of those
   * remaining (Talos's LeaveCluster retries that for five minutes, then fails with it).
   */
  private async removeMember(members: SimulatedMember[], leaving: SimulatedMember): Promise<void> {
    if (!etcdLeader(members))
      throw new CallError(GrpcStatus.UNAVAILABLE, 'etcdserver: no leader (the cluster has no quorum)');
    const remaining = members.filter((m) => !m.learner && m.id !== leaving.id);
    const healthy = remaining.filter((m) => !m.down && !m.unhealthy);
    if (remaining.length === 0 || healthy.length < Math.floor(remaining.length / 2) + 1)
      throw new CallError(
        GrpcStatus.UNKNOWN,
        `failed to remove member ${String(leaving.id)}: etcdserver: unhealthy cluster`,
      );
    await this.setAnnotations(leaving.hostname, {
      [ETCD_LEFT_ANNOTATION]: 'true',
      [ETCD_LEADER_ANNOTATION]: null,
    });
    this.log(`etcd: member ${leaving.hostname} removed`);
  }

  private etcdService(): UntypedServiceImplementation {
    return {
      // Talos's EtcdLeaveCluster: control plane only; the node's own member removed, then
      // etcd stopped and its data emptied (here: the member marked as left, as a graceful
      // reset leaves it; a boot joins it again).
      EtcdLeaveCluster: this.unary('EtcdLeaveCluster', MachineService.EtcdLeaveCluster, async (machine) => {
        const { member, members } = await this.memberOf(machine, 'etcd leave');
        try {
          await this.removeMember(members, member);
        } catch (error) {
          if (!(error instanceof CallError) || error.code !== GrpcStatus.UNKNOWN) throw error;
          throw new CallError(GrpcStatus.UNKNOWN, `failed to leave cluster: ${error.message}`);
        }
        return { messages: [{}] };
      }),
      // Talos's EtcdRemoveMemberByID: control plane only (any member's node, through the
      // control-plane IPs); NotFound for an ID no member has.
      EtcdRemoveMemberByID: this.unary(
        'EtcdRemoveMemberByID',
        MachineService.EtcdRemoveMemberByID,
        async (machine, request) => {
          if (!isControlPlane(this.etcdNode(machine.node)))
            throw new CallError(
              GrpcStatus.UNIMPLEMENTED,
              'etcd remove member is only available on control plane nodes',
            );
          const members = await this.members(machine);
          const leaving = members.find((m) => m.id === request.memberId);
          if (!leaving)
            throw new CallError(
              GrpcStatus.NOT_FOUND,
              `failed to remove member ${String(request.memberId)}: etcdserver: member not found`,
            );
          await this.removeMember(members, leaving);
          return { messages: [{}] };
        },
      ),
      // Talos's EtcdSnapshot: control plane only (UNIMPLEMENTED elsewhere; a node that is
      // down is unreachable, one whose member left has no etcd to read); the local member's
      // database as etcd's maintenance Snapshot sends it — the file, then the SHA-256 of it —
      // in messages of at most 1 KiB (Talos's stream chunker). etcd serves it from the
      // member's own backend: no leader or quorum is needed, an unhealthy member still answers.
      EtcdSnapshot: this.serverStream(
        'EtcdSnapshot',
        MachineService.EtcdSnapshot,
        async (machine, _request, send) => {
          const { member } = await this.memberOf(machine, 'etcd snapshot');
          const db = etcdDatabase(member);
          const stream = Buffer.concat([db, createHash('sha256').update(db).digest()]);
          for (let at = 0; at < stream.length; at += SNAPSHOT_CHUNK)
            await send({ bytes: stream.subarray(at, at + SNAPSHOT_CHUNK) });
          return undefined;
        },
        0,
      ),
      EtcdMemberList: this.unary('EtcdMemberList', MachineService.EtcdMemberList, async (machine) => {
        const { members } = await this.memberOf(machine, 'member list');
        if (!etcdLeader(members))
          throw new CallError(GrpcStatus.UNAVAILABLE, 'etcdserver: no leader (the cluster has no quorum)');
        return memberListReply(members);
      }),
      EtcdStatus: this.unary('EtcdStatus', MachineService.EtcdStatus, async (machine) => {
        const { member, members } = await this.memberOf(machine, 'etcd status');
        return statusReply(member, members);
      }),
      EtcdAlarmList: this.unary('EtcdAlarmList', MachineService.EtcdAlarmList, async (machine) => {
        const { members } = await this.memberOf(machine, 'etcd alarm list');
        return alarmListReply(members);
      }),
      // Talos's ForfeitLeadership (internal/pkg/etcd/etcd.go): one member is an error,
      // whether it leads or not; a member that does not lead does nothing; the leader
      // moves leadership to the first other member listed, healthy or not, and the
      // answer names that member — the one leadership moved TO.
      EtcdForfeitLeadership: this.unary(
        'EtcdForfeitLeadership',
        MachineService.EtcdForfeitLeadership,
        async (machine) => {
          const { member, members } = await this.memberOf(machine, 'etcd forfeit leadership');
          if (members.length === 1)
            throw new CallError(
              GrpcStatus.UNKNOWN,
              'failed to forfeit leadership: cannot forfeit leadership, only one member',
            );
          if (etcdLeader(members)?.id !== member.id) return { messages: [{ member: '' }] };
          const next = transferee(members, member);
          if (!next || next.learner)
            throw new CallError(
              GrpcStatus.UNKNOWN,
              'failed to forfeit leadership: etcdserver: bad leader transferee',
            );
          if (next.down || next.unhealthy)
            throw new CallError(
              GrpcStatus.UNKNOWN,
              'failed to forfeit leadership: etcdserver: request timed out, leader transfer took too long',
            );
          await this.setAnnotations(member.hostname, { [ETCD_LEADER_ANNOTATION]: null });
          await this.setAnnotations(next.hostname, { [ETCD_LEADER_ANNOTATION]: 'true' });
          this.log(`etcd: moving leadership from ${member.hostname} to ${next.hostname}`);
          return { messages: [{ member: next.hostname }] };
        },
      ),
    };
  }

  private imageService(): UntypedServiceImplementation {
    return {
      // Talos's ImageService.Pull (internal/app/images): the containerd instance is
      // checked, the reference normalised as containerd names it, and the image stored
      // under that name, `<name>@<digest>` and its bare digest. The answer names the
      // image by digest: a digested reference as it was (normalised), a tagged one as
      // `<name>@<digest>`.
      Pull: this.serverStream('ImagePull', ImageService.Pull, async (machine, request, send) => {
        if (!hasLifecycleUpgrade(machine.version))
          // What a gRPC server says about a service it does not have.
          throw new CallError(GrpcStatus.UNIMPLEMENTED, 'unknown service machine.ImageService');
        const store = this.imageStore(machine, request.containerd);
        const ref = request.imageRef.trim();
        if (ref === '')
          throw new CallError(
            GrpcStatus.UNKNOWN,
            'failed to parse image reference "": invalid reference format',
          );
        const normalized = normalizeImageReference(ref);
        const layers = [0, 1].map((i) =>
          createHash('sha256')
            .update(`${normalized}#${String(i)}`)
            .digest('hex'),
        );
        const total = 48 * 1024 * 1024;
        const fault = faultFor(machine.faults, 'pull-error', 'ImagePull');
        for (const [i, layer] of layers.entries()) {
          const layerId = `sha256:${layer}`;
          for (const [status, offset] of [
            [LayerStatus.DOWNLOADING, 0],
            [LayerStatus.DOWNLOADING, total / 2],
            [LayerStatus.DOWNLOAD_COMPLETE, total],
            [LayerStatus.EXTRACTING, total],
            [LayerStatus.EXTRACT_COMPLETE, total],
          ] as const) {
            await send({
              response: {
                case: 'pullProgress',
                value: {
                  layerId,
                  progress: {
                    status,
                    offset: BigInt(offset),
                    total: BigInt(total),
                    elapsed: { seconds: BigInt(i), nanos: 0 },
                  },
                },
              },
            });
            if (fault && offset === total / 2)
              throw new CallError(GrpcStatus.UNKNOWN, `failed to pull image "${ref}": ${fault.message}`);
          }
        }
        const repository = imageRepository(normalized);
        const digest = normalized.includes('@')
          ? normalized.slice(normalized.indexOf('@') + 1)
          : `sha256:${createHash('sha256').update(normalized).digest('hex')}`;
        const pinned = `${repository}@${digest}`;
        const images = this.pulled.get(store) ?? new Map<string, string>();
        for (const name of [normalized, pinned, digest]) images.set(name, normalized);
        this.pulled.set(store, images);
        await send({ response: { case: 'name', value: normalized.includes('@') ? normalized : pinned } });
      }),
    };
  }

  private lifecycleService(): UntypedServiceImplementation {
    return {
      // Talos's LifecycleService.Upgrade (internal/app/lifecycle): runs the installer
      // image found in the containerd instance under exactly the name given, streams its
      // output, then its exit code. The installer checks the upgrade path (its version
      // from the host's) before installing; from Talos 1.14 it exits with a code per kind
      // of failure, before with 1 for all.
      Upgrade: this.serverStream(
        'LifecycleUpgrade',
        LifecycleService.Upgrade,
        async (machine, request, send) => {
          if (!hasLifecycleUpgrade(machine.version))
            // What a gRPC server says about a service it does not have.
            throw new CallError(GrpcStatus.UNIMPLEMENTED, 'unknown service machine.LifecycleService');
          const image = request.source?.imageName.trim() ?? '';
          if (image === '')
            throw new CallError(GrpcStatus.INVALID_ARGUMENT, 'installer image name is required');
          const normalized = this.pulled.get(this.imageStore(machine, request.containerd))?.get(image);
          if (normalized === undefined)
            throw new CallError(
              GrpcStatus.INTERNAL,
              `upgrade failed: installer image "${image}" not found in containerd store: image "${image}": not found`,
            );
          const target = this.installerTarget(normalized);
          const say = (message: string) =>
            send({ progress: { response: { case: 'message', value: message } } });
          const exit = (code: number) => send({ progress: { response: { case: 'exitCode', value: code } } });
          // Installers before 1.14 tell no failure apart: every one exits 1.
          const coded = (code: number) => (hasInstallerExitCodes(target) ? code : 1);
          await say(`running installer ${image}`);
          await say(`host Talos version: ${formatTalosVersion(machine.version)}`);
          const path = upgradePathProblem(machine.version, target);
          if (path) {
            await say(`pre-flight checks failed: ${path}`);
            await exit(coded(4));
            return undefined;
          }
          await say('all pre-flight checks successful');
          const asked = Number(machine.node.metadata.annotations?.[INSTALLER_EXIT_ANNOTATION] ?? '0');
          if (Number.isInteger(asked) && asked > 0) {
            await say(`error: ${faultMessageOf(machine)}`);
            await exit(coded(asked));
            return undefined;
          }
          await say('installing to the boot disk');
          const fault = faultFor(machine.faults, 'upgrade-error', 'LifecycleUpgrade');
          if (fault) {
            await say(`error: ${fault.message}`);
            await exit(1);
            return undefined;
          }
          await this.setAnnotations(machine.name, {
            [STAGED_OS_IMAGE_ANNOTATION]: osImageOf(target),
            [PREVIOUS_OS_IMAGE_ANNOTATION]: osImageOf(machine.version),
          });
          await say(`installed Talos ${formatTalosVersion(target)}; it runs after the next reboot`);
          await exit(0);
          return undefined;
        },
      ),
    };
  }

  /**
   * The COSI resource API, as far as the machine configuration goes: the running one
   * (ID v1alpha1) and the persisted one (ID persistent), their spec Talos's
   * MachineConfigSpec with the YAML as it was applied. Anything else is not found.
   */
  private cosiState(): UntypedServiceImplementation {
    return {
      Get: this.unary('MachineConfigGet', CosiState.Get, (machine, request) => {
        const { running, persisted } = this.configsOf(machine);
        const text =
          request.namespace === 'config' && request.type === 'MachineConfigs.config.talos.dev'
            ? request.id === 'v1alpha1'
              ? running
              : request.id === 'persistent'
                ? persisted
                : undefined
            : undefined;
        if (text === undefined)
          throw new CallError(
            GrpcStatus.NOT_FOUND,
            `resource ${request.type}(${request.namespace}/${request.id}@undefined) doesn't exist`,
          );
        const bytes = new TextEncoder().encode(text);
        return {
          resource: {
            metadata: { namespace: request.namespace, type: request.type, id: request.id, version: '1' },
            spec: {
              protoSpec: toBinary(
                MachineConfigSpecSchema,
                create(MachineConfigSpecSchema, { yamlMarshalled: bytes }),
              ),
              yamlSpec: text,
            },
          },
        };
      }),
    };
  }

  /**
   * Where images go: the containerd of the driver (CONTAINERD: the system one; CRI: the
   * CRI one) in the namespace asked for, refused as Talos refuses a combination it lacks.
   */
  private imageStore(machine: Machine, containerd: ContainerdInstance | undefined): string {
    const driver = containerd?.driver ?? ContainerDriver.CONTAINERD;
    const namespace = containerd?.namespace ?? ContainerdNamespace.NS_UNKNOWN;
    const driverName =
      driver === ContainerDriver.CRI
        ? 'CRI'
        : driver === ContainerDriver.CONTAINERD
          ? 'CONTAINERD'
          : undefined;
    if (driverName === undefined)
      throw new CallError(GrpcStatus.INVALID_ARGUMENT, `invalid containerd driver ${String(driver)}`);
    if (namespace !== ContainerdNamespace.NS_SYSTEM && namespace !== ContainerdNamespace.NS_CRI)
      throw new CallError(
        GrpcStatus.INVALID_ARGUMENT,
        `invalid containerd namespace ${namespace === ContainerdNamespace.NS_UNKNOWN ? 'NS_UNKNOWN' : String(namespace)}`,
      );
    if (driver === ContainerDriver.CONTAINERD && namespace === ContainerdNamespace.NS_CRI)
      throw new CallError(GrpcStatus.INVALID_ARGUMENT, 'cannot use CRI namespace with containerd driver');
    const namespaceName = namespace === ContainerdNamespace.NS_CRI ? 'k8s.io' : 'system';
    return `${machine.node.metadata.uid}/${driverName}/${namespaceName}`;
  }

  // --- call plumbing ----------------------------------------------------------------

  /** The role of the node a raw call (talos-wire.ts) names; undefined when no simulated node has that address. */
  private async roleOf(node: string | undefined): Promise<'control-plane' | 'worker' | undefined> {
    if (node === undefined) return undefined;
    const metadata = new Metadata();
    metadata.set('node', node);
    const machine = await this.target(metadata, 'Version').catch(() => undefined);
    if (!machine) return undefined;
    return isControlPlane(this.etcdNode(machine.node)) ? 'control-plane' : 'worker';
  }

  /** The machine a call is for (from its `node` metadata), or undefined when it names none. */
  /**
   * The simulated Node a call names (its address or name), read afresh: by name when the
   * address was seen before (one GET, not a LIST of every Node on every call), else from
   * a LIST that also refreshes what is known of the addresses.
   */
  private async findNode(address: string): Promise<NodeObject | undefined> {
    const simulated = (n: NodeObject) =>
      n.metadata.annotations?.[KWOK_NODE_ANNOTATION] !== undefined &&
      (internalIP(n) === address || n.metadata.name === address);
    const known = this.nodeNames.get(address);
    if (known !== undefined) {
      const read = await this.rest
        .request<NodeObject>(`/api/v1/nodes/${encodeURIComponent(known)}`)
        .catch((error: unknown) => {
          if (error instanceof KubeApiError && error.code === 404) return undefined;
          throw error;
        });
      if (read && simulated(read)) return read;
    }
    const list = await this.rest.request<{ items: NodeObject[] }>('/api/v1/nodes');
    this.nodeNames.clear();
    for (const n of list.items) {
      const ip = internalIP(n);
      if (ip !== undefined) this.nodeNames.set(ip, n.metadata.name);
      this.nodeNames.set(n.metadata.name, n.metadata.name);
    }
    return list.items.find(simulated);
  }

  private async target(metadata: Metadata, method: MethodName): Promise<Machine | undefined> {
    const node = metadata.get('node')[0];
    if (node === undefined) {
      if (metadata.get('nodes').length > 0)
        throw new CallError(
          GrpcStatus.INVALID_ARGUMENT,
          'the simulator proxies to one node at a time: name it with the `node` metadata',
        );
      return undefined;
    }
    const address = String(node);
    const found = await this.findNode(address);
    if (!found)
      throw new CallError(
        GrpcStatus.UNAVAILABLE,
        `connection error: dial tcp ${address}:50000: connect: no route to host (no simulated node has that address)`,
      );
    const annotations = found.metadata.annotations ?? {};
    let faults: TalosFault[];
    try {
      faults = parseFaults(annotations[TALOS_FAULT_ANNOTATION], annotations[TALOS_FAULT_MESSAGE_ANNOTATION]);
    } catch (error) {
      throw new CallError(GrpcStatus.INTERNAL, `node ${found.metadata.name}: ${errorMessage(error)}`);
    }
    const ip = internalIP(found) ?? '';
    faults.push(...(this.injected.get(found.metadata.name) ?? []), ...(this.injected.get(ip) ?? []));
    const osImage = found.status?.nodeInfo?.osImage;
    const version = talosVersionFromOsImage(osImage);
    if (!version)
      throw new CallError(
        GrpcStatus.FAILED_PRECONDITION,
        `node ${found.metadata.name} does not run Talos (osImage "${String(osImage)}")`,
      );
    const machine = { node: found, name: found.metadata.name, address: ip, version, faults };
    if (annotations[NODE_POWER_ANNOTATION] === NODE_POWER_OFF && !faultFor(faults, 'hang', method))
      throw new CallError(
        GrpcStatus.UNAVAILABLE,
        `connection error: dial tcp ${address}:50000: connect: connection refused (the node is ${annotations[BOOT_AT_ANNOTATION] ? 'rebooting' : 'powered off'})`,
      );
    return machine;
  }

  /** Runs a call for its machine, applying the faults that concern it. */
  private async play<T>(
    method: MethodName,
    metadata: Metadata,
    work: (machine: Machine) => T | Promise<T>,
  ): Promise<T | typeof HANG> {
    const machine = await this.target(metadata, method);
    if (!machine) {
      if (method !== 'Version')
        throw new CallError(
          GrpcStatus.FAILED_PRECONDITION,
          'the Talos simulator is not a machine itself: choose a node with the `node` metadata',
        );
      return work({
        node: { metadata: { name: 'talos-simulator', uid: '' } },
        name: 'talos-simulator',
        address: this.host,
        version: talosVersionFromOsImage(`Talos (${TALOS_VERSION})`) as TalosVersionNumber,
        faults: [],
      });
    }
    this.log(`${method} on ${machine.name} (${machine.address})`);
    await this.countCall(machine.name, method);
    if (faultFor(machine.faults, 'hang', method)) {
      this.log(`${method} on ${machine.name}: hanging (injected fault)`);
      return HANG;
    }
    if (faultFor(machine.faults, 'unimplemented', method))
      throw new CallError(
        GrpcStatus.UNIMPLEMENTED,
        `${method} is not implemented by this node (injected fault)`,
      );
    const error = faultFor(machine.faults, 'error', method);
    if (error) throw new CallError(GrpcStatus.UNKNOWN, error.message);
    const result = await work(machine);
    if (faultFor(machine.faults, 'lost-reply', method)) {
      this.log(`${method} on ${machine.name}: done, but the reply is lost (injected fault)`);
      return HANG;
    }
    return result;
  }

  /** Counts a call on its Node (read, add one, write back conditionally; a conflict reads again). */
  private async countCall(name: string, method: MethodName): Promise<void> {
    await this.rewriteAnnotation(name, TALOS_CALLS_ANNOTATION, `count a ${method} call`, (annotations) => {
      const counts = talosCallCounts(annotations);
      counts[method] = (counts[method] ?? 0) + 1;
      return JSON.stringify(counts);
    });
  }

  private unary<Req extends DescMessage, Res extends DescMessage>(
    method: MethodName,
    _def: Method<Req, Res>,
    handler: (
      machine: Machine,
      request: MessageShape<Req>,
    ) => MessageInitShape<Res> | Promise<MessageInitShape<Res>>,
  ) {
    return (
      call: ServerUnaryCall<MessageShape<Req>, MessageInitShape<Res>>,
      callback: sendUnaryData<MessageInitShape<Res>>,
    ) => {
      if (call.metadata.get('node').length === 0 && call.metadata.get('nodes').length > 0) {
        this.fanOut(method, call.metadata, (machine) => handler(machine, call.request)).then(
          (reply) => callback(null, reply as unknown as MessageInitShape<Res>),
          (error: unknown) => callback(this.toStatus(method, error)),
        );
        return;
      }
      this.play(method, call.metadata, (machine) => handler(machine, call.request)).then(
        (reply) => {
          if (reply !== HANG) callback(null, reply);
        },
        (error: unknown) => callback(this.toStatus(method, error)),
      );
    };
  }

  /** A unary call to each of the `nodes`, merged as apid merges them (talos-fan-out.ts). */
  private async fanOut(
    method: MethodName,
    metadata: Metadata,
    work: (machine: Machine) => unknown,
  ): Promise<{ messages: Record<string, unknown>[] }> {
    const nodes = metadata
      .get('nodes')
      .flatMap((v) => String(v).split(','))
      .map((n) => n.trim())
      .filter((n) => n !== '');
    const outcomes = await Promise.all(
      nodes.map(async (node) => {
        const one = new Metadata();
        one.set('node', node);
        try {
          const reply = (await this.play(method, one, work)) as
            { messages?: Record<string, unknown>[] } | typeof HANG;
          return { node, outcome: { messages: reply === HANG ? [] : (reply.messages ?? []) } };
        } catch (error) {
          return { node, outcome: { error: this.toStatus(method, error) } };
        }
      }),
    );
    return mergeFanOut(outcomes);
  }

  private serverStream<Req extends DescMessage, Res extends DescMessage>(
    method: MethodName,
    _def: Method<Req, Res>,
    handler: (
      machine: Machine,
      request: MessageShape<Req>,
      send: (reply: MessageInitShape<Res>) => Promise<void>,
    ) => Promise<undefined | typeof HANG>,
    /** Between replies: a stream worth the name, replies arriving over time (0: a backlog sent at once). */
    paceMs = 20,
  ) {
    return (call: ServerWritableStream<MessageShape<Req>, MessageInitShape<Res>>) => {
      let cancelled = false;
      call.on('cancelled', () => (cancelled = true));
      const send = async (reply: MessageInitShape<Res>) => {
        if (cancelled) throw new CallError(GrpcStatus.CANCELLED, 'cancelled by the client');
        call.write(reply);
        if (paceMs > 0) await sleep(paceMs);
      };
      this.play(method, call.metadata, (machine) => handler(machine, call.request, send)).then(
        (result) => {
          if (result !== HANG && !cancelled) call.end();
        },
        (error: unknown) => {
          // grpc-js ends a server stream with the status of an 'error' it is given.
          if (!cancelled) call.emit('error', Object.assign(new Error(), this.toStatus(method, error)));
        },
      );
    };
  }

  private toStatus(method: MethodName, error: unknown): { code: GrpcStatus; details: string } {
    if (error instanceof CallError) return { code: error.code, details: error.message };
    this.log(`${method} failed inside the simulator: ${errorMessage(error)}`);
    return { code: GrpcStatus.INTERNAL, details: `simulator error: ${errorMessage(error)}` };
  }

  // --- machine behaviour ------------------------------------------------------------

  private versionOf(machine: Machine): MessageInitShape<typeof VersionSchema> {
    const tag = formatTalosVersion(machine.version);
    return {
      version: {
        tag,
        sha: createHash('sha1').update(tag).digest('hex').slice(0, 8),
        built: '',
        goVersion: 'go1.25',
        os: 'linux',
        arch: machine.node.status?.nodeInfo?.architecture ?? 'amd64',
      },
      platform: { name: 'metal', mode: 'metal' },
      features: { rbac: true },
    };
  }

  private installerTarget(image: string): TalosVersionNumber {
    const version = installerVersion(image);
    if (!version)
      throw new CallError(
        GrpcStatus.INVALID_ARGUMENT,
        `installer image "${image}" is not tagged with a Talos version (like ghcr.io/siderolabs/installer:v1.13.1)`,
      );
    return version;
  }

  /** A duration the machine's Node asks for by annotation, else `fallback`. */
  private delayFor(machine: Machine, annotation: string, fallback: number): number {
    const text = machine.node.metadata.annotations?.[annotation];
    if (text === undefined) return fallback;
    try {
      return parseDuration(text);
    } catch {
      this.log(`node ${machine.name}: ignoring ${annotation}="${text}" (not a duration)`);
      return fallback;
    }
  }

  private bootDelayFor(machine: Machine): number {
    return this.delayFor(machine, BOOT_DELAY_ANNOTATION, this.bootDelayMs);
  }

  /**
   * Goes down shortly after the acknowledgement (at once when forced: no graceful stop
   * of the services), and boots after the boot delay (unless it never returns).
   */
  private reboot(
    machine: Machine,
    why: string,
    force = false,
    delayMs = force ? 0 : this.delayFor(machine, SHUTDOWN_DELAY_ANNOTATION, this.shutdownDelayMs),
  ): void {
    const neverReturns = faultFor(machine.faults, 'never-return', 'Reboot') !== undefined;
    const bootDelay = this.bootDelayFor(machine);
    this.log(`${machine.name}: ${why}${neverReturns ? ' (it will never come back: injected fault)' : ''}`);
    this.later(delayMs, async () => {
      const bootAt = neverReturns ? undefined : new Date(Date.now() + bootDelay);
      await this.powerOff(machine.name, bootAt, force);
      if (bootAt) this.later(bootDelay, () => this.boot(machine.name));
    });
  }

  /** The configuration the machine runs now, and the one it boots with next. */
  private configsOf(machine: Machine): { running: string; persisted: string } {
    const annotations = machine.node.metadata.annotations ?? {};
    const running =
      annotations[MACHINE_CONFIG_TEXT_ANNOTATION] ??
      defaultMachineConfig(isControlPlane(this.etcdNode(machine.node)));
    return { running, persisted: annotations[PERSISTED_CONFIG_TEXT_ANNOTATION] ?? running };
  }

  /** Talos's ApplyConfiguration, per version (talos-machine-config.ts decides, this plays it). */
  private async applyConfiguration(
    machine: Machine,
    request: ApplyConfigurationRequest,
  ): Promise<MessageInitShape<typeof ApplyConfigurationSchema>> {
    const annotations = machine.node.metadata.annotations ?? {};
    if (annotations[APPLY_REBOOTING_ANNOTATION] !== undefined)
      throw new CallError(
        GrpcStatus.FAILED_PRECONDITION,
        'configuration was already applied and node is rebooting, cannot apply more configuration changes until next reboot',
      );
    const requested = (['REBOOT', 'AUTO', 'NO_REBOOT', 'STAGED', 'TRY'] as const)[request.mode];
    if (requested === undefined)
      throw new CallError(
        GrpcStatus.INVALID_ARGUMENT,
        `incorrect mode '${String(request.mode)}' specified for the apply config call`,
      );
    // Any apply but a TRY confirms a TRY under way: its revert is cancelled, first thing.
    if (requested !== 'TRY' && annotations[TRY_REVERT_AT_ANNOTATION] !== undefined)
      await this.setAnnotations(machine.name, { [TRY_REVERT_AT_ANNOTATION]: null });
    const text = new TextDecoder().decode(request.data);
    let next: ParsedMachineConfig;
    let current: ParsedMachineConfig;
    try {
      next = parseMachineConfig(text);
      current = parseMachineConfig(this.configsOf(machine).running);
    } catch (error) {
      throw new CallError(GrpcStatus.INVALID_ARGUMENT, errorMessage(error));
    }
    const outcome = decideApply(machine.version, requested, current, next);
    if (outcome.refused)
      throw new CallError(
        outcome.code === 'UNIMPLEMENTED' ? GrpcStatus.UNIMPLEMENTED : GrpcStatus.INVALID_ARGUMENT,
        outcome.message,
      );
    const mode = ApplyMode[outcome.mode];
    const t = request.tryModeTimeout;
    const tryMs = t ? Number(t.seconds) * 1000 + t.nanos / 1e6 : 60_000;
    const details =
      outcome.mode === 'TRY'
        ? `${outcome.modeDetails}\nThe config is applied in 'try' mode and will be automatically reverted back in ${goDuration(tryMs)}`
        : outcome.modeDetails;
    if (request.dryRun)
      return { warnings: [], mode, modeDetails: `Dry run summary:\n${details} (skipped in dry-run).\n` };
    this.log(`${machine.name}: apply config request: mode ${outcome.logged}`);
    const { running } = this.configsOf(machine);
    await this.setAnnotations(machine.name, {
      ...(outcome.live
        ? { [MACHINE_CONFIG_TEXT_ANNOTATION]: text, [MACHINE_CONFIG_ANNOTATION]: sha256(request.data) }
        : {}),
      // What the next boot runs: this configuration when persisted; the one persisted
      // before when it was only tried.
      [PERSISTED_CONFIG_TEXT_ANNOTATION]: outcome.persist
        ? outcome.live
          ? null
          : text
        : (annotations[PERSISTED_CONFIG_TEXT_ANNOTATION] ?? running),
      ...(outcome.reboot ? { [APPLY_REBOOTING_ANNOTATION]: 'true' } : {}),
    });
    if (outcome.restartsCri) await this.restartCri(machine.name);
    if (outcome.mode === 'TRY') this.scheduleTryRevert(machine.name, new Date(Date.now() + tryMs));
    if (outcome.reboot) {
      await this.publish(machine.name, { sequence: 'reboot', action: 'start' });
      this.reboot(machine, 'apply configuration with a reboot');
    }
    return { warnings: [], mode, modeDetails: details };
  }

  /**
   * A TRY's revert: at `at`, unless another apply cancelled it (the annotation changed),
   * the running configuration goes back to the persisted one (restarting CRI again on
   * Talos 1.14 when that changes CRI's configuration back).
   */
  private scheduleTryRevert(name: string, at: Date): void {
    const stamp = at.toISOString();
    void this.setAnnotations(name, { [TRY_REVERT_AT_ANNOTATION]: stamp }).then(
      () =>
        this.later(Math.max(0, at.getTime() - Date.now()), async () => {
          const node = await this.rest.request<NodeObject>(this.nodePath(name));
          const annotations = node.metadata.annotations ?? {};
          if (annotations[TRY_REVERT_AT_ANNOTATION] !== stamp) return;
          const persisted = annotations[PERSISTED_CONFIG_TEXT_ANNOTATION];
          const version = talosVersionFromOsImage(node.status?.nodeInfo?.osImage);
          this.log(`${name}: reverting the configuration applied in try mode`);
          await this.setAnnotations(name, {
            [TRY_REVERT_AT_ANNOTATION]: null,
            [PERSISTED_CONFIG_TEXT_ANNOTATION]: null,
            ...(persisted !== undefined
              ? {
                  [MACHINE_CONFIG_TEXT_ANNOTATION]: persisted,
                  [MACHINE_CONFIG_ANNOTATION]: sha256(new TextEncoder().encode(persisted)),
                }
              : {}),
          });
          const tried = annotations[MACHINE_CONFIG_TEXT_ANNOTATION];
          if (version && persisted !== undefined && tried !== undefined) {
            const back = decideApply(
              version,
              'NO_REBOOT',
              parseMachineConfig(tried),
              parseMachineConfig(persisted),
            );
            if (!back.refused && back.restartsCri) await this.restartCri(name);
          }
        }),
      (error: unknown) => this.log(`${name}: could not record the try revert: ${errorMessage(error)}`),
    );
  }

  /**
   * CRI restarts (Talos ≥ 1.14 on a change of its configuration): every container on the
   * node is killed and started again by the kubelet — restart counts go up, a Job's pod
   * (restartPolicy Never or OnFailure alike) fails — while the Node stays Ready.
   */
  private async restartCri(name: string): Promise<void> {
    await this.rewriteAnnotation(name, CRI_RESTARTS_ANNOTATION, 'count a CRI restart', (annotations) =>
      String(Number(annotations?.[CRI_RESTARTS_ANNOTATION] ?? '0') + 1),
    );
    const pods = await this.rest.request<{ items: PodObject[] }>(
      `/api/v1/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${name}`)}`,
    );
    const now = new Date().toISOString();
    for (const pod of pods.items) {
      if (pod.status?.phase !== 'Running' || pod.metadata.deletionTimestamp) continue;
      const ownedByJob = (pod.metadata.ownerReferences ?? []).some((o) => o.kind === 'Job');
      const containerStatuses = (pod.status.containerStatuses ?? []).map((c) => ({
        ...c,
        restartCount: (c.restartCount ?? 0) + (ownedByJob ? 0 : 1),
        lastState: { terminated: { exitCode: 255, reason: 'Unknown', finishedAt: now } },
        state: ownedByJob
          ? { terminated: { exitCode: 255, reason: 'Unknown', finishedAt: now } }
          : { running: { startedAt: now } },
      }));
      try {
        await this.rest.request(
          `/api/v1/namespaces/${encodeURIComponent(pod.metadata.namespace)}/pods/${encodeURIComponent(pod.metadata.name)}/status`,
          {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: { status: { containerStatuses, ...(ownedByJob ? { phase: 'Failed' } : {}) } },
          },
        );
      } catch (error) {
        if (!(error instanceof KubeApiError && error.code === 404)) throw error;
      }
    }
    this.log(`${name}: CRI restarted, ${String(pods.items.length)} pod(s) on the node restarted`);
  }

  private later(ms: number, work: () => Promise<unknown>): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (this.stopped) return;
      work().catch((error: unknown) => this.log(`background step failed: ${errorMessage(error)}`));
    }, ms);
    this.timers.add(timer);
  }

  private nodePath(name: string): string {
    return `/api/v1/nodes/${encodeURIComponent(name)}`;
  }

  private async setAnnotations(
    name: string,
    annotations: Record<string, string | null>,
  ): Promise<NodeObject> {
    return this.rest.request<NodeObject>(this.nodePath(name), {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations } },
    });
  }

  /** Powers the machine off: kwok then reports the Node NotReady (see kwok-config.ts). */
  private async powerOff(name: string, bootAt: Date | undefined, force = false): Promise<void> {
    this.log(
      `${name}: powered off${force ? ' (forced)' : ''}${bootAt ? `, boots at ${bootAt.toISOString()}` : ''}`,
    );
    await this.setAnnotations(name, {
      [NODE_POWER_ANNOTATION]: NODE_POWER_OFF,
      [BOOT_AT_ANNOTATION]: bootAt ? bootAt.toISOString() : null,
      [LAST_POWER_OFF_ANNOTATION]: force ? 'force' : 'graceful',
    });
  }

  /**
   * Boots a powered-off machine whose boot is due: a new bootID, the staged osImage and
   * configuration, then power on (kwok turns it Ready). Guarded by resourceVersion so
   * that two simulators resuming the same boot do it once. A boot is one boot ID: when
   * the Node changes between writing the boot ID and powering on (a controller records
   * the new boot on it at once), only the power-on is tried again.
   */
  private async boot(name: string): Promise<void> {
    let bootID: string | undefined;
    for (let attempt = 0; attempt < 10; attempt++) {
      let node: NodeObject;
      try {
        node = await this.rest.request<NodeObject>(this.nodePath(name));
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 404) return; // deleted meanwhile
        throw error;
      }
      const annotations = node.metadata.annotations ?? {};
      if (annotations[NODE_POWER_ANNOTATION] !== NODE_POWER_OFF || !annotations[BOOT_AT_ANNOTATION]) return;
      const osImage = annotations[STAGED_OS_IMAGE_ANNOTATION] ?? node.status?.nodeInfo?.osImage;
      try {
        let resourceVersion = node.metadata.resourceVersion;
        if (bootID === undefined || node.status?.nodeInfo?.bootID !== bootID) {
          bootID = randomUUID();
          const booted = await this.rest.request<NodeObject>(`${this.nodePath(name)}/status`, {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: {
              metadata: { resourceVersion },
              status: { nodeInfo: { bootID, ...(osImage ? { osImage } : {}) } },
            },
          });
          resourceVersion = booted.metadata.resourceVersion;
        }
        // The persisted configuration is the one this boot runs (staged, or from before a try).
        const persisted = annotations[PERSISTED_CONFIG_TEXT_ANNOTATION];
        await this.rest.request(this.nodePath(name), {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: {
            metadata: {
              resourceVersion,
              annotations: {
                [NODE_POWER_ANNOTATION]: null,
                [BOOT_AT_ANNOTATION]: null,
                [STAGED_OS_IMAGE_ANNOTATION]: null,
                [PERSISTED_CONFIG_TEXT_ANNOTATION]: null,
                [TRY_REVERT_AT_ANNOTATION]: null,
                [APPLY_REBOOTING_ANNOTATION]: null,
                // A member that left etcd (graceful reset) joins again as it boots.
                [ETCD_LEFT_ANNOTATION]: null,
                // Events live in memory: this boot's are its boot sequence.
                [EVENTS_ANNOTATION]: JSON.stringify(bootEvents()),
                ...(persisted !== undefined
                  ? {
                      [MACHINE_CONFIG_TEXT_ANNOTATION]: persisted,
                      [MACHINE_CONFIG_ANNOTATION]: sha256(new TextEncoder().encode(persisted)),
                    }
                  : {}),
              },
            },
          },
        });
        this.log(`${name}: booted ${String(osImage)} (boot ${bootID})`);
        return;
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 409) continue;
        throw error;
      }
    }
    throw new Error(`node ${name}: could not boot it, its Node kept changing`);
  }

  /** Picks up boots and try reverts that a previous simulator scheduled but did not live to do. */
  private async resumeBoots(): Promise<void> {
    const list = await this.rest.request<{ items: NodeObject[] }>('/api/v1/nodes');
    for (const node of list.items) {
      const revertAt = node.metadata.annotations?.[TRY_REVERT_AT_ANNOTATION];
      if (revertAt) this.scheduleTryRevert(node.metadata.name, new Date(revertAt));
      const bootAt = node.metadata.annotations?.[BOOT_AT_ANNOTATION];
      if (node.metadata.annotations?.[NODE_POWER_ANNOTATION] !== NODE_POWER_OFF || !bootAt) continue;
      this.later(Math.max(0, Date.parse(bootAt) - Date.now()), () => this.boot(node.metadata.name));
    }
  }
}

// `node sandbox/talos-simulator.ts --kubeconfig K --pki DIR --port P`: the sandbox runs
// the simulator as a process of its own, stopped by PID like the others.
if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      kubeconfig: { type: 'string' },
      pki: { type: 'string' },
      port: { type: 'string', default: '0' },
      'boot-delay': { type: 'string', default: '2s' },
    },
  });
  if (!values.kubeconfig || !values.pki) {
    process.stderr.write(
      'usage: talos-simulator.ts --kubeconfig FILE --pki DIR [--port N] [--boot-delay 2s]\n',
    );
    process.exit(2);
  }
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(values.kubeconfig);
  const pki = talosPkiPaths(values.pki);
  const simulator = await TalosSimulator.start({
    kubeConfig,
    tls: { ca: pki.ca, cert: pki.server.cert, key: pki.server.key },
    port: Number(values.port),
    bootDelayMs: parseDuration(values['boot-delay']),
    log: (line) => process.stdout.write(`${new Date().toISOString()} ${line}\n`),
  });
  const shutdown = () => {
    void simulator.stop().then(() => process.exit(0));
  };
  process.once('SIGTERM', shutdown);
  process.once('SIGINT', shutdown);
}
