// POST /v1/actions: create a NodeAction for the caller, once per Idempotency-Key.
import { createHash } from 'node:crypto';
import type { ActionObject } from '../../api/node-action.ts';
import { API_VERSION } from '../../api/common.ts';
import {
  FINGERPRINT_ANNOTATION,
  IDEMPOTENCY_KEY_ANNOTATION,
  IDEMPOTENCY_LABEL,
  INSTANCE_LABEL,
  REQUESTED_VIA_ANNOTATION,
} from '../../api/names.ts';
import type { NodeActionSpec } from '../../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../../api/paths.ts';
import { KubeApiError } from '../../kube/rest.ts';
import { ApiError } from '../api-error.ts';
import type { Caller } from '../auth.ts';
import { readJson } from '../body.ts';
import { canonicalJson } from '../../canonical-json.ts';
import type { Reply, Request } from '../router.ts';
import { actionRequestSchema } from '../schemas.ts';
import { validator } from '../validation.ts';
import type { ActionsContext } from './context.ts';
import { actionNamePrefix } from './names.ts';
import { REQUESTER_ROLE, actionView } from './view.ts';

export interface ActionRequestBody {
  spec: Omit<NodeActionSpec, 'requestedBy'>;
}

type RequestedSpec = ActionRequestBody['spec'];

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

// RFC 9110 token-ish: visible ASCII, no spaces; long enough for a UUID or a ULID with a prefix.
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

function idempotencyKey(req: Request): string | undefined {
  const raw = req.raw.headers['idempotency-key'];
  if (raw === undefined) return undefined;
  const key = Array.isArray(raw) ? raw.join(',') : raw;
  // Structured-field strings arrive quoted (draft-ietf-httpapi-idempotency-key-header).
  const unquoted = /^"[^"]*"$/.test(key) ? key.slice(1, -1) : key;
  if (!IDEMPOTENCY_KEY.test(unquoted)) {
    throw new ApiError(
      400,
      'the Idempotency-Key header must be 1 to 255 visible ASCII characters without spaces, e.g. a UUID',
    );
  }
  return unquoted;
}

function bypassing(spec: RequestedSpec): boolean {
  return spec.bypass?.healthChecks === true || spec.bypass?.hooks === true;
}

interface Idempotency {
  key: string;
  keyHash: string;
}

export class ActionCreation {
  private readonly validateRequest = validator<ActionRequestBody>(actionRequestSchema(), 'the request body');
  /** The request in progress for each Idempotency-Key digest. */
  private readonly keyed = new Map<string, Promise<Reply>>();

  private readonly c: ActionsContext;

  constructor(context: ActionsContext) {
    this.c = context;
  }

  async create(req: Request): Promise<Reply> {
    const { access } = this.c;
    const caller = await access.caller(req);
    await access.authorize(caller, { verb: 'create', resource: 'nodeactions' }, REQUESTER_ROLE);
    const key = idempotencyKey(req);
    const body = this.validateRequest(await readJson(req.raw, access.limits.bodyBytes));
    const spec = body.spec;
    if (bypassing(spec)) {
      await access.authorize(caller, { verb: 'bypass', resource: 'nodeactions' }, 'gatehouse:bypass');
    }
    const fingerprint = `sha256:${sha256(canonicalJson(spec))}`;
    if (key === undefined) return this.createAction(caller, spec, fingerprint);
    const keyHash = sha256(`${caller.username}\n${key}`).slice(0, 40);
    // One request per key at a time here: a lookup and a create must not interleave with
    // another's, or two different requests under one key could both be created.
    const previous = this.keyed.get(keyHash) ?? Promise.resolve();
    const turn = previous.then(
      () => this.createAction(caller, spec, fingerprint, { key, keyHash }),
      () => this.createAction(caller, spec, fingerprint, { key, keyHash }),
    );
    this.keyed.set(keyHash, turn);
    try {
      return await turn;
    } finally {
      if (this.keyed.get(keyHash) === turn) this.keyed.delete(keyHash);
    }
  }

  private async createAction(
    caller: Caller,
    spec: RequestedSpec,
    fingerprint: string,
    idempotency?: Idempotency,
  ): Promise<Reply> {
    const { store } = this.c;
    const key = idempotency?.key;
    const keyHash = idempotency?.keyHash;
    if (keyHash !== undefined) {
      const earlier = await this.findByKey(keyHash);
      if (earlier) return replay(earlier, fingerprint, caller);
    }
    this.c.access.takeCreation(caller);
    const suffix = keyHash?.slice(0, 10);
    const prefix = actionNamePrefix(spec.nodeName, spec.action, suffix?.length ?? 5);
    const object = {
      apiVersion: API_VERSION,
      kind: 'NodeAction',
      metadata: {
        ...(suffix ? { name: `${prefix}${suffix}` } : { generateName: prefix }),
        labels: {
          ...(store.instance ? { [INSTANCE_LABEL]: store.instance } : {}),
          ...(keyHash ? { [IDEMPOTENCY_LABEL]: keyHash } : {}),
        },
        annotations: {
          [REQUESTED_VIA_ANNOTATION]: 'http-api',
          ...(key !== undefined
            ? { [IDEMPOTENCY_KEY_ANNOTATION]: key, [FINGERPRINT_ANNOTATION]: fingerprint }
            : {}),
        },
      },
      spec: { ...spec, requestedBy: caller.username },
    };
    let created: ActionObject;
    try {
      created = await store.rest.request<ActionObject>(NODE_ACTIONS_PATH, { method: 'POST', body: object });
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409 && suffix) {
        // A concurrent attempt with the same key got there first.
        const earlier = await store.read(`${prefix}${suffix}`);
        if (earlier && earlier.metadata.labels?.[IDEMPOTENCY_LABEL] === keyHash)
          return replay(earlier, fingerprint, caller);
        throw new ApiError(
          409,
          `a NodeAction named ${prefix}${suffix} already exists; retry with another Idempotency-Key`,
        );
      }
      throw store.writeFailure(error, 'create the NodeAction');
    }
    this.c.log.info(
      {
        action: created.metadata.name,
        node: spec.nodeName,
        requestedBy: caller.username,
        bypass: bypassing(spec),
      },
      'action requested over HTTP',
    );
    return {
      status: 201,
      body: actionView(created),
      headers: { Location: `/v1/actions/${created.metadata.name}` },
    };
  }

  private async findByKey(keyHash: string): Promise<ActionObject | undefined> {
    const earlier = await this.c.store.list('look up the Idempotency-Key', `${IDEMPOTENCY_LABEL}=${keyHash}`);
    return earlier.sort((a, b) =>
      (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''),
    )[0];
  }
}

function replay(earlier: ActionObject, fingerprint: string, caller: Caller): Reply {
  const name = earlier.metadata.name;
  if (earlier.metadata.annotations?.[FINGERPRINT_ANNOTATION] !== fingerprint) {
    throw new ApiError(
      409,
      `this Idempotency-Key was already used by ${caller.username} for a different request (NodeAction ${name}); send the same request to get that action back, or use a new key for a new request`,
    );
  }
  return {
    status: 200,
    body: actionView(earlier),
    headers: { Location: `/v1/actions/${name}`, 'Idempotent-Replayed': 'true' },
  };
}
