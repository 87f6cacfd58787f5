// A Talos API simulator for the sandbox: serves the Talos gRPC API (MachineService
// Version, Reboot, Shutdown, Reset, ApplyConfiguration, Upgrade, Events and the etcd methods;
// ImageService.Pull; LifecycleService.Upgrade) over mutual TLS like apid, routes each
// call by its `node` metadata to the kwok Node with that InternalIP (or name), and
// plays the call on that Node through the Kubernetes API, as the Talos version in the
// Node's osImage would:
//
//   reboot   → acknowledged; the Node goes NotReady (powered off), gets a new bootID
//              (and the new osImage after an upgrade), and turns Ready after the boot delay
//   shutdown → NotReady, and stays down
//   reset    → NotReady; with `reboot` it boots again (into maintenance mode, NotReady
//              for good, unless only user disks were wiped), else it stays halted. A
//              reset never deletes the Node, as on a real cluster.
//
// Per version: ImageService and LifecycleService exist from 1.13 (UNIMPLEMENTED
// before); from 1.14.0-alpha.2 ApplyConfiguration REBOOT is UNIMPLEMENTED and AUTO never
// reboots; on older versions AUTO reboots when the change needs it (here: a change of
// `machine.install`). The legacy MachineService.Upgrade installs and reboots by itself,
// and refuses a control-plane node when etcd could not spare it (unless `force`).
// Like a real node answering a call addressed with `node`, no reply carries
// common.Metadata: errors are gRPC statuses.
//
// Events replays the sequences the node's calls started since its boot (reboot,
// shutdown, reset, upgrade: recorded before the call is answered, as Talos publishes
// them when the sequence starts), then holds the stream open, as Talos does.
//
// The control-plane Nodes form one simulated etcd cluster (talos-etcd.ts).
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
import { parseAllDocuments } from 'yaml';
import { parseDuration } from '../src/duration.ts';
import { KubeApiError, RestClient } from '../src/kube/rest.ts';
import {
  create,
  toBinary,
  type DescMessage,
  type MessageInitShape,
  type MessageShape,
} from '@bufbuild/protobuf';
import { ContainerdNamespace, type ContainerdInstance } from '../src/talos/gen/gatehouse/talos/common_pb.ts';
import { ContainerDriver } from '../src/talos/gen/gatehouse/talos/common_pb.ts';
import {
  ApplyConfigurationRequest_Mode as ApplyMode,
  ImageServicePullLayerProgress_Status as LayerStatus,
  RebootRequest_Mode as RebootMode,
  ResetRequest_WipeMode as WipeMode,
  SequenceEvent_Action as SequenceAction,
  SequenceEventSchema,
  ApplyConfigurationSchema,
  VersionSchema,
  type ApplyConfigurationRequest,
} from '../src/talos/gen/gatehouse/talos/machine_pb.ts';
import {
  ImageService,
  LifecycleService,
  MachineService,
  serviceDefinition,
  type Method,
} from '../src/talos/services.ts';
import {
  appliesWithoutReboot,
  formatTalosVersion,
  hasForceReboot,
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
  faultFor,
  parseFaults,
  TALOS_FAULT_ANNOTATION,
  TALOS_FAULT_MESSAGE_ANNOTATION,
  type TalosFault,
} from './talos-faults.ts';
import {
  ETCD_LEADER_ANNOTATION,
  ETCD_LEFT_ANNOTATION,
  etcdClusterOf,
  etcdLeader,
  etcdMembers,
  isControlPlane,
  alarmListReply,
  memberListReply,
  nextLeader,
  statusReply,
  type EtcdNode,
  type SimulatedMember,
} from './talos-etcd.ts';
import { talosPkiPaths } from './talos-pki.ts';
import { mergeFanOut } from './talos-fan-out.ts';
import { WIRE_METHODS, wireService, type WireRecorder } from './talos-wire.ts';

