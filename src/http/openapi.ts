// The OpenAPI 3.1 document of the controller's HTTP API, served at /openapi.json.
//
// Resource shapes come from the talos.dev schemas (src/api) through the same
// translation that writes the CRDs, and the HTTP-only shapes from schemas.ts, so the
// document describes what the server actually sends — precisely enough that a
// schema-driven fuzzer (schemathesis) checks every response against it.
import packageJson from '../../package.json' with { type: 'json' };
import { ACTIONS } from '../api/common.ts';
import { NODE_ACTION_PHASES } from '../api/node-action.ts';
import { isRecord, toStructural, type OpenAPISchema } from '../manifests/openapi.ts';
import { formatDuration } from '../duration.ts';
import type { Router } from './router.ts';
import { ApprovalRequest } from './actions/approve.ts';
import { TALOS_ROLES } from '../talos/roles.ts';
import {
  CancelResult,
  CheckSummary,
  ErrorBody,
  HealthBody,
  LiveBody,
  NodeView,
  ReadyBody,
  actionPolicySchema,
  actionRequestSchema,
  nodeActionSchema,
  specRuleMessages,
  talosCertificateRequestSchema,
} from './schemas.ts';

export interface OpenApiOptions {
  maxWaitMs: number;
  bodyBytes: number;
}

/** CRD-only extensions out; int-or-string and nullable as OpenAPI 3.1 (JSON Schema 2020-12) spells them. */
function forOpenApi(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(forOpenApi);
  if (!isRecord(schema)) return schema;
  const out: OpenAPISchema = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === 'nullable') {
      continue;
    } else if (key === 'type' && schema.nullable === true && typeof value === 'string') {
      out.type = [value, 'null'];
    } else if (key === 'x-kubernetes-int-or-string' && value === true) {
      out.anyOf = [{ type: 'integer' }, { type: 'string' }];
    } else if (key.startsWith('x-kubernetes-')) {
      continue;
    } else if (key === 'properties' && isRecord(value)) {
      out.properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, forOpenApi(v)]));
    } else if (key === 'items' || key === 'additionalProperties') {
      out[key] = forOpenApi(value);
    } else {
      out[key] = value;
    }
  }
  return out;
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });

function errorResponse(description: string, headers?: Record<string, unknown>) {
  return { description, content: json(ref('Error')), ...(headers ? { headers } : {}) };
}

const RETRY_AFTER = {
  'Retry-After': {
    description: 'Seconds to wait before trying again.',
    required: true,
    schema: { type: 'integer', minimum: 1 },
  },
};

/** The refusals every authenticated operation may answer with. */
function authenticatedRefusals() {
  return {
    '401': errorResponse('No bearer token, or one the Kubernetes API server does not accept.', {
      'WWW-Authenticate': {
        description: 'Bearer realm="gatehouse", with error="invalid_token" for a bad token.',
        required: true,
        schema: { type: 'string' },
      },
    }),
    '403': errorResponse('The caller lacks the RBAC verb this needs (the message names it and the role).'),
    '429': errorResponse(
      'Over the per-caller request rate, creation rate or number of open long-polls and streams; or too many failed authentications from this address.',
      RETRY_AFTER,
    ),
    '503': errorResponse(
      'The Kubernetes API server did not answer (authentication, authorisation or the read itself); retry.',
      RETRY_AFTER,
    ),
  };
}

const nameParameter = (what: string) => ({
  name: 'name',
  in: 'path',
  required: true,
  description: `Name of the ${what}.`,
  schema: { type: 'string', minLength: 1, maxLength: 253 },
});

const security = [{ bearerAuth: [] }];

/** One server-sent event as OpenAPI 3.2 (and schemathesis) describe events: its fields, data as JSON. */
function sseEvent(event: string, dataSchema: string) {
  return {
    type: 'object',
    required: ['event', 'data'],
    properties: {
      event: { type: 'string', enum: [event] },
      id: { type: 'string', description: 'The resourceVersion of the action the event shows.' },
      retry: { type: 'integer' },
      data: { type: 'string', contentMediaType: 'application/json', contentSchema: ref(dataSchema) },
    },
  };
}

