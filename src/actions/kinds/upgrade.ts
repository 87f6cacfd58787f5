// Upgrade: the node installs another Talos version and boots into it.
import {
  compareTalosVersions,
  formatTalosVersion,
  installerVersion,
  talosVersionFromOsImage,
} from '../../talos/version.ts';
import { upgradeSteps } from '../../talos/plan.ts';
import { THROUGH_TALOS, type ActionKind } from './kind.ts';

export const upgrade: ActionKind = {
  preHookKind: 'PreUpgradeJob',
  managed: { by: 'talos', steps: upgradeSteps },
  noDrain: () => undefined,
  etcdGuard: () => true,
  etcdMember: () => 'down',
  cordonAtEnd: 'lift',
  // Talos upgrades always reboot into the new image, staged ones included.
  completion: () => 'reboot',
  // A Managed upgrade whose node came back running another version than the installer's:
  // Talos boots the previous version when the new one fails.
  missed: (spec, status, node) => {
    // Managed: once the call was made. External: the requester's image is known too, and
    // a node back on the old version is as much a failed upgrade.
    if (status.execution?.callTime === undefined && spec.execution !== 'External') return undefined;
    const wanted = installerVersion(spec.upgrade?.image ?? '');
    const running = talosVersionFromOsImage(node.osImage);
    if (!wanted || !running || compareTalosVersions(wanted, running) === 0) return undefined;
    return `node ${node.name} came back running Talos ${formatTalosVersion(running)}, not ${formatTalosVersion(wanted)}: the upgrade did not take (Talos boots the previous version when the new one fails)`;
  },
  words: { perform: 'perform the Upgrade of', managed: THROUGH_TALOS, done: 'upgrade done' },
  targetImage: (spec) => spec.upgrade?.image,
};
