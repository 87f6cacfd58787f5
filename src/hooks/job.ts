// The Job of one hook run, built from the hook's template; and what an observed Job
// says about the run. Pure functions: the runner creates, the planner reads.
import { createHash } from 'node:crypto';
import type {
  V1Job,
  V1NodeSelectorRequirement,
  V1NodeSelectorTerm,
  V1OwnerReference,
} from '@kubernetes/client-node';
import type { Action } from '../api/common.ts';
import { HOOK_JOB_ANNOTATIONS, HOOK_JOB_LABELS, PREREADY_TAINT } from '../api/names.ts';
import { parseDuration } from '../duration.ts';
import type { HookObject } from './select.ts';

/** Who a hook run is for: a node, its boot, and the action that caused the run, if any. */
export interface HookSubject {
  node: string;
  /** The node's boot ID the run is about (GATEHOUSE_BOOT_ID). */
  bootID?: string;
  action?: {
    name: string;
    uid: string;
    action: Action;
    /** The action's parameters as the spec has them (upgrade, reboot, reset, configChange). */
    parameters: Record<string, unknown>;
    /** The image of an Upgrade (GATEHOUSE_TARGET_IMAGE). */
    targetImage?: string;
    /** A ConfigChange's disruption class, once decided (GATEHOUSE_DISRUPTION_CLASS). */
    disruptionClass?: string;
  };
  /** The owner of the runs' Jobs (the NodeAction), so they go when it goes. */
  owner?: V1OwnerReference;
  /** Undo: the runs put back what the action's pre-action hooks prepared (src/actions/undo.ts). */
  purpose?: 'Undo';
}

/**
 * What the runs are for, stable across restarts: the action's UID, or the boot. It is
 * part of every Job name, which is how a Job is never created twice.
 */
export function runIdentity(subject: HookSubject): string {
  if (!subject.action) return `boot/${subject.node}/${subject.bootID ?? ''}`;
  // An undo's runs have names of their own: never the hook's Job, never created twice.
  return `action/${subject.action.uid}${subject.purpose === 'Undo' ? '/undo' : ''}`;
}

// Their names are well known (src/api/names.ts): the boot reconciler and the CLI read them too.
const LABELS = HOOK_JOB_LABELS;
const ANNOTATIONS = HOOK_JOB_ANNOTATIONS;

const MAX_NAME = 63;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** A label value if the text is one (at most 63 characters of the allowed set), else nothing. */
function labelValue(text: string | undefined): string | undefined {
  return text !== undefined && text.length <= 63 && LABEL_VALUE.test(text) ? text : undefined;
}

/**
 * The Job name of one attempt: readable (the hook's name) and determined by the run
 * identity, the hook's UID and the attempt, at most 63 characters (Job names become
 * pod label values).
 */
export function hookJobName(subject: HookSubject, hook: HookObject, attempt: number): string {
  const hash = createHash('sha256')
    .update(`${runIdentity(subject)}\n${hook.metadata.uid}`)
    .digest('hex')
    .slice(0, 10);
  const suffix = `-${hash}-${attempt}`;
  const base = hook.metadata.name
    .replace(/[^a-z0-9-]+/g, '-')
    .slice(0, MAX_NAME - suffix.length)
    .replace(/-+$/, '');
  return `${base || 'hook'}${suffix}`;
}

/** The environment every container of a hook Job gets. */
export function hookEnvironment(subject: HookSubject): { name: string; value: string }[] {
  return [
    { name: 'GATEHOUSE_NODE', value: subject.node },
    { name: 'GATEHOUSE_ACTION', value: subject.action?.action ?? '' },
    { name: 'GATEHOUSE_ACTION_NAME', value: subject.action?.name ?? '' },
    { name: 'GATEHOUSE_BOOT_ID', value: subject.bootID ?? '' },
    ...(subject.action?.targetImage
      ? [{ name: 'GATEHOUSE_TARGET_IMAGE', value: subject.action.targetImage }]
      : []),
    ...(subject.action?.disruptionClass
      ? [{ name: 'GATEHOUSE_DISRUPTION_CLASS', value: subject.action.disruptionClass }]
      : []),
    ...(subject.purpose ? [{ name: 'GATEHOUSE_HOOK_PURPOSE', value: subject.purpose }] : []),
  ];
}

