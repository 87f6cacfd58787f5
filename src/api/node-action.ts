// NodeAction: the protocol object. One request to perform one action on one node,
// from the CLI, the HTTP API, kubectl or another controller; its status is the record
// of how it was judged and carried out.
import Type, { type Static } from 'typebox';
import {
  ACTIONS,
  AGE_COLUMN,
  type Action,
  CATEGORY,
  Conditions,
  DnsLabel,
  DnsSubdomain,
  Duration,
  Int32,
  Int64,
  LabelSelector,
  Resource,
  StringEnum,
  Text,
  Timestamp,
  rules,
  type KindDefinition,
  type ValidationRule,
} from './common.ts';
import { HOOK_KIND_NAMES } from './hooks.ts';

/** At least three letters, in any script: a bypass reason says something readable. */
export const VISIBLE_REASON = "r'(?s)\\pL.*\\pL.*\\pL'";

/** VISIBLE_REASON, in JavaScript: for the CLI and the HTTP API, which refuse before the API server does. */
export function hasVisibleWords(text: string): boolean {
  return /\p{L}.*\p{L}.*\p{L}/su.test(text);
}

// An image reference with a tag or a digest: an upgrade never means "whatever latest is".
const IMAGE_REFERENCE =
  '^[a-z0-9]+(([.]|_|__|-+)[a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+(([.]|_|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$';

export const UpgradeParameters = Type.Object(
  {
    image: Type.String({
      description:
        'The Talos installer image to upgrade to, with a tag or digest, e.g. factory.talos.dev/installer/<schematic>:v1.11.5.',
      minLength: 1,
      maxLength: 512,
      ...rules({
        rule: `self.matches('${IMAGE_REFERENCE}') && (self.contains('@sha256:') || self.matches(':[A-Za-z0-9_][A-Za-z0-9_.-]*$'))`,
        message:
          'upgrade.image must be an image reference with a tag or digest, e.g. factory.talos.dev/installer/<schematic>:v1.11.5',
      }),
    }),
    stage: Type.Optional(
      Type.Boolean({
        description:
          'Stage the upgrade and perform it on the next reboot, for when files in use would block it. Defaults to false.',
        default: false,
      }),
    ),
  },
  { description: 'Parameters of an Upgrade; only with action Upgrade, where it is required.' },
);

export const RebootParameters = Type.Object(
  {
    mode: Type.Optional(
      StringEnum(['Default', 'PowerCycle', 'Force'], {
        description:
          "How to reboot: Default (through kexec when the node allows it), PowerCycle (always through the firmware), or Force (Talos 1.12 and later: skips stopping the node's pods and services gracefully). Force is sent only when asked for here by name, never implied by a bypass. Defaults to Default.",
        default: 'Default',
      }),
    ),
  },
  { description: 'Parameters of a Reboot; only with action Reboot.' },
);

/** The Talos reset wipe modes gatehouse offers (docs/concepts.md says what each wipes). */
export const RESET_WIPE_MODES = ['All', 'SystemDisk', 'UserDisks', 'SystemData'] as const;

export const ResetParameters = Type.Object(
  {
    graceful: Type.Optional(
      Type.Boolean({
        description:
          'Leave etcd (on control-plane nodes: for good, the cluster has one member less) and the cluster cleanly before wiping. Set false only for a node that cannot leave gracefully. Defaults to true.',
        default: true,
      }),
    ),
    wipeMode: Type.Optional(
      StringEnum(RESET_WIPE_MODES, {
        description:
          'What to wipe. All: the system disk (on Talos 1.14 also the disks holding its ETCD, CRI, KUBELET and LOG volumes) and the disks in userDisks; SystemDisk: the system disk alone; UserDisks: only the disks in userDisks, Talos and its data stay; SystemData: the STATE and EPHEMERAL partitions (and on Talos 1.14, ETCD, CRI, KUBELET and LOG, which it may put on partitions of their own), keeping Talos installed: the node comes back in maintenance mode. Defaults to All.',
        default: 'All',
      }),
    ),
    userDisks: Type.Optional(
      Type.Array(
        Type.String({
          description: 'A device path as Talos lists it (talosctl get disks), e.g. /dev/sdb.',
          minLength: 6,
          maxLength: 256,
          pattern: '^/dev/[A-Za-z0-9._/-]+$',
        }),
        {
          description:
            'The user disks to wipe, by device path: required with wipeMode UserDisks (Talos wipes only the disks it is given), optional with All, not allowed with SystemDisk or SystemData. Never the system disk.',
          minItems: 1,
          maxItems: 64,
          'x-kubernetes-list-type': 'set',
        },
      ),
    ),
  },
  {
    description: 'Parameters of a Reset; only with action Reset.',
    ...rules(
      {
        rule: "!has(self.wipeMode) || self.wipeMode != 'UserDisks' || (has(self.userDisks) && size(self.userDisks) > 0)",
        message:
          'reset.userDisks must list the disks to wipe with wipeMode UserDisks (e.g. ["/dev/sdb"]): Talos wipes only the user disks it is given, so a UserDisks reset without any would wipe nothing',
        fieldPath: '.userDisks',
        reason: 'FieldValueRequired',
      },
      {
        rule: "!has(self.userDisks) || !has(self.wipeMode) || self.wipeMode == 'All' || self.wipeMode == 'UserDisks'",
        message:
          'reset.userDisks is only allowed with wipeMode All or UserDisks: Talos refuses user disks with SystemDisk, and SystemData wipes partitions only',
        fieldPath: '.userDisks',
        reason: 'FieldValueForbidden',
      },
    ),
  },
);

export const MaintenanceParameters = Type.Object(
  {
    maxDuration: Type.Optional(
      Duration(
        'maintenance.maxDuration',
        'Longest time the node is held out once drained: then it is released as if someone had released it, with a Warning (MaxDurationReached). Absent: held until released.',
        { min: '10s', max: '720h' },
      ),
    ),
    reason: Type.Optional(
      Type.String({
        description:
          'What the node is taken out for (e.g. "replace DIMM B2"), shown with the hold in the status, the CLI and the dashboard.',
        minLength: 1,
        maxLength: 1024,
      }),
    ),
  },
  {
    description:
      'Parameters of a Maintenance: the node is cordoned and drained (Managed) or drained by the requester (External), then held out of service (phase Held, counting against budgets) until released with the annotation talos.dev/released: "true", `gatehouse maintenance release`, POST /v1/actions/{name}/release, or maxDuration; then its NodeReadyJobs run and the cordon is lifted. Only with action Maintenance.',
  },
);

