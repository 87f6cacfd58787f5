// The /v1/actions API: how Talos, scripts and people ask for an action and follow it.
//
//   POST /v1/actions                      create (Idempotency-Key honoured)
//   GET  /v1/actions                      list (?node=, ?phase=)
//   GET  /v1/actions/{name}               one action (?wait=30s long-polls for a phase change)
//   GET  /v1/actions/{name}/events        server-sent events of its progress
//   POST /v1/actions/{name}/executed      mark an External action performed
//   POST /v1/actions/{name}/cancel        cancel (deletes the NodeAction)
//
// Every request is authenticated (TokenReview) and authorised as the caller
// (SubjectAccessReview) on nodeactions.talos.dev — create, get, list, watch, patch,
// delete, and bypass when the request bypasses checks or hooks. The controller then
// acts with its own identity, setting spec.requestedBy to the caller: the admission
// policy exempts the controller's ServiceAccount from that check because of this file.
import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { instanceSelector, type ActionObject } from '../actions/reconciler.ts';
import { API_VERSION } from '../api/common.ts';
import {
  INSTANCE_LABEL,
  EXECUTED_ANNOTATION,
  IDEMPOTENCY_LABEL,
  REQUESTED_VIA_ANNOTATION,
  IDEMPOTENCY_KEY_ANNOTATION,
  FINGERPRINT_ANNOTATION,
} from '../api/names.ts';
import { NODE_ACTION_PHASES, type NodeActionPhase, type NodeActionSpec } from '../api/node-action.ts';
import { ACTION_POLICIES_PATH, NODE_ACTIONS_PATH } from '../api/paths.ts';
import { isTerminal } from '../api/phases.ts';
import type { CheckRunner } from '../checks/runner.ts';
import { parseDuration } from '../duration.ts';
import type { Informer, KubeObject } from '../kube/informer.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { errorMessage, formatDuration } from '../wait.ts';
import { Access, type ApiLimits, type AuthCacheOptions } from './access.ts';
import { ApiError, type FieldProblem } from './api-error.ts';
import { apiServerUnavailable, type Caller } from './auth.ts';
import { readJson } from './body.ts';
import { checkSummary } from './health.ts';
import { nodeView } from './node-view.ts';
import { openApiDocument } from './openapi.ts';
import { API_METADATA_FIELDS, actionRequestSchema, type NodeView } from './schemas.ts';
import type { Reply, Request, Router } from './server.ts';
import { validator } from './validation.ts';

const REQUESTER_ROLE = 'gatehouse:requester';
const READER_ROLE = 'gatehouse:view or gatehouse:requester';

export interface ActionsApiOptions {
  rest: RestClient;
  log: Logger;
  /** The controller's NodeAction informer: changes wake long-polls and event streams. */
  actions: Informer<ActionObject>;
  nodes: Informer<KubeObject>;
  checks: CheckRunner;
  /** The controller instance whose actions this API creates and serves (see ControllerOptions.instance). */
  instance?: string;
  metrics?: Metrics;
  limits?: Partial<ApiLimits>;
  auth?: AuthCacheOptions;
  /** How often a waiting request re-reads its action even without an informer event. Default 5s. */
  pollIntervalMs?: number;
  /** Comment lines that keep an idle event stream open through proxies. Default 15s. */
  heartbeatMs?: number;
}

export interface ActionRequestBody {
  spec: Omit<NodeActionSpec, 'requestedBy'>;
}

/** An object as the API returns it: without the API server's bookkeeping (managedFields). */
export function objectView(
  object: KubeObject & { spec?: unknown; status?: unknown },
): Record<string, unknown> {
  const metadata = object.metadata as Record<string, unknown>;
  return {
    apiVersion: object.apiVersion ?? API_VERSION,
    kind: object.kind,
    metadata: Object.fromEntries(
      API_METADATA_FIELDS.filter((f) => metadata[f] !== undefined).map((f) => [f, metadata[f]]),
    ),
    spec: object.spec,
    ...(object.status !== undefined ? { status: object.status } : {}),
  };
}