/** /v1/health and /v1/health/{check}: anyone may read them. */
function healthPaths() {
  const healthQuery = [
    {
      name: 'action',
      in: 'query',
      description: 'With node: only the checks that would gate this action on that node now.',
      schema: { type: 'string', enum: [...ACTIONS] },
    },
    {
      name: 'node',
      in: 'query',
      description:
        'The node of the prospective action (alone: every check that gates some action on it). Node-scoped checks are answered with their result for this node. A node that does not exist is answered as one without labels, so that this anonymous endpoint does not tell which nodes exist.',
      schema: { type: 'string' },
    },
    {
      name: 'If-None-Match',
      in: 'header',
      description: 'The ETag of an earlier healthy answer: 304 without a body while it still holds.',
      schema: { type: 'string' },
    },
  ];
  const healthTag = {
    ETag: {
      description: 'Names this answer; it changes whenever a check does.',
      schema: { type: 'string' },
    },
  };
  const healthResponses = (what: string) => ({
    '200': { description: `${what} healthy.`, headers: healthTag, content: json(ref('Health')) },
    '304': {
      description: `${what} healthy, and the answer is still the one whose ETag was sent in If-None-Match.`,
      headers: healthTag,
    },
    '503': {
      description: `${what} not healthy (unknown counts as not healthy).`,
      headers: healthTag,
      content: json(ref('Health')),
    },
    '400': errorResponse('Only one of action and node, or an action that does not exist.'),
    '404': errorResponse('No such check.'),
  });
  return {
    '/v1/health': {
      get: {
        operationId: 'getHealth',
        tags: ['health'],
        summary: 'Whether every ClusterHealthCheck holds',
        description:
          "200 when every selected check is healthy, 503 otherwise, so the endpoint is itself a probe. Unauthenticated and read-only; answers come from each check's current state and never trigger probes.",
        security: [],
        parameters: healthQuery,
        responses: healthResponses('Every selected check is'),
      },
    },
    '/v1/health/{check}': {
      get: {
        operationId: 'getCheckHealth',
        tags: ['health'],
        summary: 'Whether one ClusterHealthCheck holds',
        security: [],
        parameters: [{ ...nameParameter('ClusterHealthCheck'), name: 'check' }, ...healthQuery],
        responses: healthResponses('The check is'),
      },
    },
  };
}

/** Running the controller: probes, metrics, this document. */
function operationPaths() {
  return {
    '/healthz': {
      get: {
        operationId: 'getLiveness',
        tags: ['operations'],
        summary: 'Liveness',
        security: [],
        responses: { '200': { description: 'The process serves.', content: json(ref('Live')) } },
      },
    },
    '/readyz': {
      get: {
        operationId: 'getReadiness',
        tags: ['operations'],
        summary: 'Readiness: whether every cache has synced',
        security: [],
        responses: {
          '200': { description: 'Ready.', content: json(ref('Ready')) },
          '503': { description: 'Caches still syncing.', content: json(ref('Ready')) },
        },
      },
    },
    '/metrics': {
      get: {
        operationId: 'getMetrics',
        tags: ['operations'],
        summary: 'Prometheus metrics',
        security: [],
        responses: {
          '200': {
            description: 'Prometheus text exposition format.',
            content: { 'text/plain; version=0.0.4; charset=utf-8': { schema: { type: 'string' } } },
          },
        },
      },
    },
    '/openapi.json': {
      get: {
        operationId: 'getOpenApi',
        tags: ['operations'],
        summary: 'This document',
        security: [],
        responses: { '200': { description: 'The OpenAPI document.', content: json({ type: 'object' }) } },
      },
    },
  };
}