/**
 * How a configuration change disrupts its node, least to most (src/talos/config-disruption.ts):
 * nothing restarts; a service restarts (kubelet, the network, control-plane static pods),
 * pods keep running; CRI restarts, and with it every pod on the node (Talos 1.14); the
 * node reboots.
 */
export const DISRUPTION_CLASSES = ['None', 'ServiceRestart', 'CRIRestart', 'Reboot'] as const;
export type DisruptionClass = (typeof DISRUPTION_CLASSES)[number];

export const ConfigChangeParameters = Type.Object(
  {
    mode: Type.Optional(
      StringEnum(['Auto', 'NoReboot', 'Reboot', 'Staged', 'Try'], {
        description:
          "How the configuration is applied, as talosctl apply-config --mode: Auto lets Talos decide (Managed execution only, where the controller learns from Talos whether the node reboots), NoReboot applies live, Reboot applies and reboots, Staged applies on the next boot, Try applies live and rolls back after Talos's timeout. Defaults to Auto.",
        default: 'Auto',
      }),
    ),
    configSecretRef: Type.Optional(
      Type.Object(
        {
          name: DnsSubdomain("Name of the Secret, in the controller's namespace."),
          key: Type.Optional(
            Type.String({
              description: 'Key in the Secret holding the configuration. Defaults to config.yaml.',
              minLength: 1,
              maxLength: 253,
              default: 'config.yaml',
            }),
          ),
        },
        {
          description:
            "The node's full machine configuration, in a Secret in the controller's own namespace (so the controller needs no cluster-wide Secret access). Required with Managed execution, not allowed with External.",
        },
      ),
    ),
    disruptionClass: Type.Optional(
      StringEnum(DISRUPTION_CLASSES, {
        description:
          "External execution only: how the change disrupts the node, as the requester (or the Talos API gate, which compares the configurations it forwards) states it: None, ServiceRestart, CRIRestart or Reboot. It decides whether the etcd guard holds the action. A class lower than the mode allows (None with mode Reboot) is raised to it; absent, the most disruptive class the mode allows on the node's Talos version counts. Managed actions are classified by the controller, which compares the node's configuration with the new one.",
      }),
    ),
    confirm: Type.Optional(
      Type.Object(
        {
          checks: Type.Array(DnsSubdomain('The name of a ClusterHealthCheck.'), {
            description:
              'ClusterHealthChecks that must be healthy, evaluated afresh for the node, after the change is applied in TRY mode: all healthy inside the window commits it.',
            minItems: 1,
            maxItems: 32,
          }),
          window: Type.Optional(
            Duration(
              'configChange.confirm.window',
              "How long the change is on trial: Talos's TRY timeout. The checks must be healthy before it ends (with a margin for the commit); otherwise Talos reverts the change.",
              { min: '20s', max: '20m', default: '2m' },
            ),
          ),
        },
        {
          description:
            'Mode Try confirmed by checks (Managed execution): the change is applied in TRY mode with the window as its timeout, the checks are evaluated for the node, and only if they are all healthy in time is it applied again with NO_REBOOT, which keeps it; otherwise Talos reverts it at the timeout and the action fails with their messages.',
        },
      ),
    ),
  },
  { description: 'Parameters of a ConfigChange; only with action ConfigChange, where it is required.' },
);

export const DrainOptions = Type.Object(
  {
    enabled: Type.Optional(
      Type.Boolean({
        description: 'Cordon and drain the node before a disruptive step. Defaults to true.',
        default: true,
      }),
    ),
    timeout: Type.Optional(
      Duration('drain.timeout', 'How long evictions may take before the action fails.', {
        min: '1s',
        max: '24h',
        default: '10m',
      }),
    ),
    onTimeout: Type.Optional(
      StringEnum(['Uncordon', 'KeepCordoned'], {
        description:
          'The node after a drain that timed out, which fails the action before anything was done to it: Uncordon (the default: the cordon the action made is lifted) or KeepCordoned (it stays, for a person or a later try; a NodeRollout under onDrainTimeout: Quarantine asks for it).',
        default: 'Uncordon',
      }),
    ),
    gracePeriodSeconds: Type.Optional(
      Int32("Termination grace period for evicted pods. Absent: each pod's own.", {
        minimum: 0,
        maximum: 86400,
      }),
    ),
    podSelector: Type.Optional(
      LabelSelector('Evict only pods with matching labels. Absent: every pod but DaemonSet and mirror pods.'),
    ),
  },
  {
    description:
      'How the controller drains the node (Managed execution only): by eviction, so PodDisruptionBudgets are respected; DaemonSet and mirror pods stay. Absent: drain with the defaults.',
  },
);

const bypassFields = {
  healthChecks: Type.Optional(
    Type.Boolean({
      description: 'Approve without waiting for the health checks. Defaults to false.',
      default: false,
    }),
  ),
  hooks: Type.Optional(
    Type.Boolean({
      description: 'Approve without running the pre-action hooks. Defaults to false.',
      default: false,
    }),
  ),
  reason: Type.Optional(
    Type.String({
      description: 'Why, in words: required with any bypass, and recorded in the status and an Event.',
      maxLength: 1024,
    }),
  ),
};

/** The CRD's own rule on a bypass reason (the admission policy asks for one at all). */
export const BYPASS_REASON_RULES = rules({
  // trim() leaves zero-width and other invisible characters: letters are asked for.
  rule: `!((has(self.healthChecks) && self.healthChecks) || (has(self.hooks) && self.hooks)) || !has(self.reason) || self.reason.trim().size() == 0 || self.reason.matches(${VISIBLE_REASON})`,
  message:
    'spec.bypass.reason must say why in words (at least three letters): it is recorded in the status and an Event',
  fieldPath: '.reason',
  reason: 'FieldValueInvalid',
});

export const Bypass = Type.Object(bypassFields, {
  description:
    'Skip the health checks and/or the pre-action hooks. Needs the verb bypass on nodeactions.talos.dev (ClusterRole gatehouse:bypass) and a reason; the shipped ValidatingAdmissionPolicy refuses it otherwise.',
  ...BYPASS_REASON_RULES,
});

/**
 * A rollout's bypass: an action's, and who granted it for what the rollout's spec says
 * now. A rollout's spec may change after its bypass was granted (its selector, its
 * parallelism, its pause), and every change widens or speeds up what the bypass covers.
 */
