// Building blocks shared by every talos.dev/v1alpha1 kind: names, durations, label
// selectors, conditions, object metadata, and the shape of a kind definition from
// which the CRDs, RBAC and TypeScript types are all derived.
import type { V1ObjectMeta } from '@kubernetes/client-node';
import Type, { type TSchema } from 'typebox';

export const GROUP = 'talos.dev';
export const VERSION = 'v1alpha1';
export const API_VERSION = 'talos.dev/v1alpha1';

/** The actions gatehouse gates, in the order the design lists them. */
export const ACTIONS = [
  'Upgrade',
  'Reboot',
  'Shutdown',
  'Reset',
  'ConfigChange',
  'EtcdLeave',
  'Maintenance',
] as const;
export type Action = (typeof ACTIONS)[number];

/** One `x-kubernetes-validations` rule: CEL evaluated by the API server itself. */
export interface ValidationRule {
  rule: string;
  /** Names the field and says what is allowed; the API server prefixes the field path. */
  message: string;
  /** Where the error points, relative to the schema carrying the rule (e.g. `.upgrade`). */
  fieldPath?: string;
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired' | 'FieldValueDuplicate';
}

/** The schema option that carries CEL rules, spelled once. */
export function rules(...list: ValidationRule[]): { 'x-kubernetes-validations': ValidationRule[] } {
  return { 'x-kubernetes-validations': list };
}

/** A CEL rule requiring at most one (`max`) or exactly one of the named optional fields. */
export function oneOf(fields: readonly string[], what: string, exactly: boolean): ValidationRule {
  const set = `[${fields.map((f) => `has(self.${f})`).join(', ')}].filter(x, x).size()`;
  const list = `${fields.slice(0, -1).join(', ')} or ${fields.at(-1) ?? ''}`;
  return exactly
    ? { rule: `${set} == 1`, message: `${what}: set exactly one of ${list}` }
    : { rule: `${set} <= 1`, message: `${what}: set at most one of ${list}` };
}

// Names of other objects. Patterns are the API machinery's own (DNS-1123).
const DNS_LABEL = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';
const DNS_SUBDOMAIN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$';

/** A DNS-1123 label: namespaces, Services and most other object names. */
export function DnsLabel(description: string) {
  return Type.String({ description, minLength: 1, maxLength: 63, pattern: DNS_LABEL });
}

/** A DNS-1123 subdomain: node names, Secret names. */
export function DnsSubdomain(description: string) {
  return Type.String({ description, minLength: 1, maxLength: 253, pattern: DNS_SUBDOMAIN });
}

/** An RFC 3339 timestamp, as metav1.Time serialises. */
export function Timestamp(description: string) {
  return Type.String({ description, format: 'date-time' });
}

export function Int32(
  description: string,
  bounds: { minimum?: number; maximum?: number; default?: number } = {},
) {
  return Type.Integer({ description, format: 'int32', ...bounds });
}

export function Int64(description: string, bounds: { minimum?: number } = {}) {
  return Type.Integer({ description, format: 'int64', ...bounds });
}

/** A bounded free-text field (messages, reasons), bounded so CEL cost stays estimable. */
export function Text(description: string, maxLength = 32768) {
  return Type.String({ description, maxLength });
}

/** A string enum; the CRD gets `type: string` and `enum`. */
export function StringEnum<const V extends readonly [string, ...string[]]>(
  values: V,
  options: { description: string; default?: V[number] },
) {
  return Type.Enum<[...V]>([...values], { type: 'string', ...options });
}

/** A string-to-string map, as labels and annotations are. */
export function StringMap(description: string) {
  return Type.Record(Type.String(), Type.String({ maxLength: 4096 }), { description, maxProperties: 128 });
}

// Durations are Go-style strings ("30s", "5m", "1h30m"), as everywhere in Kubernetes.
// The regular expression guards `duration()`, which would fail the rule with an
// evaluation error instead of the message on input it cannot parse.
export const DURATION_REGEX = '^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$';

export interface DurationBounds {
  min: string;
  max: string;
  default?: string;
}

/**
 * A duration field. `field` is how the error message names it (the API server adds
 * the full path in front), so a refusal reads e.g. "spec.interval: Invalid value:
 * ...: interval must be a duration such as 30s, 5m or 1h30m, from 1s to 24h".
 */
export function Duration(field: string, description: string, bounds: DurationBounds) {
  const { min, max } = bounds;
  const defaultText = bounds.default === undefined ? '' : ` Defaults to ${bounds.default}.`;
  return Type.String({
    description: `${description} A duration such as 30s, 5m or 1h30m, from ${min} to ${max}.${defaultText}`,
    maxLength: 32,
    ...(bounds.default === undefined ? {} : { default: bounds.default }),
    ...rules({
      rule: `self.matches('${DURATION_REGEX}') && duration(self) >= duration('${min}') && duration(self) <= duration('${max}')`,
      message: `${field} must be a duration such as 30s, 5m or 1h30m (units h, m, s, ms), from ${min} to ${max}`,
    }),
  });
}

