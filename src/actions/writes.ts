// The action reconciler's writes to NodeActions: the status and the finalizers, each
// conditional on the resourceVersion decided upon (src/kube/reconciler.ts), put into the
// cache at once (Informer.applyWritten) so the next pass decides on what was written,
// and reported to the admission pass, whose cache reads must wait for the watch to
// reach our own newest write (admission-read.ts).
import type { ActionObject, NodeActionStatus } from '../api/node-action.ts';
import { NODE_ACTIONS_PATH } from '../api/paths.ts';
import type { Informer } from '../kube/informer.ts';
import { ConditionalWrites, isConflict } from '../kube/reconciler.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Metrics } from '../metrics.ts';

export class ActionWrites extends ConditionalWrites {
  private readonly rest: RestClient;
  private readonly actions: Informer<ActionObject>;
  private readonly metrics: Metrics | undefined;
  /** Told the resourceVersion every write returned. */
  private readonly written: (resourceVersion: string | undefined) => void;

  constructor(o: {
    rest: RestClient;
    actions: Informer<ActionObject>;
    metrics?: Metrics;
    written: (resourceVersion: string | undefined) => void;
  }) {
    super();
    this.rest = o.rest;
    this.actions = o.actions;
    this.metrics = o.metrics;
    this.written = o.written;
  }

  /** Writes the action's status, conditional on the action's resourceVersion. */
  async writeStatus(action: ActionObject, status: NodeActionStatus): Promise<ActionObject> {
    const written = await this.status(
      this.rest,
      `${NODE_ACTIONS_PATH}/${action.metadata.name}`,
      action,
      status,
    );
    this.written(written.metadata.resourceVersion);
    this.actions.applyWritten(action.metadata.resourceVersion, written);
    this.metrics?.statusWrites.inc();
    return written;
  }

  /** Sets the action's finalizers; one that changed meanwhile (or is gone) is left to the next pass. */
  async patchFinalizers(action: ActionObject, finalizers: string[]): Promise<void> {
    try {
      const written = await this.rest.request<ActionObject>(`${NODE_ACTIONS_PATH}/${action.metadata.name}`, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        // The resourceVersion makes the patch conditional: finalizers are a list.
        body: { metadata: { resourceVersion: action.metadata.resourceVersion, finalizers } },
      });
      this.replaced(action);
      this.written(written.metadata.resourceVersion);
      this.actions.applyWritten(action.metadata.resourceVersion, written);
    } catch (error) {
      if (isConflict(error)) return;
      throw error;
    }
  }
}
