// What a simulated node does with a machine configuration applied to it, per Talos
// version, as Talos's ApplyConfiguration handler and runtime decide (read from
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go and
// internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go, v1.11–v1.14):
//
// - up to 1.14.0-alpha.1, a change can be applied live only when the v1alpha1 document
//   differs in nothing but the parts CanApplyImmediate lists (LIVE_V1ALPHA1 below; other
//   documents are never compared). NO_REBOOT and TRY of any other change are refused
//   (InvalidArgument, with the diff); AUTO turns it into REBOOT.
// - from 1.14.0-alpha.2, REBOOT is refused (Unimplemented) and AUTO is NO_REBOOT: the
//   configuration is applied to the running node, and what the running node only reads
//   at boot (BOOT_ONLY below, from Talos's own list of "changes which might need a
//   reboot") waits for the next one. From 1.14.0-beta.0 a change of what makes up CRI's
//   configuration (CRICustomizationConfig documents, the legacy
//   /etc/cri/conf.d/20-customization.part machine file, the base runtime spec, registry
//   credentials) restarts CRI: every container on the node restarts, the node stays up.
//
// Pure: the simulator keeps the texts on the Node and plays the outcome.
import { parseAllDocuments } from 'yaml';
import { compareTalosVersions, type TalosVersionNumber } from '../src/talos/version.ts';

/** The v1alpha1 parts Talos ≤ 1.13 applies live (CanApplyImmediate): everything else needs a reboot. */
const LIVE_V1ALPHA1 = {
  root: ['debug', 'cluster'],
  machine: [
    'ca',
    'acceptedCAs',
    'time',
    'certSANs',
    'install',
    'network',
    'sysfs',
    'sysctls',
    'logging',
    'controlPlane',
    'kubelet',
    'kernel',
    'registries',
    'pods',
    'seccompProfiles',
    'nodeAnnotations',
    'nodeLabels',
    'nodeTaints',
  ],
  features: ['kubernetesTalosAPIAccess', 'kubePrism', 'hostDNS', 'imageCache', 'nodeAddressSortAlgorithm'],
} as const;

/** The legacy CRI customization Talos 1.14 reads from machine.files. */
const LEGACY_CRI_PART = '/etc/cri/conf.d/20-customization.part';

const FIRST_LIVE_ONLY: TalosVersionNumber = { major: 1, minor: 14, patch: 0, prerelease: 'alpha.2' };
const FIRST_CRI_RESTART: TalosVersionNumber = { major: 1, minor: 14, patch: 0, prerelease: 'beta.0' };

export type ApplyModeName = 'REBOOT' | 'AUTO' | 'NO_REBOOT' | 'STAGED' | 'TRY';

export interface ParsedMachineConfig {
  text: string;
  v1alpha1: Record<string, unknown>;
  /** The other documents (multi-document configuration), as parsed. */
  documents: Record<string, unknown>[];
}

export type ApplyOutcome =
  | { refused: true; code: 'INVALID_ARGUMENT' | 'UNIMPLEMENTED'; message: string }
  | {
      refused: false;
      /** The mode Talos answers with. */
      mode: Exclude<ApplyModeName, 'AUTO'>;
      modeDetails: string;
      /** What Talos's log line names the mode (`auto(no_reboot)`). */
      logged: string;
      /** Set the running configuration now. */
      live: boolean;
      /** Keep it for the next boot. */
      persist: boolean;
      /** Reboot now (≤ 1.13, REBOOT or AUTO of a change that needs one). */
      reboot: boolean;
      /** Restart CRI (1.14 from beta.0, live modes only): every container on the node restarts. */
      restartsCri: boolean;
      /** What the running node takes only at its next boot (1.14): paths, for the reply's words. */
      atNextBoot: string[];
    };

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses a machine configuration as Talos's config loader would refuse it, or throws with Talos's words. */
export function parseMachineConfig(text: string): ParsedMachineConfig {
  const docs = parseAllDocuments(text);
  const broken = docs.flatMap((d) => d.errors);
  if (text.trim() === '' || broken.length > 0)
    throw new Error(`failed to parse config: ${broken[0]?.message ?? 'the configuration is empty'}`);
  const values = docs.map((d) => d.toJS() as unknown).filter(isObject);
  const v1alpha1 = values.find((d) => d.version === 'v1alpha1' && d.kind === undefined);
  if (!v1alpha1 || !isObject(v1alpha1.machine))
    throw new Error(
      "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?",
    );
  return { text, v1alpha1, documents: values.filter((d) => d !== v1alpha1) };
}