/** One requirement of a label selector, as metav1.LabelSelectorRequirement. */
export const LabelSelectorRequirement = Type.Object(
  {
    key: Type.String({
      description: 'The label key the requirement applies to, e.g. node-role.kubernetes.io/control-plane.',
      minLength: 1,
      maxLength: 317,
    }),
    operator: StringEnum(['In', 'NotIn', 'Exists', 'DoesNotExist'], {
      description:
        "How the key's value is compared: In and NotIn compare against values; Exists and DoesNotExist only look at the key.",
    }),
    values: Type.Optional(
      Type.Array(Type.String({ maxLength: 63 }), {
        description: 'The values for In and NotIn (at least one); must be empty for Exists and DoesNotExist.',
        maxItems: 64,
      }),
    ),
  },
  {
    description: 'A label requirement: a key, an operator and, for In and NotIn, the values.',
    ...rules({
      rule: "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",
      message:
        'matchExpressions[].values must list at least one value for operator In or NotIn, and none for Exists or DoesNotExist',
      fieldPath: '.values',
    }),
  },
);

/** A Kubernetes label selector (metav1.LabelSelector); empty or absent selects everything. */
export function LabelSelector(description: string) {
  return Type.Object(
    {
      matchLabels: Type.Optional(
        StringMap('Labels that must all be present with exactly these values (ANDed with matchExpressions).'),
      ),
      matchExpressions: Type.Optional(
        Type.Array(LabelSelectorRequirement, {
          description: 'Label requirements that must all hold (ANDed with matchLabels).',
          maxItems: 32,
        }),
      ),
    },
    { description, 'x-kubernetes-map-type': 'atomic' },
  );
}

/** A standard condition (metav1.Condition). */
export const Condition = Type.Object(
  {
    type: Type.String({
      description: 'The aspect of the object the condition describes, in CamelCase (e.g. Healthy, Approved).',
      minLength: 1,
      maxLength: 316,
    }),
    status: StringEnum(['True', 'False', 'Unknown'], {
      description: 'Whether the condition holds: True, False or Unknown.',
    }),
    observedGeneration: Type.Optional(
      Int64(
        'The metadata.generation the condition was computed from; older means the condition may be stale.',
        {
          minimum: 0,
        },
      ),
    ),
    lastTransitionTime: Timestamp('When the status last changed.'),
    reason: Type.String({
      description: 'A CamelCase word saying why the condition is in its status, for programs to match on.',
      minLength: 1,
      maxLength: 1024,
    }),
    message: Text('A human-readable explanation of the status; may be empty.'),
  },
  { description: 'A condition of the object, as metav1.Condition.' },
);

/** The conditions list of a status, keyed by type so server-side apply can merge it. */
export function Conditions(description: string) {
  return Type.Array(Condition, {
    description,
    maxItems: 32,
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['type'],
  });
}

/**
 * Standard object metadata. The CRD declares only `type: object` here (the API server
 * owns metadata's schema); the static type is client-node's V1ObjectMeta.
 */
export const ObjectMeta = Type.Unsafe<V1ObjectMeta>({
  type: 'object',
  description:
    "Standard object metadata: name, labels, annotations and the server's bookkeeping. See https://kubernetes.io/docs/reference/using-api/api-concepts/.",
});

/** The full object schema of a kind: apiVersion, kind, metadata, spec and status. */
export function Resource<const Kind extends string, Spec extends TSchema, Status extends TSchema>(
  kind: Kind,
  description: string,
  spec: Spec,
  status: Status,
) {
  return Type.Object(
    {
      apiVersion: Type.Literal(API_VERSION, {
        description: 'The versioned schema of this object: talos.dev/v1alpha1.',
      }),
      kind: Type.Literal(kind, { description: `The kind of this object: ${kind}.` }),
      metadata: ObjectMeta,
      spec,
      status: Type.Optional(status),
    },
    { description },
  );
}

/** A column of `kubectl get`, computed by the API server (additionalPrinterColumns). */
export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description: string;
  /** 0 shows in `kubectl get`; 1 only with `-o wide`. */
  priority?: number;
}

/** Everything the CRD of one kind is generated from. */
export interface KindDefinition {
  kind: string;
  plural: string;
  singular: string;
  shortNames: readonly string[];
  categories: readonly string[];
  scope: 'Cluster' | 'Namespaced';
  /** The Resource() schema: the single source of the CRD schema and the static type. */
  schema: TSchema;
  printerColumns: readonly PrinterColumn[];
  /**
   * Fields a list may filter on server-side (`fieldSelector`), as JSON paths. Only
   * fields a reader can trust belong here: a status field is written by the controller
   * alone (the status subresource drops it from everyone else's writes).
   */
  selectableFields?: readonly string[];
}

export const CATEGORY = 'gatehouse';

export const AGE_COLUMN: PrinterColumn = {
  name: 'Age',
  type: 'date',
  jsonPath: '.metadata.creationTimestamp',
  description: 'Time since the object was created.',
};
