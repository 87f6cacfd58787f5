// What a machine configuration change does to a running Talos node, per version: the
// table the classifier (config-disruption.ts) reads, kept as data so that a new Talos
// fact is one line here. Source of the facts, checked against the Talos sources (late
// 2026) and kept in agreement with the sandbox's simulator (sandbox/talos-machine-config.ts,
// test/unit/talos-config-disruption.test.ts compares them):
//
// - Talos ≤ 1.13 (up to 1.14.0-alpha.1): ApplyConfiguration applies a change live only
//   when the v1alpha1 document differs in nothing but what CanApplyImmediate lists
//   (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go); any other v1alpha1
//   difference needs a reboot (AUTO reboots, NO_REBOOT/TRY are refused). Other documents
//   are never compared: they apply live.
// - Talos ≥ 1.14.0-alpha.2: everything applies live (AUTO is NO_REBOOT, REBOOT refused);
//   what the running node reads only when a service starts (Talos's own list of "changes
//   which might need a reboot": etcd's settings, environment, kernel modules, workload
//   isolation) waits for the next boot.
// - Talos ≥ 1.14.0-beta.0: a change of what makes up CRI's configuration (CRI
//   customization documents, files under /etc/cri/conf.d, the base runtime spec and its
//   overrides, registry credentials) restarts CRI: every container on the node restarts,
//   the node stays up (../shared/LANDSCAPE.md, "More Talos facts").
// - What the live parts restart: Talos's controllers re-render and restart the kubelet on
//   a change of its configuration (pods keep running), re-render the control-plane static
//   pods on a change of `cluster`, reconfigure the network, time sync and static pods in
//   place; node labels, annotations and taints are written to the Node through the API.
import type { DisruptionClass } from '../api/node-action.ts';
import type { TalosVersionNumber } from './version.ts';

/** Where these facts come from, as the classifier's messages name it. */
export const CONFIG_DISRUPTION_SOURCE =
  "Talos's ApplyConfiguration and CanApplyImmediate (v1.11-v1.14), as src/talos/config-disruption-facts.ts records them";

/** From this version everything applies live (AUTO never reboots). */
export const FIRST_LIVE_ONLY: TalosVersionNumber = { major: 1, minor: 14, patch: 0, prerelease: 'alpha.2' };
/** From this version a change of CRI's configuration restarts CRI. */
export const FIRST_CRI_RESTART: TalosVersionNumber = { major: 1, minor: 14, patch: 0, prerelease: 'beta.0' };

/**
 * What a change of one configuration path does, on a running node.
 * - `Reboot` on ≤ 1.13: the path is not one CanApplyImmediate lets through.
 * - `NextBoot` on 1.14: applied to the configuration, read only when the service starts:
 *   nothing restarts now (class None), the next boot takes it.
 */
export interface PathFact {
  /**
   * A v1alpha1 path (`machine.kubelet`; `*` matches one key: `machine.registries.config.*.auth`),
   * a machine file (`machine.files[/etc/cri/conf.d/]`, a prefix of the file's path), or
   * another document (`kind:CRICustomizationConfig`). The most specific match decides.
   */
  path: string;
  /** Talos ≤ 1.13 (up to 1.14.0-alpha.1). */
  upTo113: DisruptionClass;
  /** Talos ≥ 1.14.0-alpha.2 (CRIRestart from 1.14.0-beta.0; before it, such a change waits for the next boot). */
  from114: DisruptionClass | 'NextBoot';
  /** Why, in a few words (for the action's status). */
  why: string;
}

const live = (path: string, cls: DisruptionClass, why: string): PathFact => ({
  path,
  upTo113: cls,
  from114: cls,
  why,
});

/**
 * The table. A difference no entry matches is unknown, and counts as the most disruptive
 * class the mode allows on the version (config-disruption.ts). On ≤ 1.13 a v1alpha1 path
 * outside CanApplyImmediate needs a reboot whether listed or not (Talos's rule is a list
 * of what may change live); the entries with `upTo113: 'Reboot'` say what 1.14 does instead.
 */
