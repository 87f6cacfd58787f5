// NodeRollout: "these nodes should run this Talos version" (or: be rebooted once). The
// rollout controller (src/rollouts/) creates one NodeAction per selected node, so every
// check, hook, policy, window and etcd guard applies to each, and records the progress
// of the whole here.
import Type, { type Static } from 'typebox';
import {
  ACTIONS,
  AGE_COLUMN,
  CATEGORY,
  Conditions,
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
import {
  Deadlines,
  DrainOptions,
  OnPostCheckFailure,
  PostChecks,
  postCheckRules,
  RebootParameters,
  RolloutBypass,
  UpgradeParameters,
} from './node-action.ts';

/** The actions a rollout may take; the others make no sense in bulk. */
export const ROLLOUT_ACTIONS = ['Upgrade', 'Reboot'] as const;
export type RolloutAction = (typeof ROLLOUT_ACTIONS)[number];
/** The actions a rollout refuses, in words: "Shutdown, Reset, ConfigChange and EtcdLeave". */
const REFUSED = ((refused: readonly string[]) =>
  `${refused.slice(0, -1).join(', ')} and ${refused.at(-1) ?? ''}`)(
  ACTIONS.filter((a) => !(ROLLOUT_ACTIONS as readonly string[]).includes(a)),
);

/** Most nodes one rollout tracks: its status lists each, and an object has a size limit. */
export const MAX_ROLLOUT_NODES = 1000;

const LABEL_KEY =
  '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$';

const specRules: ValidationRule[] = [
  {
    rule: `self.action in [${ROLLOUT_ACTIONS.map((a) => `'${a}'`).join(', ')}]`,
    message: `spec.action must be Upgrade or Reboot: ${REFUSED} make no sense for a whole pool; request them per node with a NodeAction`,
    fieldPath: '.action',
    reason: 'FieldValueForbidden',
  },
  {
    rule: "self.action != 'Upgrade' || has(self.upgrade)",
    message: 'spec.upgrade (with upgrade.image) is required when spec.action is Upgrade',
    fieldPath: '.upgrade',
    reason: 'FieldValueRequired',
  },
  {
    rule: "!has(self.upgrade) || self.action == 'Upgrade'",
    message: 'spec.upgrade is only allowed when spec.action is Upgrade',
    fieldPath: '.upgrade',
    reason: 'FieldValueForbidden',
  },
  {
    rule: "!has(self.reboot) || self.action == 'Reboot'",
    message: 'spec.reboot is only allowed when spec.action is Reboot',
    fieldPath: '.reboot',
    reason: 'FieldValueForbidden',
  },
  {
    rule: "!has(self.drain) || self.execution == 'Managed'",
    message:
      'spec.drain is only allowed with Managed execution: with External execution the requester drains, if it wants to',
    fieldPath: '.drain',
    reason: 'FieldValueForbidden',
  },
  {
    // What the rollout does to a node must not change under its feet: a node upgraded to
    // one image and then, after an edit, counted as done for another would be a lie.
    rule: 'self.action == oldSelf.action && has(self.upgrade) == has(oldSelf.upgrade) && (!has(self.upgrade) || self.upgrade.image == oldSelf.upgrade.image)',
    message:
      'spec.action and spec.upgrade.image may not change once the rollout exists: create a new NodeRollout for another target',
  },
  ...postCheckRules,
  {
    rule: "!has(self.onDrainTimeout) || self.onDrainTimeout == 'Fail' || self.execution == 'Managed'",
    message:
      'spec.onDrainTimeout may be Quarantine or Skip only with Managed execution: with External execution the requester drains, and gatehouse never sees a drain time out',
    fieldPath: '.onDrainTimeout',
    reason: 'FieldValueForbidden',
  },
  {
    rule: 'self.requestedBy == oldSelf.requestedBy',
    message: 'spec.requestedBy may not change once the rollout exists',
    fieldPath: '.requestedBy',
  },
];

export const NodeRolloutSpec = Type.Object(
  {
    action: StringEnum(ACTIONS, {
      description: `What to do to every selected node: Upgrade (to upgrade.image; nodes already at its version are skipped) or Reboot (each node once). ${REFUSED} are refused.`,
    }),
    upgrade: Type.Optional(UpgradeParameters),
    reboot: Type.Optional(RebootParameters),
    nodeSelector: Type.Optional(
      LabelSelector(
        'Nodes the rollout covers. Absent: every node. A node that starts matching later is included; one that goes away is reported, not waited for.',
      ),
    ),
    order: Type.Optional(
      StringEnum(['controlPlaneLast', 'controlPlaneFirst'], {
        description:
          'Whether control-plane nodes go after every other node (controlPlaneLast, the default) or before them (controlPlaneFirst).',
        default: 'controlPlaneLast',
      }),
    ),
    groupBy: Type.Optional(
      Type.String({
        description:
          'A node label (e.g. topology.kubernetes.io/zone): the nodes of one value finish before any node of the next value starts, values in alphabetical order, nodes without the label last.',
        minLength: 1,
        maxLength: 317,
        pattern: LABEL_KEY,
      }),
    ),
    maxParallel: Type.Optional(
      Int32(
        "Most nodes whose NodeAction is unfinished at once. On top of the ActionPolicies, which still decide each node's approval. Defaults to 1.",
        { minimum: 1, maximum: 1000, default: 1 },
      ),
    ),
    maxFailures: Type.Optional(
      Int32(
        'Failed nodes the rollout tolerates; one more halts it (no new node starts, those running finish). Defaults to 0: the first failure halts it. Raising it resumes a halted rollout.',
        { minimum: 0, maximum: 1000, default: 0 },
      ),
    ),
    paused: Type.Optional(
      Type.Boolean({
        description: 'Start no new node; the ones running finish. Defaults to false.',
        default: false,
      }),
    ),
    execution: Type.Optional(
      StringEnum(['Managed', 'External'], {
        description:
          "The execution of each node's NodeAction: Managed (the controller through the Talos API, the default) or External (someone else performs each approved action and marks it executed).",
        default: 'Managed',
      }),
    ),
    dryRun: Type.Optional(
      Type.Boolean({
        description:
          'Plan only: the controller writes status.plan — the nodes in order with their groups, which are skipped and why, the policies and windows governing each, the expected duration of each and in all, the first window each can start in, and every preflight finding — and starts no node. Set it to false to start the rollout as planned. Defaults to false.',
        default: false,
      }),
    ),
    canary: Type.Optional(
      Type.Object(
        {
          nodes: Int32('How many nodes go first (the first in order that are not already at the target).', {
            minimum: 1,
            maximum: 100,
          }),
          soak: Type.Optional(
            Duration(
              'canary.soak',
              "How long the rollout watches its checks after the canary nodes succeeded, before any other node starts: a check that gates the rollout's action turning unhealthy (or not healthy throughout) halts it.",
              { min: '0s', max: '168h', default: '1h' },
            ),
          ),
        },
        {
          description:
            'Canary nodes first: they run alone, and a failure among them halts the rollout whatever maxFailures says; once they succeeded, the soak; then the rest.',
        },
      ),
    ),
    soakBetweenGroups: Type.Optional(
      Duration(
        'soakBetweenGroups',
        'How long the rollout watches its checks after one stage (a groupBy value, or the control plane) finished, before the next starts; a check turning unhealthy halts it.',
        { min: '0s', max: '168h' },
      ),
    ),
    pauseBefore: Type.Optional(
      Type.Object(
        {
          nodes: Type.Optional(
            Type.Array(DnsSubdomain('A node name.'), {
              description: 'Nodes to pause before.',
              maxItems: 100,
            }),
          ),
          nodeSelector: Type.Optional(LabelSelector('Pause before every node with matching labels.')),
        },
        {
          description:
            'Nodes the rollout pauses before, each until promoted (gatehouse rollout promote NAME --reason, by a holder of the verb promote on noderollouts): a look at the first node of a rack, say.',
        },
      ),
    ),
    drain: Type.Optional(DrainOptions),
    onDrainTimeout: Type.Optional(
      StringEnum(['Fail', 'Quarantine', 'Skip'], {
        description:
          'What a node whose drain timed out (a PodDisruptionBudget that allows no eviction, say) becomes: Fail (the default: it counts against maxFailures), Quarantine (it stays cordoned and labelled talos.dev/quarantined, its action ends without a Talos call, the rollout moves on and tries it once more at the end; at most maxQuarantined) or Skip (its cordon is lifted and the rollout moves on). No drain is ever forced.',
        default: 'Fail',
      }),
    ),
    postChecks: Type.Optional(PostChecks),
    onPostCheckFailure: Type.Optional(OnPostCheckFailure),
    maxQuarantined: Type.Optional(
      Int32(
        'Most nodes onDrainTimeout: Quarantine sets aside; an undrainable node beyond them fails. Defaults to maxParallel.',
        { minimum: 0, maximum: 1000 },
      ),
    ),
    bypass: Type.Optional(RolloutBypass),
    deadlines: Type.Optional(Deadlines),
    requestedBy: Type.String({
      description:
        "The requesting user's name, exactly as the API server knows it (kubectl auth whoami); the admission policy refuses any other. It becomes the requestedBy of every NodeAction the rollout creates.",
      minLength: 1,
      maxLength: 512,
    }),
  },
  {
    description:
      'Which nodes, what to do to each, how many at once, and how many failures to tolerate. action, upgrade and requestedBy are fixed; the rest may change (pause, resume, widen).',
    ...rules(...specRules),
  },
);

export const ROLLOUT_NODE_PHASES = [
  'Pending',
  'Waiting',
  'Running',
  'Succeeded',
  'Failed',
  'Skipped',
  'Vanished',
  'Quarantined',
] as const;
export type RolloutNodePhase = (typeof ROLLOUT_NODE_PHASES)[number];

export const RolloutQuarantine = Type.Object(
  {
    action: DnsSubdomain('The NodeAction whose drain timed out.'),
    since: Timestamp('When the rollout set the node aside.'),
    blockedBy: Text('What refused the eviction of its pods, in words.', 1024),
    retried: Type.Optional(
      Type.Boolean({ description: 'Its one retry at the end of the rollout has been made.' }),
    ),
  },
  {
    description:
      'A node set aside by onDrainTimeout: Quarantine: cordoned and labelled talos.dev/quarantined until its retry succeeds, never forced.',
  },
);

export const RolloutNode = Type.Object(
  {
    node: DnsSubdomain('Name of the node.'),
    phase: StringEnum(ROLLOUT_NODE_PHASES, {
      description:
        'Pending (not started yet), Waiting (held back, e.g. it does not fit in what is left of its window), Running (its NodeAction is unfinished), Succeeded, Failed (its NodeAction Failed, was Denied or Cancelled, or was deleted unfinished), Skipped (already at the target version, or undrainable under onDrainTimeout: Skip), Vanished (the node went away before it was done) or Quarantined (undrainable under onDrainTimeout: Quarantine: cordoned, labelled, tried once more at the end).',
    }),
    action: Type.Optional(DnsSubdomain('Name of the NodeAction the rollout created for the node.')),
    actionPhase: Type.Optional(Type.String({ description: 'The phase of that NodeAction.', maxLength: 64 })),
    group: Type.Optional(Type.String({ description: 'The value of the groupBy label.', maxLength: 63 })),
    controlPlane: Type.Optional(Type.Boolean({ description: 'Whether the node is a control-plane node.' })),
    message: Type.Optional(Text('What is happening to the node, or why it ended.', 1024)),
    quarantine: Type.Optional(RolloutQuarantine),
    rolledBack: Type.Optional(
      Type.Boolean({
        description:
          'Its post-checks failed and its upgrade was rolled back: the rollout halts until promoted past rollback/<node>.',
      }),
    ),
  },
  { description: 'Where one node of the rollout is.' },
);

export const RolloutCounts = Type.Object(
  {
    pending: Int32('Nodes not started yet (Pending or Waiting).', { minimum: 0 }),
    running: Int32('Nodes whose NodeAction is unfinished.', { minimum: 0 }),
    succeeded: Int32('Nodes done.', { minimum: 0 }),
    failed: Int32('Nodes whose NodeAction did not succeed.', { minimum: 0 }),
    skipped: Int32('Nodes already at the target.', { minimum: 0 }),
    vanished: Int32('Nodes that went away before they were done.', { minimum: 0 }),
    quarantined: Type.Optional(
      Int32('Nodes set aside because they could not be drained (onDrainTimeout: Quarantine).', {
        minimum: 0,
      }),
    ),
  },
  { description: 'How many nodes are where.' },
);

export const PlannedNode = Type.Object(
  {
    node: DnsSubdomain('Name of the node.'),
    position: Int32('Its place in the order, from 1.', { minimum: 1 }),
    group: Type.Optional(Type.String({ description: 'The value of the groupBy label.', maxLength: 63 })),
    controlPlane: Type.Optional(Type.Boolean({ description: 'Whether the node is a control-plane node.' })),
    canary: Type.Optional(Type.Boolean({ description: 'One of the canary nodes.' })),
    pauseBefore: Type.Optional(Type.Boolean({ description: 'The rollout pauses before it until promoted.' })),
    skip: Type.Optional(Text('Why it is skipped (already at the target), when it is.', 256)),
    policies: Type.Optional(
      Type.Array(Type.String({ maxLength: 253 }), {
        description: 'The ActionPolicies that govern its action (windows marked).',
        maxItems: 32,
      }),
    ),
    expectedSeconds: Type.Optional(Int64('Its expected duration, as window fit expects it.', { minimum: 0 })),
    basis: Type.Optional(
      Type.String({
        description: 'Where the expectation comes from: node (its own history), pool, or default.',
        maxLength: 16,
      }),
    ),
    start: Type.Optional(
      Timestamp('When it can start at the earliest: its turn, a window it fits in, no freeze.'),
    ),
    end: Type.Optional(Timestamp('When it is expected to be done.')),
    findings: Type.Optional(
      Type.Array(Text('A preflight finding.', 512), { description: 'What stands in its way.', maxItems: 8 }),
    ),
    drain: Type.Optional(
      Type.Object(
        {
          pods: Int32(
            'Pods its drain would meet trouble with now: a PodDisruptionBudget allowing no disruption, nowhere else to go, or nothing to recreate them.',
            { minimum: 0 },
          ),
          words: Type.Optional(
            Type.Array(Type.String({ maxLength: 256 }), {
              description: 'The first of them, in words.',
              maxItems: 2,
            }),
          ),
        },
        { description: 'The drain forecast of the node, as things stand when the plan is made.' },
      ),
    ),
  },
  { description: 'One node of a planned rollout.' },
);

export const RolloutPlanRecord = Type.Object(
  {
    time: Timestamp('When the plan was made.'),
    feasible: Type.Boolean({ description: 'Whether the plan can succeed: no preflight finding stops it.' }),
    expectedEnd: Type.Optional(Timestamp('When the last node is expected to be done, if it can be.')),
    expectedSeconds: Type.Optional(Int64('The whole rollout, expected.', { minimum: 0 })),
    findings: Type.Optional(
      Type.Array(Text('A finding about the rollout as a whole.', 1024), {
        maxItems: 32,
        description:
          'What stands in the way of the rollout as a whole: nodes that cannot go and why, pauses that wait for a promotion, an image without a version.',
      }),
    ),
    nodes: Type.Array(PlannedNode, {
      description: 'The nodes in the order they go.',
      maxItems: MAX_ROLLOUT_NODES,
    }),
  },
  {
    description:
      'What the rollout would do, written while spec.dryRun is true (and kept as the record once it starts): the same order, skips and windows the rollout then follows.',
  },
);

export const RolloutGate = Type.Object(
  {
    id: Type.String({
      description:
        'What the rollout waits at: canary-soak, soak/<stage> or pause/<node>; the value gatehouse rollout promote answers (talos.dev/promote).',
      maxLength: 400,
    }),
    kind: StringEnum(['Soak', 'PauseBefore', 'Rollback'], {
      description:
        'Soak (watching its checks), PauseBefore, or Rollback (a node was rolled back after its post-checks failed).',
    }),
    since: Timestamp('Since when it waits there.'),
    until: Type.Optional(Timestamp('When a soak ends by itself, its checks healthy throughout.')),
    failed: Type.Optional(
      Text('Why the soak failed (a check not healthy throughout): the rollout halts until promoted.', 1024),
    ),
    message: Text('What it waits for, in words.', 1024),
  },
  { description: 'The gate the rollout waits at now, written by the controller.' },
);

export const RolloutPromotion = Type.Object(
  {
    gate: Type.String({ description: 'The gate promoted past.', maxLength: 400 }),
    by: Type.String({ description: 'Who promoted, as the API server authenticated them.', maxLength: 256 }),
    reason: Text('Why, in their words.', 1024),
    time: Timestamp('When the controller took it.'),
  },
  { description: 'A promotion past a gate.' },
);

export const NodeRolloutStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Int64('The metadata.generation the status reflects.', { minimum: 0 })),
    targetVersion: Type.Optional(
      Type.String({ description: 'The Talos version upgrade.image installs (its tag).', maxLength: 128 }),
    ),
    counts: Type.Optional(RolloutCounts),
    nodes: Type.Optional(
      Type.Array(RolloutNode, {
        description: `Every node of the rollout, in the order it goes (at most ${String(MAX_ROLLOUT_NODES)}). Also the rollout's memory: a node listed with an action is never started again.`,
        maxItems: MAX_ROLLOUT_NODES,
      }),
    ),
    startTime: Type.Optional(Timestamp('When the controller first processed the rollout.')),
    completionTime: Type.Optional(Timestamp('When every node was done.')),
    conditions: Type.Optional(
      Conditions(
        'Progressing (nodes are running or may start now), Halted (maxFailures exceeded, paused, or stopped by a problem, with the reason), Complete (every node done).',
      ),
    ),
    message: Type.Optional(Text('What the rollout is doing or waiting for, in words.', 4096)),
    plan: Type.Optional(RolloutPlanRecord),
    gate: Type.Optional(RolloutGate),
    passedGates: Type.Optional(
      Type.Array(Type.String({ maxLength: 400 }), {
        description: 'The ids of the gates passed (soaks over, pauses promoted): never waited for again.',
        maxItems: 256,
      }),
    ),
    promotions: Type.Optional(
      Type.Array(RolloutPromotion, {
        description: 'Every promotion, oldest first, recorded like a bypass.',
        maxItems: 64,
      }),
    ),
  },
  { description: 'The progress of the rollout, written by the controller.' },
);