export const RolloutBypass = Type.Object(
  {
    ...bypassFields,
    grantedBy: Type.Optional(
      Type.String({
        description:
          "Who granted the bypass for the rollout's spec as it is: the user who last changed the spec of a rollout that bypasses (the admission policy refuses any other name, and any change without the verb bypass but pausing it). Absent: spec.requestedBy. Recorded in the Bypassed condition and Event of each NodeAction the rollout creates.",
        minLength: 1,
        maxLength: 512,
      }),
    ),
  },
  {
    description:
      'Skip the health checks and/or the pre-action hooks of every NodeAction of the rollout. Needs the verb bypass on nodeactions.talos.dev (ClusterRole gatehouse:bypass) and a reason, when it is set and whenever the spec of a rollout that bypasses changes (other than to pause it); the shipped ValidatingAdmissionPolicy refuses it otherwise.',
    ...BYPASS_REASON_RULES,
  },
);

/** A per-phase deadline: how long the action may stay in that phase before it fails. */
function deadline(phase: string, what: string, defaultValue: string) {
  return Type.Optional(
    Duration(`deadlines.${phase}`, `Longest time ${what}.`, {
      min: '1s',
      max: '168h',
      default: defaultValue,
    }),
  );
}

export const Deadlines = Type.Object(
  {
    pending: deadline('pending', 'waiting for its policies to allow it (a free slot, an open window)', '24h'),
    waitingForHealth: deadline('waitingForHealth', 'waiting for its health checks to pass', '30m'),
    runningPreHooks: deadline('runningPreHooks', 'running its pre-action hooks', '1h'),
    approved: deadline(
      'approved',
      'approved but not yet executed (External execution: the requester has this long to act and set the talos.dev/executed annotation)',
      '1h',
    ),
    executing: deadline('executing', 'executing, drain included', '30m'),
    waitingForNode: deadline(
      'waitingForNode',
      'waiting for the node to come back with a new boot ID and Ready',
      '30m',
    ),
    runningPostHooks: deadline(
      'runningPostHooks',
      'running the boot hooks of the node after the action',
      '1h',
    ),
  },
  {
    description:
      'How long the action may stay in each phase before it fails (phase Failed, with the deadline named in the message). Every deadline has a default, filled in by the API server.',
    default: {},
  },
);

/** The spec fields that hold an action's parameters. */
export type ParameterField = 'upgrade' | 'reboot' | 'reset' | 'configChange' | 'maintenance';

/**
 * Each action's parameters: the spec field that belongs to it alone (allowed with that
 * action only) and whether it is required. A new action does not compile until it is here.
 */
export const ACTION_PARAMETERS: { readonly [A in Action]: ParameterField | undefined } = {
  Upgrade: 'upgrade',
  Reboot: 'reboot',
  Shutdown: undefined,
  Reset: 'reset',
  ConfigChange: 'configChange',
  EtcdLeave: undefined,
  Maintenance: 'maintenance',
};

/** The parameters an action cannot go without, and how the refusal says so. */
const REQUIRED_PARAMETERS: Partial<Record<Action, string>> = {
  Upgrade: 'spec.upgrade (with upgrade.image) is required when spec.action is Upgrade',
  ConfigChange: 'spec.configChange is required when spec.action is ConfigChange',
};

const parameterFields = (Object.entries(ACTION_PARAMETERS) as [Action, ParameterField | undefined][]).flatMap(
  ([action, field]) => (field ? [{ action, field }] : []),
);

/** The actions whose node comes back from a reboot: the ones post-checks judge it after. */
const POST_CHECKED = ['Upgrade', 'Reboot', 'ConfigChange'];

/** Rules of postChecks and onPostCheckFailure, shared by NodeAction and NodeRollout. */
export const postCheckRules: ValidationRule[] = [
  {
    rule: `!has(self.postChecks) || self.action in [${POST_CHECKED.map((a) => `'${a}'`).join(', ')}]`,
    message:
      'spec.postChecks is only allowed with action Upgrade, Reboot or ConfigChange: the actions whose node comes back',
    fieldPath: '.postChecks',
    reason: 'FieldValueForbidden',
  },
  {
    rule: "!has(self.onPostCheckFailure) || self.onPostCheckFailure != 'Rollback' || (self.action == 'Upgrade' && self.execution == 'Managed' && has(self.postChecks))",
    message:
      'spec.onPostCheckFailure may be Rollback only for an Upgrade with Managed execution and spec.postChecks: Talos rolls back an upgrade, and the controller must make the call',
    fieldPath: '.onPostCheckFailure',
    reason: 'FieldValueForbidden',
  },
];

const parameterRules: ValidationRule[] = [
  ...parameterFields.flatMap(({ action, field }): ValidationRule[] => {
    const message = REQUIRED_PARAMETERS[action];
    return message
      ? [
          {
            rule: `self.action != '${action}' || has(self.${field})`,
            message,
            fieldPath: `.${field}`,
            reason: 'FieldValueRequired',
          },
        ]
      : [];
  }),
  ...parameterFields.map(({ action, field }): ValidationRule => ({
    rule: `!has(self.${field}) || self.action == '${action}'`,
    message: `spec.${field} is only allowed when spec.action is ${action}`,
    fieldPath: `.${field}`,
    reason: 'FieldValueForbidden',
  })),
  {
    rule: "!has(self.configChange) || self.execution != 'Managed' || has(self.configChange.configSecretRef)",
    message:
      'spec.configChange.configSecretRef is required with Managed execution: the controller applies the machine configuration from that Secret',
    fieldPath: '.configChange',
    reason: 'FieldValueRequired',
  },
  {
    rule: "!has(self.configChange) || !has(self.configChange.configSecretRef) || self.execution == 'Managed'",
    message:
      'spec.configChange.configSecretRef is only allowed with Managed execution: with External execution the requester applies the configuration itself',
    fieldPath: '.configChange.configSecretRef',
    reason: 'FieldValueForbidden',
  },
  {
    rule: "!has(self.configChange) || self.execution != 'External' || self.configChange.mode != 'Auto'",
    message:
      'spec.configChange.mode must be NoReboot, Reboot, Staged or Try with External execution (Auto needs Managed execution, where the controller learns from Talos whether the node reboots)',
    fieldPath: '.configChange.mode',
  },
  {
    rule: "!has(self.configChange) || !has(self.configChange.disruptionClass) || self.execution == 'External'",
    message:
      'spec.configChange.disruptionClass is only allowed with External execution: the controller classifies a Managed change itself, comparing the configurations',
    fieldPath: '.configChange.disruptionClass',
    reason: 'FieldValueForbidden',
  },
  {
    rule: "!has(self.configChange) || !has(self.configChange.confirm) || (self.configChange.mode == 'Try' && self.execution == 'Managed')",
    message:
      'spec.configChange.confirm is only allowed with mode Try and Managed execution: the controller applies the change on trial and commits it',
    fieldPath: '.configChange.confirm',
    reason: 'FieldValueForbidden',
  },
  {
    rule: "!has(self.drain) || self.execution == 'Managed'",
    message:
      'spec.drain is only allowed with Managed execution: with External execution the requester drains, if it wants to',
    fieldPath: '.drain',
    reason: 'FieldValueForbidden',
  },
  ...postCheckRules,
  {
    rule: 'self == oldSelf',
    message: 'spec is immutable: delete this NodeAction (which cancels it) and create a new one',
  },
];

