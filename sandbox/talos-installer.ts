// The installer's pre-flight check of the upgrade path, as Talos's compatibility tables
// state it (pkg/machinery/compatibility/talos1*/: per target minor, the oldest host it
// upgrades from and the first host too new to downgrade from), with
// TalosVersion.UpgradeableFrom's words. Patch releases and prereleases of a host count
// by their major.minor.patch.
import { formatTalosVersion, type TalosVersionNumber } from '../src/talos/version.ts';

/** Target minor → [oldest host, first host too new], as major.minor.patch. */
const PATHS: Record<number, [[number, number, number], [number, number, number]]> = {
  10: [
    [1, 8, 0],
    [1, 12, 0],
  ],
  11: [
    [1, 9, 0],
    [1, 13, 0],
  ],
  12: [
    [1, 10, 0],
    [1, 14, 0],
  ],
  13: [
    [1, 11, 0],
    [1, 15, 0],
  ],
  14: [
    [1, 12, 0],
    [1, 16, 0],
  ],
};

const core = (v: TalosVersionNumber): [number, number, number] => [v.major, v.minor, v.patch];
const compare = (a: [number, number, number], b: [number, number, number]) =>
  a[0] - b[0] || a[1] - b[1] || a[2] - b[2];

/** Why an installer of `target` refuses a host running `host`, or undefined. */
export function upgradePathProblem(host: TalosVersionNumber, target: TalosVersionNumber): string | undefined {
  const path = target.major === 1 ? PATHS[target.minor] : undefined;
  const [h, t] = [formatTalosVersion(host).slice(1), formatTalosVersion(target).slice(1)];
  if (!path) return `upgrades to version ${t} are not supported`;
  if (compare(core(host), path[0]) < 0) return `host version ${h} is too old to upgrade to Talos ${t}`;
  if (compare(core(host), path[1]) >= 0) return `host version ${h} is too new to downgrade to Talos ${t}`;
  return undefined;
}
