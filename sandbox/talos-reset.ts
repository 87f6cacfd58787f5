// What a simulated node's Reset accepts and wipes, as Talos's Reset handler and reset
// sequence decide (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go, v1.11–v1.14):
//
// - user disks must exist, be writable and not be the system disk; none with SYSTEM_DISK;
// - system partitions (labels) none with USER_DISKS; each must be a volume the node has.
//   Up to 1.14.0-beta.0 those are the partitions of the system disk (EFI, BIOS, BOOT,
//   META, STATE, EPHEMERAL); from 1.14.0-beta.1 also ETCD, CRI, KUBELET and LOG, which
//   are directories under EPHEMERAL unless given partitions of their own, and a
//   directory-backed one is accepted only with EPHEMERAL wiped too;
// - ALL wipes the system disk and the user disks listed — only those: nothing else;
//   SYSTEM_DISK the system disk; USER_DISKS the listed user disks; with labels, the
//   system wipe is those partitions instead of the whole disk.
//
// Talos answers these refusals with plain errors: gRPC code UNKNOWN.
import { hasSystemVolumeLabels, type TalosVersionNumber } from '../src/talos/version.ts';

/** The disks of a simulated node (override: DISKS_ANNOTATION, comma-separated, the first the system disk). */
export const DISKS_ANNOTATION = 'sandbox.gatehouse.dev/disks';
export const DEFAULT_DISKS = ['/dev/sda', '/dev/sdb', '/dev/sdc'];
/**
 * The 1.14 system volumes that have partitions of their own on this node
 * (comma-separated, e.g. `ETCD`); the others are directories under EPHEMERAL.
 */
export const DEDICATED_VOLUMES_ANNOTATION = 'sandbox.gatehouse.dev/dedicated-volumes';
/** What the last reset wiped, as JSON: `{"disks":["/dev/sda"],"partitions":["STATE"]}`. */
export const WIPED_ANNOTATION = 'sandbox.gatehouse.dev/wiped';

const SYSTEM_PARTITIONS = ['EFI', 'BIOS', 'BOOT', 'META', 'STATE', 'EPHEMERAL'];
const SYSTEM_VOLUMES = ['ETCD', 'CRI', 'KUBELET', 'LOG'];

export type ResetMode = 'ALL' | 'SYSTEM_DISK' | 'USER_DISKS';

export interface ResetAsked {
  mode: ResetMode;
  userDisks: string[];
  partitions: { label: string; wipe: boolean }[];
}

export interface ResetPlan {
  /** Whole disks wiped. */
  disks: string[];
  /** System partitions (volumes) wiped, by label. */
  partitions: string[];
  /** The node loses its configuration (STATE, or the whole system disk): it boots into maintenance mode. */
  maintenance: boolean;
}

const csv = (text: string | undefined) =>
  (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');

export function nodeDisks(annotations: Record<string, string>): string[] {
  const listed = csv(annotations[DISKS_ANNOTATION]);
  return listed.length > 0 ? listed : DEFAULT_DISKS;
}

/** What a reset would wipe, or Talos's refusal (thrown as an Error with its message). */
export function planReset(
  version: TalosVersionNumber,
  annotations: Record<string, string>,
  asked: ResetAsked,
): ResetPlan {
  const [systemDisk, ...userDisks] = nodeDisks(annotations);
  if (asked.userDisks.length > 0) {
    if (asked.mode === 'SYSTEM_DISK')
      throw new Error(
        "reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter",
      );
    for (const disk of asked.userDisks) {
      if (disk === systemDisk) throw new Error(`reset user disk failed: device ${disk} is the system disk`);
      if (!userDisks.includes(disk)) throw new Error(`reset user disk failed: device ${disk} wasn't found`);
    }
  }
  const partitions: string[] = [];
  if (asked.partitions.length > 0) {
    if (asked.mode === 'USER_DISKS')
      throw new Error(
        "reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter",
      );
    const volumes = hasSystemVolumeLabels(version)
      ? [...SYSTEM_PARTITIONS, ...SYSTEM_VOLUMES]
      : SYSTEM_PARTITIONS;
    const dedicated = csv(annotations[DEDICATED_VOLUMES_ANNOTATION]);
    const wiped = new Set(asked.partitions.filter((p) => p.wipe).map((p) => p.label));
    for (const p of asked.partitions) {
      if (!volumes.includes(p.label))
        throw new Error(
          `failed to get volume status with label "${p.label}": resource VolumeStatuses.block.talos.dev(runtime/${p.label}@undefined) NotFound`,
        );
      if (SYSTEM_VOLUMES.includes(p.label) && !dedicated.includes(p.label)) {
        if (!wiped.has('EPHEMERAL'))
          throw new Error(
            `failed to reset: volume "${p.label}" resides on volume "EPHEMERAL", and therefore "${p.label}" cannot be wiped without wiping "EPHEMERAL"`,
          );
        continue;
      }
      if (p.wipe) partitions.push(p.label);
    }
  }
  const system = asked.mode !== 'USER_DISKS';
  const user = asked.mode !== 'SYSTEM_DISK';
  const disks = [
    ...(system && asked.partitions.length === 0 && systemDisk ? [systemDisk] : []),
    ...(user ? asked.userDisks : []),
  ];
  return {
    disks,
    partitions: system ? partitions : [],
    maintenance: (system && asked.partitions.length === 0) || (system && partitions.includes('STATE')),
  };
}
