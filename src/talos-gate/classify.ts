// What a gated Talos API call asks for, read from its request: the NodeAction it needs
// (action and parameters), or that it passes (a dry run, a STAGED apply), or why the gate
// refuses it. Pure: the server (server.ts) decodes the request and finds the node's Talos
// version, this decides.
import { fromBinary } from '@bufbuild/protobuf';
import type { NodeActionSpec } from '../api/node-action.ts';
import {
  ApplyConfigurationRequest_Mode as ApplyMode,
  ApplyConfigurationRequestSchema,
  EtcdRemoveMemberByIDRequestSchema,
  LifecycleServiceUpgradeRequestSchema,
  RebootRequest_Mode as RebootMode,
  RebootRequestSchema,
  ResetRequest_WipeMode as WipeMode,
  ResetRequestSchema,
  ShutdownRequestSchema,
  UpgradeRequestSchema,
  UpgradeRequest_RebootMode as UpgradeRebootMode,
} from '../talos/gen/gatehouse/talos/machine_pb.ts';
import { appliesWithoutReboot, type TalosVersionNumber } from '../talos/version.ts';
import { classifyConfigChange, type ConfigChangeClass } from '../talos/config-disruption.ts';
import { GrpcStatus } from '../talos/grpc-status.ts';
import { methodFacts } from './methods.ts';

/** gRPC status codes the gate answers with. */
export const Code = {
  CANCELLED: GrpcStatus.CANCELLED,
  INVALID_ARGUMENT: GrpcStatus.INVALID_ARGUMENT,
  DEADLINE_EXCEEDED: GrpcStatus.DEADLINE_EXCEEDED,
  PERMISSION_DENIED: GrpcStatus.PERMISSION_DENIED,
  FAILED_PRECONDITION: GrpcStatus.FAILED_PRECONDITION,
  UNIMPLEMENTED: GrpcStatus.UNIMPLEMENTED,
  INTERNAL: GrpcStatus.INTERNAL,
  UNAVAILABLE: GrpcStatus.UNAVAILABLE,
  UNAUTHENTICATED: GrpcStatus.UNAUTHENTICATED,
} as const;

/** The parameters of the NodeAction a call needs (spec fields beside nodeName, execution, requestedBy). */
export type ActionAsk = Pick<NodeActionSpec, 'action' | 'upgrade' | 'reboot' | 'reset' | 'configChange'>;

/**
 * What the gate does with one call:
 * - `forward`: as it is, now (not gated, or gated but harmless in this form);
 * - `gate`: only once a NodeAction `ask` of the caller is Approved; `step` says whether
 *   the call disrupts (the executed mark) or only installs (an Upgrade's first half);
 * - `etcd-remove`: a member removed by ID, gated as an EtcdLeave of the member's node
 *   once the gate knows which node that is (server.ts asks etcd);
 * - `refuse`: never, with a status the caller can act on.
 */
export type Classification =
  | { kind: 'forward'; why: string }
  | { kind: 'gate'; ask: ActionAsk; step: 'disrupt' | 'install'; call: string }
  | { kind: 'etcd-remove'; memberId: bigint; call: string }
  | { kind: 'refuse'; code: number; message: string };

export class RequestDecodeError extends Error {
  override readonly name = 'RequestDecodeError';
}