export const PostChecks = Type.Object(
  {
    checks: Type.Array(DnsSubdomain('The name of a ClusterHealthCheck.'), {
      description:
        'ClusterHealthChecks that must be healthy, evaluated afresh for the node (a Node-scoped check for it alone), once it is back and its boot hooks are done.',
      minItems: 1,
      maxItems: 32,
    }),
    within: Type.Optional(
      Duration(
        'postChecks.within',
        'How long after its boot hooks are done they may take to be healthy, all at once, before the action fails (or is rolled back).',
        { min: '0s', max: '24h', default: '10m' },
      ),
    ),
  },
  {
    description:
      'Checks that must be healthy for the node after it returns, before the action succeeds: a node Ready on the new version that fails what matters (a CSI driver, a database) is not a success.',
  },
);

export const OnPostCheckFailure = StringEnum(['Fail', 'Rollback'], {
  description:
    "What a post-check that is not healthy in time does: Fail (the default) ends the action Failed with the checks' messages; Rollback (Managed upgrades) also calls Talos's Rollback once and waits for the node to come back on the version it ran before, recorded in status.rollback.",
  default: 'Fail',
});

export const NodeActionSpec = Type.Object(
  {
    nodeName: DnsSubdomain('Name of the Node to act on.'),
    action: StringEnum(ACTIONS, {
      description: `What to do to the node: ${ACTIONS.slice(0, -1).join(', ')} or ${ACTIONS.at(-1) ?? ''}.`,
    }),
    upgrade: Type.Optional(UpgradeParameters),
    reboot: Type.Optional(RebootParameters),
    reset: Type.Optional(ResetParameters),
    configChange: Type.Optional(ConfigChangeParameters),
    maintenance: Type.Optional(MaintenanceParameters),
    execution: Type.Optional(
      StringEnum(['Managed', 'External'], {
        description:
          'Who performs the action once approved: Managed, the controller through the Talos API (the default); External, the requester (e.g. with talosctl), which then sets the annotation talos.dev/executed: "true" so the controller follows the node to the end.',
        default: 'Managed',
      }),
    ),
    drain: Type.Optional(DrainOptions),
    postChecks: Type.Optional(PostChecks),
    onPostCheckFailure: Type.Optional(OnPostCheckFailure),
    bypass: Type.Optional(Bypass),
    deadlines: Type.Optional(Deadlines),
    requestedBy: Type.String({
      description:
        "The requesting user's name, exactly as the API server knows it (kubectl auth whoami). The admission policy refuses any other name, so the record can be trusted; the CLI and HTTP API fill it in.",
      minLength: 1,
      maxLength: 512,
    }),
  },
  {
    description:
      'The request: which node, which action with which parameters, how it is executed, and by whom. Immutable.',
    ...rules(...parameterRules),
  },
);

export const NODE_ACTION_PHASES = [
  'Pending',
  'WaitingForHealth',
  'RunningPreHooks',
  'Approved',
  'Executing',
  'WaitingForNode',
  'Held',
  'RunningPostHooks',
  'Succeeded',
  'Failed',
  'Denied',
  'Cancelled',
] as const;
export type NodeActionPhase = (typeof NODE_ACTION_PHASES)[number];

export const CheckResult = Type.Object(
  {
    name: Type.String({
      description:
        'Name of the ClusterHealthCheck, builtin:etcd for the etcd guard of a control-plane node, or builtin:do-not-disrupt for the Pods and the Node that ask not to be disrupted (annotation talos.dev/do-not-disrupt), or builtin:maintainers for other maintainers holding the node (a medik8s NodeMaintenance, a cordon not made by gatehouse), or builtin:drain-forecast for the drain forecast under an ActionPolicy with drainForecast: Block: names no ClusterHealthCheck can have.',
      minLength: 1,
      maxLength: 253,
      pattern:
        '^(builtin:etcd|builtin:do-not-disrupt|builtin:maintainers|builtin:drain-forecast|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$',
    }),
    healthy: Type.Boolean({
      description: 'Whether it held at the fresh evaluation the action was judged on.',
    }),
    bypassed: Type.Optional(
      Type.Boolean({ description: 'True when the check was not waited for because of spec.bypass.' }),
    ),
    notChecked: Type.Optional(
      Type.Boolean({
        description:
          'True when the check could not be made at all (builtin:etcd without a talosconfig); healthy then says whether the action was let through without it, and message why.',
      }),
    ),
    probeTime: Type.Optional(Timestamp('When that evaluation was made.')),
    message: Type.Optional(Text('What the probe found.', 4096)),
  },
  { description: 'The result of one health check the action was judged on.' },
);

export const HookRunRecord = Type.Object(
  {
    kind: StringEnum(HOOK_KIND_NAMES, { description: 'Kind of the hook.' }),
    namespace: DnsLabel('Namespace of the hook.'),
    name: DnsSubdomain('Name of the hook.'),
    uid: Type.Optional(
      Type.String({
        description:
          'UID of the hook object: a hook deleted and created again under the same name is a different hook, with runs of its own.',
        maxLength: 64,
      }),
    ),
    attempt: Int32('Attempt number, from 1.', { minimum: 1 }),
    failurePolicy: Type.Optional(
      StringEnum(['Fail', 'Ignore'], {
        description: "The hook's failurePolicy when it ran: Ignore means a failure did not stop the action.",
      }),
    ),
    jobName: Type.Optional(DnsSubdomain('Name of the Job created for this attempt; absent for a webhook.')),
    runs: Type.Optional(
      StringEnum(['Job', 'Webhook', 'Approval', 'Readiness'], {
        description:
          "What the attempt runs: the hook's template (a Job), its webhook, a person's approval, or the readiness preset.",
      }),
    ),
    templateHash: Type.Optional(
      Type.String({
        description:
          'Hash of the Job gatehouse built for this attempt (its annotation talos.dev/template-hash): a Job under that name without it is not adopted.',
        maxLength: 64,
      }),
    ),
    phase: StringEnum(['Pending', 'Running', 'Succeeded', 'Failed', 'Bypassed'], {
      description: 'Pending, Running, Succeeded, Failed, or Bypassed (not run because of spec.bypass.hooks).',
    }),
    startTime: Type.Optional(Timestamp('When the attempt started.')),
    completionTime: Type.Optional(Timestamp('When the attempt finished.')),
    message: Type.Optional(Text('What happened: the Job failure reason or the webhook message.', 4096)),
  },
  { description: 'One attempt of one hook for this action.' },
);

