// The six hook kinds. They share one spec; the kind says when a hook runs. A hook is
// consequential and blocking: a Job (or a callback) that must finish at its point of
// an action or a boot, idempotent by contract.
import type { V1JobTemplateSpec } from '@kubernetes/client-node';
import Type, { type Static } from 'typebox';
import {
  AGE_COLUMN,
  CATEGORY,
  Conditions,
  DnsLabel,
  DnsSubdomain,
  Duration,
  Int32,
  Int64,
  LabelSelector,
  oneOf,
  Resource,
  StringEnum,
  StringMap,
  Text,
  Timestamp,
  rules,
  type KindDefinition,
} from './common.ts';

const TemplateMetadata = (what: string) =>
  Type.Object(
    {
      labels: Type.Optional(StringMap(`Labels to put on the ${what}, next to the ones gatehouse adds.`)),
      annotations: Type.Optional(StringMap(`Annotations to put on the ${what}.`)),
    },
    {
      description: `Labels and annotations for the ${what}. Other metadata is ignored: gatehouse names the Job after the action, the hook and the attempt, so that it is never created twice.`,
    },
  );

/**
 * A batch/v1 JobTemplateSpec. Only what gatehouse must enforce is declared (a restart
 * policy that lets the Job finish, at least one container); the rest of the Job and
 * pod spec is preserved as written and validated by the API server when the Job is
 * created, so the CRD does not freeze a copy of one Kubernetes version's Job schema.
 * Not x-kubernetes-embedded-resource: a template has no apiVersion and kind. The
 * static type is client-node's V1JobTemplateSpec.
 */
export interface JobTemplateTexts {
  /** What has to finish, in the restart policy's message: "a hook Job". */
  what: string;
  podSpec: string;
  jobSpec: string;
  template: string;
}

const HOOK_TEMPLATE_TEXTS: JobTemplateTexts = {
  what: 'a hook Job',
  podSpec:
    "The pod spec (core/v1 PodSpec). gatehouse adds node affinity for the hook's placement, and environment variables GATEHOUSE_NODE, GATEHOUSE_ACTION, GATEHOUSE_ACTION_NAME, GATEHOUSE_BOOT_ID and GATEHOUSE_TARGET_IMAGE (when upgrading) to every container.",
  jobSpec:
    'The Job spec (batch/v1 JobSpec): template, backoffLimit, activeDeadlineSeconds and so on. The hook timeout bounds the Job as a whole.',
  template:
    "A Job template (batch/v1 JobTemplateSpec) run in the hook's namespace; the Job is owned by the NodeAction and labelled with the action and the hook.",
};

/** A JobTemplateSpec schema with descriptions for its user (hooks, checker Jobs). */
export const jobTemplate = (texts: JobTemplateTexts) =>
  Type.Unsafe<V1JobTemplateSpec>(
    Type.Object(
      {
        metadata: Type.Optional(TemplateMetadata('Job')),
        spec: Type.Object(
          {
            template: Type.Object(
              {
                metadata: Type.Optional(TemplateMetadata('pod')),
                spec: Type.Object(
                  {
                    restartPolicy: Type.String({
                      description:
                        "The pod's restart policy: Never or OnFailure, so that the Job can finish (Always, the pod default, is refused).",
                      maxLength: 16,
                    }),
                    containers: Type.Array(
                      Type.Object(
                        {},
                        {
                          description: 'A container (core/v1 Container).',
                          'x-kubernetes-preserve-unknown-fields': true,
                        },
                      ),
                      {
                        description: 'The containers of the pod (core/v1 Container); at least one.',
                        minItems: 1,
                        maxItems: 64,
                      },
                    ),
                  },
                  {
                    description: texts.podSpec,
                    'x-kubernetes-preserve-unknown-fields': true,
                    ...rules({
                      rule: "!has(self.restartPolicy) || self.restartPolicy in ['Never', 'OnFailure']",
                      message: `template.spec.template.spec.restartPolicy must be Never or OnFailure: ${texts.what} has to finish`,
                      fieldPath: '.restartPolicy',
                    }),
                  },
                ),
              },
              { description: 'The pod template of the Job (core/v1 PodTemplateSpec).' },
            ),
          },
          {
            description: texts.jobSpec,
            'x-kubernetes-preserve-unknown-fields': true,
          },
        ),
      },
      {
        description: texts.template,
      },
    ),
  );