/** /v1/actions: list and create. */
function actionCollectionPaths(rules: string[], options: OpenApiOptions) {
  return {
    '/v1/actions': {
      post: {
        operationId: 'createAction',
        tags: ['actions'],
        summary: 'Request an action on a node (creates a NodeAction)',
        description: [
          'Creates a NodeAction with spec.requestedBy set to the caller. Needs the verb create on nodeactions.talos.dev (ClusterRole gatehouse:requester), and bypass as well (gatehouse:bypass) when spec.bypass skips checks or hooks.',
          `With an Idempotency-Key, retrying the same request returns the same action (200, Idempotent-Replayed: true) for as long as it exists; the same key with a different request is refused (409). Bodies are at most ${String(options.bodyBytes / 1024)} KiB.`,
          `The API server also enforces these rules on the spec (a violation is a 422 naming the field): ${rules.join('; ')}.`,
        ].join('\n\n'),
        security,
        parameters: [
          {
            name: 'Idempotency-Key',
            in: 'header',
            description: 'A key unique to this request (e.g. a UUID), so that retrying it is safe.',
            schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]+$' },
          },
        ],
        requestBody: { required: true, content: json(ref('ActionRequest')) },
        responses: {
          '201': {
            description: 'Created.',
            headers: { Location: { required: true, schema: { type: 'string' }, description: 'The action.' } },
            content: json(ref('NodeAction')),
          },
          '200': {
            description: 'The action this Idempotency-Key created before.',
            headers: {
              Location: { required: true, schema: { type: 'string' }, description: 'The action.' },
              'Idempotent-Replayed': { required: true, schema: { type: 'string', enum: ['true'] } },
            },
            content: json(ref('NodeAction')),
          },
          '400': errorResponse('The body is not JSON or not UTF-8, or the Idempotency-Key is malformed.'),
          '409': errorResponse('The Idempotency-Key was used for a different request.'),
          '413': errorResponse(`The body is larger than ${String(options.bodyBytes / 1024)} KiB.`),
          '415': errorResponse('The body is not sent as application/json.'),
          '422': errorResponse('The request does not fit the schema or the rules: details name each field.'),
          ...authenticatedRefusals(),
        },
      },
      get: {
        operationId: 'listActions',
        tags: ['actions'],
        summary: 'List actions',
        description: 'Needs the verb list on nodeactions.talos.dev. Oldest first.',
        security,
        parameters: [
          {
            name: 'node',
            in: 'query',
            description: 'Only actions on this node.',
            schema: { type: 'string' },
          },
          {
            name: 'phase',
            in: 'query',
            description: 'Only actions in this phase.',
            schema: { type: 'string', enum: [...NODE_ACTION_PHASES] },
          },
        ],
        responses: {
          '200': { description: 'The actions.', content: json(ref('NodeActionList')) },
          '400': errorResponse('An unknown phase.'),
          ...authenticatedRefusals(),
        },
      },
    },
  };
}

/** One action: read it, follow it, mark it, cancel it. */
function actionPaths(maxWait: string) {
  return {
    '/v1/actions/{name}': {
      get: {
        operationId: 'getAction',
        tags: ['actions'],
        summary: 'One action; with ?wait=, long-poll until its phase changes',
        description: `Needs the verb get on nodeactions.talos.dev. With wait, the answer comes as soon as the phase differs from ?phase= (default: the phase when the request arrived) or is final, and at the latest after wait (at most ${maxWait}), with the action as it is then.`,
        security,
        parameters: [
          nameParameter('NodeAction'),
          {
            name: 'wait',
            in: 'query',
            description: `How long to wait for a phase change, e.g. 30s (at most ${maxWait}).`,
            schema: { type: 'string', pattern: '^([0-9]{1,6}(ms|s|m))+$' },
          },
          {
            name: 'phase',
            in: 'query',
            description: 'The phase the caller knows: wait for a different one.',
            schema: { type: 'string', enum: [...NODE_ACTION_PHASES] },
          },
        ],
        responses: {
          '200': { description: 'The action.', content: json(ref('NodeAction')) },
          '400': errorResponse(`wait is not a duration from 0s to ${maxWait}, or phase is unknown.`),
          '404': errorResponse('No such action, or it was deleted while waiting.'),
          ...authenticatedRefusals(),
        },
      },
    },
    '/v1/actions/{name}/events': {
      get: {
        operationId: 'streamActionEvents',
        tags: ['actions'],
        summary: 'Server-sent events of an action’s progress',
        description:
          'Needs the verb watch on nodeactions.talos.dev. Events: `progress` (data: a ProgressEvent, with the action and its node; id: the resourceVersion), whenever either changes; `end` (data: name, phase, message) once the action is final, after which the stream closes; `deleted` if the action disappears. Comment lines keep an idle stream open.',
        security,
        parameters: [nameParameter('NodeAction')],
        responses: {
          '200': {
            description: 'The event stream. Each event is described below; its data is JSON.',
            content: {
              'text/event-stream': {
                schema: {
                  anyOf: [
                    sseEvent('progress', 'ProgressEvent'),
                    sseEvent('end', 'EndEvent'),
                    sseEvent('deleted', 'DeletedEvent'),
                  ],
                },
              },
            },
          },
          '404': errorResponse('No such action.'),
          ...authenticatedRefusals(),
        },
      },
    },
  };
}

