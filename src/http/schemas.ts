// The shapes of the HTTP API's requests and answers. The NodeAction and ActionPolicy
// shapes are derived from the talos.dev schemas in src/api through the same
// translation that writes the CRDs, so the API, its OpenAPI document and the CRDs
// cannot disagree; the shapes that exist only over HTTP (errors, health, progress)
// are declared here.
import Type, { type Static } from 'typebox';
import { actionPolicyKind } from '../api/action-policy.ts';
import { ACTIONS } from '../api/common.ts';
import { NODE_ACTION_PHASES, nodeActionKind } from '../api/node-action.ts';
import { openAPIV3Schema } from '../manifests/crds.ts';
import { isRecord, toStructural, type OpenAPISchema } from '../manifests/openapi.ts';

/** The metadata the API returns with each object (managedFields and the like left out). */
export const API_METADATA_FIELDS = [
  'name',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'labels',
  'annotations',
  'finalizers',
] as const;

const ReturnedMetadata = Type.Object(
  {
    name: Type.String({ description: 'Name of the object.' }),
    uid: Type.Optional(Type.String({ description: 'Unique ID the API server gave the object.' })),
    resourceVersion: Type.Optional(
      Type.String({ description: 'Opaque version; changes with every change of the object.' }),
    ),
    generation: Type.Optional(Type.Integer({ description: 'Changes of the spec.', format: 'int64' })),
    creationTimestamp: Type.Optional(
      Type.String({ description: 'When the object was created.', format: 'date-time' }),
    ),
    deletionTimestamp: Type.Optional(
      Type.String({
        description: 'Set once deletion (for an unfinished action: cancellation) was requested.',
        format: 'date-time',
      }),
    ),
    labels: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'Labels.' })),
    annotations: Type.Optional(
      Type.Record(Type.String(), Type.String(), {
        description:
          'Annotations, among them talos.dev/executed (External execution done) and talos.dev/idempotency-key.',
      }),
    ),
    finalizers: Type.Optional(
      Type.Array(Type.String(), {
        description: 'Finalizers that hold the object until the controller is done.',
      }),
    ),
  },
  { description: 'Object metadata, as the API server keeps it (managedFields left out).' },
);

function withMetadata(root: OpenAPISchema): OpenAPISchema {
  const properties = root.properties;
  if (!isRecord(properties)) throw new Error('resource schema without properties');
  return {
    ...root,
    required: ['apiVersion', 'kind', 'metadata', 'spec'],
    properties: { ...properties, metadata: toStructural(ReturnedMetadata, 'metadata') },
  };
}

/** A NodeAction as the API returns it: the CRD's own schema. */
export function nodeActionSchema(): OpenAPISchema {
  return withMetadata(openAPIV3Schema(nodeActionKind));
}

/** An ActionPolicy as the API returns it: the CRD's own schema. */
export function actionPolicySchema(): OpenAPISchema {
  return withMetadata(openAPIV3Schema(actionPolicyKind));
}

/** Fields of the spec that the server fills in; a request may not set them. */
const SERVER_FIELDS: Record<string, string> = {
  requestedBy: 'spec.requestedBy is set by gatehouse to the user the bearer token belongs to; leave it out',
};

/** Closes every object schema (unknown fields are refused) and drops CRD-only extensions. */
function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (!isRecord(schema)) return schema;
  const out: OpenAPISchema = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key.startsWith('x-kubernetes-')) continue;
    if (key === 'properties' && isRecord(value)) {
      out.properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, closed(v)]));
    } else if (key === 'items' || key === 'additionalProperties') {
      out[key] = closed(value);
    } else {
      out[key] = value;
    }
  }
  if (out.type === 'object' && isRecord(out.properties) && out.additionalProperties === undefined) {
    out.additionalProperties = false;
  }
  return out;
}

/** The spec a caller may send: the NodeAction spec without the fields the server sets. */
export function actionRequestSpecSchema(): OpenAPISchema {
  const spec = openAPIV3Schema(nodeActionKind).properties;
  if (!isRecord(spec) || !isRecord(spec.spec)) throw new Error('NodeAction schema without spec');
  const properties = Object.fromEntries(
    Object.entries(spec.spec.properties as OpenAPISchema).filter(([field]) => !(field in SERVER_FIELDS)),
  );
  const required = (spec.spec.required as string[] | undefined)?.filter((f) => !(f in SERVER_FIELDS));
  return closed({
    ...spec.spec,
    description:
      'What to do: the NodeAction spec (see the NodeAction schema), without requestedBy, which the server sets to the authenticated user.',
    properties,
    ...(required ? { required } : {}),
  }) as OpenAPISchema;
}