const APPROVERS = Type.Array(Type.String({ maxLength: 256 }), { maxItems: 32 });

export const ApprovalDecision = Type.Object(
  {
    hook: Type.String({ description: 'The approval hook decided: Kind/namespace/name.', maxLength: 512 }),
    decision: StringEnum(['Approved', 'Refused'], {
      description: 'Approved, or Refused (the action ends Denied).',
    }),
    by: Type.String({ description: 'Who decided, as the API server authenticated them.', maxLength: 256 }),
    reason: Text('Why, in their words.', 1024),
    time: Timestamp('When the controller took the decision.'),
  },
  { description: "One person's decision on an approval hook." },
);

export const PersonApproval = Type.Object(
  {
    pending: Type.Optional(
      Type.Object(
        {
          hook: Type.String({
            description:
              'The approval hook the action waits for, Kind/namespace/name: the value an approval must give in talos.dev/approval-for.',
            maxLength: 512,
          }),
          message: Type.Optional(Text("The hook's message to its approvers.", 1024)),
          groups: Type.Optional({ ...APPROVERS, description: 'Groups whose members may approve.' }),
          users: Type.Optional({ ...APPROVERS, description: 'Users who may approve.' }),
          allowSelfApproval: Type.Boolean({ description: 'Whether the requester may approve it.' }),
          since: Timestamp('Since when the action waits for it.'),
        },
        {
          description:
            'The approval the action waits for now, written by the controller: the admission policy judges an approval against it (who may give it), so it is the one an approver answers.',
        },
      ),
    ),
    decisions: Type.Optional(
      Type.Array(ApprovalDecision, {
        description: "Every decision taken on the action's approval hooks, oldest first.",
        maxItems: 32,
      }),
    ),
  },
  {
    description:
      'A person\'s approval of the action, asked for by approval hooks (docs/concepts.md, "Approval"): who may give the one it waits for, and who decided what, recorded like a bypass.',
  },
);

export const UndoRecord = Type.Object(
  {
    decisionTime: Timestamp('When the action ended and the undo rule was applied (once).'),
    nodeDisrupted: Type.Boolean({
      description:
        'Whether the node may have been disrupted when the action ended (a Talos call made and not refused, the executed mark, a new boot): then nothing is undone, the boot hooks clean up.',
    }),
    reason: Text('Why the undo runs, or does not, in words.', 1024),
    runs: Type.Optional(
      Type.Array(HookRunRecord, {
        description:
          'One run per pre-action hook that had started and carries an undo, each at most once (never retried; its Job name is derived from the action, the hook and the word undo).',
        maxItems: 64,
      }),
    ),
  },
  {
    description:
      'The undo of the pre-action hooks, decided once when the action ended unsuccessfully (docs/decisions.md, "Undo"): deleting the action waits until its runs finished, at most their timeout.',
  },
);

/** How many refused evictions status.drain lists; the rest are only counted (moreBlockers). */
export const DRAIN_BLOCKERS_LISTED = 10;

export const DrainBlocker = Type.Object(
  {
    namespace: Type.String({ description: "The pod's namespace.", maxLength: 63 }),
    pod: Type.String({ description: 'The pod whose eviction is refused.', maxLength: 253 }),
    podDisruptionBudget: Type.Optional(
      Type.String({
        description:
          "The PodDisruptionBudget (in the pod's namespace) that selects the pod, when the refusal came from one.",
        maxLength: 253,
      }),
    ),
    disruptionsAllowed: Type.Optional(
      Int32('What that budget allows now (status.disruptionsAllowed): 0 while it refuses.', { minimum: 0 }),
    ),
    since: Timestamp("When the pod's eviction was first refused in this drain."),
    message: Type.Optional(Text('The refusal as the API server gave it, when no budget explains it.', 512)),
  },
  { description: 'One pod whose eviction is refused, and what refuses it.' },
);

export const DrainRecord = Type.Object(
  {
    blockers: Type.Optional(
      Type.Array(DrainBlocker, {
        description: `The pods whose eviction is refused now, longest refused first (at most ${String(DRAIN_BLOCKERS_LISTED)}); absent once the drain proceeds.`,
        maxItems: DRAIN_BLOCKERS_LISTED,
      }),
    ),
    moreBlockers: Type.Optional(Int32('How many more pods are refused than blockers lists.', { minimum: 1 })),
  },
  {
    description:
      'Managed execution: what holds the drain while PodDisruptionBudgets refuse evictions (with the condition DrainBlocked), refreshed as it changes; the drain never forces a pod out.',
  },
);

/** How many Pods status.drainForecast names; the rest are only counted (morePods). */
export const DRAIN_FORECAST_PODS_LISTED = 10;

export const DrainForecastPod = Type.Object(
  {
    namespace: Type.String({ description: "The Pod's namespace.", maxLength: 63 }),
    pod: Type.String({ description: 'The name of the Pod the forecast names.', maxLength: 253 }),
    podDisruptionBudget: Type.Optional(
      Type.String({
        description:
          "A PodDisruptionBudget (in the Pod's namespace) that selects it and allows no disruption now: its eviction would be refused.",
        maxLength: 253,
      }),
    ),
    unmanaged: Type.Optional(
      Type.Boolean({
        description:
          'The Pod has no controller (no ownerReference with controller: true): a drain deletes it and nothing recreates it.',
      }),
    ),
    fitsNowhere: Type.Optional(
      Text(
        'Why no other node could take the Pod, in the scheduler\'s words (e.g. "3 nodes: node selector or required affinity does not match; 1 node: taint dedicated=db:NoSchedule not tolerated"). Absent: it fits somewhere, or was not judged.',
        1024,
      ),
    ),
  },
  { description: 'One Pod the forecast names, and what is wrong with its leaving.' },
);

