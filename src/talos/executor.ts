// The Talos side of a Managed action: the calls talosctl would make, chosen from the
// action and the node's Talos version (from its osImage), with progress in words.
//
// A Managed action runs in four steps (see docs/decisions.md, "Managed execution"):
//
//   prepare  repeatable, before the drain: pull the installer image (Talos ≥ 1.13), or
//            read a ConfigChange's machine configuration — what can fail without having
//            disturbed any workload
//   drain    repeatable (drain.ts), recorded in the action's status once done
//   install  repeatable, after the drain: LifecycleService.Upgrade installs the pulled
//            image to the boot disk (Talos ≥ 1.13; it runs only after the next reboot),
//            or, on Talos ≥ 1.14 for a ConfigChange in mode Reboot, ApplyConfiguration
//            NO_REBOOT (1.14 refuses REBOOT outside maintenance mode)
//   call     the one call that disrupts the node (Reboot, Shutdown, Reset, the legacy
//            Upgrade, ApplyConfiguration), recorded before it is made and never made twice
//
// The flow is chosen from the node's Talos version (its osImage). When Talos answers
// UNIMPLEMENTED for a call the version should have, the step fails saying so — the
// osImage and the node disagree — rather than guessing another flow from a failure.
//
// plan.ts says which steps an action has, as typed steps (pure: each action kind's
// descriptor chooses them); prepareTalosAction(), installTalosUpgrade() and callTalos()
// make them, knowing nothing of the action's kind. Draining, recording and waiting for
// the node belong to the reconciler.
import { GrpcStatus } from './grpc-status.ts';
import type { TalosClient } from './client.ts';
import { TalosApiError } from './errors.ts';
import { normalizeImageReference } from './image-reference.ts';
import { takesNodeDown, type InstallStep, type TalosCall } from './plan.ts';

export interface TalosTarget {
  /** The node's address (its InternalIP), sent as the `node` header. */
  address: string;
  /** The Node's status.nodeInfo.osImage, e.g. "Talos (v1.13.0)". */
  osImage: string | undefined;
  /** Whether the Node is a control-plane node (an etcd member). */
  controlPlane?: boolean;
}

export interface TalosOutcome {
  /** Whether the node is now rebooting (or halting): the reconciler waits for it. */
  disrupts: boolean;
  message: string;
}

export interface StepOptions {
  progress?: (line: string) => void;
  signal?: AbortSignal;
}

/**
 * Rethrows an UNIMPLEMENTED answer as what it means here: the node's Talos lacks the
 * call its osImage says it has. Anything else is rethrown as it is.
 */
async function confirmed<T>(call: string, osImage: string | undefined, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof TalosApiError && error.code === GrpcStatus.UNIMPLEMENTED)
      // Still a TalosApiError with its status: the call was refused, so not made.
      throw new TalosApiError(
        {
          call: error.call,
          node: error.node,
          endpoint: error.endpoint,
          failure: error.failure,
          code: error.code,
          talosMessage: error.talosMessage,
        },
        `Talos answered UNIMPLEMENTED to ${call}: the node does not have what its osImage "${String(osImage)}" promises (${error.talosMessage}); nothing was changed`,
        { cause: error },
      );
    throw error;
  }
}

/** The repeatable step before the drain: pulls the installer image into the node's system containerd. */
export async function prepareTalosAction(
  client: TalosClient,
  step: { type: 'pull'; image: string },
  target: TalosTarget,
  options: StepOptions = {},
): Promise<string> {
  const { image } = step;
  const progress = options.progress ?? (() => undefined);
  progress(`pulling ${image}`);
  let last = '';
  const pulled = await confirmed('ImageService.Pull', target.osImage, () =>
    client.pullImage({
      node: target.address,
      image,
      ...(options.signal ? { signal: options.signal } : {}),
      onProgress: (p) => {
        const line = `pulling ${image}: layer ${p.layerId.slice(7, 19)} ${p.status}`;
        if (line !== last) progress(line);
        last = line;
      },
    }),
  );
  return `pulled ${pulled.name}`;
}

/**
 * The repeatable step after the drain: installs the pulled image (Talos ≥ 1.13; runs
 * after the next reboot), or applies a ConfigChange NO_REBOOT ahead of its Reboot
 * (Talos ≥ 1.14; applying the same configuration again changes nothing).
 */