/** The body of POST /v1/actions. */
export function actionRequestSchema(): OpenAPISchema {
  return {
    description:
      'A request for one action on one node. The server names the NodeAction (<node>-<action>-<suffix>) and sets spec.requestedBy to the authenticated user.',
    type: 'object',
    required: ['spec'],
    properties: { spec: actionRequestSpecSchema() },
    additionalProperties: false,
  };
}

export function serverSetFieldMessage(field: string): string | undefined {
  return SERVER_FIELDS[field];
}

/** The cross-field rules the API server enforces on a NodeAction spec (CEL), as words. */
export function specRuleMessages(): string[] {
  const spec = openAPIV3Schema(nodeActionKind).properties;
  const rules = isRecord(spec) && isRecord(spec.spec) ? spec.spec['x-kubernetes-validations'] : undefined;
  if (!Array.isArray(rules)) return [];
  return rules
    .filter(isRecord)
    .filter((r) => typeof r.rule === 'string' && !r.rule.includes('oldSelf'))
    .map((r) => String(r.message));
}

export const ErrorBody = Type.Object(
  {
    error: Type.String({ description: 'What was wrong, and what to do about it.' }),
    details: Type.Optional(
      Type.Array(
        Type.Object(
          {
            field: Type.String({ description: 'The field at fault, e.g. spec.upgrade.image.' }),
            message: Type.String({ description: 'What is wrong with it and what is allowed.' }),
          },
          { description: 'One problem with one field.' },
        ),
        { description: 'Every problem found with the request, one per field.' },
      ),
    ),
  },
  { description: 'A refusal.' },
);

const NullableTimestamp = (description: string) =>
  Type.Unsafe<string | null>({ type: 'string', format: 'date-time', nullable: true, description });

export const CheckSummary = Type.Object(
  {
    name: Type.String({ description: 'Name of the ClusterHealthCheck.' }),
    healthy: Type.Boolean({ description: 'Whether it holds (false when unknown).' }),
    state: Type.Enum(['Healthy', 'Unhealthy', 'Unknown', 'PerNode'], {
      type: 'string',
      description:
        'Healthy, Unhealthy, or Unknown (not probed yet), which counts as not healthy; PerNode: a Node-scoped check asked about without a node, which has no verdict of its own (see nodes) and does not count.',
    }),
    reason: Type.Enum(['NotProbed', 'ProbeSucceeded', 'ProbeFailed', 'ProbeError', 'ProbeTimeout'], {
      type: 'string',
      description: 'Why it is in that state.',
    }),
    message: Type.String({ description: 'What the last probe found.' }),
    probe: Type.String({ description: 'The probe type: httpGet, tcpSocket, resource, and so on.' }),
    consecutiveSuccesses: Type.Integer({ description: 'Successful probes in a row.', minimum: 0 }),
    consecutiveFailures: Type.Integer({ description: 'Failed probes in a row.', minimum: 0 }),
    lastProbeTime: NullableTimestamp('When it was last probed; null if never.'),
    lastTransitionTime: NullableTimestamp('When its state last changed; null if never.'),
    scope: Type.Optional(Type.Literal('Node', { description: 'Set for a Node-scoped check.' })),
    node: Type.Optional(Type.String({ description: 'The node a Node-scoped check was judged for.' })),
    nodes: Type.Optional(
      Type.Object(
        {
          evaluated: Type.Integer({ description: 'Selected nodes with a result.', minimum: 0 }),
          safe: Type.Integer({ description: 'Nodes the check holds for.', minimum: 0 }),
          unsafe: Type.Integer({ description: 'Nodes it does not hold for.', minimum: 0 }),
          unsafeNodes: Type.Array(
            Type.Object({
              name: Type.String({ description: 'The node.' }),
              message: Type.String({ description: 'What the last probe for it found.' }),
              lastProbeTime: NullableTimestamp('When it was last probed for this node.'),
            }),
            { description: 'The first 20 unsafe nodes, by name.' },
          ),
        },
        { description: 'A Node-scoped check asked about without a node: its per-node results.' },
      ),
    ),
  },
  { description: 'The current state of one ClusterHealthCheck.' },
);
export type CheckSummary = Static<typeof CheckSummary>;