export const JobTemplate = jobTemplate(HOOK_TEMPLATE_TEXTS);

export const Webhook = Type.Object(
  {
    service: Type.Object(
      {
        name: DnsLabel("Name of a Service in the hook's namespace."),
        port: Type.Optional(
          Int32('Port of the Service. Defaults to 443.', { minimum: 1, maximum: 65535, default: 443 }),
        ),
      },
      { description: "The Service to call, in the hook's own namespace." },
    ),
    path: Type.Optional(
      Type.String({
        description: 'Path to POST the HookRequest to, starting with /. Defaults to /.',
        maxLength: 2048,
        default: '/',
        ...rules({ rule: "self.startsWith('/')", message: 'webhook.path must start with /' }),
      }),
    ),
    scheme: Type.Optional(
      StringEnum(['HTTPS', 'HTTP'], {
        description:
          'HTTPS (the default, as for admission webhooks and Cluster API runtime extensions) or HTTP for a trusted in-namespace callback.',
        default: 'HTTPS',
      }),
    ),
    caBundle: Type.Optional(
      Type.String({
        description:
          "PEM certificates (base64-encoded) that sign the Service's serving certificate, for HTTPS. Absent: the cluster's CA (the service-account ca.crt) and the system roots.",
        format: 'byte',
        maxLength: 65536,
      }),
    ),
    requestTimeout: Type.Optional(
      Duration(
        'webhook.requestTimeout',
        'How long one request may take; a timed-out request is retried until the hook timeout.',
        {
          min: '1s',
          max: '5m',
          default: '10s',
        },
      ),
    ),
  },
  {
    description:
      'A callback: gatehouse POSTs a HookRequest (apiVersion, kind: HookRequest, action, hook) and expects {status: Success | Failure, message, retryAfterSeconds}; retryAfterSeconds > 0 means "not yet, ask again". The same shape as Cluster API runtime hooks.',
  },
);

const HOOK_SPEC_DESCRIPTION =
  'When and where the hook runs, and what it runs: exactly one of template (a Job) or webhook (a callback).';

/** The approval annotations name a hook so: `PreRebootJob/ceph/needs-a-person`. */
export function approvalHookRef(hook: { kind: string; namespace: string; name: string }): string {
  return `${hook.kind}/${hook.namespace}/${hook.name}`;
}

/**
 * A person's approval as a pre-action hook: the action waits here, in the hook's order,
 * until someone with the verb approve on nodeactions (and, when named, in one of the
 * groups or users) approves or refuses it. docs/concepts.md, "Approval".
 */
export const Approval = Type.Object(
  {
    message: Type.Optional(
      Text(
        'What the approver is asked, shown with the waiting action (e.g. "reboots of storage nodes need the storage on-call").',
        1024,
      ),
    ),
    approvers: Type.Optional(
      Type.Object(
        {
          groups: Type.Optional(
            Type.Array(Type.String({ minLength: 1, maxLength: 256 }), {
              description: 'Groups whose members may approve (as the API server authenticates them).',
              maxItems: 32,
            }),
          ),
          users: Type.Optional(
            Type.Array(Type.String({ minLength: 1, maxLength: 256 }), {
              description: 'Users who may approve.',
              maxItems: 32,
            }),
          ),
        },
        {
          description:
            'Who may approve, besides holding the verb approve on nodeactions.talos.dev (always required): a member of one of the groups or one of the users. Absent: any holder of the verb.',
        },
      ),
    ),
    allowSelfApproval: Type.Optional(
      Type.Boolean({
        description:
          "Whether the action's own requester may approve it. Defaults to false: a second person decides.",
        default: false,
      }),
    ),
  },
  {
    description:
      "A person's approval (gatehouse approve NAME --reason, POST /v1/actions/{name}/approve, or the talos.dev/approval annotations): the hook succeeds when approved, and a refusal ends the action Denied with the approver's reason. Its timeout bounds the wait (set it: a person takes longer than 15 minutes); its failurePolicy is Fail and it has no undo.",
  },
);

