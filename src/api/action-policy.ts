// ActionPolicy: who may be disrupted when. An action is approved only if every policy
// matching its node and action allows it. Without any policy the controller allows one
// action at a time cluster-wide, and never two control-plane nodes at once.
import Type, { type Static } from 'typebox';
import {
  ACTIONS,
  AGE_COLUMN,
  CATEGORY,
  Conditions,
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
} from './common.ts';

// Five cron fields (minute hour day-of-month month day-of-week), each a list of *,
// numbers, names (MON, JAN) or ranges, with optional steps; or a macro like @daily.
// The controller checks the value ranges when it computes the next window.
const CRON_FIELD =
  '([*]|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?(,([*]|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?)*';
const CRON = `^(${CRON_FIELD}( +${CRON_FIELD}){4}|@(yearly|annually|monthly|weekly|daily|midnight|hourly))$`;

export const MaintenanceWindow = Type.Object(
  {
    schedule: Type.String({
      description:
        'When the window opens, as a 5-field cron expression (minute hour day-of-month month day-of-week), e.g. "0 2 * * *" for 02:00 every day or "0 22 * * FRI" for Fridays at 22:00; macros like @daily work too.',
      minLength: 1,
      maxLength: 128,
      ...rules({
        rule: `self.matches('${CRON}')`,
        message:
          'windows[].schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, e.g. "0 2 * * *") or a macro such as @daily',
      }),
    }),
    duration: Duration('windows[].duration', 'How long the window stays open after each start.', {
      min: '1m',
      max: '168h',
    }),
    timeZone: Type.Optional(
      Type.String({
        description: 'IANA time zone the schedule is read in, e.g. Europe/Berlin. Defaults to UTC.',
        minLength: 1,
        maxLength: 64,
        default: 'UTC',
        ...rules({
          rule: "self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$')",
          message: 'windows[].timeZone must be an IANA time zone name such as UTC or Europe/Berlin',
        }),
      }),
    ),
  },
  {
    description:
      'A recurring maintenance window. An action must be approved inside a window; once approved it runs to the end even if the window closes.',
  },
);

// A date-time string: the API server checks the format (RFC 3339), and CEL reads it as a
// timestamp.
const RFC3339 = (description: string) =>
  Type.String({ description, format: 'date-time', minLength: 1, maxLength: 64 });

export const Freeze = Type.Object(
  {
    start: RFC3339('When the freeze begins (RFC 3339, e.g. 2026-12-20T00:00:00Z).'),
    end: RFC3339('When it ends: actions may be approved again from then on.'),
    actions: Type.Optional(
      Type.Array(StringEnum(ACTIONS, { description: 'An action.' }), {
        description:
          'Actions the freeze holds, e.g. [Upgrade] so that security reboots still go through. Absent or empty: every action the policy governs.',
        maxItems: ACTIONS.length,
        'x-kubernetes-list-type': 'set',
      }),
    ),
    reason: Type.Optional(
      Type.String({ description: 'Why, shown in the message of every action it holds.', maxLength: 256 }),
    ),
  },
  {
    description:
      'A change freeze: no governed action is approved between start and end, whatever the windows say. An action approved before it runs to the end.',
    ...rules({
      rule: 'self.end > self.start',
      message: 'freezes[].end must be after freezes[].start',
    }),
  },
);

export const AlertmanagerSilence = Type.Object(
  {
    url: Type.String({
      description: 'Base URL of the Alertmanager API, e.g. http://alertmanager-operated.monitoring.svc:9093.',
      minLength: 1,
      maxLength: 2048,
      ...rules({
        rule: "isURL(self) && url(self).getScheme() in ['http', 'https']",
        message: 'alertmanagerSilence.url must be an absolute http:// or https:// URL',
      }),
    }),
    nodeLabel: Type.Optional(
      Type.String({
        description:
          "Alert label that carries the node name; the silence matches alerts whose label equals the action's node. Defaults to node.",
        minLength: 1,
        maxLength: 128,
        default: 'node',
        ...rules({
          rule: "self.matches('^[a-zA-Z_][a-zA-Z0-9_]*$')",
          message: 'alertmanagerSilence.nodeLabel must be a Prometheus label name such as node or instance',
        }),
      }),
    ),
    duration: Type.Optional(
      Duration(
        'alertmanagerSilence.duration',
        'Longest the silence lasts; the controller expires it early when the action finishes.',
        { min: '1m', max: '24h', default: '1h' },
      ),
    ),
  },
  {
    description:
      "Silence the node's alerts in Alertmanager while an approved action on it runs, so a planned reboot does not page anyone. Created at approval, expired when the action finishes.",
  },
);

