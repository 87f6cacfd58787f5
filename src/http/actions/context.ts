// What every handler of the actions API works with.
import type { Informer, KubeObject } from '../../kube/informer.ts';
import type { Logger } from '../../log.ts';
import type { Access } from '../access.ts';
import type { Followers } from './followers.ts';
import type { ActionStore } from './store.ts';

export interface ActionsContext {
  access: Access;
  store: ActionStore;
  followers: Followers;
  log: Logger;
  nodes: Informer<KubeObject>;
  /** Comment lines that keep an idle event stream open through proxies. */
  heartbeatMs: number;
}