export const NodeRollout = Resource(
  'NodeRollout',
  'NodeRollout upgrades (or reboots) a set of nodes one NodeAction at a time: at most maxParallel unfinished, control plane last by default, one groupBy group after another, halting when more than maxFailures nodes failed. Each NodeAction passes every gate (checks, hooks, policies, windows, the etcd guard); a node starts inside a maintenance window only if its expected duration fits in what is left of it. It resumes where it was after any restart.',
  NodeRolloutSpec,
  NodeRolloutStatus,
);

export type NodeRollout = Static<typeof NodeRollout>;
export type NodeRolloutSpec = Static<typeof NodeRolloutSpec>;
export type NodeRolloutStatus = Static<typeof NodeRolloutStatus>;
export type RolloutNode = Static<typeof RolloutNode>;
export type RolloutCounts = Static<typeof RolloutCounts>;
export type PlannedNode = Static<typeof PlannedNode>;
export type RolloutPlanRecord = Static<typeof RolloutPlanRecord>;
export type RolloutGate = Static<typeof RolloutGate>;
export type RolloutQuarantine = Static<typeof RolloutQuarantine>;

/** A NodeRollout as the controller reads it. */
export interface ObservedNodeRollout {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    uid: string;
    generation?: number;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec: NodeRolloutSpec;
  status?: NodeRolloutStatus;
}