/** The configuration a simulated node runs before anything was applied to it. */
export function defaultMachineConfig(controlPlane: boolean): string {
  return `version: v1alpha1\nmachine:\n  type: ${controlPlane ? 'controlplane' : 'worker'}\ncluster:\n  clusterName: sandbox\n`;
}

function without(value: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(value).filter(([k]) => !keys.includes(k)));
}

/** The v1alpha1 document with what ≤ 1.13 applies live taken out: what must not differ. */
function rebootRelevant(doc: Record<string, unknown>): Record<string, unknown> {
  const machine = isObject(doc.machine) ? doc.machine : {};
  const stripped = without(machine, LIVE_V1ALPHA1.machine);
  // Talos copies the feature flags over only when both configurations have features.
  return { ...without(doc, LIVE_V1ALPHA1.root), machine: stripped };
}

function stripFeatures(
  current: Record<string, unknown>,
  next: Record<string, unknown>,
): [Record<string, unknown>, Record<string, unknown>] {
  const a = rebootRelevant(current);
  const b = rebootRelevant(next);
  const fa = (a.machine as Record<string, unknown>).features;
  const fb = (b.machine as Record<string, unknown>).features;
  if (isObject(fa) && isObject(fb)) {
    (a.machine as Record<string, unknown>).features = without(fa, LIVE_V1ALPHA1.features);
    (b.machine as Record<string, unknown>).features = without(fb, LIVE_V1ALPHA1.features);
  }
  return [a, b];
}

/** Canonical JSON (sorted keys): equal values, equal text. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (isObject(value))
    return `{${Object.keys(value)
      .sort()
      .filter((k) => value[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
      .join(',')}}`;
  return JSON.stringify(value ?? null);
}

/** The top-level paths in which two canonical objects differ (`machine.env`, `cluster`). */
function differingPaths(a: Record<string, unknown>, b: Record<string, unknown>, prefix = ''): string[] {
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
  return keys.flatMap((k) => {
    const [x, y] = [a[k], b[k]];
    if (canonical(x) === canonical(y)) return [];
    if (prefix === '' && k === 'machine' && isObject(x) && isObject(y))
      return differingPaths(x, y, 'machine.');
    return [`${prefix}${k}`];
  });
}

/** Talos ≤ 1.13's CanApplyImmediate: the paths that keep a change from being applied live. */
export function immediateBlockers(current: ParsedMachineConfig, next: ParsedMachineConfig): string[] {
  const [a, b] = stripFeatures(current.v1alpha1, next.v1alpha1);
  return differingPaths(a, b);
}

const documentsOfKind = (config: ParsedMachineConfig, kind: string) =>
  config.documents.filter((d) => d.kind === kind);

/** What makes up CRI's configuration on Talos 1.14 (cri.toml and base-spec.json). */
export function criInputs(config: ParsedMachineConfig): string {
  const machine = isObject(config.v1alpha1.machine) ? config.v1alpha1.machine : {};
  const files = Array.isArray(machine.files) ? machine.files : [];
  const registries = isObject(machine.registries) ? machine.registries : {};
  const registryConfig = isObject(registries.config) ? registries.config : {};
  const auths = Object.fromEntries(
    Object.entries(registryConfig).map(([host, c]) => [host, isObject(c) ? c.auth : undefined]),
  );
  return canonical({
    customizations: documentsOfKind(config, 'CRICustomizationConfig'),
    legacyPart: files.filter((f) => isObject(f) && f.path === LEGACY_CRI_PART),
    baseRuntimeSpec: documentsOfKind(config, 'CRIBaseRuntimeSpecConfig'),
    baseRuntimeSpecOverrides: machine.baseRuntimeSpecOverrides,
    registryAuths: auths,
    registryAuthDocuments: documentsOfKind(config, 'RegistryAuthConfig'),
  });
}

/**
 * What Talos 1.14 reads only when a service starts, so a running node takes it at its
 * next boot: etcd's settings, environment variables, kernel modules, workload isolation.
 */