/** Exactly one of the things a pre-action hook can run. */
const ONE_PRE_ACTION_RUNNER = rules(
  oneOf(
    ['template', 'webhook', 'approval'],
    'a pre-action hook runs a Job, calls a webhook or asks a person',
    true,
  ),
  {
    rule: "!has(self.approval) || !has(self.failurePolicy) || self.failurePolicy == 'Fail'",
    message: 'failurePolicy must be Fail in an approval hook: an approval nobody gave in time is not one',
    fieldPath: '.failurePolicy',
  },
  {
    rule: '!has(self.approval) || !has(self.undo)',
    message: "undo must not be set in an approval hook: a person's approval has nothing to undo",
    fieldPath: '.undo',
  },
);

export const HookSpec = Type.Object(
  {
    nodeSelector: Type.Optional(
      LabelSelector('Run for actions and boots of nodes with matching labels. Absent: every node.'),
    ),
    order: Type.Optional(
      Int32(
        'Hooks of the same kind run in ascending order; hooks with equal order run in parallel, and the next order starts when they all finished. Defaults to 0.',
        { minimum: -1000, maximum: 1000, default: 0 },
      ),
    ),
    timeout: Type.Optional(
      Duration('timeout', 'How long the hook may take, all attempts included, before it counts as failed.', {
        min: '1s',
        max: '24h',
        default: '15m',
      }),
    ),
    failurePolicy: Type.Optional(
      StringEnum(['Fail', 'Ignore'], {
        description:
          'What a failed (or timed-out) hook means: Fail stops the action (or, for boot hooks, keeps the node from becoming ready); Ignore records the failure and goes on. Defaults to Fail.',
        default: 'Fail',
      }),
    ),
    placement: Type.Optional(
      StringEnum(['AwayFromTarget', 'OnTarget', 'Anywhere'], {
        description:
          'Where the Job may run: AwayFromTarget (the default) never on the node the action or boot is about, since that node is about to go down or is not ready; OnTarget only there; Anywhere wherever the scheduler likes. Webhooks ignore it.',
        default: 'AwayFromTarget',
      }),
    ),
    template: Type.Optional(JobTemplate),
    webhook: Type.Optional(Webhook),
  },
  {
    description: HOOK_SPEC_DESCRIPTION,
    ...rules({
      rule: 'has(self.template) != has(self.webhook)',
      message: 'spec must set exactly one of template (a Job) or webhook (a callback)',
    }),
  },
);

/** A CSI driver's name as the kubelet registers it in CSINode (at most 63 characters). */
const CsiDriverName = Type.String({
  description: 'A CSI driver name, as in CSINode spec.drivers[].name (e.g. rook-ceph.rbd.csi.ceph.com).',
  minLength: 1,
  maxLength: 63,
  pattern: '^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$',
});

/**
 * The readiness preset of a NodePrereadyJob: no Job to write, the controller itself
 * waits until the node's critical DaemonSet Pods are Ready and its CSI drivers are
 * registered. docs/concepts.md, "Readiness without a Job".
 */