/** When a powered-off node boots (RFC 3339); absent while it stays down. */
export const BOOT_AT_ANNOTATION = 'sandbox.gatehouse.dev/boot-at';
/** The osImage the node boots into next (set by an upgrade). */
export const STAGED_OS_IMAGE_ANNOTATION = 'sandbox.gatehouse.dev/staged-os-image';
/** sha256 of the machine configuration the node runs, once one was applied. */
export const MACHINE_CONFIG_ANNOTATION = 'sandbox.gatehouse.dev/machine-config';
/** sha256 of a configuration staged for the next boot. */
export const STAGED_MACHINE_CONFIG_ANNOTATION = 'sandbox.gatehouse.dev/staged-machine-config';
/** sha256 of the configuration's `machine.install` (what needs a reboot to change), once applied. */
export const INSTALL_CONFIG_ANNOTATION = 'sandbox.gatehouse.dev/install-config';
/** sha256 of a `machine.install` that takes effect at the next boot. */
export const STAGED_INSTALL_CONFIG_ANNOTATION = 'sandbox.gatehouse.dev/staged-install-config';
/** Set when a reset wiped the system disk: the node boots into maintenance mode, NotReady for good. */
export const MAINTENANCE_ANNOTATION = 'sandbox.gatehouse.dev/maintenance';
/** How the last reboot or shutdown went: `graceful` or `force` (FORCE, or Shutdown force). */
export const LAST_POWER_OFF_ANNOTATION = 'sandbox.gatehouse.dev/last-power-off';
/**
 * The node's events since it booted, as JSON: the sequences (boot, reboot, shutdown,
 * reset, upgrade) it started, `[{"id":"…","sequence":"reboot","action":"start"}]`, as
 * MachineService.Events replays them. Talos keeps events in memory: a boot starts anew.
 */
export const EVENTS_ANNOTATION = 'sandbox.gatehouse.dev/events';

interface SequenceRecord {
  id: string;
  sequence: string;
  action: 'start' | 'stop';
}

/** An event ID that sorts by time, as Talos' (xid) do. */
function eventId(): string {
  return `${Date.now().toString(36).padStart(9, '0')}${randomUUID().slice(0, 8)}`;
}

/** The events of a fresh boot: its boot sequence, started and done. */
function bootEvents(): SequenceRecord[] {
  const id = eventId();
  return [
    { id: `${id}a`, sequence: 'boot', action: 'start' },
    { id: `${id}b`, sequence: 'boot', action: 'stop' },
  ];
}

/** The events a Node records (EVENTS_ANNOTATION); a node never recorded on has only booted. */
export function nodeEvents(annotations: Record<string, string> | undefined): SequenceRecord[] {
  const text = annotations?.[EVENTS_ANNOTATION];
  if (text === undefined) return bootEvents();
  try {
    return JSON.parse(text) as SequenceRecord[];
  } catch {
    return bootEvents();
  }
}

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

