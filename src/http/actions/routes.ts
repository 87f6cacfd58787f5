// The /v1/actions API: how Talos, scripts and people ask for an action and follow it.
//
//   POST /v1/actions                      create (Idempotency-Key honoured)      create.ts
//   GET  /v1/actions                      list (?node=, ?phase=)                 list.ts
//   GET  /v1/actions/{name}               one action (?wait=30s long-polls)      follow.ts
//   GET  /v1/actions/{name}/events        server-sent events of its progress     events.ts
//   POST /v1/actions/{name}/executed      mark an External action performed      executed.ts
//   POST /v1/actions/{name}/cancel        cancel (deletes the NodeAction)        cancel.ts
//
// Every request is authenticated (TokenReview) and authorised as the caller
// (SubjectAccessReview) on nodeactions.talos.dev — create, get, list, watch, patch,
// delete, and bypass when the request bypasses checks or hooks. The controller then
// acts with its own identity, setting spec.requestedBy to the caller: the admission
// policy exempts the controller's ServiceAccount from that check because of this API.
import type { ActionObject } from '../../api/node-action.ts';
import type { Informer, KubeObject } from '../../kube/informer.ts';
import type { RestClient } from '../../kube/rest.ts';
import type { Logger } from '../../log.ts';
import type { Access } from '../access.ts';
import type { Router } from '../router.ts';
import { cancelAction } from './cancel.ts';
import type { ActionsContext } from './context.ts';
import { ActionCreation } from './create.ts';
import { actionEvents } from './events.ts';
import { releaseAction } from './released.ts';
import { approveAction } from './approve.ts';
import { markExecuted } from './executed.ts';
import { getAction } from './follow.ts';
import { Followers } from './followers.ts';
import { listActions } from './list.ts';
import { ActionStore } from './store.ts';

export interface ActionsApiOptions {
  rest: RestClient;
  log: Logger;
  /** The controller's NodeAction informer: changes wake long-polls and event streams. */
  actions: Informer<ActionObject>;
  nodes: Informer<KubeObject>;
  /** The controller instance whose actions this API creates and serves (see ControllerOptions.instance). */
  instance?: string;
  /** How often a waiting request re-reads its action even without an informer event. Default 5s. */
  pollIntervalMs?: number;
  /** Comment lines that keep an idle event stream open through proxies. Default 15s. */
  heartbeatMs?: number;
}

/** Registers the /v1/actions routes, each guarded by `access`. */
export function actionRoutes(router: Router, access: Access, options: ActionsApiOptions): void {
  const store = new ActionStore(options.rest, options.log, options.instance);
  const c: ActionsContext = {
    access,
    store,
    followers: new Followers(store, options.log, options, options.pollIntervalMs ?? 5000),
    log: options.log,
    nodes: options.nodes,
    heartbeatMs: options.heartbeatMs ?? 15_000,
  };
  const creation = new ActionCreation(c);
  router
    .on(
      'POST',
      '/v1/actions',
      access.guard('create', (req) => creation.create(req)),
    )
    .on(
      'GET',
      '/v1/actions',
      access.guard('list', (req) => listActions(c, req)),
    )
    .on(
      'GET',
      '/v1/actions/{name}',
      access.guard('get', (req, res) => getAction(c, req, res)),
    )
    .on(
      'GET',
      '/v1/actions/{name}/events',
      access.guard('events', (req, res) => actionEvents(c, req, res)),
    )
    .on(
      'POST',
      '/v1/actions/{name}/executed',
      access.guard('executed', (req) => markExecuted(c, req)),
    )
    .on(
      'POST',
      '/v1/actions/{name}/release',
      access.guard('release', (req) => releaseAction(c, req)),
    )
    .on(
      'POST',
      '/v1/actions/{name}/approve',
      access.guard('approve', (req) => approveAction(c, req)),
    )
    .on(
      'POST',
      '/v1/actions/{name}/cancel',
      access.guard('cancel', (req) => cancelAction(c, req)),
    );
}