/** A budget: a whole number of nodes, or a percentage of the governed ones. */
const MaxConcurrent = (defaults: string) =>
  Type.Union([Type.Integer(), Type.String()], {
    description: `How many governed nodes may be in an approved, unfinished action at once: a whole number (at least 1) or a percentage of the governed nodes ("25%", rounded down, at least 1). ${defaults}`,
    ...(defaults === 'Defaults to 1.' ? { default: 1 } : {}),
    maxLength: 4,
    ...rules({
      rule: "type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",
      message:
        'maxConcurrent must be a whole number of at least 1 or a percentage from 1% to 100%, e.g. 2 or "25%"',
    }),
  });

export const PerActionLimits = Type.Object(
  {
    actions: Type.Array(StringEnum(ACTIONS, { description: 'An action.' }), {
      description: 'The action kinds these limits add to, e.g. [Upgrade].',
      minItems: 1,
      maxItems: ACTIONS.length,
      'x-kubernetes-list-type': 'set',
    }),
    maxConcurrent: Type.Optional(
      MaxConcurrent("Counted over the actions of these kinds only; the policy's own budget holds too."),
    ),
    windows: Type.Optional(
      Type.Array(MaintenanceWindow, {
        description:
          "Maintenance windows for these kinds, besides the policy's own: e.g. upgrades at weekends while reboots go any time.",
        maxItems: 16,
      }),
    ),
  },
  {
    description:
      "Limits for some action kinds on top of the policy's: the most restrictive wins, and the action's message says which held it.",
  },
);

/** How many snapshots an ActionPolicy's etcdSnapshot may keep, and its catalogue may list. */
export const ETCD_SNAPSHOT_KEEP_MAX = 100;
const ETCD_SNAPSHOT_CATALOGUE_MAX = 2 * ETCD_SNAPSHOT_KEEP_MAX;

export const EtcdSnapshotHttp = Type.Object(
  {
    url: Type.String({
      description:
        'Where snapshots go: an http:// or https:// URL ending in "/" under which each snapshot is written with one PUT (its name appended, e.g. etcd-20261204T020000Z-<action>.db), read back with HEAD and deleted with DELETE when more than keep are stored. The store must accept a PUT without Content-Length (chunked transfer encoding): a WebDAV server (nginx dav_methods PUT DELETE, Apache mod_dav, rclone serve webdav), or any HTTP store that does. No credential is read from a Secret: a token the store needs goes in the URL (shown redacted) — whoever may read the ActionPolicy may read it.',
      minLength: 1,
      maxLength: 2048,
      ...rules({
        rule: "isURL(self) && url(self).getScheme() in ['http', 'https'] && self.endsWith('/')",
        message: 'etcdSnapshot.http.url must be an absolute http:// or https:// URL ending in "/"',
      }),
    }),
  },
  { description: 'An HTTP store for snapshots (PUT, HEAD, DELETE).' },
);

export const EtcdSnapshotPolicy = Type.Object(
  {
    http: EtcdSnapshotHttp,
    keep: Type.Optional(
      Type.Integer({
        description: `How many of this policy's snapshots to keep: once a new one is stored, the oldest beyond this many are deleted from the store (status.etcdSnapshots lists them). From 1 to ${String(ETCD_SNAPSHOT_KEEP_MAX)}; defaults to 5.`,
        minimum: 1,
        maximum: ETCD_SNAPSHOT_KEEP_MAX,
        default: 5,
      }),
    ),
    timeout: Type.Optional(
      Duration(
        'etcdSnapshot.timeout',
        'Longest an action waits for its snapshot, failed attempts retried meanwhile, counted from the first attempt; then the action fails (fail closed), naming the last failure.',
        { min: '30s', max: '1h', default: '5m' },
      ),
    ),
  },
  {
    description:
      "Take an etcd snapshot before a disruptive action on a governed control-plane node (one the etcd guard judges) is approved: streamed with MachineService.EtcdSnapshot from a healthy etcd member — another node's when one is healthy — to the store, its size and sha256 checked, recorded in the action's status.etcdSnapshot. The action waits for it and fails if it cannot be taken within timeout, unless bypass.healthChecks (recorded: no snapshot taken). Where several governing policies ask for one, the first by name is followed.",
  },
);