export const Readiness = Type.Object(
  {
    daemonSets: Type.Optional(
      Type.Object(
        {
          priorityClassNames: Type.Optional(
            Type.Array(DnsSubdomain('A PriorityClass name.'), {
              description:
                'Pods with one of these priority classes are critical (e.g. system-node-critical, which CNI and CSI node plugins use).',
              minItems: 1,
              maxItems: 16,
            }),
          ),
          selector: Type.Optional(
            LabelSelector(
              "Pods whose labels match are critical (e.g. node.gardener.cloud/critical-component: 'true'); an empty selector makes every DaemonSet Pod critical.",
            ),
          ),
        },
        {
          description:
            'Which DaemonSet Pods on the node are critical: those with one of the priority classes, or with labels the selector matches (either suffices). Each must be Ready. Only Pods that exist on the node (spec.nodeName) can be checked: a DaemonSet that does not target the node has none there, and when none matches at all the hook waits 30s for the DaemonSet controller to create them, then goes on.',
          ...rules({
            rule: 'has(self.priorityClassNames) || has(self.selector)',
            message: 'readiness.daemonSets must set priorityClassNames, selector or both',
          }),
        },
      ),
    ),
    csiDrivers: Type.Optional(
      Type.Array(CsiDriverName, {
        description:
          "CSI drivers that must be registered in the node's CSINode (spec.drivers[].name), as the kubelet does once the driver's node plugin is up.",
        minItems: 1,
        maxItems: 32,
      }),
    ),
  },
  {
    description:
      "Wait, without a Job, until every critical DaemonSet Pod on the node is Ready and every CSI driver named is registered in the node's CSINode; the hook's timeout bounds the wait. The controller reads the node's Pods and CSINode every 5s while it waits.",
    ...rules({
      rule: 'has(self.daemonSets) || has(self.csiDrivers)',
      message: 'readiness must set daemonSets, csiDrivers or both',
    }),
  },
);

/**
 * What a pre-action hook's undo runs: the same shapes as the hook itself, placed as the
 * hook is. It runs at most once per action, when the action ends (Failed, Cancelled,
 * past a deadline) without the node having been disrupted after the hook ran: the case
 * in which no boot hook will ever clean up (docs/decisions.md, "Undo").
 */
export const Undo = Type.Object(
  {
    template: Type.Optional(JobTemplate),
    webhook: Type.Optional(Webhook),
    timeout: Type.Optional(
      Duration(
        'undo.timeout',
        "How long the undo may take; deleting the action waits for it at most this long. Defaults to the hook's timeout.",
        { min: '1s', max: '24h' },
      ),
    ),
  },
  {
    description:
      "What puts back what the hook prepared, when the action ends without having touched the node (e.g. ceph osd unset-group noout after a cancelled reboot): exactly one of template (a Job) or webhook (a callback, sent with purpose Undo). It uses the hook's placement, and is not retried: a failed undo is a Warning Event and the action's condition Undone.",
    ...rules({
      rule: 'has(self.template) != has(self.webhook)',
      message: 'undo must set exactly one of template (a Job) or webhook (a callback)',
    }),
  },
);

/** The spec of the pre-action hook kinds: a hook, and what undoes it. */
export const PreActionHookSpec = Type.Object(
  { ...HookSpec.properties, approval: Type.Optional(Approval), undo: Type.Optional(Undo) },
  {
    description: `${HOOK_SPEC_DESCRIPTION} A pre-action hook may instead wait for a person's approval (approval), and may say how it is undone (undo).`,
    ...ONE_PRE_ACTION_RUNNER,
  },
);

/** The spec of NodePrereadyJob: a hook, or the readiness preset in its place. */
export const NodePrereadyHookSpec = Type.Object(
  { ...HookSpec.properties, readiness: Type.Optional(Readiness) },
  {
    description: `${HOOK_SPEC_DESCRIPTION} A NodePrereadyJob may instead wait for the node's critical DaemonSet Pods and CSI drivers (readiness).`,
    ...rules(
      oneOf(
        ['template', 'webhook', 'readiness'],
        'a NodePrereadyJob runs a Job, calls a webhook or waits for readiness',
        true,
      ),
    ),
  },
);

export const HOOK_RUN_PHASES = ['Pending', 'Running', 'Succeeded', 'Failed'] as const;