export const DrainForecast = Type.Object(
  {
    time: Timestamp('When the forecast was made.'),
    evicted: Int32('The Pods a drain of the node would evict now.', { minimum: 0 }),
    leftInPlace: Type.Optional(
      Int32(
        'The Pods a drain leaves in place: DaemonSet and mirror (static) Pods, finished Pods, gatehouse hook Pods, Pods spec.drain.podSelector does not select.',
        { minimum: 0 },
      ),
    ),
    blockedByPDB: Int32(
      'Of the evicted Pods, those a PodDisruptionBudget at its limit (0 disruptions allowed) selects.',
      {
        minimum: 0,
      },
    ),
    unmanaged: Int32('Of the evicted Pods, those without a controller: nothing recreates them.', {
      minimum: 0,
    }),
    fitsNowhere: Int32('Of the evicted Pods, those no other schedulable node could take.', { minimum: 0 }),
    notJudged: Type.Optional(
      Int32(
        'Of the evicted Pods, those that fit on none of the nodes whose Pods were read, while other nodes could take them: the forecast reads a bounded number of nodes and does not say.',
        { minimum: 1 },
      ),
    ),
    pods: Type.Optional(
      Type.Array(DrainForecastPod, {
        description: `The Pods with something wrong, PodDisruptionBudget and nowhere to go first (at most ${String(DRAIN_FORECAST_PODS_LISTED)}).`,
        maxItems: DRAIN_FORECAST_PODS_LISTED,
      }),
    ),
    morePods: Type.Optional(
      Int32('How many more Pods have something wrong than pods lists.', { minimum: 1 }),
    ),
    message: Text('The forecast in words, with what it simulates and what it does not.', 4096),
  },
  {
    description:
      'What a drain of the node would meet, forecast at the health gate before approval for an action that drains it (docs/concepts.md, "The drain forecast"): Pods a PodDisruptionBudget holds, Pods nothing recreates, Pods no other node could take. Recorded and shown; under an ActionPolicy with drainForecast: Block, it holds the gate as builtin:drain-forecast.',
  },
);

export const ExecutionRecord = Type.Object(
  {
    drainTime: Type.Optional(
      Timestamp(
        'When the node was cordoned and drained (or the drain was found unnecessary); a drain recorded here is not made again.',
      ),
    ),
    call: Type.Optional(
      Type.String({
        description:
          'The Talos call that disrupts the node (e.g. MachineService.Reboot), named when the controller decided to make it.',
        maxLength: 256,
      }),
    ),
    callTime: Type.Optional(
      Timestamp(
        'When the controller decided to make the call, written before making it: from then on the call is never made again for this action, even by a restarted controller, which waits for the node instead.',
      ),
    ),
    callResult: Type.Optional(
      StringEnum(['Acknowledged', 'Failed', 'Unknown'], {
        description:
          'What came of the call: Acknowledged by Talos, Failed (Talos refused it, or it never reached Talos), or Unknown (no answer, or the controller restarted while it was made).',
      }),
    ),
    reboots: Type.Optional(
      Type.Boolean({
        description:
          'Whether the node reboots (or goes down) because of the call; for a ConfigChange in mode Auto, what Talos decided.',
      }),
    ),
    installRetries: Type.Optional(
      Type.Object(
        {
          count: Int32('How many times the pull and the install were made again.', { minimum: 1 }),
          lastTime: Timestamp('When the installer last failed on a dependency.'),
          message: Text("The installer's failure that caused the last retry."),
          madeAgain: Type.Optional(
            Type.Boolean({
              description:
                'Whether the pull and install were asked for again since that failure (the next failure is a new one).',
            }),
          ),
        },
        {
          description:
            'An upgrade whose installer failed on a dependency (exit code 5, e.g. an image pull): pulled and installed again, with a growing pause, until the executing deadline.',
        },
      ),
    ),
  },
  {
    description:
      'Managed execution: the steps the controller took through the Talos API, each recorded before the next one starts.',
  },
);

/** How many configuration paths status.configDisruption names. */
export const CONFIG_DISRUPTION_PATHS_LISTED = 16;

export const ConfigDisruption = Type.Object(
  {
    class: StringEnum(DISRUPTION_CLASSES, {
      description:
        'How the change disrupts the node: None, ServiceRestart (pods keep running), CRIRestart (every pod on the node restarts: drained first) or Reboot. It decides the drain (Managed), the etcd guard and the pre-action hooks (docs/concepts.md, "How a configuration change disrupts").',
    }),
    basis: StringEnum(['Compared', 'Stated', 'Mode'], {
      description:
        "How the class was decided: Compared (the node's running configuration, read through the Talos API, against the new one), Stated (External: spec.configChange.disruptionClass, raised to what the mode needs), Mode (nothing to compare: the most disruptive class the mode allows on the node's Talos version).",
    }),
    talosVersion: Type.Optional(
      Type.String({
        description: 'The Talos version the facts were taken for (from the Node).',
        maxLength: 64,
      }),
    ),
    paths: Type.Optional(
      Type.Array(Type.String({ maxLength: 256 }), {
        description: `The configuration paths (or documents, "kind:NAME") that decided the class, at most ${String(CONFIG_DISRUPTION_PATHS_LISTED)}: the differences of the highest class. Paths only, never values.`,
        maxItems: CONFIG_DISRUPTION_PATHS_LISTED,
      }),
    ),
    message: Text('Why, in words: the paths, the facts of the Talos version, the mode.', 4096),
    time: Timestamp('When it was decided (before the health gate).'),
  },
  {
    description:
      'ConfigChange: how the change disrupts the node, decided before the health gate from the configuration paths that change and the facts of the Talos version (src/talos/config-disruption-facts.ts).',
  },
);
export type ConfigDisruption = Static<typeof ConfigDisruption>;

/** The states of a silence gatehouse holds for an action (src/silences/plan.ts). */
export const SILENCE_STATES = ['Pending', 'Active', 'Expired', 'Lapsed'] as const;
export type SilenceState = (typeof SILENCE_STATES)[number];

export const SilenceRecord = Type.Object(
  {
    url: Type.String({
      description: 'The Alertmanager the silence is held in (alertmanagerSilence.url of a governing policy).',
      maxLength: 2048,
    }),
    nodeLabel: Type.String({
      description: "The alert label the silence matches, equal to the action's node.",
      maxLength: 128,
    }),
    state: StringEnum(SILENCE_STATES, {
      description:
        'Pending: asked for, not yet confirmed by Alertmanager. Active: Alertmanager holds it until endsAt; the controller renews it while the action runs. Expired: the controller expired it when the action ended (or no policy asked for it any more). Lapsed: it ended, or ends, by itself at endsAt — its duration ran out, or Alertmanager could not be reached to expire it.',
    }),
    id: Type.Optional(Type.String({ description: "Alertmanager's ID of the silence.", maxLength: 128 })),
    endsAt: Type.Optional(
      Timestamp(
        'When the silence ends unless renewed: as Alertmanager confirmed it, or, while Pending, as asked for.',
      ),
    ),
  },
  {
    description:
      "A silence of the node's alerts held in Alertmanager while the approved action runs, as a lease renewed every few minutes.",
  },
);

/** How many phase entries status.phaseHistory keeps; the oldest go first. */
export const PHASE_HISTORY_LIMIT = 16;

