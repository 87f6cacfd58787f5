// The checker Job of a `job` probe, built from the check's template, and what an observed
// Job and its pods say. Pure: src/checks/probes/job.ts creates, waits and deletes.
//
// One Job at a time per (check, generation, node), under a name derived from them, so a
// run still going is found again instead of doubled. A verdict is taken only from a Job
// whose UID the controller got back from its own create call, and only from pods that Job
// controls and that run the template's containers: a namespace editor who creates a Job
// under the name first, or a pod claiming the Job, forges nothing (docs/security.md).
import { createHash } from 'node:crypto';
import type { V1Job, V1OwnerReference, V1Pod } from '@kubernetes/client-node';
import type { ProbeSpecs } from '../api/cluster-health-check.ts';
import { CHECKER_JOB_ANNOTATIONS, CHECKER_JOB_LABELS } from '../api/names.ts';
import type { NodeTarget } from './node-target.ts';
import type { CheckIdentity, ProbeResult } from './probe.ts';
import { API_VERSION } from '../api/common.ts';

export type JobProbeSpec = ProbeSpecs['job'];

/** How long a finished checker Job stays if no later run replaces it (a node gone, a check changed). */
export const CHECKER_JOB_TTL_SECONDS = 3600;
/** The check's message is the last line of the termination message, at most this long. */
export const MAX_CHECKER_MESSAGE = 1024;

const LABELS = CHECKER_JOB_LABELS;
const MAX_NAME = 63;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

function labelValue(text: string | undefined): string | undefined {
  return text !== undefined && text.length <= 63 && LABEL_VALUE.test(text) ? text : undefined;
}

/**
 * The Job name for a check and node: the check's name, readable, and a hash of the
 * check's UID, generation and the node, at most 63 characters.
 */
export function checkerJobName(check: CheckIdentity, node: string | undefined): string {
  const hash = createHash('sha256')
    .update(`${check.uid}\n${String(check.generation)}\n${node ?? ''}`)
    .digest('hex')
    .slice(0, 10);
  const suffix = `-${hash}`;
  const base = check.name
    .replace(/[^a-z0-9-]+/g, '-')
    .slice(0, MAX_NAME - suffix.length)
    .replace(/-+$/, '');
  return `${base || 'check'}${suffix}`;
}

/** The labels every checker Job of a check (and its pods) carries. */
export function checkerJobLabels(check: CheckIdentity, node: string | undefined): Record<string, string> {
  const labels: Record<string, string> = {
    [LABELS.managedBy]: 'gatehouse',
    [LABELS.checkUID]: check.uid,
    [LABELS.checkGeneration]: String(check.generation),
  };
  const name = labelValue(check.name);
  if (name) labels[LABELS.check] = name;
  const nodeLabel = labelValue(node);
  if (nodeLabel) labels[LABELS.node] = nodeLabel;
  return labels;
}

/** The environment of every container: the node a Node-scoped check asks about. */
export function checkerEnvironment(
  check: CheckIdentity,
  node: NodeTarget | undefined,
): { name: string; value: string }[] {
  return [
    { name: 'GATEHOUSE_CHECK', value: check.name },
    ...(node
      ? [
          { name: 'GATEHOUSE_NODE', value: node.name },
          { name: 'GATEHOUSE_NODE_IP', value: node.ip ?? '' },
        ]
      : []),
  ];
}

type Container = {
  name?: string;
  env?: { name: string }[];
  terminationMessagePolicy?: string;
} & Record<string, unknown>;

function withEnvironment(containers: unknown, env: { name: string; value: string }[]): Container[] {
  if (!Array.isArray(containers)) return [];
  const ours = new Set(env.map((e) => e.name));
  return (containers as Container[]).map((c) => ({
    ...c,
    env: [...(c.env ?? []).filter((e) => !ours.has(e.name)), ...env],
    // The kubelet then reports the last log lines of a container that failed silently.
    terminationMessagePolicy: c.terminationMessagePolicy ?? 'FallbackToLogsOnError',
  }));
}

type NodeSelectorTerm = { matchFields?: unknown[] } & Record<string, unknown>;

