// How a machine configuration change disrupts a running Talos node: None, ServiceRestart,
// CRIRestart or Reboot, from the configuration paths that change and the facts of the
// node's Talos version (config-disruption-facts.ts), bounded by what the apply mode allows.
// Pure: the configurations are read elsewhere (config-disruption-read.ts) and given here.
//
//   classifyConfigChange({ mode: 'NoReboot', version: v1_14_0, current, next })
//   // → { class: 'CRIRestart', paths: ['machine.baseRuntimeSpecOverrides'], message: … }
import { parseAllDocuments } from 'yaml';
import { canonicalJson } from '../canonical-json.ts';
import {
  CONFIG_DISRUPTION_PATHS_LISTED,
  DISRUPTION_CLASSES,
  type DisruptionClass,
} from '../api/node-action.ts';
import {
  CONFIG_DISRUPTION_SOURCE,
  FIRST_CRI_RESTART,
  FIRST_LIVE_ONLY,
  LIVE_UP_TO_113,
  PATH_FACTS,
  type PathFact,
} from './config-disruption-facts.ts';
import { compareTalosVersions, formatTalosVersion, type TalosVersionNumber } from './version.ts';

export type ConfigChangeMode = 'Auto' | 'NoReboot' | 'Reboot' | 'Staged' | 'Try';

/** A class's rank: None 0 … Reboot 3. */
export const rank = (c: DisruptionClass): number => DISRUPTION_CLASSES.indexOf(c);
const higher = (a: DisruptionClass, b: DisruptionClass) => (rank(a) >= rank(b) ? a : b);

/** The classes a mode allows on a version: the least and the most disruptive, and why. */
export interface ModeBounds {
  floor: DisruptionClass;
  ceiling: DisruptionClass;
  why: string;
}

type Era = 'upTo113' | 'from114';

function eraOf(version: TalosVersionNumber): Era {
  return compareTalosVersions(version, FIRST_LIVE_ONLY) >= 0 ? 'from114' : 'upTo113';
}

const restartsCri = (version: TalosVersionNumber | undefined) =>
  version === undefined || compareTalosVersions(version, FIRST_CRI_RESTART) >= 0;

/**
 * What the mode allows on the version (undefined: unknown, so any Talos): Reboot reboots
 * (on 1.14 gatehouse applies NO_REBOOT, then reboots); Staged changes nothing now; a live
 * mode restarts at most services before 1.14 (Talos refuses, or with AUTO reboots for, a
 * change it cannot apply live) and at most CRI from 1.14.0-beta.0.
 */
export function modeBounds(mode: ConfigChangeMode, version: TalosVersionNumber | undefined): ModeBounds {
  const on = version ? `Talos ${formatTalosVersion(version)}` : 'a node whose Talos version is unknown';
  if (mode === 'Reboot') return { floor: 'Reboot', ceiling: 'Reboot', why: 'mode Reboot reboots the node' };
  if (mode === 'Staged')
    return {
      floor: 'None',
      ceiling: 'None',
      why: 'mode Staged applies at the next boot, which this action does not cause',
    };
  const live: DisruptionClass = restartsCri(version) ? 'CRIRestart' : 'ServiceRestart';
  if (version === undefined)
    return {
      floor: 'None',
      ceiling: mode === 'Auto' ? 'Reboot' : live,
      why: `mode ${mode} on ${on} may ${mode === 'Auto' ? 'reboot it' : 'restart CRI'}`,
    };
  if (eraOf(version) === 'from114')
    return {
      floor: 'None',
      ceiling: live,
      why: `mode ${mode} never reboots ${on}${live === 'CRIRestart' ? ', and may restart CRI' : ''}`,
    };
  return mode === 'Auto'
    ? { floor: 'None', ceiling: 'Reboot', why: `mode Auto reboots ${on} for a change it cannot apply live` }
    : {
        floor: 'None',
        ceiling: 'ServiceRestart',
        why: `mode ${mode} applies live on ${on}, which refuses a change that needs a reboot`,
      };
}

// --- the differences -------------------------------------------------------------------

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

interface Parsed {
  v1alpha1: Record<string, unknown>;
  /** The other documents, by `kind:KIND` or `kind:KIND/NAME`. */
  documents: Map<string, unknown>;
}

/** Parses a (multi-document) machine configuration; throws naming what is wrong, never a value. */
export function parseConfiguration(text: string, what: string): Parsed {
  const docs = parseAllDocuments(text);
  if (docs.some((d) => d.errors.length > 0))
    throw new Error(`the ${what} machine configuration is not valid YAML`);
  const values = docs.map((d) => d.toJS() as unknown).filter(isObject);
  const v1alpha1 = values.find((d) => d.version === 'v1alpha1' && d.kind === undefined);
  if (!v1alpha1) throw new Error(`the ${what} machine configuration has no v1alpha1 document`);
  const documents = new Map<string, unknown>();
  for (const d of values) {
    if (d === v1alpha1) continue;
    const kind = typeof d.kind === 'string' ? d.kind : '?';
    const key = typeof d.name === 'string' ? `kind:${kind}/${d.name}` : `kind:${kind}`;
    documents.set(key, d);
  }
  return { v1alpha1, documents };
}

