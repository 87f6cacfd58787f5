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
//            image to the boot disk (Talos ≥ 1.13); it runs only after the next reboot
//   call     the one call that disrupts the node (Reboot, Shutdown, Reset, the legacy
//            Upgrade, ApplyConfiguration), recorded before it is made and never made twice
//
// plan.ts says which steps an action has (pure: the decision core uses it);
// prepareTalosAction(), installTalosUpgrade() and callTalos() make them. Draining,
// recording and waiting for the node belong to the reconciler.
import type { NodeActionSpec } from '../api/node-action.ts';
import type { ApplyMode, TalosClient, WipeMode } from './client.ts';
import { lifecycleUpgrade } from './plan.ts';
import { formatTalosVersion, talosVersionFromOsImage } from './version.ts';

export interface TalosTarget {
  /** The node's address (its InternalIP), sent as the `node` header. */
  address: string;
  /** The Node's status.nodeInfo.osImage, e.g. "Talos (v1.13.0)". */
  osImage: string | undefined;
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

const WIPE: Record<string, WipeMode> = { All: 'all', SystemDisk: 'system-disk', UserDisks: 'user-disks' };
const APPLY: Record<string, ApplyMode> = {
  Auto: 'auto',
  NoReboot: 'no-reboot',
  Reboot: 'reboot',
  Staged: 'staged',
  Try: 'try',
};

/** The repeatable step before the drain: pulls the installer image into the node's system containerd. */
export async function prepareTalosAction(
  client: TalosClient,
  spec: NodeActionSpec,
  target: TalosTarget,
  options: StepOptions = {},
): Promise<string> {
  const image = spec.upgrade?.image;
  if (spec.action !== 'Upgrade' || !image || !lifecycleUpgrade(spec, target.osImage))
    return 'nothing to prepare';
  const progress = options.progress ?? (() => undefined);
  progress(`pulling ${image}`);
  let last = '';
  const pulled = await client.pullImage({
    node: target.address,
    image,
    ...(options.signal ? { signal: options.signal } : {}),
    onProgress: (p) => {
      const line = `pulling ${image}: layer ${p.layerId.slice(7, 19)} ${p.status}`;
      if (line !== last) progress(line);
      last = line;
    },
  });
  return `pulled ${pulled.name}`;
}

/** The repeatable step after the drain: installs the pulled image (Talos ≥ 1.13; runs after the next reboot). */
export async function installTalosUpgrade(
  client: TalosClient,
  spec: NodeActionSpec,
  target: TalosTarget,
  options: StepOptions = {},
): Promise<string> {
  const image = spec.upgrade?.image;
  if (spec.action !== 'Upgrade' || !image || !lifecycleUpgrade(spec, target.osImage))
    return 'nothing to install';
  const progress = options.progress ?? (() => undefined);
  progress(`installing ${image}`);
  await client.installUpgrade({
    node: target.address,
    image,
    ...(options.signal ? { signal: options.signal } : {}),
    onProgress: (line) => progress(`installer: ${line}`),
  });
  return `installed ${image}`;
}

/**
 * The disruptive call. `machineConfig` is the full machine configuration for
 * ConfigChange (read by the caller from the action's Secret).
 */
export async function callTalos(
  client: TalosClient,
  spec: NodeActionSpec,
  target: TalosTarget,
  options: { machineConfig?: string; signal?: AbortSignal } = {},
): Promise<TalosOutcome> {
  const call = { node: target.address, ...(options.signal ? { signal: options.signal } : {}) };
  switch (spec.action) {
    case 'Reboot': {
      const mode = spec.reboot?.mode === 'PowerCycle' ? 'powercycle' : 'default';
      await client.reboot({ ...call, mode });
      return { disrupts: true, message: `rebooting (${mode})` };
    }
    case 'Shutdown':
      await client.shutdown({ ...call, force: false });
      return { disrupts: true, message: 'shutting down' };
    case 'Reset': {
      const wipeMode = WIPE[spec.reset?.wipeMode ?? 'All'] ?? 'all';
      await client.reset({ ...call, graceful: spec.reset?.graceful ?? true, reboot: false, wipeMode });
      return {
        disrupts: true,
        message: `resetting (wipe ${wipeMode}, ${spec.reset?.graceful === false ? 'not ' : ''}graceful)`,
      };
    }
    case 'Upgrade': {
      const image = spec.upgrade?.image;
      if (!image) throw new Error('spec.upgrade.image is missing');
      if (!lifecycleUpgrade(spec, target.osImage)) {
        const version = talosVersionFromOsImage(target.osImage);
        await client.upgrade({ ...call, image, stage: spec.upgrade?.stage ?? false });
        return {
          disrupts: true,
          message: `upgrading to ${image} (legacy upgrade, Talos ${version ? formatTalosVersion(version) : '?'})`,
        };
      }
      await client.reboot({ ...call, mode: 'default' });
      return { disrupts: true, message: `rebooting into ${image}` };
    }
    case 'ConfigChange': {
      if (options.machineConfig === undefined)
        throw new Error('the machine configuration to apply is missing');
      const requested = APPLY[spec.configChange?.mode ?? 'Auto'] ?? 'auto';
      const applied = await client.applyConfiguration({
        ...call,
        data: options.machineConfig,
        mode: requested,
      });
      const mode = applied.mode;
      return {
        disrupts: mode === 'reboot',
        message: `configuration applied (mode ${mode}${mode === requested ? '' : `, asked ${requested}`})`,
      };
    }
  }
}

/**
 * Every step in one go, without a drain: what `talosctl` does for the action. For
 * callers that need no record between the steps (the controller makes them one by one).
 */
export async function performTalosAction(
  client: TalosClient,
  spec: NodeActionSpec,
  target: TalosTarget,
  options: { machineConfig?: string } & StepOptions = {},
): Promise<TalosOutcome> {
  await prepareTalosAction(client, spec, target, options);
  await installTalosUpgrade(client, spec, target, options);
  return callTalos(client, spec, target, options);
}