export const HealthBody = Type.Object(
  {
    healthy: Type.Boolean({ description: 'Whether every selected check holds.' }),
    message: Type.String({ description: 'A one-line summary.' }),
    action: Type.Optional(
      Type.Enum([...ACTIONS], { type: 'string', description: 'The prospective action asked about.' }),
    ),
    node: Type.Optional(Type.String({ description: 'The node of the prospective action.' })),
    gates: Type.Optional(
      Type.Boolean({ description: 'Whether the check gates the prospective action at all.' }),
    ),
    checks: Type.Array(CheckSummary, { description: 'The selected checks, by name.' }),
  },
  { description: 'Whether the checks hold.' },
);

export const NodeView = Type.Object(
  {
    name: Type.String({ description: 'Name of the Node.' }),
    exists: Type.Boolean({ description: 'Whether the Node object exists (a reset node is deleted).' }),
    ready: Type.Enum(['True', 'False', 'Unknown'], {
      type: 'string',
      description: "The Node's Ready condition (Unknown when absent).",
    }),
    readyMessage: Type.Optional(Type.String({ description: 'The Ready condition message.' })),
    bootID: Type.Optional(Type.String({ description: 'status.nodeInfo.bootID: a new one means a reboot.' })),
    osImage: Type.Optional(Type.String({ description: 'status.nodeInfo.osImage, e.g. Talos (v1.11.5).' })),
    unschedulable: Type.Boolean({ description: 'Whether the node is cordoned.' }),
    preready: Type.Boolean({
      description:
        'Whether the node carries the talos.dev/preready taint (its NodePrereadyJobs have not all succeeded).',
    }),
    unplanned: Type.Optional(
      Type.Object(
        {
          kind: Type.Enum(['boot', 'version-change', 'not-ready'], { type: 'string' }),
          at: Type.String({ description: 'When the audit saw it (RFC 3339).' }),
        },
        {
          description:
            'The last disruption of the node that went around the gate (the unplanned-disruption audit): a boot, a Talos version or a long NotReady with no gatehouse action in flight.',
        },
      ),
    ),
  },
  { description: 'What the controller sees of a node right now.' },
);
export type NodeView = Static<typeof NodeView>;

export const CancelResult = Type.Object(
  {
    name: Type.String({ description: 'Name of the NodeAction.' }),
    message: Type.String({ description: 'What happens now.' }),
  },
  { description: 'Cancellation accepted: the NodeAction is being deleted, which cancels it.' },
);

export const ReadyBody = Type.Object(
  {
    ready: Type.Boolean({ description: 'Whether the caches have synced.' }),
    message: Type.Optional(Type.String({ description: 'What is still syncing.' })),
  },
  { description: 'Readiness of the controller.' },
);

export const LiveBody = Type.Object(
  { ok: Type.Boolean({ description: 'Always true while the process serves.' }) },
  { description: 'Liveness.' },
);

export const ACTION_PHASES = NODE_ACTION_PHASES;

/** The body of POST /v1/talos/certificates (src/talos-gate/certificate-routes.ts). */
export function talosCertificateRequestSchema(): OpenAPISchema {
  return {
    description: 'A request for a Talos API gate certificate for the caller.',
    type: 'object',
    required: ['certificateRequest'],
    properties: {
      certificateRequest: {
        type: 'string',
        minLength: 1,
        maxLength: 8192,
        description:
          'A PEM PKCS#10 certificate request (Ed25519) whose subject names the caller (CN, as GET /v1/whoami says) and one Talos role (O), signed with the key the certificate is for.',
      },
      durationSeconds: {
        type: 'integer',
        // Kubernetes' shortest certificate lifetime, and a week.
        minimum: 600,
        maximum: 7 * 86_400,
        description: 'How long the certificate should be valid; the gate may cut it shorter.',
      },
    },
    additionalProperties: false,
  };
}

export interface TalosCertificateRequest {
  certificateRequest: string;
  durationSeconds?: number;
}
