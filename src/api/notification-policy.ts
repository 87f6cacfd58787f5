// NotificationPolicy: where the steps of actions and rollouts are sent — a generic JSON
// webhook, signed with HMAC-SHA256, or a Slack-compatible incoming webhook. A courtesy,
// never a gate: an unreachable receiver never delays an action (docs/integrations.md).
import Type, { type Static } from 'typebox';
import {
  ACTIONS,
  AGE_COLUMN,
  CATEGORY,
  Conditions,
  DnsSubdomain,
  Duration,
  Int64,
  LabelSelector,
  Resource,
  StringEnum,
  Text,
  Timestamp,
  oneOf,
  rules,
  type KindDefinition,
} from './common.ts';

/** The steps a notification reports, in the order an action goes through them. */
export const NOTIFICATION_STEPS = ['Started', 'Held', 'Approved', 'Done', 'Failed'] as const;
export type NotificationStep = (typeof NOTIFICATION_STEPS)[number];

export const NOTIFICATION_FORMATS = ['Generic', 'Slack'] as const;
export type NotificationFormat = (typeof NOTIFICATION_FORMATS)[number];

/** A key of a Secret in the controller's own namespace (the only one it reads Secrets in). */
const SecretKeyRef = (description: string) =>
  Type.Object(
    {
      name: DnsSubdomain("Name of the Secret, in gatehouse's own namespace."),
      key: Type.String({ description: 'Key of the Secret holding the value.', minLength: 1, maxLength: 253 }),
    },
    { description },
  );

export const NotificationWebhook = Type.Object(
  {
    format: Type.Optional(
      StringEnum(NOTIFICATION_FORMATS, {
        description:
          'Generic: a JSON Notification document (docs/integrations.md), signed with signingSecretRef. Slack: a Slack-compatible incoming webhook body ({"text": ...}); Mattermost, Rocket.Chat and Discord (/slack) take it too. Defaults to Generic.',
        default: 'Generic',
      }),
    ),
    url: Type.Optional(
      Type.String({
        description:
          'Where to POST, when the URL itself is no secret. Readable by everyone who may read NotificationPolicies: a URL that carries a token (a Slack webhook) belongs in urlSecretRef.',
        minLength: 1,
        maxLength: 2048,
        ...rules({
          rule: "isURL(self) && url(self).getScheme() in ['http', 'https']",
          message: 'webhook.url must be an absolute http:// or https:// URL',
        }),
      }),
    ),
    urlSecretRef: Type.Optional(
      SecretKeyRef(
        "The URL to POST to, from a Secret in the controller's namespace: for URLs that carry a token, such as Slack's incoming webhooks.",
      ),
    ),
    signingSecretRef: Type.Optional(
      SecretKeyRef(
        "The HMAC-SHA256 key every Generic message is signed with (header X-Gatehouse-Signature), from a Secret in the controller's namespace. Required for Generic; Slack verifies nothing, so it is refused there.",
      ),
    ),
    timeout: Type.Optional(
      Duration('webhook.timeout', 'How long one attempt may take before it counts as failed.', {
        min: '1s',
        max: '30s',
        default: '5s',
      }),
    ),
  },
  {
    description: 'The receiver.',
    ...rules(oneOf(['url', 'urlSecretRef'], 'webhook', true), {
      rule: "!has(self.format) || self.format == 'Generic' ? has(self.signingSecretRef) : !has(self.signingSecretRef)",
      message:
        'webhook.signingSecretRef is required with format Generic (receivers verify what they get) and refused with format Slack (which verifies nothing)',
    }),
  },
);

export const NotificationPolicySpec = Type.Object(
  {
    nodeSelector: Type.Optional(
      LabelSelector(
        "Nodes whose actions are reported; a rollout is reported when any of its nodes matches. Absent: every node's.",
      ),
    ),
    actions: Type.Optional(
      Type.Array(StringEnum(ACTIONS, { description: 'An action.' }), {
        description:
          "Action kinds reported (a rollout's action counts for the rollout). Absent or empty: every kind.",
        maxItems: ACTIONS.length,
        'x-kubernetes-list-type': 'set',
      }),
    ),
    steps: Type.Optional(
      Type.Array(StringEnum(NOTIFICATION_STEPS, { description: 'A step.' }), {
        description:
          'Steps reported: Started (requested), Held (waiting, and why), Approved, Done, Failed (failed, denied or cancelled). Absent or empty: every step.',
        maxItems: NOTIFICATION_STEPS.length,
        'x-kubernetes-list-type': 'set',
      }),
    ),
    rollouts: Type.Optional(
      Type.Boolean({
        description:
          "Whether NodeRollouts' steps are reported too (each node started, done or failed, a halt, the end). Defaults to true.",
        default: true,
      }),
    ),
    webhook: NotificationWebhook,
  },
  { description: 'Which steps of which actions and rollouts are sent, and where.' },
);

export const NotificationPolicyStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Int64('The metadata.generation the status reflects.', { minimum: 0 })),
    sent: Type.Optional(Int64('Messages the receiver accepted.', { minimum: 0 })),
    failed: Type.Optional(Int64('Messages given up on after their retries.', { minimum: 0 })),
    dropped: Type.Optional(
      Int64('Steps dropped because too many were waiting (the receiver was too slow or away).', {
        minimum: 0,
      }),
    ),
    lastSentTime: Type.Optional(Timestamp('When the receiver last accepted a message.')),
    lastError: Type.Optional(
      Text('Why the last message that failed did, without the URL or any secret.', 1024),
    ),
    conditions: Type.Optional(
      Conditions(
        'Ready: whether messages can be (and last were) delivered; False with SecretMissing or DeliveryFailed says what to fix.',
      ),
    ),
  },
  { description: 'How delivery goes, written by the controller at most every 30 seconds.' },
);

export const NotificationPolicy = Resource(
  'NotificationPolicy',
  'NotificationPolicy sends each step of matching NodeActions and NodeRollouts (started, held and why, approved, done, failed) to a webhook: a signed JSON document, or a Slack-compatible message. Delivery is retried and rate-limited per action in the background; it never delays an action.',
  NotificationPolicySpec,
  NotificationPolicyStatus,
);

export type NotificationPolicy = Static<typeof NotificationPolicy>;
export type NotificationPolicySpec = Static<typeof NotificationPolicySpec>;
export type NotificationPolicyStatus = Static<typeof NotificationPolicyStatus>;
export type NotificationWebhook = Static<typeof NotificationWebhook>;

export const notificationPolicyKind: KindDefinition = {
  kind: 'NotificationPolicy',
  plural: 'notificationpolicies',
  singular: 'notificationpolicy',
  shortNames: ['npol'],
  categories: [CATEGORY],
  scope: 'Cluster',
  schema: NotificationPolicy,
  printerColumns: [
    {
      name: 'Format',
      type: 'string',
      jsonPath: '.spec.webhook.format',
      description: 'Generic (signed JSON) or Slack.',
    },
    {
      name: 'Ready',
      type: 'string',
      jsonPath: '.status.conditions[?(@.type=="Ready")].status',
      description: 'Whether messages are delivered.',
    },
    { name: 'Sent', type: 'integer', jsonPath: '.status.sent', description: 'Messages delivered.' },
    {
      name: 'Failed',
      type: 'integer',
      jsonPath: '.status.failed',
      description: 'Messages given up on.',
      priority: 1,
    },
    AGE_COLUMN,
  ],
};
