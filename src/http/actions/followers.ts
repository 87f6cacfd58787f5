// Who waits on which action: long-polls and event streams are woken by the controller's
// informer events for their action or its node, and poll in case the informer is behind.
import type { ActionObject } from '../../api/node-action.ts';
import type { Informer, KubeObject } from '../../kube/informer.ts';
import type { Logger } from '../../log.ts';
import { errorMessage } from '../../wait.ts';
import type { ActionStore } from './store.ts';

type Waiters = Map<string, Set<() => void>>;

export class Followers {
  private readonly byAction: Waiters = new Map();
  private readonly byNode: Waiters = new Map();

  private readonly store: ActionStore;
  private readonly log: Logger;
  /** How often a follower re-reads its action even without an informer event. */
  private readonly pollIntervalMs: number;

  constructor(
    store: ActionStore,
    log: Logger,
    sources: { actions: Informer<ActionObject>; nodes: Informer<KubeObject> },
    pollIntervalMs: number,
  ) {
    this.store = store;
    this.log = log;
    this.pollIntervalMs = pollIntervalMs;
    // One listener per informer event, whatever the number of followers: they are found
    // by name (and an EventEmitter would warn of a leak past ten listeners).
    const wake = (map: Waiters, key: string) => {
      for (const check of map.get(key) ?? []) check();
    };
    const onAction = (a: ActionObject) => wake(this.byAction, a.metadata.name);
    const onNode = (n: KubeObject) => wake(this.byNode, n.metadata.name);
    const { actions, nodes } = sources;
    actions.on('add', onAction);
    actions.on('update', (_, a) => onAction(a));
    actions.on('delete', onAction);
    nodes.on('add', onNode);
    nodes.on('update', (_, n) => onNode(n));
    nodes.on('delete', onNode);
  }

  /**
   * Calls `check` whenever the action (or its node) may have changed: on informer events
   * for it, and every pollIntervalMs in case the informer is behind or reconnecting.
   * Returns a function that stops it.
   */
  follow(name: string, nodeName: string, check: () => void): () => void {
    const add = (map: Waiters, key: string) => {
      const set = map.get(key) ?? new Set();
      set.add(check);
      map.set(key, set);
      return () => {
        set.delete(check);
        if (set.size === 0) map.delete(key);
      };
    };
    const stopAction = add(this.byAction, name);
    const stopNode = add(this.byNode, nodeName);
    const poll = setInterval(check, this.pollIntervalMs);
    poll.unref();
    return () => {
      clearInterval(poll);
      stopAction();
      stopNode();
    };
  }

  /** A read of the action that never runs twice at once and runs again if asked meanwhile. */
  reader(name: string, onRead: (action: ActionObject | undefined) => void): () => void {
    const state = { running: false, again: false };
    // A function, so that the compiler does not assume `again` cannot change during a read.
    const again = () => state.again;
    const run = async (): Promise<void> => {
      state.running = true;
      do {
        state.again = false;
        try {
          onRead(await this.store.read(name));
        } catch (error) {
          // The next event or poll tries again; a waiting client is not failed for a blip.
          this.log.debug({ action: name, err: errorMessage(error) }, 'reading a followed action failed');
        }
      } while (again());
      state.running = false;
    };
    return () => {
      if (state.running) state.again = true;
      else void run();
    };
  }
}
