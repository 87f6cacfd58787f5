// The actions API's reads and writes of NodeActions, always as the controller (the
// caller was authorised before): only this instance's actions, and the API server's
// refusals turned into answers that say what to do.
import { INSTANCE_LABEL, instanceSelector } from '../../api/names.ts';
import type { ActionObject } from '../../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../../api/paths.ts';
import { KubeApiError, type RestClient } from '../../kube/rest.ts';
import type { Logger } from '../../log.ts';
import { ApiError, type FieldProblem } from '../api-error.ts';
import { apiServerUnavailable } from '../auth.ts';
import { isActionName } from './names.ts';

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

export class ActionStore {
  readonly rest: RestClient;
  /** The controller instance whose actions these are (see ControllerOptions.instance). */
  readonly instance: string | undefined;
  private readonly log: Logger;

  constructor(rest: RestClient, log: Logger, instance: string | undefined) {
    this.rest = rest;
    this.log = log;
    this.instance = instance;
  }

  async read(name: string): Promise<ActionObject | undefined> {
    try {
      const action = await this.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${name}`);
      // Another controller instance's actions are not this API's to show.
      return this.ours(action) ? action : undefined;
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 404) return undefined;
      throw apiServerUnavailable(`read NodeAction ${name}`, error);
    }
  }

  /** The action, or a 404 for a name that is not one of this instance's actions. */
  async mustRead(name: string): Promise<ActionObject> {
    const action = isActionName(name) ? await this.read(name) : undefined;
    if (!action) throw new ApiError(404, `NodeAction "${name}" does not exist`);
    return action;
  }

  /** This instance's actions, or those matching `labelSelector` among them. */
  async list(what: string, labelSelector?: string): Promise<ActionObject[]> {
    try {
      const list = await this.rest.request<{ items: ActionObject[] }>(NODE_ACTIONS_PATH, {
        query: { labelSelector: labelSelector ?? instanceSelector(this.instance) },
      });
      return list.items.filter((a) => this.ours(a));
    } catch (error) {
      throw apiServerUnavailable(what, error);
    }
  }

  ours(action: ActionObject): boolean {
    const label = action.metadata.labels?.[INSTANCE_LABEL];
    return this.instance ? label === this.instance : label === undefined;
  }

  /** A failed write on the caller's behalf, as the caller's answer. */
  writeFailure(error: unknown, what: string): Error {
    if (error instanceof ApiError) return error;
    if (error instanceof KubeApiError) {
      if (error.code === 422 || error.code === 400) return refusedByApiServer(error);
      if (error.code === 404) return new ApiError(404, error.serverMessage);
      if (error.code === 409) return new ApiError(409, `${error.serverMessage}; read it again and retry`);
      if (error.code === 429 || error.code >= 500) return apiServerUnavailable(what, error);
      // 401/403 here are the controller's own credentials or RBAC, never the caller's.
      this.log.error({ err: error.message }, `the API server refused the controller: cannot ${what}`);
      return new ApiError(
        502,
        `the Kubernetes API server refused the controller (${error.serverMessage}); see the controller log`,
      );
    }
    return apiServerUnavailable(what, error);
  }
}