/** The node affinity requirement of a placement, relative to the node the run is about. */
export function placementRequirement(
  placement: 'AwayFromTarget' | 'OnTarget' | 'Anywhere' | undefined,
  node: string,
): V1NodeSelectorRequirement | undefined {
  switch (placement ?? 'AwayFromTarget') {
    case 'AwayFromTarget':
      // matchFields on metadata.name: exact, whatever the node's hostname label says.
      return { key: 'metadata.name', operator: 'NotIn', values: [node] };
    case 'OnTarget':
      return { key: 'metadata.name', operator: 'In', values: [node] };
    case 'Anywhere':
      return undefined;
  }
}

type Container = { name?: string; env?: { name: string }[] } & Record<string, unknown>;

function withEnvironment(containers: unknown, env: { name: string; value: string }[]): unknown {
  if (!Array.isArray(containers)) return containers;
  const ours = new Set(env.map((e) => e.name));
  return (containers as Container[]).map((c) => ({
    ...c,
    env: [...(c.env ?? []).filter((e) => !ours.has(e.name)), ...env],
  }));
}

/**
 * The Job for one attempt of a template hook, in the hook's namespace. gatehouse adds
 * its labels, the environment, node affinity for the placement (ANDed with the
 * template's own), a deadline no longer than the hook's timeout, and the owner. It
 * drops ttlSecondsAfterFinished: the Job is the record of the attempt until its owner
 * goes, and a Job that vanished by itself could not be told from one never created.
 */