export const HookRun = Type.Object(
  {
    action: Type.Optional(DnsSubdomain('Name of the NodeAction the run was for; absent for a boot hook.')),
    node: DnsSubdomain('The node the run was about.'),
    bootID: Type.Optional(
      Type.String({ description: "The node's boot ID the run was about (boot hooks).", maxLength: 64 }),
    ),
    attempt: Int32('Attempt number, from 1.', { minimum: 1 }),
    jobName: Type.Optional(DnsSubdomain('The Job created for the run; absent for a webhook.')),
    phase: StringEnum(HOOK_RUN_PHASES, { description: 'Pending, Running, Succeeded or Failed.' }),
    startTime: Type.Optional(Timestamp('When the run started.')),
    completionTime: Type.Optional(Timestamp('When the run finished.')),
    message: Type.Optional(Text('What happened, e.g. the Job failure reason or the webhook message.', 4096)),
  },
  { description: 'One run of the hook.' },
);

export const HookStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Int64('The metadata.generation the status reflects.', { minimum: 0 })),
    active: Type.Optional(Int32('Runs in progress.', { minimum: 0 })),
    succeeded: Type.Optional(Int32('Runs that succeeded, since the hook was created.', { minimum: 0 })),
    failed: Type.Optional(
      Int32('Runs that failed or timed out, since the hook was created.', { minimum: 0 }),
    ),
    lastRuns: Type.Optional(
      Type.Array(HookRun, { description: 'The most recent runs, newest first (at most 10).', maxItems: 10 }),
    ),
    conditions: Type.Optional(
      Conditions(
        'Standard conditions; type LastRunSucceeded says whether the latest finished run succeeded, and for which action or boot.',
      ),
    ),
  },
  { description: 'Counts and the latest runs, written by the controller.' },
);

/** When each hook kind runs, which is also its CRD description. */
const HOOK_KINDS = [
  {
    kind: 'PreUpgradeJob',
    shortName: 'preupgrade',
    when: 'before an Upgrade of a matching node, after the health checks passed',
  },
  {
    kind: 'PreRebootJob',
    shortName: 'prereboot',
    when: 'before a Reboot of a matching node, after the health checks passed (e.g. ceph osd set-group noout)',
  },
  {
    kind: 'PreShutdownJob',
    shortName: 'preshutdown',
    when: 'before a Shutdown of a matching node, after the health checks passed',
  },
  {
    kind: 'PreResetJob',
    shortName: 'prereset',
    when: 'before a Reset of a matching node, after the health checks passed: the place to move data off the node for good (e.g. out and purge its Ceph OSDs)',
  },
  {
    kind: 'PreMaintenanceJob',
    shortName: 'premaintenance',
    when: 'before a Maintenance of a matching node (cordoned, drained and held out until released), after the health checks passed',
  },
  {
    kind: 'NodePrereadyJob',
    shortName: 'preready',
    when: 'on every boot of a matching node, before it may take workloads: the node keeps the taint talos.dev/preready:NoSchedule until every NodePrereadyJob succeeded for its current boot ID',
  },
  {
    kind: 'NodeReadyJob',
    shortName: 'nodeready',
    when: 'on every boot of a matching node, once it is Ready and the preready taint is gone (e.g. ceph osd unset-group noout)',
  },
] as const;

export type HookKindName = (typeof HOOK_KINDS)[number]['kind'];
/** The hook kinds that run on every boot of a node, not before an action. */
export type BootHookKind = 'NodePrereadyJob' | 'NodeReadyJob';
/** The hook kinds that run before an action (each action kind names its own: src/actions/kinds/). */
export type PreActionHookKind = Exclude<HookKindName, BootHookKind>;
export const HOOK_KIND_NAMES = HOOK_KINDS.map((h) => h.kind) as unknown as readonly [
  HookKindName,
  ...HookKindName[],
];

function hookResource<
  const Kind extends HookKindName,
  S extends typeof HookSpec | typeof PreActionHookSpec | typeof NodePrereadyHookSpec,
>(kind: Kind, when: string, spec: S) {
  return Resource(
    kind,
    `${kind} is a hook that runs ${when}. It runs a Job from its template, or calls its webhook, and must succeed unless its failurePolicy is Ignore. Hooks must be idempotent. Creating one is as powerful as creating a Job in its namespace.`,
    spec,
    HookStatus,
  );
}