function decode<T>(what: string, run: () => T): T {
  try {
    return run();
  } catch (error) {
    throw new RequestDecodeError(
      `the ${what} request does not decode as Talos's message: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

/** An etcd member ID as etcdctl and talosctl print it. */
export const memberHex = (id: bigint) => id.toString(16).padStart(16, '0');

const methodName = (path: string) => path.replace(/^\/machine\./, '').replace(/^\//, '');

/**
 * The Talos version needed to judge the call; undefined when the node's is unknown.
 * `current`: the configuration the node runs, for an ApplyConfiguration (classifyApply).
 */
export function classifyCall(
  path: string,
  request: Uint8Array,
  version: TalosVersionNumber | undefined,
  current?: string,
): Classification {
  const gating = methodFacts(path).gating;
  const call = methodName(path);
  switch (gating.gated) {
    case false:
      return { kind: 'forward', why: gating.why };
    case 'EtcdLeave':
      return { kind: 'gate', ask: { action: 'EtcdLeave' }, step: 'disrupt', call };
    case 'EtcdRemoveMember': {
      const r = decode(call, () => fromBinary(EtcdRemoveMemberByIDRequestSchema, request));
      return { kind: 'etcd-remove', memberId: r.memberId, call: `${call} (member ${memberHex(r.memberId)})` };
    }
    case 'Shutdown': {
      const r = decode(call, () => fromBinary(ShutdownRequestSchema, request));
      return {
        kind: 'gate',
        ask: { action: 'Shutdown' },
        step: 'disrupt',
        call: r.force ? `${call} (force)` : call,
      };
    }
    case 'Reset': {
      const r = decode(call, () => fromBinary(ResetRequestSchema, request));
      const wipeMode =
        r.mode === WipeMode.SYSTEM_DISK ? 'SystemDisk' : r.mode === WipeMode.USER_DISKS ? 'UserDisks' : 'All';
      const labels = r.systemPartitionsToWipe.map((p) => p.label);
      return {
        kind: 'gate',
        ask: { action: 'Reset', reset: { graceful: r.graceful, wipeMode } },
        step: 'disrupt',
        call: `${call}${labels.length > 0 ? ` (partitions ${labels.join(', ')})` : ''}${r.reboot ? ' (then reboot)' : ''}`,
      };
    }
    case 'Reboot':
      return classifyReboot(path, call, request);
    case 'Upgrade':
      return classifyUpgrade(path, call, request);
    case 'ConfigChange':
      return classifyApply(call, request, version, current);
  }
}

function classifyReboot(path: string, call: string, request: Uint8Array): Classification {
  if (path.endsWith('/Rollback')) return { kind: 'gate', ask: { action: 'Reboot' }, step: 'disrupt', call };
  const r = decode(call, () => fromBinary(RebootRequestSchema, request));
  const mode =
    r.mode === RebootMode.POWERCYCLE ? 'PowerCycle' : r.mode === RebootMode.FORCE ? 'Force' : 'Default';
  return {
    kind: 'gate',
    ask: { action: 'Reboot', reboot: { mode } },
    step: 'disrupt',
    call: r.mode === RebootMode.FORCE ? `${call} (mode FORCE)` : call,
  };
}

function classifyUpgrade(path: string, call: string, request: Uint8Array): Classification {
  if (path === '/machine.LifecycleService/Upgrade') {
    const r = decode(call, () => fromBinary(LifecycleServiceUpgradeRequestSchema, request));
    const image = r.source?.imageName.trim() ?? '';
    if (image === '')
      return {
        kind: 'refuse',
        code: Code.INVALID_ARGUMENT,
        message: 'talos gate: LifecycleService.Upgrade names no image (source.image_name): nothing to gate',
      };
    return { kind: 'gate', ask: { action: 'Upgrade', upgrade: { image } }, step: 'install', call };
  }
  const r = decode(call, () => fromBinary(UpgradeRequestSchema, request));
  if (r.image.trim() === '')
    return {
      kind: 'refuse',
      code: Code.INVALID_ARGUMENT,
      message: 'talos gate: MachineService.Upgrade names no image: nothing to gate',
    };
  return {
    kind: 'gate',
    ask: { action: 'Upgrade', upgrade: { image: r.image.trim(), stage: r.stage } },
    step: 'disrupt',
    call: `${call}${r.rebootMode === UpgradeRebootMode.POWERCYCLE ? ' (power cycle)' : ''}${r.force ? ' (force)' : ''}`,
  };
}

const APPLY_NAMES: Record<number, string> = {
  [ApplyMode.REBOOT]: 'REBOOT',
  [ApplyMode.AUTO]: 'AUTO',
  [ApplyMode.NO_REBOOT]: 'NO_REBOOT',
  [ApplyMode.STAGED]: 'STAGED',
  [ApplyMode.TRY]: 'TRY',
};

/**
 * A live 1.14 apply, gated as an External ConfigChange stating its class, computed from
 * the configuration it carries and the one the node runs (src/talos/config-disruption.ts):
 * the class decides the etcd guard, and the caller cannot state a kinder one than the
 * bytes it sends. A None change is gated all the same: its pre-action hooks (a person's
 * approval, a change ticket) gate every configuration change. Without the node's
 * configuration (it could not be read) the action states none, and counts as the most
 * disruptive class the mode allows.
 */
function gateLive(
  described: string,
  mode: 'NoReboot' | 'Try',
  data: Uint8Array,
  version: TalosVersionNumber,
  current: string | undefined,
): Classification {
  let stated: ConfigChangeClass | undefined;
  if (current !== undefined) {
    try {
      const next = new TextDecoder().decode(data);
      stated = classifyConfigChange({ mode, version, current, next });
    } catch {
      stated = undefined; // Unparseable: Talos refuses it; gated at the mode's worst meanwhile.
    }
  }
  return {
    kind: 'gate',
    ask: {
      action: 'ConfigChange',
      configChange: { mode, ...(stated ? { disruptionClass: stated.class } : {}) },
    },
    step: 'disrupt',
    call: stated ? `${described} (${stated.class}: ${stated.paths.slice(0, 3).join(', ')})` : described,
  };
}

/**
 * ApplyConfiguration by mode and the node's Talos version; from 1.14, by what the change
 * does to the node (gateLive), when `current`, the node's configuration, is known.
 */
export function classifyApply(
  call: string,
  request: Uint8Array,
  version: TalosVersionNumber | undefined,
  current?: string,
): Classification {
  const r = decode(call, () => fromBinary(ApplyConfigurationRequestSchema, request));
  const mode = APPLY_NAMES[r.mode] ?? String(r.mode);
  if (r.dryRun) return { kind: 'forward', why: 'a dry run applies nothing' };
  if (r.mode === ApplyMode.STAGED)
    return { kind: 'forward', why: 'STAGED applies at the next boot, which is gated' };
  if (version === undefined)
    return {
      kind: 'refuse',
      code: Code.FAILED_PRECONDITION,
      message: `talos gate: cannot tell the node's Talos version (its Node's osImage) to judge ApplyConfiguration mode ${mode}; apply with --mode=staged, or fix the Node's osImage`,
    };
  const live = appliesWithoutReboot(version);
  const described = `${call} (mode ${mode})`;
  switch (r.mode) {
    case ApplyMode.REBOOT:
      // From 1.14 Talos refuses REBOOT outside maintenance mode: nothing to hold.
      if (live) return { kind: 'forward', why: 'Talos 1.14 refuses mode REBOOT outside maintenance mode' };
      return {
        kind: 'gate',
        ask: { action: 'ConfigChange', configChange: { mode: 'Reboot' } },
        step: 'disrupt',
        call: described,
      };
    case ApplyMode.AUTO:
      // AUTO never reboots from 1.14, but may restart CRI.
      if (live) return gateLive(described, 'NoReboot', r.data, version, current);
      return {
        kind: 'refuse',
        code: Code.FAILED_PRECONDITION,
        message:
          'talos gate: mode AUTO lets the node decide whether it reboots, which cannot be known before it is approved; apply with --mode=reboot (gated as a reboot) or --mode=no-reboot',
      };
    case ApplyMode.NO_REBOOT:
    case ApplyMode.TRY: {
      // Before 1.14 a live apply restarts nothing that holds workloads (kubelet reloads);
      // from 1.14 it may restart CRI and with it every pod (LANDSCAPE.md).
      if (!live)
        return {
          kind: 'forward',
          why: `mode ${mode} applies live and restarts no service before Talos 1.14`,
        };
      const configMode = r.mode === ApplyMode.TRY ? 'Try' : 'NoReboot';
      return gateLive(described, configMode, r.data, version, current);
    }
    default:
      return { kind: 'forward', why: `unknown mode ${mode}: Talos refuses it` };
  }
}
