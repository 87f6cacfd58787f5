// Reading what a Node says about its boots: the preready taint, the boot record and the
// announcement (the two annotations of src/api/boot-record.ts), and what a record means
// for the hooks that select the node now. Pure; shared by the boot reconciler and by the
// action reconciler, which waits on the record of the boot its action caused.
import Schema from 'typebox/schema';
import { BootAnnouncement, BootRecord, type BootStage } from '../api/boot-record.ts';
import type { HookKindName } from '../api/hooks.ts';
import { BOOT_ANNOUNCEMENT_ANNOTATION, BOOT_RECORD_ANNOTATION, PREREADY_TAINT } from '../api/names.ts';
import type { HookRunRecord } from '../hooks/plan.ts';
import type { HookObject } from '../hooks/select.ts';

/** The hook kinds that run on a boot, owned by the boot reconciler. */
export const BOOT_HOOK_KINDS: ReadonlySet<HookKindName> = new Set(['NodePrereadyJob', 'NodeReadyJob']);

export function isBootHookKind(kind: HookKindName): boolean {
  return BOOT_HOOK_KINDS.has(kind);
}

export interface Taint {
  key: string;
  value?: string;
  effect: string;
  timeAdded?: string;
}

/** A Node as the boot code reads it (the informer's object). */
export interface BootNodeObject {
  metadata: {
    name: string;
    uid?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
  };
  spec?: { taints?: Taint[] };
  status?: {
    nodeInfo?: { bootID?: string };
    conditions?: { type: string; status: string }[];
  };
}

/** What the annotations and taints of a Node say about its boots. */
export interface BootAnnotations {
  /** The node carries the preready taint (any effect). */
  prereadyTaint: boolean;
  /** The boot record; undefined when absent or not valid. */
  record?: BootRecord;
  /** The announcement of a coming boot; undefined when absent or not valid. */
  announcement?: BootAnnouncement;
  /** Annotations present but not understood (treated as absent, which keeps the taint on). */
  invalid: string[];
}

export function hasPrereadyTaint(taints: readonly Taint[] | undefined): boolean {
  return (taints ?? []).some((t) => t.key === PREREADY_TAINT);
}

/** The taints with the preready taint added (NoSchedule), or removed. */
export function withPrereadyTaint(taints: readonly Taint[] | undefined, present: boolean): Taint[] {
  const others = (taints ?? []).filter((t) => t.key !== PREREADY_TAINT);
  return present ? [...others, { key: PREREADY_TAINT, effect: 'NoSchedule' }] : others;
}

function parse<T>(
  text: string | undefined,
  check: (value: unknown) => value is T,
): T | 'invalid' | undefined {
  if (text === undefined) return undefined;
  try {
    const value: unknown = JSON.parse(text);
    return check(value) ? value : 'invalid';
  } catch {
    return 'invalid';
  }
}

const isRecord = (value: unknown): value is BootRecord => Schema.Check(BootRecord, value);
const isAnnouncement = (value: unknown): value is BootAnnouncement => Schema.Check(BootAnnouncement, value);

export function readBootAnnotations(node: BootNodeObject): BootAnnotations {
  const annotations = node.metadata.annotations ?? {};
  const record = parse(annotations[BOOT_RECORD_ANNOTATION], isRecord);
  const announcement = parse(annotations[BOOT_ANNOUNCEMENT_ANNOTATION], isAnnouncement);
  return {
    prereadyTaint: hasPrereadyTaint(node.spec?.taints),
    ...(record && record !== 'invalid' ? { record } : {}),
    ...(announcement && announcement !== 'invalid' ? { announcement } : {}),
    invalid: [
      ...(record === 'invalid' ? [BOOT_RECORD_ANNOTATION] : []),
      ...(announcement === 'invalid' ? [BOOT_ANNOUNCEMENT_ANNOTATION] : []),
    ],
  };
}

export function bootIDOf(node: BootNodeObject): string | undefined {
  return node.status?.nodeInfo?.bootID || undefined;
}

export function isNodeReady(node: BootNodeObject): boolean {
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export function emptyStage(): BootStage {
  return { phase: 'Pending', hooks: [], runs: [] };
}

/**
 * Whether a stage is done for these hooks (the ones that select the node now): it
 * succeeded, and its completion covers every one of them. A hook created after the
 * stage finished — or deleted and created again, which gives it a new UID — is not
 * covered, so the stage is not done until it ran too. A hook deleted since does not
 * matter.
 */
export function stageDone(stage: BootStage | undefined, hooks: readonly HookObject[]): boolean {
  if (stage?.phase !== 'Succeeded') return false;
  const covered = new Set(stage.hooks);
  return hooks.every((h) => covered.has(h.metadata.uid));
}

/** Where the boot hooks of one boot stand, as the record on the node says, for the hooks selecting it now. */
export interface BootOutcome {
  state: 'Waiting' | 'Running' | 'Succeeded' | 'Failed';
  message: string;
  /** The runs of both stages for that boot (NodePrereadyJobs first). */
  runs: HookRunRecord[];
}

export function bootOutcome(
  record: BootRecord | undefined,
  bootID: string | undefined,
  prereadyHooks: readonly HookObject[],
  readyHooks: readonly HookObject[],
): BootOutcome {
  const count = prereadyHooks.length + readyHooks.length;
  if (count === 0) return { state: 'Succeeded', message: 'no boot hooks select the node', runs: [] };
  if (!record || bootID === undefined || record.bootID !== bootID) {
    return {
      state: 'Waiting',
      message: `waiting for the boot hooks of boot ${bootID ?? '?'} to start`,
      runs: [],
    };
  }
  const runs = [...record.preready.runs, ...record.ready.runs];
  if (record.preready.phase === 'Failed')
    return { state: 'Failed', message: `NodePrereadyJobs: ${record.preready.message ?? 'failed'}`, runs };
  if (!stageDone(record.preready, prereadyHooks)) {
    const doing =
      record.preready.phase === 'Pending' ? 'not started' : (record.preready.message ?? 'running');
    return { state: 'Running', message: `NodePrereadyJobs: ${doing}`, runs };
  }
  if (record.ready.phase === 'Failed')
    return { state: 'Failed', message: `NodeReadyJobs: ${record.ready.message ?? 'failed'}`, runs };
  if (!stageDone(record.ready, readyHooks)) {
    const doing =
      record.ready.phase === 'Pending'
        ? 'waiting for the node to be Ready without the preready taint'
        : (record.ready.message ?? 'running');
    return { state: 'Running', message: `NodeReadyJobs: ${doing}`, runs };
  }
  return { state: 'Succeeded', message: `${count} boot hook${count === 1 ? '' : 's'} done`, runs };
}