/** The action as the API returns it. */
export function actionView(action: ActionObject): Record<string, unknown> {
  return objectView({ ...action, kind: action.kind ?? 'NodeAction' });
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** JSON with object keys sorted, so equal requests have equal fingerprints. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  );
}

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export function isActionName(name: string): boolean {
  return name.length <= 253 && DNS_SUBDOMAIN.test(name);
}

/**
 * `<node>-<action>-` (a generateName prefix), or with a suffix a full name. The node is
 * shortened so the name stays within 253 characters and ends in a letter or digit.
 */
export function actionNamePrefix(nodeName: string, action: string, suffixLength: number): string {
  const tail = `-${action.toLowerCase()}-`;
  const node = nodeName.slice(0, 253 - tail.length - suffixLength).replace(/[-.]+$/, '');
  return `${node}${tail}`;
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

function bypassing(spec: ActionRequestBody['spec']): boolean {
  return spec.bypass?.healthChecks === true || spec.bypass?.hooks === true;
}

/** The action's phase; a new action the controller has not looked at yet is Pending. */
function phaseOf(action: ActionObject): NodeActionPhase {
  return action.status?.phase ?? 'Pending';
}

function parsePhase(value: string | null, parameter: string): NodeActionPhase | undefined {
  if (value === null) return undefined;
  if (!(NODE_ACTION_PHASES as readonly string[]).includes(value)) {
    throw new ApiError(400, `?${parameter}= must be one of ${NODE_ACTION_PHASES.join(', ')}, not "${value}"`);
  }
  return value as NodeActionPhase;
}

const WAIT_PATTERN = /^([0-9]{1,6}(ms|s|m))+$/;

function parseWait(value: string | null, maxMs: number): number {
  if (value === null) return 0;
  const bounds = `from 0s to ${formatDuration(maxMs)}`;
  if (!WAIT_PATTERN.test(value)) {
    throw new ApiError(
      400,
      `?wait= must be a duration such as 30s or 500ms (${bounds}), not "${value.slice(0, 40)}"`,
    );
  }
  const ms = parseDuration(value);
  if (ms > maxMs) throw new ApiError(400, `?wait= must be ${bounds}, not ${value}`);
  return ms;
}

/** The API server refused a write on the caller's behalf: say why, in its words. */
function refusedByApiServer(error: KubeApiError): ApiError {
  const details = (error.status.details as { causes?: { field?: string; message?: string }[] } | undefined)
    ?.causes;
  const problems: FieldProblem[] = (details ?? []).map((c) => ({
    field: c.field ?? '',
    message: c.field && c.message ? `${c.field}: ${c.message}` : (c.message ?? ''),
  }));
  return new ApiError(422, error.serverMessage || error.message, { details: problems });
}

/**
 * Whether the controller has already seen an External action performed (the node went
 * down or came back with a new boot): marking it executed then changes nothing, and
 * succeeds, so that `talosctl reboot` (which waits for the node) followed by the mark
 * works however quickly gatehouse noticed.
 */
export function performanceObserved(action: ActionObject): boolean {
  const phase = phaseOf(action);
  return (
    (action.spec.execution ?? 'Managed') === 'External' &&
    (phase === 'WaitingForNode' || phase === 'RunningPostHooks' || phase === 'Succeeded')
  );
}

/** The merge patch that marks an action executed, conditional on the version judged Approved. */
export function executedMark(action: ActionObject): Record<string, unknown> {
  return {
    metadata: {
      resourceVersion: action.metadata.resourceVersion,
      annotations: { [EXECUTED_ANNOTATION]: 'true' },
    },
  };
}

/**
 * Why an action cannot be marked executed now, or undefined if it can: only an
 * External action, only once Approved and before it ended.
 */
export function executedRefusal(action: ActionObject): string | undefined {
  const name = action.metadata.name;
  if ((action.spec.execution ?? 'Managed') !== 'External') {
    return `NodeAction ${name} has Managed execution: the controller performs it, so there is nothing to mark executed`;
  }
  const phase = phaseOf(action);
  if (isTerminal(phase))
    return `NodeAction ${name} has already ended (${phase}): it cannot be marked executed`;
  if (action.metadata.deletionTimestamp) {
    return `NodeAction ${name} is being cancelled: it cannot be marked executed`;
  }
  if (phase !== 'Approved') {
    return `NodeAction ${name} is not approved yet (phase ${phase}): perform the action only once it is Approved, then mark it executed`;
  }
  return undefined;
}

export class ActionsApi {
  readonly access: Access;
  private readonly o: ActionsApiOptions & { pollIntervalMs: number; heartbeatMs: number };
  private readonly validateRequest: (value: unknown) => ActionRequestBody;
  /** The request in progress for each Idempotency-Key digest. */
  private readonly keyed = new Map<string, Promise<Reply>>();
  /** Long-polls and event streams waiting on each action, and on each node. */
  private readonly actionFollowers = new Map<string, Set<() => void>>();
  private readonly nodeFollowers = new Map<string, Set<() => void>>();

  constructor(options: ActionsApiOptions) {
    this.o = { pollIntervalMs: 5000, heartbeatMs: 15_000, ...options };
    this.access = new Access({
      rest: options.rest,
      log: options.log,
      ...(options.metrics ? { metrics: options.metrics } : {}),
      ...(options.limits ? { limits: options.limits } : {}),
      ...(options.auth ? { auth: options.auth } : {}),
    });
    this.validateRequest = validator<ActionRequestBody>(actionRequestSchema(), 'the request body');
    this.listen();
  }

  routes(router: Router): void {
    const g = (route: string, handler: (req: Request, res: ServerResponse) => Promise<Reply | undefined>) =>
      this.access.guard(route, handler);
    router.on(
      'POST',
      '/v1/actions',
      g('create', (req) => this.create(req)),
    );
    router.on(
      'GET',
      '/v1/actions',
      g('list', (req) => this.list(req)),
    );
    router.on(
      'GET',
      '/v1/actions/{name}',
      g('get', (req, res) => this.get(req, res)),
    );
    router.on(
      'GET',
      '/v1/actions/{name}/events',
      g('events', (req, res) => this.events(req, res)),
    );
    router.on(
      'POST',
      '/v1/actions/{name}/executed',
      g('executed', (req) => this.executed(req)),
    );
    router.on(
      'POST',
      '/v1/actions/{name}/cancel',
      g('cancel', (req) => this.cancel(req)),
    );
    router.on(
      'GET',
      '/v1/policies',
      g('policies', (req) => this.policies(req)),
    );
    router.on(
      'POST',
      '/v1/checks/{name}/evaluate',
      g('evaluate', (req) => this.evaluate(req)),
    );
    const document = `${JSON.stringify(openApiDocument(this.access.limits))}\n`;
    router.on('GET', '/openapi.json', () => ({
      status: 200,
      body: document,
      contentType: 'application/json; charset=utf-8',
    }));
  }

  // -----------------------------------------------------------------------------------
  // Reading from the API server, always as the controller.

  private async read(name: string): Promise<ActionObject | undefined> {
    try {
      const action = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      // Another controller instance's actions are not this API's to show.
      return this.ours(action) ? action : undefined;
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404) return undefined;
      throw apiServerUnavailable(`read NodeAction ${name}`, error);
    }
  }

  private ours(action: ActionObject): boolean {
    const label = action.metadata.labels?.[INSTANCE_LABEL];
    return this.o.instance ? label === this.o.instance : label === undefined;
  }

  private async mustRead(name: string): Promise<ActionObject> {
    const action = isActionName(name) ? await this.read(name) : undefined;
    if (!action) throw new ApiError(404, `NodeAction "${name}" does not exist`);
    return action;
  }

  private nodeOf(action: ActionObject): NodeView {
    const name = action.spec.nodeName;
    return nodeView(name, this.o.nodes.get(name));
  }

  // -----------------------------------------------------------------------------------
  // POST /v1/actions

  private async create(req: Request): Promise<Reply> {
    const caller = await this.access.caller(req);
    await this.access.authorize(caller, { verb: 'create', resource: 'nodeactions' }, REQUESTER_ROLE);
    const key = idempotencyKey(req);
    const body = this.validateRequest(await readJson(req.raw, this.access.limits.bodyBytes));
    const spec = body.spec;
    if (bypassing(spec)) {
      await this.access.authorize(caller, { verb: 'bypass', resource: 'nodeactions' }, 'gatehouse:bypass');
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
    spec: ActionRequestBody['spec'],
    fingerprint: string,
    idempotency?: { key: string; keyHash: string },
  ): Promise<Reply> {
    const key = idempotency?.key;
    const keyHash = idempotency?.keyHash;
    if (keyHash !== undefined) {
      const earlier = await this.findByKey(keyHash);
      if (earlier) return this.replay(earlier, fingerprint, caller);
    }
    this.access.takeCreation(caller);
    const suffix = keyHash?.slice(0, 10);
    const prefix = actionNamePrefix(spec.nodeName, spec.action, suffix?.length ?? 5);
    const object = {
      apiVersion: API_VERSION,
      kind: 'NodeAction',
      metadata: {
        ...(suffix ? { name: `${prefix}${suffix}` } : { generateName: prefix }),
        labels: {
          ...(this.o.instance ? { [INSTANCE_LABEL]: this.o.instance } : {}),
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
      created = await this.o.rest.request<ActionObject>(NODE_ACTIONS_PATH, { method: 'POST', body: object });
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409 && suffix) {
        // A concurrent attempt with the same key got there first.
        const earlier = await this.read(`${prefix}${suffix}`);
        if (earlier && earlier.metadata.labels?.[IDEMPOTENCY_LABEL] === keyHash)
          return this.replay(earlier, fingerprint, caller);
        throw new ApiError(
          409,
          `a NodeAction named ${prefix}${suffix} already exists; retry with another Idempotency-Key`,
        );
      }
      throw this.writeFailure(error, 'create the NodeAction');
    }
    this.o.log.info(
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
    try {
      const list = await this.o.rest.request<{ items: ActionObject[] }>(NODE_ACTIONS_PATH, {
        query: { labelSelector: `${IDEMPOTENCY_LABEL}=${keyHash}` },
      });
      return list.items
        .filter((a) => this.ours(a))
        .sort((a, b) =>
          (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''),
        )[0];
    } catch (error) {
      throw apiServerUnavailable('look up the Idempotency-Key', error);
    }
  }

  private replay(earlier: ActionObject, fingerprint: string, caller: Caller): Reply {
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

  private writeFailure(error: unknown, what: string): Error {
    if (error instanceof ApiError) return error;
    if (error instanceof KubeApiError) {
      if (error.code === 422 || error.code === 400) return refusedByApiServer(error);
      if (error.code === 404) return new ApiError(404, error.serverMessage);
      if (error.code === 409) return new ApiError(409, `${error.serverMessage}; read it again and retry`);
      if (error.code === 429 || error.code >= 500) return apiServerUnavailable(what, error);
      // 401/403 here are the controller's own credentials or RBAC, never the caller's.
      this.o.log.error({ err: error.message }, `the API server refused the controller: cannot ${what}`);
      return new ApiError(
        502,
        `the Kubernetes API server refused the controller (${error.serverMessage}); see the controller log`,
      );
    }
    return apiServerUnavailable(what, error);
  }

  // -----------------------------------------------------------------------------------
  // GET /v1/actions, /v1/policies

  private async list(req: Request): Promise<Reply> {
    const caller = await this.access.caller(req);
    await this.access.authorize(caller, { verb: 'list', resource: 'nodeactions' }, READER_ROLE);
    const node = req.url.searchParams.get('node');
    const phase = parsePhase(req.url.searchParams.get('phase'), 'phase');
    let items: ActionObject[];
    try {
      items = (
        await this.o.rest.request<{ items: ActionObject[] }>(NODE_ACTIONS_PATH, {
          query: { labelSelector: instanceSelector(this.o.instance) },
        })
      ).items;
    } catch (error) {
      throw apiServerUnavailable('list NodeActions', error);
    }
    const selected = items
      .filter(
        (a) => (node === null || a.spec.nodeName === node) && (phase === undefined || phaseOf(a) === phase),
      )
      .sort(
        (a, b) =>
          (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') ||
          a.metadata.name.localeCompare(b.metadata.name),
      );
    return { status: 200, body: { items: selected.map(actionView) } };
  }

  private async policies(req: Request): Promise<Reply> {
    const caller = await this.access.caller(req);
    await this.access.authorize(caller, { verb: 'list', resource: 'actionpolicies' }, 'gatehouse:view');
    try {
      const list = await this.o.rest.request<{ items: (KubeObject & { spec?: unknown })[] }>(
        ACTION_POLICIES_PATH,
      );
      const items = list.items
        .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
        .map((p) => objectView({ ...p, kind: 'ActionPolicy' }));
      return { status: 200, body: { items } };
    } catch (error) {
      throw apiServerUnavailable('list ActionPolicies', error);
    }
  }

  // -----------------------------------------------------------------------------------
  // POST /v1/checks/{name}/evaluate

  private async evaluate(req: Request): Promise<Reply> {
    const caller = await this.access.caller(req);
    const name = req.params.name ?? '';
    await this.access.authorize(
      caller,
      { verb: 'get', resource: 'clusterhealthchecks', ...(isActionName(name) ? { name } : {}) },
      'gatehouse:view',
    );
    if (!this.o.checks.view(name)) throw new ApiError(404, `ClusterHealthCheck "${name}" does not exist`);
    // A probe that starts now, shared with any gate asking at the same moment.
    await this.o.checks.evaluateNow([name]);
    const view = this.o.checks.view(name);
    if (!view) throw new ApiError(404, `ClusterHealthCheck "${name}" was deleted while it was evaluated`);
    return { status: 200, body: checkSummary(view) };
  }

  // -----------------------------------------------------------------------------------
  // GET /v1/actions/{name}[?wait=]

  private async get(req: Request, res: ServerResponse): Promise<Reply> {
    const caller = await this.access.caller(req);
    const name = req.params.name ?? '';
    await this.access.authorize(
      caller,
      { verb: 'get', resource: 'nodeactions', ...(isActionName(name) ? { name } : {}) },
      READER_ROLE,
    );
    const waitMs = parseWait(req.url.searchParams.get('wait'), this.access.limits.maxWaitMs);
    const known = parsePhase(req.url.searchParams.get('phase'), 'phase');
    const action = await this.mustRead(name);
    if (waitMs === 0) return { status: 200, body: actionView(action) };
    const baseline = known ?? phaseOf(action);
    if (phaseOf(action) !== baseline || isTerminal(phaseOf(action))) {
      return { status: 200, body: actionView(action) };
    }
    const release = this.access.openStream(caller);
    const closed = new AbortController();
    const onClose = () => closed.abort();
    res.once('close', onClose);
    try {
      const after = await this.waitForChange(action, baseline, waitMs, closed.signal);
      if (after === 'deleted') {
        throw new ApiError(
          404,
          `NodeAction "${name}" was deleted while waiting (a cancelled action is deleted once it stops)`,
        );
      }
      return { status: 200, body: actionView(after ?? action) };
    } finally {
      res.off('close', onClose);
      release();
    }
  }

  /**
   * Calls `check` whenever the action (or its node) may have changed: on informer events
   * for it, and every pollIntervalMs in case the informer is behind or reconnecting.
   * Returns a function that stops it.
   */
  private follow(name: string, nodeName: string, check: () => void): () => void {
    const add = (map: Map<string, Set<() => void>>, key: string) => {
      const set = map.get(key) ?? new Set();
      set.add(check);
      map.set(key, set);
      return () => {
        set.delete(check);
        if (set.size === 0) map.delete(key);
      };
    };
    const stopAction = add(this.actionFollowers, name);
    const stopNode = add(this.nodeFollowers, nodeName);
    const poll = setInterval(check, this.o.pollIntervalMs);
    poll.unref();
    return () => {
      clearInterval(poll);
      stopAction();
      stopNode();
    };
  }

  /**
   * One listener per informer event, whatever the number of followers: they are found by
   * name (and an EventEmitter would warn of a leak past ten listeners).
   */
  private listen(): void {
    const wake = (map: Map<string, Set<() => void>>, key: string) => {
      for (const check of map.get(key) ?? []) check();
    };
    const onAction = (a: ActionObject) => wake(this.actionFollowers, a.metadata.name);
    const onNode = (n: KubeObject) => wake(this.nodeFollowers, n.metadata.name);
    const { actions, nodes } = this.o;
    actions.on('add', onAction);
    actions.on('update', (_, a) => onAction(a));
    actions.on('delete', onAction);
    nodes.on('add', onNode);
    nodes.on('update', (_, n) => onNode(n));
    nodes.on('delete', onNode);
  }

  /** A read of the action that never runs twice at once and runs again if asked meanwhile. */
  private reader(name: string, onRead: (action: ActionObject | undefined) => void): () => void {
    const state = { running: false, again: false };
    // A function, so that the compiler does not assume `again` cannot change during a read.
    const again = () => state.again;
    const run = async (): Promise<void> => {
      state.running = true;
      do {
        state.again = false;
        try {
          onRead(await this.read(name));
        } catch (error) {
          // The next event or poll tries again; a waiting client is not failed for a blip.
          this.o.log.debug({ action: name, err: errorMessage(error) }, 'reading a followed action failed');
        }
      } while (again());
      state.running = false;
    };
    return () => {
      if (state.running) state.again = true;
      else void run();
    };
  }

  private waitForChange(
    action: ActionObject,
    baseline: NodeActionPhase,
    waitMs: number,
    signal: AbortSignal,
  ): Promise<ActionObject | 'deleted' | undefined> {
    const name = action.metadata.name;
    return new Promise((resolve) => {
      let latest = action;
      const following: { stop?: () => void } = {};
      const finish = (result: ActionObject | 'deleted' | undefined) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        following.stop?.();
        resolve(result);
      };
      const onAbort = () => finish(undefined);
      const timer = setTimeout(() => finish(latest), waitMs);
      signal.addEventListener('abort', onAbort, { once: true });
      const check = this.reader(name, (current) => {
        if (!current) finish('deleted');
        else {
          latest = current;
          if (phaseOf(current) !== baseline || isTerminal(phaseOf(current))) finish(current);
        }
      });
      following.stop = this.follow(name, action.spec.nodeName, check);
      // The informer may already be past the object read at the start.
      check();
    });
  }

  // -----------------------------------------------------------------------------------
  // GET /v1/actions/{name}/events

  private async events(req: Request, res: ServerResponse): Promise<Reply | undefined> {
    const caller = await this.access.caller(req);
    const name = req.params.name ?? '';
    await this.access.authorize(
      caller,
      { verb: 'watch', resource: 'nodeactions', ...(isActionName(name) ? { name } : {}) },
      READER_ROLE,
    );
    const action = await this.mustRead(name);
    if (req.method === 'HEAD') return { status: 200, contentType: 'text/event-stream' };
    const release = this.access.openStream(caller);
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
      Connection: 'keep-alive',
      'X-Accel-Buffering': 'no',
    });
    res.write('retry: 2000\n\n');
    let lastSent = '';
    let ended = false;
    const send = (event: string, data: unknown, id?: string) => {
      if (ended) return;
      res.write(`event: ${event}\n${id ? `id: ${id}\n` : ''}data: ${JSON.stringify(data)}\n\n`);
    };
    const end = () => {
      if (ended) return;
      ended = true;
      stop();
      clearInterval(heartbeat);
      release();
      res.end();
    };
    const progress = (current: ActionObject) => {
      const data = { action: actionView(current), node: this.nodeOf(current) };
      const text = canonicalJson(data);
      if (text === lastSent) return;
      lastSent = text;
      send('progress', data, current.metadata.resourceVersion);
      const phase = phaseOf(current);
      if (isTerminal(phase)) {
        send('end', { name, phase, message: current.status?.message ?? '' });
        end();
      }
    };
    const check = this.reader(name, (current) => {
      if (!current) {
        send('deleted', { name, message: `NodeAction "${name}" was deleted` });
        end();
      } else progress(current);
    });
    const heartbeat = setInterval(() => {
      if (!ended) res.write(': keep-alive\n\n');
    }, this.o.heartbeatMs);
    heartbeat.unref();
    const stop = this.follow(name, action.spec.nodeName, check);
    res.once('close', end);
    progress(action);
    return undefined;
  }

  // -----------------------------------------------------------------------------------
  // POST /v1/actions/{name}/executed, /cancel

  private async executed(req: Request): Promise<Reply> {
    const caller = await this.access.caller(req);
    const name = req.params.name ?? '';
    await this.access.authorize(
      caller,
      { verb: 'patch', resource: 'nodeactions', ...(isActionName(name) ? { name } : {}) },
      REQUESTER_ROLE,
    );
    for (let attempt = 1; ; attempt++) {
      const action = await this.mustRead(name);
      // The admission policy's rule, answered here first: the requester, or a bypass holder.
      if (action.spec.requestedBy !== caller.username)
        await this.access.authorize(
          caller,
          { verb: 'bypass', resource: 'nodeactions', name },
          'gatehouse:bypass',
        );
      if (performanceObserved(action)) return { status: 200, body: actionView(action) };
      // A mark already there does not make an action markable: the same refusal as without it.
      const refusal = executedRefusal(action);
      if (refusal) throw new ApiError(409, refusal);
      if (action.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true')
        return { status: 200, body: actionView(action) };
      try {
        const patched = await this.o.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: executedMark(action),
        });
        this.o.log.info({ action: name, by: caller.username }, 'action marked executed over HTTP');
        return { status: 200, body: actionView(patched) };
      } catch (error) {
        if (error instanceof KubeApiError && error.code === 409 && attempt < 5) continue;
        throw this.writeFailure(error, `mark NodeAction ${name} executed`);
      }
    }
  }

  private async cancel(req: Request): Promise<Reply> {
    const caller = await this.access.caller(req);
    const name = req.params.name ?? '';
    await this.access.authorize(
      caller,
      { verb: 'delete', resource: 'nodeactions', ...(isActionName(name) ? { name } : {}) },
      REQUESTER_ROLE,
    );
    const action = await this.mustRead(name);
    const phase = phaseOf(action);
    if (isTerminal(phase)) {
      throw new ApiError(
        409,
        `NodeAction ${name} has already ended (${phase}): there is nothing to cancel, and its record is kept`,
      );
    }
    if (!action.metadata.deletionTimestamp) {
      try {
        await this.o.rest.request(`${NODE_ACTIONS_PATH}/${name}`, {
          method: 'DELETE',
          body: {
            apiVersion: 'v1',
            kind: 'DeleteOptions',
            preconditions: { uid: action.metadata.uid },
            propagationPolicy: 'Background',
          },
        });
      } catch (error) {
        if (!(error instanceof KubeApiError && error.code === 404)) {
          throw this.writeFailure(error, `cancel NodeAction ${name}`);
        }
      }
      this.o.log.info({ action: name, by: caller.username }, 'action cancelled over HTTP');
    }
    return {
      status: 202,
      body: {
        name,
        message: `cancelling ${name}: the controller stops its hooks, records phase Cancelled and then deletes it`,
      },
      headers: { Location: `/v1/actions/${name}` },
    };
  }
}

/** Registers the /v1 action routes on the controller's router. */
export function actionRoutes(router: Router, options: ActionsApiOptions): ActionsApi {
  const api = new ActionsApi(options);
  api.routes(router);
  return api;
}