const byKind = Object.fromEntries(HOOK_KINDS.map((h) => [h.kind, h])) as Record<
  HookKindName,
  (typeof HOOK_KINDS)[number]
>;

export const PreUpgradeJob = hookResource('PreUpgradeJob', byKind.PreUpgradeJob.when, PreActionHookSpec);
export const PreRebootJob = hookResource('PreRebootJob', byKind.PreRebootJob.when, PreActionHookSpec);
export const PreShutdownJob = hookResource('PreShutdownJob', byKind.PreShutdownJob.when, PreActionHookSpec);
export const PreResetJob = hookResource('PreResetJob', byKind.PreResetJob.when, PreActionHookSpec);
export const PreMaintenanceJob = hookResource(
  'PreMaintenanceJob',
  byKind.PreMaintenanceJob.when,
  PreActionHookSpec,
);
export const NodePrereadyJob = hookResource(
  'NodePrereadyJob',
  byKind.NodePrereadyJob.when,
  NodePrereadyHookSpec,
);
export const NodeReadyJob = hookResource('NodeReadyJob', byKind.NodeReadyJob.when, HookSpec);

/**
 * Any hook's spec: pre-action kinds may carry an undo or an approval, NodePrereadyJob a
 * readiness preset; each kind's schema allows only its own.
 */
export type HookSpec = Static<typeof PreActionHookSpec> &
  Pick<Static<typeof NodePrereadyHookSpec>, 'readiness'>;
export type Readiness = Static<typeof Readiness>;
export type Undo = Static<typeof Undo>;
export type HookStatus = Static<typeof HookStatus>;
export type HookRun = Static<typeof HookRun>;
export type PreUpgradeJob = Static<typeof PreUpgradeJob>;
export type PreRebootJob = Static<typeof PreRebootJob>;
export type PreShutdownJob = Static<typeof PreShutdownJob>;
export type PreResetJob = Static<typeof PreResetJob>;
export type PreMaintenanceJob = Static<typeof PreMaintenanceJob>;
export type NodePrereadyJob = Static<typeof NodePrereadyJob>;
export type NodeReadyJob = Static<typeof NodeReadyJob>;
/** Any hook object; `kind` says which. */
export type Hook =
  | PreUpgradeJob
  | PreRebootJob
  | PreShutdownJob
  | PreResetJob
  | PreMaintenanceJob
  | NodePrereadyJob
  | NodeReadyJob;

const SCHEMAS = {
  PreUpgradeJob,
  PreRebootJob,
  PreShutdownJob,
  PreResetJob,
  PreMaintenanceJob,
  NodePrereadyJob,
  NodeReadyJob,
};

export const hookKinds: readonly KindDefinition[] = HOOK_KINDS.map((h) => ({
  kind: h.kind,
  plural: `${h.kind.toLowerCase()}s`,
  singular: h.kind.toLowerCase(),
  shortNames: [h.shortName],
  categories: [CATEGORY, 'gatehouse-hooks'],
  scope: 'Namespaced',
  schema: SCHEMAS[h.kind],
  printerColumns: [
    {
      name: 'Order',
      type: 'integer',
      jsonPath: '.spec.order',
      description: 'Run order among hooks of this kind.',
    },
    {
      name: 'Failure Policy',
      type: 'string',
      jsonPath: '.spec.failurePolicy',
      description: 'Fail stops the action; Ignore goes on.',
    },
    { name: 'Placement', type: 'string', jsonPath: '.spec.placement', description: 'Where the Job may run.' },
    {
      name: 'Active',
      type: 'integer',
      jsonPath: '.status.active',
      description: 'Runs in progress.',
      priority: 1,
    },
    {
      name: 'Succeeded',
      type: 'integer',
      jsonPath: '.status.succeeded',
      description: 'Runs that succeeded.',
    },
    { name: 'Failed', type: 'integer', jsonPath: '.status.failed', description: 'Runs that failed.' },
    AGE_COLUMN,
  ],
}));
