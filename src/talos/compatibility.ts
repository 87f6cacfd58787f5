// Which Talos versions a node may upgrade to, and which Kubernetes versions each supports:
// facts of Talos's compatibility tables (siderolabs/talos, pkg/machinery/compatibility,
// talos111 … talos115 and TalosVersion.UpgradeableFrom), written here as data. A target
// not in the table is not judged (a newer Talos than this table knows: the installer says).
import { formatTalosVersion, parseTalosVersion, type TalosVersionNumber } from './version.ts';

interface Compatibility {
  /** The oldest host that may upgrade to this minor (major.minor.patch). */
  minimumHost: string;
  /** Hosts at or above this cannot downgrade to this minor. */
  maximumHostDowngrade: string;
  /** Kubernetes versions the minor supports, inclusive (x.y.99: any patch of x.y). */
  kubernetes: [string, string];
}

/** By target `major.minor`. */
export const TALOS_COMPATIBILITY: Readonly<Record<string, Compatibility>> = {
  '1.11': { minimumHost: '1.9.0', maximumHostDowngrade: '1.13.0', kubernetes: ['1.29.0', '1.34.99'] },
  '1.12': { minimumHost: '1.10.0', maximumHostDowngrade: '1.14.0', kubernetes: ['1.30.0', '1.35.99'] },
  '1.13': { minimumHost: '1.11.0', maximumHostDowngrade: '1.15.0', kubernetes: ['1.31.0', '1.36.99'] },
  '1.14': { minimumHost: '1.12.0', maximumHostDowngrade: '1.16.0', kubernetes: ['1.32.0', '1.37.99'] },
  '1.15': { minimumHost: '1.13.0', maximumHostDowngrade: '1.17.0', kubernetes: ['1.33.0', '1.38.99'] },
};

const core = (v: TalosVersionNumber) => [v.major, v.minor, v.patch] as const;
const compare = (a: readonly number[], b: readonly number[]) =>
  (a[0] ?? 0) - (b[0] ?? 0) || (a[1] ?? 0) - (b[1] ?? 0) || (a[2] ?? 0) - (b[2] ?? 0);
const triple = (text: string): number[] => text.replace(/^v/, '').split(/[.+-]/).slice(0, 3).map(Number);

/**
 * Why a node running Talos `host` (and the kubelet `kubelet`, e.g. v1.35.2) cannot upgrade
 * to `target`, in words; undefined when it can, or when the table does not know the target.
 */
export function upgradePathProblem(
  target: string,
  host: TalosVersionNumber | undefined,
  kubelet: string | undefined,
): string | undefined {
  const to = parseTalosVersion(target);
  if (!to) return undefined;
  const facts = TALOS_COMPATIBILITY[`${String(to.major)}.${String(to.minor)}`];
  if (!facts) return undefined;
  const minor = `${String(to.major)}.${String(to.minor)}`;
  if (host) {
    if (compare(core(host), triple(facts.minimumHost)) < 0)
      return `Talos ${formatTalosVersion(host)} is too old to upgrade to ${target}: Talos ${minor} needs a host of v${facts.minimumHost} or later (upgrade to an intermediate version first)`;
    if (compare(core(host), triple(facts.maximumHostDowngrade)) >= 0)
      return `Talos ${formatTalosVersion(host)} is too new to downgrade to ${target}: Talos ${minor} accepts hosts below v${facts.maximumHostDowngrade}`;
  }
  if (kubelet) {
    const k = triple(kubelet).slice(0, 2);
    const [low, high] = facts.kubernetes.map((v) => triple(v).slice(0, 2)) as [number[], number[]];
    if (k.length === 2 && !k.some(Number.isNaN) && (compare(k, low) < 0 || compare(k, high) > 0))
      return `Kubernetes ${kubelet} is not supported by Talos ${minor} (${String(low[0])}.${String(low[1])}–${String(high[0])}.${String(high[1])}): upgrade Kubernetes first, or choose another Talos version`;
  }
  return undefined;
}