export const PhaseEntry = Type.Object(
  {
    phase: StringEnum(NODE_ACTION_PHASES, { description: 'The phase entered.' }),
    since: Timestamp('When the action entered it.'),
  },
  { description: 'One phase the action entered, and when.' },
);

/** The last fresh evaluation of the checks a trial or post-checks name, check by check. */
const LastEvaluation = Type.Array(CheckResult, {
  description: 'The last evaluation, check by check.',
  maxItems: 32,
  'x-kubernetes-list-type': 'map',
  'x-kubernetes-list-map-keys': ['name'],
});

export const TryConfirmRecord = Type.Object(
  {
    until: Timestamp('When Talos reverts the change unless it is committed: the call, plus the window.'),
    time: Type.Optional(Timestamp('When the checks were last evaluated.')),
    results: Type.Optional(LastEvaluation),
    commitTime: Type.Optional(
      Timestamp(
        'When the controller decided to commit (apply again with NO_REBOOT), written before the call: it is never made twice, nor after the window.',
      ),
    ),
    commitResult: Type.Optional(
      StringEnum(['Acknowledged', 'Failed', 'Unknown'], {
        description: 'What came of the commit: Acknowledged by Talos, Failed, or Unknown.',
      }),
    ),
    message: Type.Optional(Text("Talos's answer to the commit, or why there is none.")),
  },
  { description: 'A change applied in TRY mode and confirmed by checks (spec.configChange.confirm).' },
);

export const PostChecksRecord = Type.Object(
  {
    since: Timestamp('When the post-checks began: the node back, its boot hooks done.'),
    time: Type.Optional(Timestamp('When they were last evaluated.')),
    results: Type.Optional(LastEvaluation),
  },
  { description: 'The post-checks (spec.postChecks) of the returned node.' },
);

export const RollbackRecord = Type.Object(
  {
    time: Timestamp(
      'When the controller decided to roll back, written before the call: from then on MachineService.Rollback is never called again for this action.',
    ),
    why: Text('The post-checks that were not healthy in time, in words.'),
    from: Type.String({ description: 'The osImage the node ran when it was rolled back.', maxLength: 256 }),
    callResult: Type.Optional(
      StringEnum(['Acknowledged', 'Failed', 'Unknown'], {
        description:
          'What came of the call: Acknowledged by Talos, Failed (refused, or never made), Unknown (no answer, or the controller restarted while it was made).',
      }),
    ),
    message: Type.Optional(Text("Talos's answer, or why there is none.")),
    to: Type.Optional(
      Type.String({ description: 'The osImage the node came back on after the rollback.', maxLength: 256 }),
    ),
    bootID: Type.Optional(
      Type.String({ description: 'The boot ID the node came back with after the rollback.', maxLength: 128 }),
    ),
  },
  { description: 'The rollback of an upgrade whose post-checks failed (onPostCheckFailure: Rollback).' },
);

export const EtcdSnapshotRecord = Type.Object(
  {
    phase: StringEnum(['Taking', 'Taken', 'Failed', 'Bypassed'], {
      description:
        'Taking: an attempt runs (or is about to); Taken: stored and checked; Failed: the last attempt failed (another follows within the timeout, else the action fails); Bypassed: none taken, health checks were bypassed.',
    }),
    policy: Type.String({
      description: 'The ActionPolicy whose spec.etcdSnapshot asked for it.',
      maxLength: 253,
    }),
    startTime: Timestamp("When the first attempt began: the policy's etcdSnapshot.timeout counts from here."),
    attempts: Type.Optional(Int32('Attempts begun so far.', { minimum: 0 })),
    time: Type.Optional(Timestamp('When it was stored, or when the last attempt failed.')),
    name: Type.Optional(Type.String({ description: 'Its object name in the store.', maxLength: 512 })),
    url: Type.Optional(
      Type.String({ description: 'Where it was stored (credentials in the URL redacted).', maxLength: 2600 }),
    ),
    member: Type.Optional(
      Type.String({ description: 'The node of the etcd member it was streamed from.', maxLength: 253 }),
    ),
    size: Type.Optional(Int64('Its size in bytes, as streamed and as the store reports it.', { minimum: 0 })),
    sha256: Type.Optional(
      Type.String({ description: 'Its SHA-256 in hex, computed while streaming.', maxLength: 64 }),
    ),
    raftIndex: Type.Optional(
      Int64(
        "The member's applied raft index read just before the snapshot (EtcdStatus): the snapshot holds at least everything applied up to it. The Talos API tells no MVCC revision; etcdutl snapshot status on the file does.",
        { minimum: 0 },
      ),
    ),
    pruned: Type.Optional(
      Type.Array(Type.String({ maxLength: 512 }), {
        description: 'The older snapshots deleted from the store to keep the last keep.',
        maxItems: 256,
      }),
    ),
    message: Type.Optional(
      Text('What happened, in words: the failure of the last attempt, or what was checked.'),
    ),
  },
  {
    description:
      'The etcd snapshot taken before the action was approved, when an ActionPolicy governing its control-plane node asks for one (spec.etcdSnapshot).',
  },
);

