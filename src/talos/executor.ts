// The Talos side of a Managed action: the calls talosctl would make, chosen from the
// action and the node's Talos version (from its osImage), with progress in words.
// Draining, waiting for the node and the hooks around it belong to the reconciler.
import type { NodeActionSpec } from '../api/node-action.ts';
import type { ApplyMode, TalosClient, WipeMode } from './client.ts';
import { formatTalosVersion, hasLifecycleUpgrade, talosVersionFromOsImage } from './version.ts';

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

const WIPE: Record<string, WipeMode> = { All: 'all', SystemDisk: 'system-disk', UserDisks: 'user-disks' };
const APPLY: Record<string, ApplyMode> = {
  Auto: 'auto',
  NoReboot: 'no-reboot',
  Reboot: 'reboot',
  Staged: 'staged',
  Try: 'try',
};

/**
 * Performs the action on the node through the Talos API. `machineConfig` is the full
 * machine configuration for ConfigChange (read by the caller from the action's Secret).
 */
export async function performTalosAction(
  client: TalosClient,
  spec: NodeActionSpec,
  target: TalosTarget,
  options: { machineConfig?: string; progress?: (line: string) => void; signal?: AbortSignal } = {},
): Promise<TalosOutcome> {
  const call = { node: target.address, ...(options.signal ? { signal: options.signal } : {}) };
  const progress = options.progress ?? (() => undefined);
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
      const version = talosVersionFromOsImage(target.osImage);
      if (!version)
        throw new Error(
          `cannot tell the Talos version of the node from its osImage "${String(target.osImage)}"`,
        );
      if (!hasLifecycleUpgrade(version)) {
        // Talos before 1.13: the node pulls, installs and reboots by itself.
        await client.upgrade({ ...call, image, stage: spec.upgrade?.stage ?? false });
        return {
          disrupts: true,
          message: `upgrading to ${image} (legacy upgrade, Talos ${formatTalosVersion(version)})`,
        };
      }
      progress(`pulling ${image}`);
      await client.pullImage({ ...call, image });
      progress(`installing ${image}`);
      await client.installUpgrade({ ...call, image, onProgress: (line) => progress(`installer: ${line}`) });
      progress('rebooting into the new version');
      await client.reboot({ ...call, mode: 'default' });
      return { disrupts: true, message: `upgraded to ${image}, rebooting` };
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