/** Node affinity for the placement, ANDed into every term of the template's own. */
function withPlacement(podSpec: Record<string, unknown>, spec: JobProbeSpec, node: NodeTarget | undefined) {
  const placement = spec.placement ?? 'Anywhere';
  if (!node || placement === 'Anywhere') return;
  const requirement = {
    key: 'metadata.name',
    operator: placement === 'OnTarget' ? 'In' : 'NotIn',
    values: [node.name],
  };
  const affinity = (podSpec.affinity ?? {}) as Record<string, Record<string, unknown> | undefined>;
  const nodeAffinity = affinity.nodeAffinity ?? {};
  const required = (nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution ?? {
    nodeSelectorTerms: [],
  }) as { nodeSelectorTerms: NodeSelectorTerm[] };
  const terms = required.nodeSelectorTerms.length ? required.nodeSelectorTerms : [{}];
  required.nodeSelectorTerms = terms.map((t) => ({
    ...t,
    matchFields: [...(t.matchFields ?? []), requirement],
  }));
  nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution = required;
  affinity.nodeAffinity = nodeAffinity;
  podSpec.affinity = affinity;
}

/**
 * The checker Job for one run. gatehouse sets its name, labels and owner (the check, so
 * the Job goes with it), restartPolicy Never and backoffLimit 0 (one exit is one
 * verdict, not something to retry), a deadline no longer than the check's timeout, a
 * ttlSecondsAfterFinished, the environment, and the placement.
 */
export function buildCheckerJob(
  spec: JobProbeSpec,
  check: CheckIdentity,
  node: NodeTarget | undefined,
  timeoutMs: number,
): V1Job {
  const template = structuredClone(spec.template);
  const labels = checkerJobLabels(check, node?.name);
  const annotations: Record<string, string> = {
    [CHECKER_JOB_ANNOTATIONS.check]: check.name,
    ...(node ? { [CHECKER_JOB_ANNOTATIONS.node]: node.name } : {}),
  };
  const jobSpec = (template.spec ?? {}) as NonNullable<V1Job['spec']>;
  const podTemplate = jobSpec.template;
  const podSpec = (podTemplate.spec ?? { containers: [] }) as unknown as Record<string, unknown>;
  const env = checkerEnvironment(check, node);
  podSpec.containers = withEnvironment(podSpec.containers, env);
  if (podSpec.initContainers) podSpec.initContainers = withEnvironment(podSpec.initContainers, env);
  podSpec.restartPolicy = 'Never';
  withPlacement(podSpec, spec, node);
  podTemplate.spec = podSpec as unknown as typeof podTemplate.spec;
  podTemplate.metadata = Object.assign({}, podTemplate.metadata, {
    labels: { ...podTemplate.metadata?.labels, ...labels },
    annotations: { ...podTemplate.metadata?.annotations, ...annotations },
  });
  const timeoutSeconds = Math.max(1, Math.floor(timeoutMs / 1000));
  const owner: V1OwnerReference = {
    apiVersion: API_VERSION,
    kind: 'ClusterHealthCheck',
    name: check.name,
    uid: check.uid,
  };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: checkerJobName(check, node?.name),
      namespace: spec.namespace,
      labels: { ...template.metadata?.labels, ...labels },
      annotations: { ...template.metadata?.annotations, ...annotations },
      ownerReferences: [owner],
    },
    // (Object.assign: the template is plain JSON; client-node's types merely call it a class.)
    spec: Object.assign({}, jobSpec, {
      template: podTemplate,
      backoffLimit: 0,
      activeDeadlineSeconds: Math.min(jobSpec.activeDeadlineSeconds ?? timeoutSeconds, timeoutSeconds),
      ttlSecondsAfterFinished: CHECKER_JOB_TTL_SECONDS,
    }),
  };
}

/**
 * Why an observed Job under the run's name is not one gatehouse made for this check, or
 * nothing if it claims to be (labels and owner). A claimant is still not trusted: its
 * verdict is never taken (only a Job this controller created is), it is replaced.
 */
export function foreignJob(job: V1Job, check: CheckIdentity): string | undefined {
  const labels = job.metadata?.labels ?? {};
  for (const [key, value] of [
    [LABELS.managedBy, 'gatehouse'],
    [LABELS.checkUID, check.uid],
  ] as const) {
    if (labels[key] !== value)
      return `its label ${key} is ${labels[key] === undefined ? 'missing' : JSON.stringify(labels[key])}, not ${JSON.stringify(value)}`;
  }
  if (!(job.metadata?.ownerReferences ?? []).some((o) => o.uid === check.uid))
    return `it is not owned by ClusterHealthCheck ${check.name} (uid ${check.uid})`;
  return undefined;
}