export const NodeActionStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Int64('The metadata.generation the status reflects.', { minimum: 0 })),
    phase: Type.Optional(
      StringEnum(NODE_ACTION_PHASES, {
        description:
          'Where the action is: Pending → WaitingForHealth → RunningPreHooks → Approved → Executing → WaitingForNode (or, for a Maintenance, Held until released) → RunningPostHooks → Succeeded, or Failed, Denied or Cancelled.',
      }),
    ),
    conditions: Type.Optional(
      Conditions(
        "Standard conditions: Admitted (whether its ActionPolicies let it in now), HealthChecksPassed, PreHooksSucceeded, Approved, Drained and DrainBlocked (Managed: whether PodDisruptionBudgets hold the drain now), Executed, NodeReturned, PostHooksSucceeded, Bypassed (naming who bypassed what, and why), Silenced (whether the node's alerts are silenced in Alertmanager, when a policy asks for it), Undone (whether the undo of the pre-action hooks succeeded, for an action that ended without touching the node), and MachineHeld (Cluster API mode: whether gatehouse holds the deletion of the Machine this action is for, and why).",
      ),
    ),
    checks: Type.Optional(
      Type.Array(CheckResult, {
        description: 'The health checks the action was judged on, with their results.',
        maxItems: 256,
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['name'],
      }),
    ),
    hooks: Type.Optional(
      Type.Array(HookRunRecord, {
        description: 'Every hook attempt for this action, pre- and post-action.',
        maxItems: 512,
      }),
    ),
    bootIDBefore: Type.Optional(
      Type.String({ description: "The node's boot ID when the action was approved.", maxLength: 64 }),
    ),
    bootIDAfter: Type.Optional(
      Type.String({
        description: "The node's boot ID once it came back (a new one means it rebooted).",
        maxLength: 64,
      }),
    ),
    startTime: Type.Optional(Timestamp('When the controller first processed the action.')),
    phaseTime: Type.Optional(
      Timestamp("When the action entered its current phase; that phase's deadline counts from here."),
    ),
    phaseHistory: Type.Optional(
      Type.Array(PhaseEntry, {
        description: `The phases the action entered, oldest first, each with its time: written with every phase change, at most ${String(PHASE_HISTORY_LIMIT)} (the oldest dropped). The dashboard draws them.`,
        maxItems: PHASE_HISTORY_LIMIT,
      }),
    ),
    approvalTime: Type.Optional(Timestamp('When the action was approved.')),
    approval: Type.Optional(PersonApproval),
    doNotDisruptSince: Type.Optional(
      Timestamp(
        'When the health gate first found a Pod or the Node asking not to be disrupted (talos.dev/do-not-disrupt): every such hold of this action is counted from here, so that it ends within doNotDisruptMax whatever is annotated later.',
      ),
    ),
    medik8sLease: Type.Optional(
      Type.Object(
        {
          renewTime: Timestamp('When the action last took or renewed it.'),
        },
        {
          description:
            'The action holds (or is taking) the Lease medik8s operators share for its node (medik8s-leases/node-<node>, holder gatehouse, annotated talos.dev/held-for), so that they wait for it; renewed while it runs, deleted when it ends, whatever the end. Recorded before it is written.',
        },
      ),
    ),
    remediationPaused: Type.Optional(
      Type.Boolean({
        description:
          'The action put (or is putting) the label remediation.medik8s.io/exclude-from-remediation on its node, marked talos.dev/remediation-paused-by, so that node remediation does not take the node for dead while the action takes it down; it takes it off when it ends, whatever the end. Recorded before the label is written.',
      }),
    ),
    executionTime: Type.Optional(
      Timestamp('When execution started (Managed) or was marked done (External).'),
    ),
    execution: Type.Optional(ExecutionRecord),
    drain: Type.Optional(DrainRecord),
    drainForecast: Type.Optional(DrainForecast),
    configDisruption: Type.Optional(ConfigDisruption),
    postChecks: Type.Optional(PostChecksRecord),
    rollback: Type.Optional(RollbackRecord),
    tryConfirm: Type.Optional(TryConfirmRecord),
    etcdSnapshot: Type.Optional(EtcdSnapshotRecord),
    undo: Type.Optional(UndoRecord),
    completionTime: Type.Optional(Timestamp('When the action finished, whatever the outcome.')),
    silences: Type.Optional(
      Type.Array(SilenceRecord, {
        description:
          'Alertmanager silences held for the action, one per distinct (url, nodeLabel) of the ActionPolicies with alertmanagerSilence that govern it: created at approval, expired when it ends. A courtesy, never a gate: the action goes on without them.',
        maxItems: 32,
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['url', 'nodeLabel'],
      }),
    ),
    message: Type.Optional(Text('What is happening now, or why it ended, in words.')),
  },
  { description: 'The record of how the action was judged and carried out, written by the controller.' },
);

export const NodeAction = Resource(
  'NodeAction',
  `NodeAction is a request to perform one action (${ACTIONS.slice(0, -1).join(', ')} or ${ACTIONS.at(-1) ?? ''}) on one node. gatehouse approves it once its policies allow it, every health check that gates it holds and every pre-action hook succeeded; then the controller (Managed) or the requester (External) performs it, and the controller follows the node back and runs its boot hooks. Its spec is immutable; deleting an unfinished action cancels it.`,
  NodeActionSpec,
  NodeActionStatus,
);

export type NodeAction = Static<typeof NodeAction>;
export type NodeActionSpec = Static<typeof NodeActionSpec>;
export type NodeActionStatus = Static<typeof NodeActionStatus>;
export type ExecutionRecord = Static<typeof ExecutionRecord>;
export type UndoRecord = Static<typeof UndoRecord>;
export type EtcdSnapshotRecord = Static<typeof EtcdSnapshotRecord>;
export type DrainBlocker = Static<typeof DrainBlocker>;
export type DrainRecord = Static<typeof DrainRecord>;
export type DrainForecast = Static<typeof DrainForecast>;
export type DrainForecastPod = Static<typeof DrainForecastPod>;
export type SilenceRecord = Static<typeof SilenceRecord>;
export type PhaseEntry = Static<typeof PhaseEntry>;

/** A NodeAction as the controller reads it: the fields it relies on, typed. */
export interface ObservedNodeAction {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    uid: string;
    generation?: number;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    finalizers?: string[];
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec: NodeActionSpec;
  status?: NodeActionStatus;
}

/**
 * A NodeAction as the caches and clients hold it: an ObservedNodeAction that is also a
 * Kubernetes object (src/kube/informer.ts KubeObject), for every reconciler, route and command.
 */
export type ActionObject = ObservedNodeAction & { metadata: { namespace?: string } };

export const nodeActionKind: KindDefinition = {
  kind: 'NodeAction',
  plural: 'nodeactions',
  singular: 'nodeaction',
  shortNames: ['nact'],
  categories: [CATEGORY],
  scope: 'Cluster',
  schema: NodeAction,
  // The admission pass lists the unfinished actions only (status.phase is the
  // controller's alone to write), however many finished ones are kept.
  selectableFields: ['.status.phase', '.spec.nodeName'],
  printerColumns: [
    { name: 'Node', type: 'string', jsonPath: '.spec.nodeName', description: 'The node acted on.' },
    { name: 'Action', type: 'string', jsonPath: '.spec.action', description: 'What is done to the node.' },
    { name: 'Phase', type: 'string', jsonPath: '.status.phase', description: 'Where the action is.' },
    {
      name: 'Disruption',
      type: 'string',
      jsonPath: '.status.configDisruption.class',
      description: 'ConfigChange: how the change disrupts the node.',
      priority: 1,
    },
    {
      name: 'Execution',
      type: 'string',
      jsonPath: '.spec.execution',
      description: 'Managed by the controller or External.',
      priority: 1,
    },
    {
      name: 'Requested By',
      type: 'string',
      jsonPath: '.spec.requestedBy',
      description: 'The user who asked for it.',
      priority: 1,
    },
    {
      name: 'Message',
      type: 'string',
      jsonPath: '.status.message',
      description: 'What is happening.',
      priority: 1,
    },
    AGE_COLUMN,
  ],
};