/** What Talos calls its system partitions, the only labels Reset may be asked to wipe. */
const SYSTEM_PARTITIONS = ['EFI', 'BIOS', 'BOOT', 'META', 'STATE', 'EPHEMERAL'];

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
  private readonly server = new Server();
  private readonly rest: RestClient;
  private readonly bootDelayMs: number;
  private readonly shutdownDelayMs: number;
  private readonly log: (line: string) => void;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly injected = new Map<string, TalosFault[]>();
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
        await this.startSequence(machine.name, 'reboot');
        this.reboot(machine, 'reboot', request.mode === RebootMode.FORCE);
        return ack();
      }),
      Shutdown: this.unary('Shutdown', MachineService.Shutdown, async (machine, request) => {
        await this.startSequence(machine.name, 'shutdown');
        // force: no graceful stop of the services first.
        this.later(request.force ? 0 : this.shutdownDelayMs, () =>
          this.powerOff(machine.name, undefined, request.force),
        );
        return ack();
      }),
      Reset: this.unary('Reset', MachineService.Reset, async (machine, request) => {
        const unknown = request.systemPartitionsToWipe.filter((p) => !SYSTEM_PARTITIONS.includes(p.label));
        if (unknown.length > 0)
          throw new CallError(
            GrpcStatus.INVALID_ARGUMENT,
            `failed to reset: unknown system partition label(s) ${unknown.map((p) => `"${p.label}"`).join(', ')} (system partitions: ${SYSTEM_PARTITIONS.join(', ')})`,
          );
        if (!([WipeMode.ALL, WipeMode.SYSTEM_DISK, WipeMode.USER_DISKS] as number[]).includes(request.mode))
          throw new CallError(GrpcStatus.INVALID_ARGUMENT, `unknown wipe mode ${String(request.mode)}`);
        // A graceful reset of a control-plane node leaves etcd first.
        const member = isControlPlane(this.etcdNode(machine.node));
        if (member && request.graceful) {
          const members = await this.members(machine);
          const voting = members.filter((m) => !m.learner);
          const others = voting.filter((m) => m.hostname !== machine.name && !m.down && !m.unhealthy);
          if (others.length < Math.floor((voting.length - 1) / 2) + 1 || voting.length <= 1)
            throw new CallError(
              GrpcStatus.FAILED_PRECONDITION,
              `failed to leave etcd: the remaining members would have no quorum`,
            );
          await this.setAnnotations(machine.name, {
            [ETCD_LEFT_ANNOTATION]: 'true',
            [ETCD_LEADER_ANNOTATION]: null,
          });
        }
        const systemDiskKept = request.mode === WipeMode.USER_DISKS;
        await this.startSequence(machine.name, 'reset');
        this.later(this.shutdownDelayMs, async () => {
          if (!request.reboot) {
            this.log(`${machine.name}: reset done, halted`);
            await this.powerOff(machine.name, undefined);
            return;
          }
          if (!systemDiskKept) {
            // A wiped system disk boots into maintenance mode: no kubelet, NotReady for good.
            this.log(`${machine.name}: reset done, booting into maintenance mode`);
            await this.setAnnotations(machine.name, { [MAINTENANCE_ANNOTATION]: 'true' });
            await this.powerOff(machine.name, undefined);
            return;
          }
          this.reboot(machine, 'reset (user disks wiped), rebooting', false, 0);
        });
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
        const target = this.installerTarget(request.image);
        const fault = faultFor(machine.faults, 'upgrade-error', 'Upgrade');
        if (fault) throw new CallError(GrpcStatus.UNKNOWN, fault.message);
        // The legacy upgrade holds etcd's upgrade lock and checks its health first.
        if (!request.force && isControlPlane(this.etcdNode(machine.node))) {
          const problem = this.etcdProblemWithout(await this.members(machine), machine.name);
          if (problem)
            throw new CallError(
              GrpcStatus.FAILED_PRECONDITION,
              `failed to upgrade: etcd is not healthy: ${problem} (use force to upgrade anyway)`,
            );
        }
        // preserve is what every version since 1.8 does anyway; stage installs during
        // the next boot instead of now, which the simulation cannot tell apart.
        await this.setAnnotations(machine.name, { [STAGED_OS_IMAGE_ANNOTATION]: osImageOf(target) });
        await this.startSequence(machine.name, 'upgrade');
        this.reboot(
          machine,
          `upgrade to ${formatTalosVersion(target)}${request.stage ? ' (staged)' : ''}${request.rebootMode === 1 ? ' (power cycle)' : ''}`,
        );
        return { messages: [{ ack: 'Upgrade request received', actorId: randomUUID() }] };
      }),
      ...this.etcdService(),
      // The events of this boot (tail_events -1: all; N: the last N), then the stream
      // stays open for new ones, as Talos' does, until the client goes.
      Events: this.serverStream('Events', MachineService.Events, async (machine, request, send) => {
        const events = nodeEvents(machine.node.metadata.annotations);
        const tail = request.tailEvents < 0 ? events : events.slice(events.length - request.tailEvents);
        for (const e of request.tailEvents === 0 ? [] : tail)
          await send({
            id: e.id,
            actorId: '',
            data: {
              typeUrl: 'talos/runtime/machine.SequenceEvent',
              value: toBinary(
                SequenceEventSchema,
                create(SequenceEventSchema, {
                  sequence: e.sequence,
                  action: e.action === 'start' ? SequenceAction.START : SequenceAction.STOP,
                }),
              ),
            },
          });
        return HANG;
      }),
    };
  }

  /**
   * Records a sequence starting on the node (its events: EVENTS_ANNOTATION), before the
   * call that starts it is answered, as Talos publishes it as soon as it begins.
   */
  private async startSequence(name: string, sequence: string): Promise<void> {
    await this.rewriteAnnotation(name, EVENTS_ANNOTATION, `record its ${sequence} sequence`, (annotations) =>
      JSON.stringify([...nodeEvents(annotations), { id: eventId(), sequence, action: 'start' }].slice(-100)),
    );
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
   * Why the legacy upgrade refuses to take this member down now, or undefined: it wants
   * every other member up, healthy and voting (a single-member cluster passes, as the
   * upgrade preserves its data).
   */
  private etcdProblemWithout(members: SimulatedMember[], name: string): string | undefined {
    for (const m of members) {
      if (m.hostname === name) continue;
      if (m.down) return `member ${m.hostname} is unreachable`;
      if (m.unhealthy) return `member ${m.hostname} is unhealthy`;
      if (m.learner) return `member ${m.hostname} is a learner still catching up`;
    }
    return undefined;
  }

  /** etcd runs on control-plane nodes only; on others Talos answers with an error. */
  private async memberOf(machine: Machine): Promise<{ member: SimulatedMember; members: SimulatedMember[] }> {
    const members = await this.members(machine);
    const member = members.find((m) => m.hostname === machine.name);
    if (!member)
      throw new CallError(
        GrpcStatus.FAILED_PRECONDITION,
        isControlPlane(this.etcdNode(machine.node))
          ? 'etcd is not running: this node left the etcd cluster'
          : 'etcd is not running on this node: it is not a control-plane node',
      );
    return { member, members };
  }

  private etcdService(): UntypedServiceImplementation {
    return {
      EtcdMemberList: this.unary('EtcdMemberList', MachineService.EtcdMemberList, async (machine) => {
        const { members } = await this.memberOf(machine);
        if (!etcdLeader(members))
          throw new CallError(GrpcStatus.UNAVAILABLE, 'etcdserver: no leader (the cluster has no quorum)');
        return memberListReply(members);
      }),
      EtcdStatus: this.unary('EtcdStatus', MachineService.EtcdStatus, async (machine) => {
        const { member, members } = await this.memberOf(machine);
        return statusReply(member, members);
      }),
      EtcdAlarmList: this.unary('EtcdAlarmList', MachineService.EtcdAlarmList, async (machine) => {
        const { members } = await this.memberOf(machine);
        return alarmListReply(members);
      }),
      EtcdForfeitLeadership: this.unary(
        'EtcdForfeitLeadership',
        MachineService.EtcdForfeitLeadership,
        async (machine) => {
          const { member, members } = await this.memberOf(machine);
          if (etcdLeader(members)?.id !== member.id) return { messages: [{ member: '' }] };
          const next = nextLeader(members, member);
          if (!next)
            throw new CallError(GrpcStatus.FAILED_PRECONDITION, 'no other member can take leadership over');
          await this.setAnnotations(member.hostname, { [ETCD_LEADER_ANNOTATION]: null });
          await this.setAnnotations(next.hostname, { [ETCD_LEADER_ANNOTATION]: 'true' });
          this.log(`etcd: ${member.hostname} forfeited leadership to ${next.hostname}`);
          return { messages: [{ member: member.hostname }] };
        },
      ),
    };
  }

  private imageService(): UntypedServiceImplementation {
    return {
      Pull: this.serverStream('ImagePull', ImageService.Pull, async (machine, request, send) => {
        if (!hasLifecycleUpgrade(machine.version))
          // What a gRPC server says about a service it does not have.
          throw new CallError(GrpcStatus.UNIMPLEMENTED, 'unknown service machine.ImageService');
        this.checkContainerd(request.containerd);
        const ref = request.imageRef.trim();
        if (ref === '') throw new CallError(GrpcStatus.INVALID_ARGUMENT, 'image reference is empty');
        const layers = [0, 1].map((i) =>
          createHash('sha256')
            .update(`${ref}#${String(i)}`)
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
        const store = this.imageStore(machine, request.containerd);
        const images = this.pulled.get(store) ?? new Map<string, string>();
        // The stream ends with the image's pinned name, as containerd resolved it.
        const repository = (ref.split('@')[0] ?? ref).replace(/:[^/:]+$/, '');
        const pinned = `${repository}@sha256:${createHash('sha256').update(ref).digest('hex')}`;
        images.set(ref, ref);
        images.set(pinned, ref);
        this.pulled.set(store, images);
        await send({ response: { case: 'name', value: pinned } });
      }),
    };
  }

  private lifecycleService(): UntypedServiceImplementation {
    return {
      Upgrade: this.serverStream(
        'LifecycleUpgrade',
        LifecycleService.Upgrade,
        async (machine, request, send) => {
          if (!hasLifecycleUpgrade(machine.version))
            // What a gRPC server says about a service it does not have.
            throw new CallError(GrpcStatus.UNIMPLEMENTED, 'unknown service machine.LifecycleService');
          this.checkContainerd(request.containerd);
          const image = request.source?.imageName.trim() ?? '';
          if (image === '') throw new CallError(GrpcStatus.INVALID_ARGUMENT, 'source image name is empty');
          const asked = this.pulled.get(this.imageStore(machine, request.containerd))?.get(image);
          if (asked === undefined)
            throw new CallError(
              GrpcStatus.NOT_FOUND,
              `image "${image}" not found in containerd namespace ${this.namespaceName(request.containerd)}: pull it first (ImageService.Pull)`,
            );
          const target = this.installerTarget(asked);
          const say = (message: string) =>
            send({ progress: { response: { case: 'message', value: message } } });
          await say(`running installer ${image}`);
          await say(
            `validating upgrade from ${formatTalosVersion(machine.version)} to ${formatTalosVersion(target)}`,
          );
          await say('installing to the boot disk');
          const fault = faultFor(machine.faults, 'upgrade-error', 'LifecycleUpgrade');
          if (fault) {
            await say(`error: ${fault.message}`);
            await send({ progress: { response: { case: 'exitCode', value: 1 } } });
            return;
          }
          await this.setAnnotations(machine.name, { [STAGED_OS_IMAGE_ANNOTATION]: osImageOf(target) });
          await say(`installed Talos ${formatTalosVersion(target)}; it runs after the next reboot`);
          await send({ progress: { response: { case: 'exitCode', value: 0 } } });
        },
      ),
    };
  }

  /** Talos refuses a containerd instance it does not have (driver, namespace). */
  private checkContainerd(containerd: ContainerdInstance | undefined): void {
    const driver = containerd?.driver ?? ContainerDriver.CONTAINERD;
    const namespace = containerd?.namespace ?? ContainerdNamespace.NS_UNKNOWN;
    if (driver !== ContainerDriver.CONTAINERD && driver !== ContainerDriver.CRI)
      throw new CallError(GrpcStatus.INVALID_ARGUMENT, `unsupported containerd driver ${String(driver)}`);
    if (namespace !== ContainerdNamespace.NS_SYSTEM && namespace !== ContainerdNamespace.NS_CRI)
      throw new CallError(
        GrpcStatus.INVALID_ARGUMENT,
        `unsupported containerd namespace ${String(namespace)}: choose NS_SYSTEM or NS_CRI`,
      );
  }

  private namespaceName(containerd: ContainerdInstance | undefined): string {
    const namespace = containerd?.namespace ?? ContainerdNamespace.NS_SYSTEM;
    return namespace === ContainerdNamespace.NS_CRI ? 'cri' : 'system';
  }

  private imageStore(machine: Machine, containerd: ContainerdInstance | undefined): string {
    return `${machine.node.metadata.uid}/${this.namespaceName(containerd)}`;
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
    const list = await this.rest.request<{ items: NodeObject[] }>('/api/v1/nodes');
    const found = list.items.find(
      (n) =>
        n.metadata.annotations?.[KWOK_NODE_ANNOTATION] !== undefined &&
        (internalIP(n) === address || n.metadata.name === address),
    );
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
  ) {
    return (call: ServerWritableStream<MessageShape<Req>, MessageInitShape<Res>>) => {
      let cancelled = false;
      call.on('cancelled', () => (cancelled = true));
      const send = async (reply: MessageInitShape<Res>) => {
        if (cancelled) throw new CallError(GrpcStatus.CANCELLED, 'cancelled by the client');
        call.write(reply);
        await sleep(20); // a stream worth the name: replies arrive over time
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

  private bootDelayFor(machine: Machine): number {
    const text = machine.node.metadata.annotations?.[BOOT_DELAY_ANNOTATION];
    if (text === undefined) return this.bootDelayMs;
    try {
      return parseDuration(text);
    } catch {
      this.log(`node ${machine.name}: ignoring ${BOOT_DELAY_ANNOTATION}="${text}" (not a duration)`);
      return this.bootDelayMs;
    }
  }

  /**
   * Goes down shortly after the acknowledgement (at once when forced: no graceful stop
   * of the services), and boots after the boot delay (unless it never returns).
   */
  private reboot(
    machine: Machine,
    why: string,
    force = false,
    delayMs = force ? 0 : this.shutdownDelayMs,
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

  private async applyConfiguration(
    machine: Machine,
    request: ApplyConfigurationRequest,
  ): Promise<MessageInitShape<typeof ApplyConfigurationSchema>> {
    const text = new TextDecoder().decode(request.data);
    const docs = parseAllDocuments(text);
    const broken = docs.flatMap((d) => d.errors);
    if (text.trim() === '' || broken.length > 0)
      throw new CallError(
        GrpcStatus.INVALID_ARGUMENT,
        `failed to parse config: ${broken[0]?.message ?? 'the configuration is empty'}`,
      );
    const machineConfig = docs
      .map((d) => d.toJS() as unknown)
      .find(
        (d): d is Record<string, unknown> =>
          typeof d === 'object' && d !== null && (d as Record<string, unknown>).version === 'v1alpha1',
      );
    if (!machineConfig || typeof machineConfig.machine !== 'object' || machineConfig.machine === null)
      throw new CallError(
        GrpcStatus.INVALID_ARGUMENT,
        'configuration validation failed: no v1alpha1 document with a "machine" section',
      );
    const digest = sha256(request.data);
    const install = (machineConfig.machine as Record<string, unknown>).install;
    const installDigest = sha256(new TextEncoder().encode(JSON.stringify(install ?? null)));
    const annotations = machine.node.metadata.annotations ?? {};
    const currentInstall = annotations[INSTALL_CONFIG_ANNOTATION] ?? sha256(new TextEncoder().encode('null'));
    // The one part of the configuration that takes a reboot to change, in this simulation.
    const needsReboot = installDigest !== currentInstall;
    const noApplyReboot = appliesWithoutReboot(machine.version);
    if (request.mode === ApplyMode.REBOOT && noApplyReboot)
      throw new CallError(
        GrpcStatus.UNIMPLEMENTED,
        `apply mode REBOOT is only supported in maintenance mode on Talos ${formatTalosVersion(machine.version)}: apply with NO_REBOOT, then reboot`,
      );
    let mode = request.mode;
    // AUTO: reboot when the change needs it (≤ 1.13); from 1.14 never: what needs a
    // reboot waits for the next one.
    if (mode === ApplyMode.AUTO)
      mode = needsReboot ? (noApplyReboot ? ApplyMode.STAGED : ApplyMode.REBOOT) : ApplyMode.NO_REBOOT;
    const reply = (modeDetails: string, chosen: ApplyMode) => ({
      warnings: [],
      mode: chosen,
      modeDetails,
    });
    if (request.dryRun)
      return reply(
        `Dry run: the configuration (${digest}) is valid and would be applied in mode ${Object.entries(ApplyMode).find(([, n]) => n === mode)?.[0] ?? String(mode)}`,
        mode,
      );
    switch (mode) {
      case ApplyMode.REBOOT:
        await this.setAnnotations(machine.name, {
          [STAGED_MACHINE_CONFIG_ANNOTATION]: digest,
          [STAGED_INSTALL_CONFIG_ANNOTATION]: installDigest,
        });
        await this.startSequence(machine.name, 'reboot');
        this.reboot(machine, 'apply configuration with a reboot');
        return reply('Applied configuration with a reboot', mode);
      case ApplyMode.STAGED:
        await this.setAnnotations(machine.name, {
          [STAGED_MACHINE_CONFIG_ANNOTATION]: digest,
          [STAGED_INSTALL_CONFIG_ANNOTATION]: installDigest,
        });
        return reply(
          needsReboot && request.mode === ApplyMode.AUTO
            ? 'The change needs a reboot: staged, it is applied at the next reboot'
            : 'Staged configuration to be applied after a reboot',
          mode,
        );
      case ApplyMode.TRY: {
        const previous = annotations[MACHINE_CONFIG_ANNOTATION] ?? null;
        const t = request.tryModeTimeout;
        const timeoutMs = t ? Number(t.seconds) * 1000 + t.nanos / 1e6 : 60_000;
        await this.setAnnotations(machine.name, { [MACHINE_CONFIG_ANNOTATION]: digest });
        this.later(timeoutMs, () =>
          this.setAnnotations(machine.name, { [MACHINE_CONFIG_ANNOTATION]: previous }),
        );
        return reply(
          `Applied configuration in try mode: it is rolled back in ${String(timeoutMs / 1000)}s`,
          mode,
        );
      }
      case ApplyMode.NO_REBOOT:
        // What needs a reboot (from 1.14) takes effect at the next one.
        await this.setAnnotations(machine.name, {
          [MACHINE_CONFIG_ANNOTATION]: digest,
          ...(needsReboot ? { [STAGED_INSTALL_CONFIG_ANNOTATION]: installDigest } : {}),
        });
        return reply(
          needsReboot
            ? 'Applied configuration without a reboot; the install section takes effect at the next reboot'
            : 'Applied configuration without a reboot',
          mode,
        );
      default:
        throw new CallError(GrpcStatus.INVALID_ARGUMENT, `unknown apply mode ${String(request.mode)}`);
    }
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
        const staged = annotations[STAGED_MACHINE_CONFIG_ANNOTATION];
        const stagedInstall = annotations[STAGED_INSTALL_CONFIG_ANNOTATION];
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
                [STAGED_MACHINE_CONFIG_ANNOTATION]: null,
                [STAGED_INSTALL_CONFIG_ANNOTATION]: null,
                // A member that left etcd (graceful reset) joins again as it boots.
                [ETCD_LEFT_ANNOTATION]: null,
                // Events live in memory: this boot's are its boot sequence.
                [EVENTS_ANNOTATION]: JSON.stringify(bootEvents()),
                ...(staged ? { [MACHINE_CONFIG_ANNOTATION]: staged } : {}),
                ...(stagedInstall ? { [INSTALL_CONFIG_ANNOTATION]: stagedInstall } : {}),
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

  /** Picks up boots that a previous simulator scheduled but did not live to do. */
  private async resumeBoots(): Promise<void> {
    const list = await this.rest.request<{ items: NodeObject[] }>('/api/v1/nodes');
    for (const node of list.items) {
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