/** One difference: its path as segments (`['machine', 'kubelet', 'image']`), or a document key. */
type Difference = { segments: string[] } | { document: string };

function filesByPath(value: unknown): Map<string, unknown> {
  const files = new Map<string, unknown>();
  if (Array.isArray(value))
    for (const f of value) files.set(isObject(f) && typeof f.path === 'string' ? f.path : '?', f);
  return files;
}

/** The leaf paths in which two values differ; machine.files compared file by file. */
function differences(a: unknown, b: unknown, at: string[]): Difference[] {
  if (canonicalJson(a ?? null) === canonicalJson(b ?? null)) return [];
  if (at.length === 2 && at[0] === 'machine' && at[1] === 'files') {
    const [fa, fb] = [filesByPath(a), filesByPath(b)];
    return [...new Set([...fa.keys(), ...fb.keys()])]
      .filter((p) => canonicalJson(fa.get(p) ?? null) !== canonicalJson(fb.get(p) ?? null))
      .map((p) => ({ segments: [...at, `[${p}]`] }));
  }
  if ((isObject(a) || a === undefined) && (isObject(b) || b === undefined) && (isObject(a) || isObject(b))) {
    const oa: Record<string, unknown> = isObject(a) ? a : {};
    const ob: Record<string, unknown> = isObject(b) ? b : {};
    const within = [...new Set([...Object.keys(oa), ...Object.keys(ob)])]
      .sort()
      .flatMap((k) => differences(oa[k], ob[k], [...at, k]));
    // An empty section added or removed differs at its own path.
    return within.length > 0 ? within : [{ segments: at }];
  }
  return [{ segments: at }];
}

function documentDifferences(a: Parsed, b: Parsed): Difference[] {
  return [...new Set([...a.documents.keys(), ...b.documents.keys()])]
    .sort()
    .filter((k) => canonicalJson(a.documents.get(k) ?? null) !== canonicalJson(b.documents.get(k) ?? null))
    .map((document) => ({ document }));
}

// --- the facts of a difference -----------------------------------------------------------

/** How many segments of `segments` a fact path matches (0: none). */
function matchLength(fact: string, difference: Difference): number {
  if ('document' in difference) {
    return difference.document === fact || difference.document.startsWith(`${fact}/`) ? 1 : 0;
  }
  const file = /^machine\.files\[(.*)\]$/.exec(fact);
  const s = difference.segments;
  if (file) {
    const named = /^\[(.*)\]$/.exec(s[2] ?? '');
    return s[0] === 'machine' && s[1] === 'files' && named?.[1]?.startsWith(file[1] ?? '') ? 3 : 0;
  }
  const parts = fact.split('.');
  if (parts.length > s.length) return 0;
  return parts.every((p, i) => p === '*' || p === s[i]) ? parts.length : 0;
}

/** The most specific fact about a difference, if any. */
function factOf(difference: Difference): PathFact | undefined {
  let best: { fact: PathFact; length: number } | undefined;
  for (const fact of PATH_FACTS) {
    const length = matchLength(fact.path, difference);
    if (length > 0 && (!best || length > best.length)) best = { fact, length };
  }
  return best?.fact;
}

/** Whether ≤ 1.13 applies a v1alpha1 difference live (CanApplyImmediate). */
function liveUpTo113(segments: string[], features: boolean): boolean {
  return LIVE_UP_TO_113.some((p) => {
    const parts = p.split('.');
    if (parts[1] === 'features' && !features) return false;
    return parts.length <= segments.length && parts.every((x, i) => x === segments[i]);
  });
}

/** What one difference does on one era; undefined: unknown. */
interface Judged {
  class: DisruptionClass | undefined;
  /** The path shown: the fact's, or the difference's own (its first three segments). */
  path: string;
  why: string;
}

function judge(difference: Difference, version: TalosVersionNumber, features: boolean): Judged {
  const fact = factOf(difference);
  const shown =
    fact?.path ??
    ('document' in difference ? difference.document : difference.segments.slice(0, 3).join('.'));
  if (eraOf(version) === 'upTo113') {
    if ('segments' in difference && !liveUpTo113(difference.segments, features))
      return { class: 'Reboot', path: shown, why: 'not applied live before Talos 1.14 (CanApplyImmediate)' };
    return fact
      ? { class: fact.upTo113, path: shown, why: fact.why }
      : { class: undefined, path: shown, why: 'no fact known' };
  }
  if (!fact) return { class: undefined, path: shown, why: 'no fact known' };
  if (fact.from114 === 'NextBoot')
    return { class: 'None', path: shown, why: `${fact.why}: taken at the next boot` };
  if (fact.from114 === 'CRIRestart' && !restartsCri(version))
    return {
      class: 'None',
      path: shown,
      why: `${fact.why}: taken at the next boot before Talos 1.14.0-beta.0`,
    };
  return { class: fact.from114, path: shown, why: fact.why };
}