/** The parts of a container that decide what it does, for comparing a pod with the template. */
function containerIdentity(c: {
  name?: string;
  image?: string;
  command?: string[];
  args?: string[];
}): string {
  return JSON.stringify([c.name, c.image, c.command ?? [], c.args ?? []]);
}

/**
 * Why a pod is not one the checker Job ran from its template, or nothing: it must be
 * controlled by the Job (by UID) and run exactly the template's containers (name, image,
 * command, args). Anyone who may create pods in the namespace can make a pod that claims
 * the Job; if it ran something else, the Job's verdict may rest on it.
 */
export function podImpostor(pod: V1Pod, job: V1Job, jobUID: string): string | undefined {
  const where = `pod ${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`;
  const controller = (pod.metadata?.ownerReferences ?? []).find((o) => o.controller === true);
  if (controller?.uid !== jobUID) return `${where} is not controlled by the checker Job (uid ${jobUID})`;
  const want = (job.spec?.template.spec?.containers ?? []).map(containerIdentity);
  const have = (pod.spec?.containers ?? []).map(containerIdentity);
  if (want.length !== have.length || want.some((w, i) => w !== have[i]))
    return `${where} claims the checker Job but does not run its template's containers`;
  return undefined;
}

/** The last non-empty line of a termination message, bounded. */
export function lastLine(text: string | undefined): string {
  const lines = (text ?? '')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  const line = lines.at(-1) ?? '';
  return line.length > MAX_CHECKER_MESSAGE ? `${line.slice(0, MAX_CHECKER_MESSAGE - 1)}…` : line;
}

interface Termination {
  exitCode: number;
  message: string;
  reason?: string;
  finishedAt: number;
}

/** The terminated containers of a pod: the first non-zero exit if any, else the last to finish. */
function termination(pod: V1Pod): Termination | undefined {
  const ended = (pod.status?.containerStatuses ?? []).flatMap((s): Termination[] => {
    const t = s.state?.terminated;
    if (!t) return [];
    const finished = t.finishedAt as unknown as string | Date | undefined;
    return [
      {
        exitCode: t.exitCode,
        message: lastLine(t.message),
        ...(t.reason ? { reason: t.reason } : {}),
        finishedAt: finished ? new Date(finished).getTime() : 0,
      },
    ];
  });
  return ended.find((t) => t.exitCode !== 0) ?? ended.sort((a, b) => a.finishedAt - b.finishedAt).at(-1);
}

type JobCondition = { type: string; status: string; reason?: string; message?: string };

/**
 * The verdict of a checker Job this controller created (UID `jobUID`), from the Job's
 * conditions and its pods' termination; undefined while it runs. Exit code 0 is healthy,
 * anything else unhealthy; the message is the container's termination message.
 */
export function checkerVerdict(job: V1Job, jobUID: string, pods: readonly V1Pod[]): ProbeResult | undefined {
  const where = `checker Job ${job.metadata?.namespace ?? ''}/${job.metadata?.name ?? ''}`;
  const conditions = (job.status?.conditions ?? []) as JobCondition[];
  const holds = (...types: string[]) => conditions.find((c) => types.includes(c.type) && c.status === 'True');
  const failed = holds('Failed', 'FailureTarget');
  const complete = failed ? undefined : holds('Complete', 'SuccessCriteriaMet');
  if (!failed && !complete) return undefined;
  const claimed = pods.filter((p) =>
    (p.metadata?.ownerReferences ?? []).some((o) => o.controller === true && o.uid === jobUID),
  );
  for (const pod of claimed) {
    const impostor = podImpostor(pod, job, jobUID);
    if (impostor) return { healthy: false, message: `${where}: verdict refused: ${impostor}` };
  }
  const ended = claimed
    .map(termination)
    .filter((t) => t !== undefined)
    .sort((a, b) => a.finishedAt - b.finishedAt)
    .at(-1);
  if (complete) {
    if (ended && ended.exitCode !== 0)
      return {
        healthy: false,
        message: ended.message || `${where} exited with code ${String(ended.exitCode)}`,
      };
    return { healthy: true, message: ended?.message || `${where} succeeded` };
  }
  const cause =
    failed?.reason === 'DeadlineExceeded'
      ? 'ran past its deadline'
      : `failed (${failed?.reason ?? 'Failed'})`;
  if (ended?.message) return { healthy: false, message: ended.message };
  const exit = ended
    ? `: exit code ${String(ended.exitCode)}${ended.reason ? ` (${ended.reason})` : ''}`
    : '';
  return { healthy: false, message: `${where} ${cause}${exit}` };
}