/** What a person or a requester does to one action: mark it executed, release it, answer its approval, cancel it. */
function actionMarkPaths() {
  return {
    '/v1/actions/{name}/executed': {
      post: {
        operationId: 'markActionExecuted',
        tags: ['actions'],
        summary: 'Mark an External action performed',
        description:
          'Sets the annotation talos.dev/executed: "true" on an Approved action with External execution, after the caller performed it (e.g. with talosctl); the controller then follows the node to the end. Needs the verb patch on nodeactions.talos.dev. Marking again is harmless.',
        security,
        parameters: [nameParameter('NodeAction')],
        responses: {
          '200': { description: 'Marked (or it already was).', content: json(ref('NodeAction')) },
          '404': errorResponse('No such action.'),
          '409': errorResponse('Not External, not Approved yet, or already ended.'),
          ...authenticatedRefusals(),
        },
      },
    },
    '/v1/actions/{name}/release': {
      post: {
        operationId: 'releaseAction',
        tags: ['actions'],
        summary: 'Release a Maintenance held out of service',
        description:
          'Sets the annotation talos.dev/released: "true" on a Maintenance in phase Held: its node\'s work is done. The controller then runs the node\'s NodeReadyJobs and lifts its cordon. Needs the verb patch on nodeactions.talos.dev, and to be the requester or hold the verb bypass. Releasing again is harmless.',
        security,
        parameters: [nameParameter('NodeAction')],
        responses: {
          '200': { description: 'Released (or it already was).', content: json(ref('NodeAction')) },
          '404': errorResponse('No such action.'),
          '409': errorResponse('Not held (not a Maintenance, not drained yet), or already ended.'),
          ...authenticatedRefusals(),
        },
      },
    },
    '/v1/actions/{name}/approve': {
      post: {
        operationId: 'approveAction',
        tags: ['actions'],
        summary: 'Approve or refuse an action waiting at an approval hook',
        description:
          "Answers the approval hook the action waits for (status.approval.pending): Approve lets it go on, Refuse ends it Denied with the reason. Needs the verb approve on nodeactions.talos.dev (ClusterRole gatehouse:approve), to be among the approvers the hook names (groups, users), and not to be the action's requester unless the hook sets allowSelfApproval. Recorded with the caller's name and reason in status.approval.decisions and an Event.",
        security,
        parameters: [nameParameter('NodeAction')],
        requestBody: { required: true, content: json(ref('ApprovalRequest')) },
        responses: {
          '200': {
            description: 'Answered: the controller takes it on its next pass.',
            content: json(ref('NodeAction')),
          },
          '404': errorResponse('No such action.'),
          '400': errorResponse('The body is not JSON or not UTF-8.'),
          '409': errorResponse('The action waits for no approval (none asked, or already ended).'),
          '413': errorResponse('The body is too large.'),
          '415': errorResponse('The body is not sent as application/json.'),
          '422': errorResponse('No reason, or one without words, or an unknown decision.'),
          ...authenticatedRefusals(),
        },
      },
    },
    '/v1/actions/{name}/cancel': {
      post: {
        operationId: 'cancelAction',
        tags: ['actions'],
        summary: 'Cancel an unfinished action',
        description:
          'Deletes the NodeAction, which cancels it: the controller stops its hook Jobs, records phase Cancelled, and lets it go. Needs the verb delete on nodeactions.talos.dev. Cancelling again is harmless.',
        security,
        parameters: [nameParameter('NodeAction')],
        responses: {
          '202': {
            description: 'Cancellation under way.',
            headers: { Location: { required: true, schema: { type: 'string' }, description: 'The action.' } },
            content: json(ref('CancelResult')),
          },
          '404': errorResponse('No such action.'),
          '409': errorResponse('The action has already ended.'),
          ...authenticatedRefusals(),
        },
      },
    },
  };
}