export const EtcdSnapshotEntry = Type.Object(
  {
    name: Type.String({ description: 'The object name under the URL.', maxLength: 512 }),
    url: Type.String({
      description: 'Where it is stored, the full URL (as written in the spec).',
      maxLength: 2600,
    }),
    time: Timestamp('When it was stored.'),
    node: Type.String({ description: 'The node whose action it was taken for.', maxLength: 253 }),
    action: Type.String({ description: 'The NodeAction it was taken for.', maxLength: 253 }),
    member: Type.String({ description: 'The node of the etcd member it was streamed from.', maxLength: 253 }),
    size: Int64('Its size in bytes.', { minimum: 0 }),
    sha256: Type.String({ description: 'Its SHA-256, in hex.', maxLength: 64 }),
    pruneError: Type.Optional(
      Text(
        'Why it could not be deleted when it fell out of the last keep; tried again after the next snapshot.',
        1024,
      ),
    ),
  },
  { description: 'One snapshot gatehouse stored for this policy.' },
);

export const ActionPolicySpec = Type.Object(
  {
    nodeSelector: Type.Optional(LabelSelector('Nodes this policy governs. Absent: every node.')),
    actions: Type.Optional(
      Type.Array(StringEnum(ACTIONS, { description: 'An action.' }), {
        description: 'Actions this policy governs. Absent or empty: every action.',
        maxItems: ACTIONS.length,
        'x-kubernetes-list-type': 'set',
      }),
    ),
    maxConcurrent: Type.Optional(MaxConcurrent('Defaults to 1.')),
    windows: Type.Optional(
      Type.Array(MaintenanceWindow, {
        description:
          'Maintenance windows: actions are approved only while one is open. Absent or empty: any time.',
        maxItems: 16,
      }),
    ),
    freezes: Type.Optional(
      Type.Array(Freeze, {
        description:
          'Change freezes: date ranges in which no governed action is approved, overriding the windows (for some action kinds only, if they say so).',
        maxItems: 32,
      }),
    ),
    perAction: Type.Optional(
      Type.Array(PerActionLimits, {
        description:
          'Budgets and windows per action kind, on top of the policy-wide ones (security reboots any time, upgrades at weekends, one upgrade at a time).',
        maxItems: ACTIONS.length,
      }),
    ),
    alertmanagerSilence: Type.Optional(AlertmanagerSilence),
    pauseRemediation: Type.Optional(
      Type.Boolean({
        description:
          'Whether an approved action that takes a governed node away keeps node remediation off it until it ends: the label remediation.medik8s.io/exclude-from-remediation on the Node (medik8s) and, in Cluster API mode, the annotation cluster.x-k8s.io/skip-remediation on its Machine (a MachineHealthCheck), each only where gatehouse set it. Defaults to true; false on any governing policy turns it off for the action.',
        default: true,
      }),
    ),
    allowForeignCordon: Type.Optional(
      Type.Boolean({
        description:
          'Whether a Managed action may cordon and drain a governed node that someone else cordoned (they may be working on it). Without it (the default) the action waits at its health gate until the node is uncordoned; with it, the action goes on and leaves their cordon in place at its end. Every policy governing the action must allow it.',
        default: false,
      }),
    ),
    doNotDisruptMax: Type.Optional(
      Duration(
        'doNotDisruptMax',
        'Longest an action on a governed node waits for the annotation talos.dev/do-not-disrupt on its Pods or its Node ("true" or a duration), counted from when the action first met it. 0s: the annotation is ignored. Where several policies govern an action, the shortest wins.',
        { min: '0s', max: '720h', default: '24h' },
      ),
    ),
    drainForecast: Type.Optional(
      StringEnum(['Warn', 'Block'], {
        description:
          'What the drain forecast of an action that drains a governed node does at the health gate (docs/concepts.md, "The drain forecast"). Warn: it is recorded in status.drainForecast and shown, with a Warning Event when a Pod would hold the drain or fits on no other node. Block: the action also waits at the health gate (builtin:drain-forecast in status.checks) while a Pod is held by a PodDisruptionBudget at its limit or fits on no other node. Where several policies govern an action, Block wins. Defaults to Warn.',
        default: 'Warn',
      }),
    ),
    etcdSnapshot: Type.Optional(EtcdSnapshotPolicy),
  },
  { description: 'Which nodes and actions the policy governs, how many at once, and when.' },
);