export function bootOnlyChanges(current: ParsedMachineConfig, next: ParsedMachineConfig): string[] {
  const pick = (c: ParsedMachineConfig) => {
    const cluster = isObject(c.v1alpha1.cluster) ? c.v1alpha1.cluster : {};
    const machine = isObject(c.v1alpha1.machine) ? c.v1alpha1.machine : {};
    const kernel = isObject(machine.kernel) ? machine.kernel : {};
    return {
      'cluster.etcd': cluster.etcd,
      'machine.env': machine.env,
      EnvironmentConfig: documentsOfKind(c, 'EnvironmentConfig'),
      'machine.kernel.modules': kernel.modules,
      KernelModuleConfig: documentsOfKind(c, 'KernelModuleConfig'),
      SecurityProfileConfig: documentsOfKind(c, 'SecurityProfileConfig'),
    };
  };
  const [a, b] = [pick(current), pick(next)];
  return Object.keys(a).filter(
    (k) => canonical(a[k as keyof typeof a]) !== canonical(b[k as keyof typeof b]),
  );
}

/**
 * What ApplyConfiguration in `requested` mode does on a node running `version`, whose
 * running configuration is `current`. Maintenance mode is not modelled (the simulated
 * nodes are cluster members).
 */
export function decideApply(
  version: TalosVersionNumber,
  requested: ApplyModeName,
  current: ParsedMachineConfig,
  next: ParsedMachineConfig,
): ApplyOutcome {
  const liveOnly = compareTalosVersions(version, FIRST_LIVE_ONLY) >= 0;
  const done = (
    mode: Exclude<ApplyModeName, 'AUTO'>,
    modeDetails: string,
    effects: { live: boolean; persist: boolean; reboot?: boolean },
  ): ApplyOutcome => {
    const restartsCri =
      effects.live &&
      compareTalosVersions(version, FIRST_CRI_RESTART) >= 0 &&
      criInputs(current) !== criInputs(next);
    return {
      refused: false,
      mode,
      modeDetails,
      logged: requested === 'AUTO' ? `auto(${mode.toLowerCase()})` : mode.toLowerCase(),
      live: effects.live,
      persist: effects.persist,
      reboot: effects.reboot ?? false,
      restartsCri,
      atNextBoot: liveOnly && effects.live ? bootOnlyChanges(current, next) : [],
    };
  };
  if (liveOnly) {
    switch (requested) {
      case 'REBOOT':
        return {
          refused: true,
          code: 'UNIMPLEMENTED',
          message: 'the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead',
        };
      case 'AUTO':
      case 'NO_REBOOT':
        return done('NO_REBOOT', 'Applied configuration without a reboot', { live: true, persist: true });
      case 'TRY':
        return done('TRY', 'Applied configuration without a reboot', { live: true, persist: false });
      case 'STAGED':
        return done('STAGED', 'Staged configuration to be applied after the next reboot', {
          live: false,
          persist: true,
        });
    }
  }
  const blockers = immediateBlockers(current, next);
  const refusal = `this config change can't be applied in immediate mode\ndiff:\n${blockers.map((p) => `  ${p} differs`).join('\n')}`;
  switch (requested) {
    case 'REBOOT':
      return done('REBOOT', 'Applied configuration with a reboot', {
        live: false,
        persist: true,
        reboot: true,
      });
    case 'AUTO':
      return blockers.length > 0
        ? done('REBOOT', `Applied configuration with a reboot: ${refusal}`, {
            live: false,
            persist: true,
            reboot: true,
          })
        : done('NO_REBOOT', 'Applied configuration without a reboot', { live: true, persist: true });
    case 'NO_REBOOT':
    case 'TRY':
      if (blockers.length > 0) return { refused: true, code: 'INVALID_ARGUMENT', message: refusal };
      return requested === 'TRY'
        ? done('TRY', 'Applied configuration without a reboot', { live: true, persist: false })
        : done('NO_REBOOT', 'Applied configuration without a reboot', { live: true, persist: true });
    case 'STAGED':
      return done('STAGED', 'Staged configuration to be applied after the next reboot', {
        live: false,
        persist: true,
      });
  }
}

/** Go's time.Duration.String() for whole seconds and milliseconds, as Talos prints the try timeout. */
export function goDuration(ms: number): string {
  if (ms < 1000) return `${String(ms)}ms`;
  const total = ms / 1000;
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const sec = `${Number.isInteger(s) ? String(s) : s.toFixed(3).replace(/0+$/, '')}s`;
  if (h > 0) return `${String(h)}h${String(m)}m${sec}`;
  if (m > 0) return `${String(m)}m${sec}`;
  return sec;
}