/** Who the caller is, and a Talos API gate certificate for them. */
function talosPaths() {
  return {
    '/v1/whoami': {
      get: {
        operationId: 'whoami',
        tags: ['operations'],
        summary: 'Who the bearer token belongs to',
        description:
          'The caller as the Kubernetes API server authenticated them: the name gatehouse records as requestedBy, and the CN a Talos gate certificate request must carry.',
        security,
        responses: {
          '200': { description: 'The caller.', content: json(ref('Caller')) },
          ...authenticatedRefusals(),
        },
      },
    },
    '/v1/talos/certificates': {
      post: {
        operationId: 'signTalosCertificate',
        tags: ['talos'],
        summary: 'A Talos API gate certificate for the caller',
        description:
          "Signs the caller's PKCS#10 request (Ed25519, CN the caller, O one Talos role) through the Talos API gate's signer, for those who have only a bearer token (gatehouse talosconfig --server). Needs the role's verb on talosapi.talos.dev (e.g. os:operator, ClusterRole gatehouse:talos-operator). Waits for the gate to sign.",
        security,
        requestBody: { required: true, content: json(ref('TalosCertificateRequest')) },
        responses: {
          '201': {
            description: 'Signed: the certificate, then the gate CA that the talosconfig trusts.',
            content: json(ref('TalosCertificate')),
          },
          '400': errorResponse('The body is not JSON.'),
          '413': errorResponse('The body is too large.'),
          '415': errorResponse('The body is not sent as application/json.'),
          '422': errorResponse('Not a certificate request for the caller and one Talos role.'),
          '500': errorResponse('gatehouse may not create CertificateSigningRequests (its RBAC).'),
          '504': errorResponse(
            'The gate did not sign in time: it is not running, or does not trust this controller.',
          ),
          ...authenticatedRefusals(),
        },
      },
    },
  };
}

/** ActionPolicies, and probing a check now. */
function policyAndCheckPaths() {
  return {
    '/v1/policies': {
      get: {
        operationId: 'listPolicies',
        tags: ['policies'],
        summary: 'List ActionPolicies',
        description: 'Needs the verb list on actionpolicies.talos.dev.',
        security,
        responses: {
          '200': { description: 'The policies, by name.', content: json(ref('ActionPolicyList')) },
          ...authenticatedRefusals(),
        },
      },
    },
    '/v1/checks/{name}/evaluate': {
      post: {
        operationId: 'evaluateCheck',
        tags: ['health'],
        summary: 'Probe a ClusterHealthCheck now',
        description:
          'Runs a fresh probe (shared with any gate asking at the same moment) and answers with the resulting state, healthy or not. Needs the verb get on clusterhealthchecks.talos.dev.',
        security,
        parameters: [
          nameParameter('ClusterHealthCheck'),
          {
            name: 'node',
            in: 'query',
            description:
              'A Node-scoped check: probe it for this node. Absent: for every node it selects, answered with the per-node summary.',
            schema: { type: 'string' },
          },
        ],
        responses: {
          '200': { description: 'The state after the fresh probe.', content: json(ref('CheckSummary')) },
          '404': errorResponse('No such check.'),
          ...authenticatedRefusals(),
        },
      },
    },
  };
}

