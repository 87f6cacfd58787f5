// Talos versions as the cluster shows them: a Node's `status.nodeInfo.osImage` reads
// `Talos (v1.13.0)`, and an installer image is tagged with the version it installs.

export interface TalosVersionNumber {
  major: number;
  minor: number;
  patch: number;
  /** e.g. `alpha.2`; empty for a release. */
  prerelease: string;
}

const VERSION = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$/;

export function parseTalosVersion(text: string): TalosVersionNumber | undefined {
  const match = VERSION.exec(text.trim());
  if (!match) return undefined;
  return {
    major: Number(match[1]),
    minor: Number(match[2]),
    patch: Number(match[3]),
    prerelease: match[4] ?? '',
  };
}

export function formatTalosVersion(v: TalosVersionNumber): string {
  return `v${String(v.major)}.${String(v.minor)}.${String(v.patch)}${v.prerelease ? `-${v.prerelease}` : ''}`;
}

/** The version in a Node's osImage (`Talos (v1.13.0)`), or undefined for anything else. */
export function talosVersionFromOsImage(osImage: string | undefined): TalosVersionNumber | undefined {
  const match = /^Talos \((v[^)]+)\)$/.exec(osImage?.trim() ?? '');
  return match?.[1] ? parseTalosVersion(match[1]) : undefined;
}

export function osImageOf(version: TalosVersionNumber): string {
  return `Talos (${formatTalosVersion(version)})`;
}

/**
 * The tag of an image reference (`ghcr.io/siderolabs/installer:v1.13.1`,
 * `factory.talos.dev/installer/<schematic>:v1.13.1@sha256:...`), or undefined.
 */
export function imageTag(reference: string): string | undefined {
  const withoutDigest = reference.trim().split('@')[0] ?? '';
  const lastSlash = withoutDigest.lastIndexOf('/');
  const name = withoutDigest.slice(lastSlash + 1);
  const colon = name.lastIndexOf(':');
  return colon > 0 ? name.slice(colon + 1) : undefined;
}

/** The Talos version an installer image installs, read from its tag. */
export function installerVersion(reference: string): TalosVersionNumber | undefined {
  const tag = imageTag(reference);
  return tag === undefined ? undefined : parseTalosVersion(tag);
}

/** <0, 0, >0 as a is older than, the same as, or newer than b (prereleases sort first). */
export function compareTalosVersions(a: TalosVersionNumber, b: TalosVersionNumber): number {
  const byNumber = a.major - b.major || a.minor - b.minor || a.patch - b.patch;
  if (byNumber !== 0) return byNumber;
  if (a.prerelease === b.prerelease) return 0;
  if (!a.prerelease) return 1;
  if (!b.prerelease) return -1;
  // Semantic versioning: dot-separated identifiers, numbers compared as numbers and
  // before words.
  const as = a.prerelease.split('.');
  const bs = b.prerelease.split('.');
  for (let i = 0; i < Math.max(as.length, bs.length); i++) {
    const x = as[i];
    const y = bs[i];
    if (x === undefined) return -1;
    if (y === undefined) return 1;
    if (x === y) continue;
    const xn = /^\d+$/.test(x);
    const yn = /^\d+$/.test(y);
    if (xn && yn) return Number(x) - Number(y);
    if (xn !== yn) return xn ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return 0;
}

/** The last Talos version without LifecycleService.Upgrade. */
const BEFORE_LIFECYCLE_UPGRADE: TalosVersionNumber = { major: 1, minor: 13, patch: 0, prerelease: 'alpha.2' };

/**
 * Whether a node upgrades through ImageService.Pull + LifecycleService.Upgrade (Talos
 * 1.13 and later, as talosctl decides) rather than the legacy MachineService.Upgrade.
 */
export function hasLifecycleUpgrade(version: TalosVersionNumber): boolean {
  return compareTalosVersions(version, BEFORE_LIFECYCLE_UPGRADE) > 0;
}

/** The first Talos version whose ApplyConfiguration refuses REBOOT outside maintenance mode. */
const NO_APPLY_REBOOT: TalosVersionNumber = { major: 1, minor: 14, patch: 0, prerelease: 'alpha.2' };

/**
 * Whether ApplyConfiguration in mode REBOOT answers UNIMPLEMENTED (outside maintenance
 * mode) and AUTO never reboots: Talos 1.14.0-alpha.2 and later. A change that needs a
 * reboot is then applied NO_REBOOT and followed by a Reboot of its own.
 */
export function appliesWithoutReboot(version: TalosVersionNumber): boolean {
  return compareTalosVersions(version, NO_APPLY_REBOOT) >= 0;
}

/** Whether RebootRequest.Mode FORCE exists (Talos 1.12 and later). */
export function hasForceReboot(version: TalosVersionNumber): boolean {
  return compareTalosVersions(version, { major: 1, minor: 12, patch: 0, prerelease: '' }) >= 0;
}

/**
 * The first Talos version whose Reset accepts the ETCD, CRI, KUBELET and LOG volumes by
 * label (wiped with EPHEMERAL when they are directories under it, on their own when
 * they have partitions): 1.14.0-beta.1. Before, only located partitions are accepted
 * (beta.0 refuses a directory-backed volume as "not located"), and 1.13 and older know
 * no such volume.
 */
const SYSTEM_VOLUME_LABELS: TalosVersionNumber = { major: 1, minor: 14, patch: 0, prerelease: 'beta.1' };

/** Whether a Reset of a node running `version` may name ETCD, CRI, KUBELET and LOG. */
export function hasSystemVolumeLabels(version: TalosVersionNumber): boolean {
  return compareTalosVersions(version, SYSTEM_VOLUME_LABELS) >= 0;
}

/** The first installer that exits with a code per kind of failure (before: 1 for every failure). */
const INSTALLER_EXIT_CODES: TalosVersionNumber = { major: 1, minor: 14, patch: 0, prerelease: 'alpha.2' };

/** Whether the installer of `version` tells its failures apart by exit code. */
export function hasInstallerExitCodes(version: TalosVersionNumber): boolean {
  return compareTalosVersions(version, INSTALLER_EXIT_CODES) >= 0;
}