export function buildHookJob(hook: HookObject, subject: HookSubject, attempt: number): V1Job {
  const template = structuredClone(hook.spec.template);
  if (!template)
    throw new Error(`${hook.kind} ${hook.metadata.namespace}/${hook.metadata.name} has no template`);
  const name = hookJobName(subject, hook, attempt);
  const labels: Record<string, string> = {
    [LABELS.managedBy]: 'gatehouse',
    [LABELS.hookKind]: hook.kind,
    [LABELS.hookUID]: hook.metadata.uid,
    [LABELS.attempt]: String(attempt),
  };
  const optional: [string, string | undefined][] = [
    [LABELS.hook, labelValue(hook.metadata.name)],
    [LABELS.node, labelValue(subject.node)],
    [LABELS.action, labelValue(subject.action?.name)],
    [LABELS.actionUID, subject.action?.uid],
    [LABELS.bootID, labelValue(subject.bootID)],
    [LABELS.purpose, subject.purpose === 'Undo' ? 'undo' : undefined],
  ];
  for (const [key, value] of optional) if (value) labels[key] = value;
  const annotations: Record<string, string> = {
    [ANNOTATIONS.hook]: `${hook.kind}/${hook.metadata.namespace}/${hook.metadata.name}`,
    [ANNOTATIONS.node]: subject.node,
    ...(subject.action ? { [ANNOTATIONS.action]: subject.action.name } : {}),
  };

  const jobSpec = (template.spec ?? {}) as NonNullable<V1Job['spec']>;
  const podTemplate = jobSpec.template;
  const podSpec = podTemplate.spec ?? { containers: [] };
  const env = hookEnvironment(subject);
  podSpec.containers = withEnvironment(podSpec.containers, env) as typeof podSpec.containers;
  if (podSpec.initContainers) {
    podSpec.initContainers = withEnvironment(podSpec.initContainers, env) as typeof podSpec.initContainers;
  }

  const requirement = placementRequirement(hook.spec.placement, subject.node);
  if (requirement) {
    const affinity = podSpec.affinity ?? {};
    const nodeAffinity = affinity.nodeAffinity ?? {};
    const required = nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution ?? { nodeSelectorTerms: [] };
    // Terms are ORed and requirements within a term ANDed: ours joins every term.
    const terms: V1NodeSelectorTerm[] = required.nodeSelectorTerms.length ? required.nodeSelectorTerms : [{}];
    // (The template is plain JSON; client-node's types merely call its objects classes.)
    required.nodeSelectorTerms = terms.map((t) =>
      Object.assign({}, t, { matchFields: [...(t.matchFields ?? []), requirement] }),
    );
    nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution = required;
    affinity.nodeAffinity = nodeAffinity;
    podSpec.affinity = affinity;
  }
  if (hook.kind === 'NodePrereadyJob') {
    // It runs before the preready taint comes off, possibly on that very node.
    podSpec.tolerations = [
      ...(podSpec.tolerations ?? []),
      { key: PREREADY_TAINT, operator: 'Exists', effect: 'NoSchedule' },
    ];
  }
  podTemplate.spec = podSpec;
  podTemplate.metadata = Object.assign({}, podTemplate.metadata, {
    labels: { ...podTemplate.metadata?.labels, ...labels },
    annotations: { ...podTemplate.metadata?.annotations, ...annotations },
  });

  const timeoutSeconds = Math.ceil(parseDuration(hook.spec.timeout ?? '15m') / 1000);
  const { ttlSecondsAfterFinished: _dropped, ...rest } = jobSpec;
  const job: V1Job = {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: hook.metadata.namespace,
      labels: { ...template.metadata?.labels, ...labels },
      annotations: { ...template.metadata?.annotations, ...annotations },
      ...(subject.owner ? { ownerReferences: [subject.owner] } : {}),
    },
    spec: {
      ...rest,
      template: podTemplate,
      activeDeadlineSeconds: Math.min(jobSpec.activeDeadlineSeconds ?? timeoutSeconds, timeoutSeconds),
    },
  };
  (job.metadata as { annotations: Record<string, string> }).annotations[ANNOTATIONS.templateHash] =
    jobHash(job);
  return job;
}

/**
 * The hash of a Job as built (before the hash annotation is added): what the run's
 * record keeps, so a Job under the run's name that was made from anything else is
 * told apart from the one gatehouse created.
 */
export function jobHash(job: V1Job): string {
  const annotations = Object.fromEntries(
    Object.entries(job.metadata?.annotations ?? {}).filter(([key]) => key !== ANNOTATIONS.templateHash),
  );
  // (Object.assign: the Job is plain JSON; client-node's types merely call it a class.)
  const unhashed = Object.assign({}, job, { metadata: Object.assign({}, job.metadata, { annotations }) });
  return createHash('sha256').update(JSON.stringify(unhashed)).digest('hex').slice(0, 32);
}

/** What an observed Job says of who made it, for whom (checked by jobImpostor). */
export interface JobProvenance {
  labels: Record<string, string>;
  ownerUIDs: string[];
  templateHash?: string;
}

/**
 * Why an observed Job under a run's name is not the Job gatehouse created for that run,
 * or nothing if it is. A namespace editor can create a Job under the predictable name
 * before gatehouse does; adopting it would record a hook as run that never ran. So the
 * Job must carry gatehouse's labels for this hook, attempt and action (or boot), the
 * owner reference of the run's owner (the action's UID, or the Node's), and the hash of
 * the Job gatehouse built for the attempt.
 */