export const PATH_FACTS: readonly PathFact[] = [
  // CanApplyImmediate's list (what ≤ 1.13 applies live), with what each restarts.
  live('debug', 'None', 'console debugging only'),
  live('cluster', 'ServiceRestart', 'control-plane static pods re-rendered and restarted'),
  {
    path: 'cluster.etcd',
    upTo113: 'None',
    from114: 'NextBoot',
    why: 'etcd reads its settings when it starts',
  },
  live('machine.ca', 'ServiceRestart', 'Talos API certificates issued again (apid, trustd)'),
  live('machine.acceptedCAs', 'ServiceRestart', 'Talos API certificates issued again (apid, trustd)'),
  live('machine.certSANs', 'ServiceRestart', 'Talos API certificates issued again (apid, trustd)'),
  live('machine.time', 'ServiceRestart', 'time synchronisation restarted'),
  live('machine.install', 'None', 'used by the next install or upgrade'),
  live('machine.network', 'ServiceRestart', 'network reconfigured in place (links, addresses, routes)'),
  live('machine.sysfs', 'None', 'written in place'),
  live('machine.sysctls', 'None', 'written in place'),
  live('machine.logging', 'None', 'log destinations changed in place'),
  live('machine.controlPlane', 'ServiceRestart', 'control-plane static pods re-rendered'),
  live('machine.kubelet', 'ServiceRestart', 'kubelet restarted; pods keep running'),
  { path: 'machine.kernel', upTo113: 'None', from114: 'NextBoot', why: 'kernel modules load at boot' },
  live('machine.registries', 'None', 'registry mirrors and TLS read on each pull'),
  {
    path: 'machine.registries.config.*.auth',
    upTo113: 'None',
    from114: 'CRIRestart',
    why: "registry credentials are part of CRI's configuration",
  },
  live('machine.pods', 'ServiceRestart', 'static pods created, replaced or removed by the kubelet'),
  live('machine.seccompProfiles', 'None', 'profiles written in place'),
  live('machine.nodeAnnotations', 'None', 'written to the Node through the Kubernetes API'),
  live('machine.nodeLabels', 'None', 'written to the Node through the Kubernetes API'),
  live('machine.nodeTaints', 'None', 'written to the Node through the Kubernetes API'),
  live('machine.features.kubernetesTalosAPIAccess', 'None', 'an API access rule'),
  live('machine.features.kubePrism', 'ServiceRestart', 'the KubePrism load balancer restarted'),
  live('machine.features.hostDNS', 'ServiceRestart', 'the host DNS resolver restarted'),
  live('machine.features.imageCache', 'None', 'the image cache configured in place'),
  live('machine.features.nodeAddressSortAlgorithm', 'None', 'node addresses sorted again'),
  // What ≤ 1.13 reboots for, and 1.14 applies live.
  {
    path: 'machine.baseRuntimeSpecOverrides',
    upTo113: 'Reboot',
    from114: 'CRIRestart',
    why: "the base runtime spec is part of CRI's configuration",
  },
  {
    path: 'machine.files[/etc/cri/conf.d/]',
    upTo113: 'Reboot',
    from114: 'CRIRestart',
    why: 'a CRI customization file (/etc/cri/conf.d)',
  },
  {
    path: 'machine.env',
    upTo113: 'Reboot',
    from114: 'NextBoot',
    why: 'services read their environment when they start',
  },
  // Documents beside v1alpha1 (≤ 1.13 never compares them: they apply live).
  {
    path: 'kind:CRICustomizationConfig',
    upTo113: 'None',
    from114: 'CRIRestart',
    why: "CRI customization is part of CRI's configuration",
  },
  {
    path: 'kind:CRIBaseRuntimeSpecConfig',
    upTo113: 'None',
    from114: 'CRIRestart',
    why: "the base runtime spec is part of CRI's configuration",
  },
  {
    path: 'kind:RegistryAuthConfig',
    upTo113: 'None',
    from114: 'CRIRestart',
    why: "registry credentials are part of CRI's configuration",
  },
  {
    path: 'kind:EnvironmentConfig',
    upTo113: 'None',
    from114: 'NextBoot',
    why: 'services read their environment when they start',
  },
  {
    path: 'kind:KernelModuleConfig',
    upTo113: 'None',
    from114: 'NextBoot',
    why: 'kernel modules load at boot',
  },
  {
    path: 'kind:SecurityProfileConfig',
    upTo113: 'None',
    from114: 'NextBoot',
    why: 'workload isolation is set up at boot',
  },
];

/**
 * The v1alpha1 parts Talos ≤ 1.13 applies live (CanApplyImmediate); every other v1alpha1
 * difference needs a reboot there. `machine.features.*` entries are the feature flags it
 * lets through when both configurations have a `features` section.
 */
export const LIVE_UP_TO_113: readonly string[] = PATH_FACTS.filter(
  (f) => !f.path.startsWith('kind:') && f.upTo113 !== 'Reboot' && !f.path.includes('*'),
).map((f) => f.path);