/** A version of the era before 1.14, to judge a difference as it would (unknown version). */
const LAST_BEFORE_LIVE: TalosVersionNumber = { major: 1, minor: 13, patch: 0, prerelease: '' };

// --- the classification -----------------------------------------------------------------

export interface ConfigChangeInput {
  mode: ConfigChangeMode;
  /** The node's Talos version (from its osImage); undefined: unknown. */
  version: TalosVersionNumber | undefined;
  /** The configuration the node runs, as read through the Talos API. */
  current: string;
  /** The configuration the change applies. */
  next: string;
}

export interface ConfigChangeClass {
  class: DisruptionClass;
  /** The paths that decided it (those of the highest class found), at most CONFIG_DISRUPTION_PATHS_LISTED. */
  paths: string[];
  message: string;
}

function listed(paths: readonly string[]): string {
  const shown = paths.slice(0, 5).join(', ');
  return paths.length > 5 ? `${shown} and ${String(paths.length - 5)} more` : shown;
}

/**
 * The class of a change: the highest class of its differences (an unknown one counts as
 * the mode's ceiling), held between the mode's floor and ceiling. Throws when a
 * configuration cannot be parsed (the caller falls back on the mode).
 */
export function classifyConfigChange(input: ConfigChangeInput): ConfigChangeClass {
  const { mode, version } = input;
  const bounds = modeBounds(mode, version);
  const current = parseConfiguration(input.current, "node's running");
  const next = parseConfiguration(input.next, 'new');
  const diffs = [...differences(current.v1alpha1, next.v1alpha1, []), ...documentDifferences(current, next)];
  const features =
    isObject((current.v1alpha1.machine as Record<string, unknown> | undefined)?.features) &&
    isObject((next.v1alpha1.machine as Record<string, unknown> | undefined)?.features);
  // An unknown version: judged as every era would, the most disruptive answer kept.
  const versions = version ? [version] : [LAST_BEFORE_LIVE, FIRST_CRI_RESTART];
  const judged = diffs.map((d) =>
    versions
      .map((v) => judge(d, v, features))
      .map((j) => ({ ...j, class: j.class ?? bounds.ceiling, unknown: j.class === undefined }))
      .reduce((a, b) => (rank(b.class) > rank(a.class) ? b : a)),
  );
  const on = version ? `Talos ${formatTalosVersion(version)}` : 'a Talos version unknown';
  if (judged.length === 0)
    return { class: bounds.floor, paths: [], message: `the configurations do not differ; ${bounds.why}` };
  const found = judged.map((j) => j.class).reduce(higher, 'None');
  const deciding = judged.filter((j) => j.class === found);
  const paths = [...new Set(deciding.map((j) => j.path))].slice(0, CONFIG_DISRUPTION_PATHS_LISTED);
  const reasons = [
    ...new Set(
      deciding.map((j) => (j.unknown ? 'no fact known: counted as the most the mode allows' : j.why)),
    ),
  ];
  let cls = found;
  let bound = '';
  if (rank(found) > rank(bounds.ceiling)) {
    cls = bounds.ceiling;
    bound = `; ${bounds.why}`;
  } else if (rank(found) < rank(bounds.floor)) {
    cls = bounds.floor;
    bound = `; ${bounds.why}`;
  }
  return {
    class: cls,
    paths,
    message:
      `${cls} on ${on}, mode ${mode}: ${listed(paths)} (${reasons.join('; ')})${bound}. Facts: ${CONFIG_DISRUPTION_SOURCE}`.slice(
        0,
        4096,
      ),
  };
}

/** The class of a change nothing can be compared for: the most disruptive the mode allows. */
export function classifyByMode(
  mode: ConfigChangeMode,
  version: TalosVersionNumber | undefined,
  why: string,
): ConfigChangeClass {
  const bounds = modeBounds(mode, version);
  return { class: bounds.ceiling, paths: [], message: `${bounds.ceiling}: ${why}; ${bounds.why}` };
}

/** A stated class (External), raised to the mode's floor when lower. */
export function classifyStated(
  mode: ConfigChangeMode,
  version: TalosVersionNumber | undefined,
  stated: DisruptionClass,
): ConfigChangeClass {
  const bounds = modeBounds(mode, version);
  if (rank(stated) < rank(bounds.floor))
    return {
      class: bounds.floor,
      paths: [],
      message: `${bounds.floor}: spec.configChange.disruptionClass states ${stated}, raised: ${bounds.why}`,
    };
  return { class: stated, paths: [], message: `${stated}: as spec.configChange.disruptionClass states it` };
}