export function jobImpostor(
  provenance: JobProvenance,
  subject: HookSubject,
  record: { uid?: string; attempt: number; templateHash?: string },
): string | undefined {
  const labels = provenance.labels;
  const expected: [string, string | undefined][] = [
    [LABELS.managedBy, 'gatehouse'],
    [LABELS.hookUID, record.uid],
    [LABELS.attempt, String(record.attempt)],
    [LABELS.actionUID, subject.action?.uid],
    [LABELS.bootID, subject.action ? undefined : labelValue(subject.bootID)],
    [LABELS.purpose, subject.purpose === 'Undo' ? 'undo' : undefined],
  ];
  for (const [key, value] of expected) {
    if (value !== undefined && labels[key] !== value)
      return `its label ${key} is ${labels[key] === undefined ? 'missing' : JSON.stringify(labels[key])}, not ${JSON.stringify(value)}`;
  }
  if (subject.owner && !provenance.ownerUIDs.includes(subject.owner.uid))
    return `it is not owned by ${subject.owner.kind} ${subject.owner.name} (uid ${subject.owner.uid})`;
  if (record.templateHash !== undefined && provenance.templateHash !== record.templateHash)
    return `its ${ANNOTATIONS.templateHash} is ${provenance.templateHash === undefined ? 'missing' : JSON.stringify(provenance.templateHash)}, not that of the Job gatehouse built (${record.templateHash})`;
  return undefined;
}

/** What an observed Job says about its run. */
export interface JobFacts {
  phase: 'Pending' | 'Running' | 'Succeeded' | 'Failed';
  message: string;
  startTime?: string;
  completionTime?: string;
  /** The Job is being deleted (it has a deletionTimestamp). */
  deleting: boolean;
  /** Who made the Job, for whom; absent for a Job not observed (refused by the API server). */
  provenance?: JobProvenance;
}

interface ObservedJob {
  metadata: {
    name: string;
    namespace?: string;
    deletionTimestamp?: string | Date;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: { uid: string }[];
  };
  status?: {
    active?: number;
    startTime?: string | Date;
    completionTime?: string | Date;
    conditions?: {
      type: string;
      status: string;
      reason?: string;
      message?: string;
      lastTransitionTime?: string | Date;
    }[];
  };
}

function text(time: string | Date | undefined): string | undefined {
  return time === undefined ? undefined : time instanceof Date ? time.toISOString() : time;
}

export function jobFacts(job: ObservedJob): JobFacts {
  const status = job.status ?? {};
  const condition = (...types: string[]) =>
    status.conditions?.find((c) => types.includes(c.type) && c.status === 'True');
  const where = `Job ${job.metadata.namespace ?? ''}/${job.metadata.name}`;
  const deleting = job.metadata.deletionTimestamp !== undefined;
  const startTime = text(status.startTime);
  const templateHash = job.metadata.annotations?.[ANNOTATIONS.templateHash];
  const provenance: JobProvenance = {
    labels: job.metadata.labels ?? {},
    ownerUIDs: (job.metadata.ownerReferences ?? []).map((o) => o.uid),
    ...(templateHash !== undefined ? { templateHash } : {}),
  };
  const base = { deleting, provenance, ...(startTime ? { startTime } : {}) };
  // Newer Job controllers set SuccessCriteriaMet / FailureTarget first, then Complete /
  // Failed once the pods are gone; either says how the run ended.
  const failed = condition('Failed', 'FailureTarget');
  if (failed) {
    const completionTime = text(failed.lastTransitionTime);
    return {
      ...base,
      phase: 'Failed',
      message: `${where} failed: ${failed.reason ?? 'Failed'}${failed.message ? `: ${failed.message}` : ''}`,
      ...(completionTime ? { completionTime } : {}),
    };
  }
  const complete = condition('Complete', 'SuccessCriteriaMet');
  if (complete) {
    const completionTime = text(status.completionTime) ?? text(complete.lastTransitionTime);
    return {
      ...base,
      phase: 'Succeeded',
      message: `${where} succeeded`,
      ...(completionTime ? { completionTime } : {}),
    };
  }
  if ((status.active ?? 0) > 0 || startTime)
    return { ...base, phase: 'Running', message: `${where} is running` };
  return { ...base, phase: 'Pending', message: `${where} is waiting for its pod to start` };
}