export const nodeRolloutKind: KindDefinition = {
  kind: 'NodeRollout',
  plural: 'noderollouts',
  singular: 'noderollout',
  shortNames: ['nro'],
  categories: [CATEGORY],
  scope: 'Cluster',
  schema: NodeRollout,
  printerColumns: [
    { name: 'Action', type: 'string', jsonPath: '.spec.action', description: 'What is done to each node.' },
    {
      name: 'Target',
      type: 'string',
      jsonPath: '.status.targetVersion',
      description: 'The Talos version of upgrade.image.',
    },
    { name: 'Done', type: 'integer', jsonPath: '.status.counts.succeeded', description: 'Nodes done.' },
    {
      name: 'Running',
      type: 'integer',
      jsonPath: '.status.counts.running',
      description: 'Nodes in progress.',
    },
    { name: 'Failed', type: 'integer', jsonPath: '.status.counts.failed', description: 'Nodes failed.' },
    {
      name: 'Skipped',
      type: 'integer',
      jsonPath: '.status.counts.skipped',
      description: 'Nodes already at target.',
      priority: 1,
    },
    { name: 'Paused', type: 'boolean', jsonPath: '.spec.paused', description: 'Whether it is paused.' },
    {
      name: 'Message',
      type: 'string',
      jsonPath: '.status.message',
      description: 'What it is doing or waiting for.',
      priority: 1,
    },
    AGE_COLUMN,
  ],
};