export async function installTalosUpgrade(
  client: TalosClient,
  step: InstallStep,
  target: TalosTarget,
  options: StepOptions & { machineConfig?: string } = {},
): Promise<string> {
  switch (step.type) {
    case 'applyConfig': {
      if (options.machineConfig === undefined)
        throw new Error('the machine configuration to apply is missing');
      const applied = await client.applyConfiguration({
        node: target.address,
        data: options.machineConfig,
        mode: 'no-reboot',
        ...(options.signal ? { signal: options.signal } : {}),
      });
      return `configuration applied (mode ${applied.mode}); the reboot makes it whole`;
    }
    case 'installImage': {
      // Talos stored the pulled image under containerd's name for it, and looks the
      // installer up by exactly the name it is given: `alpine:3` is `docker.io/library/alpine:3`.
      const image = normalizeImageReference(step.image);
      const progress = options.progress ?? (() => undefined);
      progress(`installing ${image}`);
      await confirmed('LifecycleService.Upgrade', target.osImage, () =>
        client.installUpgrade({
          node: target.address,
          image,
          ...(options.signal ? { signal: options.signal } : {}),
          onProgress: (line) => progress(`installer: ${line}`),
        }),
      );
      return `installed ${image}`;
    }
  }
}

/**
 * Before the disruptive call on a control-plane node: EtcdForfeitLeadership, which
 * hands leadership to another member if this one leads (and does nothing otherwise),
 * so that the cluster does not wait for an election on a leader that is gone. Only for
 * a call that takes the node down (plan.ts takesNodeDown: not a change applied live).
 * Talos refuses it in an etcd of one member ("only one member"), and a member alone
 * among voters has nobody to hand to: then nothing is asked. Returns what happened, for
 * the step's progress and the action's record: who gave leadership up, who took it.
 */
export async function forfeitEtcdLeadership(
  client: TalosClient,
  call: TalosCall,
  target: TalosTarget & { name: string },
  options: { signal?: AbortSignal } = {},
): Promise<string | undefined> {
  if (!target.controlPlane || !takesNodeDown(call, target.osImage)) return undefined;
  const to = { node: target.address, ...(options.signal ? { signal: options.signal } : {}) };
  const self = target.name;
  const members = await client.etcdMemberList(to);
  const voters = members.filter((m) => !m.isLearner && m.hostname !== self);
  if (voters.length === 0)
    return `etcd member ${self} is the only voting member: nobody to hand leadership to, so none is handed over`;
  const { member } = await client.etcdForfeitLeadership(to);
  return member
    ? `etcd leadership handed over by ${self} to ${member}`
    : `etcd member ${self} does not lead: no leadership to hand over`;
}

/**
 * The disruptive call. `machineConfig` is the full machine configuration for
 * ApplyConfiguration (read by the caller from the action's Secret).
 */
export async function callTalos(
  client: TalosClient,
  call: TalosCall,
  target: TalosTarget,
  options: { machineConfig?: string; signal?: AbortSignal } = {},
): Promise<TalosOutcome> {
  const to = { node: target.address, ...(options.signal ? { signal: options.signal } : {}) };
  switch (call.method) {
    case 'MachineService.Reboot': {
      await client.reboot({ ...to, mode: call.mode });
      const completes = call.completes;
      return {
        disrupts: true,
        message:
          completes === undefined
            ? `rebooting (${call.mode})`
            : 'upgrade' in completes
              ? `rebooting into ${completes.upgrade}`
              : // Applied NO_REBOOT by the install step; this is the reboot that completes it.
                'rebooting to complete the configuration applied without a reboot',
      };
    }
    case 'MachineService.Shutdown':
      await client.shutdown({ ...to, force: call.force });
      return { disrupts: true, message: 'shutting down' };
    case 'MachineService.Reset':
      await client.reset({
        ...to,
        graceful: call.graceful,
        reboot: false,
        wipeMode: call.wipeMode,
        userDisksToWipe: call.userDisksToWipe,
        systemPartitionsToWipe: call.systemPartitionsToWipe,
      });
      return {
        disrupts: true,
        message: `resetting: wiping ${call.wipes}${call.graceful ? (target.controlPlane ? ', after leaving etcd for good' : '') : ', not gracefully'}`,
      };
    case 'MachineService.Upgrade': {
      if (!call.image) throw new Error('spec.upgrade.image is missing');
      await client.upgrade({ ...to, image: call.image, stage: call.stage });
      return {
        disrupts: true,
        message: `upgrading to ${call.image} (legacy upgrade, Talos ${call.version})`,
      };
    }
    case 'MachineService.EtcdLeaveCluster':
      await client.etcdLeaveCluster(to);
      return { disrupts: false, message: 'left etcd: the member removed, etcd stopped and its data emptied' };
    case 'MachineService.ApplyConfiguration': {
      if (options.machineConfig === undefined)
        throw new Error('the machine configuration to apply is missing');
      const requested = call.mode;
      const machineConfig = options.machineConfig;
      const applied = await confirmed(`ApplyConfiguration in mode ${requested}`, target.osImage, () =>
        client.applyConfiguration({
          ...to,
          data: machineConfig,
          mode: requested,
          ...(call.tryTimeoutMs !== undefined ? { tryModeTimeoutMs: call.tryTimeoutMs } : {}),
        }),
      );
      const mode = applied.mode;
      return {
        disrupts: mode === 'reboot',
        message: `configuration applied (mode ${mode}${mode === requested ? '' : `, asked ${requested}`})`,
      };
    }
  }
}