export function openApiDocument(options: OpenApiOptions): Record<string, unknown> {
  const maxWait = formatDuration(options.maxWaitMs);
  const rules = specRuleMessages();
  const paths = {
    ...healthPaths(),
    ...operationPaths(),
    ...actionCollectionPaths(rules, options),
    ...actionPaths(maxWait),
    ...actionMarkPaths(),
    ...talosPaths(),
    ...policyAndCheckPaths(),
  };

  const list = (item: string, description: string) => ({
    description,
    type: 'object',
    required: ['items'],
    properties: { items: { type: 'array', items: ref(item) } },
  });

  const progress = {
    description: 'One progress event: the action and what the controller sees of its node.',
    type: 'object',
    required: ['action', 'node'],
    properties: { action: ref('NodeAction'), node: ref('NodeView') },
  };

  return {
    openapi: '3.1.0',
    info: {
      title: 'gatehouse',
      version: packageJson.version,
      description:
        'The gatehouse controller: health of the cluster for anyone (plain HTTP probes), and node actions for authenticated callers. Callers authenticate with a Kubernetes bearer token (TokenReview) and are authorised by RBAC as themselves (SubjectAccessReview) on nodeactions.talos.dev.',
    },
    servers: [{ url: '/' }],
    tags: [
      { name: 'health', description: 'ClusterHealthChecks.' },
      { name: 'actions', description: 'NodeActions.' },
      { name: 'policies', description: 'ActionPolicies.' },
      { name: 'talos', description: 'The Talos API gate.' },
      { name: 'operations', description: 'Running the controller.' },
    ],
    paths,
    components: {
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          description:
            'A Kubernetes token the API server accepts (TokenReview): a ServiceAccount token (kubectl create token), or an OIDC token.',
        },
      },
      schemas: {
        NodeAction: forOpenApi(nodeActionSchema()),
        NodeActionList: list('NodeAction', 'NodeActions.'),
        ActionRequest: forOpenApi(actionRequestSchema()),
        ActionPolicy: forOpenApi(actionPolicySchema()),
        ActionPolicyList: list('ActionPolicy', 'ActionPolicies.'),
        Error: forOpenApi(toStructural(ErrorBody, 'Error')),
        CheckSummary: forOpenApi(toStructural(CheckSummary, 'CheckSummary')),
        Health: forOpenApi({
          ...toStructural(HealthBody, 'Health'),
          properties: {
            ...((toStructural(HealthBody, 'Health').properties ?? {}) as OpenAPISchema),
            checks: {
              type: 'array',
              items: ref('CheckSummary'),
              description: 'The selected checks, by name.',
            },
          },
        }),
        NodeView: forOpenApi(toStructural(NodeView, 'NodeView')),
        ProgressEvent: progress,
        EndEvent: {
          description: 'The last event of a stream: the action is final.',
          type: 'object',
          required: ['name', 'phase', 'message'],
          properties: {
            name: { type: 'string' },
            phase: { type: 'string', enum: ['Succeeded', 'Failed', 'Denied', 'Cancelled'] },
            message: { type: 'string' },
          },
        },
        DeletedEvent: {
          description: 'The action is gone (deleted once cancelled, or by its retention).',
          type: 'object',
          required: ['name', 'message'],
          properties: { name: { type: 'string' }, message: { type: 'string' } },
        },
        CancelResult: forOpenApi(toStructural(CancelResult, 'CancelResult')),
        ApprovalRequest: forOpenApi(toStructural(ApprovalRequest, 'ApprovalRequest')),
        Caller: {
          description: 'An authenticated caller.',
          type: 'object',
          required: ['username', 'groups'],
          properties: {
            username: { type: 'string' },
            groups: { type: 'array', items: { type: 'string' } },
          },
        },
        TalosCertificateRequest: talosCertificateRequestSchema(),
        TalosCertificate: {
          description: 'A signed Talos API gate certificate.',
          type: 'object',
          required: ['certificate', 'role', 'certificateSigningRequest'],
          properties: {
            certificate: { type: 'string', description: 'PEM: the certificate, then the gate CA.' },
            role: { type: 'string', enum: [...TALOS_ROLES] },
            certificateSigningRequest: {
              type: 'string',
              description: 'The Kubernetes CertificateSigningRequest it was signed through.',
            },
          },
        },
        Ready: forOpenApi(toStructural(ReadyBody, 'Ready')),
        Live: forOpenApi(toStructural(LiveBody, 'Live')),
      },
    },
  };
}

/** GET /openapi.json: the document, serialised once. */
export function openApiRoutes(router: Router, options: OpenApiOptions): void {
  const document = `${JSON.stringify(openApiDocument(options))}\n`;
  router.on('GET', '/openapi.json', () => ({
    status: 200,
    body: document,
    contentType: 'application/json; charset=utf-8',
  }));
}