export const ActionPolicyStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Int64('The metadata.generation the status reflects.', { minimum: 0 })),
    matchingNodes: Type.Optional(Int32('Nodes the policy currently governs.', { minimum: 0 })),
    allowedConcurrent: Type.Optional(Int32('maxConcurrent resolved against matchingNodes.', { minimum: 0 })),
    activeActions: Type.Optional(Int32('Approved, unfinished actions on governed nodes.', { minimum: 0 })),
    windowOpen: Type.Optional(
      Type.Boolean({ description: 'Whether a maintenance window is open now (true without windows).' }),
    ),
    nextWindowStart: Type.Optional(Timestamp('When the next maintenance window opens.')),
    frozenUntil: Type.Optional(Timestamp('When the freeze in force now ends (absent: none is).')),
    etcdSnapshots: Type.Optional(
      Type.Array(EtcdSnapshotEntry, {
        description:
          'The etcd snapshots stored for this policy (spec.etcdSnapshot), newest first: the last keep, and any older one whose deletion failed (pruneError). Written by the controller after each snapshot; deleting the policy leaves the snapshots in the store.',
        maxItems: ETCD_SNAPSHOT_CATALOGUE_MAX,
      }),
    ),
    conditions: Type.Optional(
      Conditions('Standard conditions; type Valid reports problems such as an unknown time zone.'),
    ),
  },
  { description: 'How the policy currently applies, written by the controller.' },
);

export const ActionPolicy = Resource(
  'ActionPolicy',
  'ActionPolicy limits disruption: how many of the nodes it governs may be in an approved, unfinished action at once, and in which maintenance windows actions may be approved. An action must be allowed by every policy that matches its node and action; without any policy, one action at a time cluster-wide and never two control-plane nodes at once.',
  ActionPolicySpec,
  ActionPolicyStatus,
);

export type ActionPolicy = Static<typeof ActionPolicy>;
export type ActionPolicySpec = Static<typeof ActionPolicySpec>;
export type ActionPolicyStatus = Static<typeof ActionPolicyStatus>;
export type EtcdSnapshotPolicy = Static<typeof EtcdSnapshotPolicy>;
export type EtcdSnapshotEntry = Static<typeof EtcdSnapshotEntry>;

export const actionPolicyKind: KindDefinition = {
  kind: 'ActionPolicy',
  plural: 'actionpolicies',
  singular: 'actionpolicy',
  shortNames: ['apol'],
  categories: [CATEGORY],
  scope: 'Cluster',
  schema: ActionPolicy,
  printerColumns: [
    {
      name: 'Max Concurrent',
      type: 'string',
      jsonPath: '.spec.maxConcurrent',
      description: 'How many governed nodes may be disrupted at once.',
    },
    { name: 'Nodes', type: 'integer', jsonPath: '.status.matchingNodes', description: 'Nodes governed.' },
    {
      name: 'Active',
      type: 'integer',
      jsonPath: '.status.activeActions',
      description: 'Approved, unfinished actions.',
    },
    {
      name: 'Window Open',
      type: 'boolean',
      jsonPath: '.status.windowOpen',
      description: 'Whether a window is open now.',
    },
    {
      name: 'Next Window',
      type: 'date',
      jsonPath: '.status.nextWindowStart',
      description: 'When the next window opens.',
      priority: 1,
    },
    AGE_COLUMN,
  ],
};
