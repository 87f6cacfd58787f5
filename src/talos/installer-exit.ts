// What the Talos installer's exit code says (LifecycleService.Upgrade streams it last).
// From Talos 1.14.0-alpha.2 the installer exits with a code per kind of failure, stable
// across releases "and may be relied on by automation" (pkg/machinery/constants:
// ExitSuccess … ExitInstall, resolved by pkg/installer/exitcode); before, every failure
// is 1. The code comes from the installer image being installed, so its version is the
// target's, not the node's.
import { hasInstallerExitCodes, installerVersion } from './version.ts';

export interface InstallerExit {
  code: number;
  /** Talos's name for it. */
  name: string;
  /** What it means for the action, in words for its status. */
  meaning: string;
  /**
   * What gatehouse does: `never` — permanent, the action fails at once and is not tried
   * again; `pull` — the pull and the install are made again while the executing deadline
   * allows; `fail` — the action fails with the meaning.
   */
  then: 'never' | 'pull' | 'fail';
}

const EXITS: Record<number, Omit<InstallerExit, 'code'>> = {
  1: {
    name: 'unknown error',
    meaning: 'the installer failed for a reason it did not classify',
    then: 'fail',
  },
  2: {
    name: 'invalid input',
    meaning:
      'the installer refused its input (the image, its options or the configuration): permanent, not retried; fix the request',
    then: 'never',
  },
  3: {
    name: 'unsupported',
    meaning:
      'the installer does not support this operation for this version or platform: permanent, not retried',
    then: 'never',
  },
  4: {
    name: 'environment',
    meaning:
      "the installer's pre-flight checks failed on this node, e.g. its upgrade path (the node's Talos is too old or too new for this version: upgrade through an intermediate release)",
    then: 'fail',
  },
  5: {
    name: 'dependency',
    meaning:
      'an external dependency of the installer failed (e.g. an image pull): pulled and installed again within the executing deadline',
    then: 'pull',
  },
  6: { name: 'IO', meaning: 'a local filesystem or I/O failure on the node', then: 'fail' },
  7: { name: 'install', meaning: 'the installation failed after it had begun', then: 'fail' },
};

/**
 * The meaning of a non-zero exit code of the installer in `image` (its tag names its
 * version; a digest-only reference is read as a current installer).
 */
export function installerExit(code: number, image: string): InstallerExit {
  const version = installerVersion(image);
  if (version && !hasInstallerExitCodes(version))
    return {
      code,
      name: 'failure',
      meaning: 'installers before Talos 1.14 exit 1 on every failure: its output says why',
      then: 'fail',
    };
  const known = EXITS[code];
  return known
    ? { code, ...known }
    : { code, name: 'unknown code', meaning: 'an exit code the installer does not document', then: 'fail' };
}
