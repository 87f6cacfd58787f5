// Shutdown: the node powers off, and stays off until someone powers it on.
import { shutdownSteps } from '../../talos/plan.ts';
import { THROUGH_TALOS, type ActionKind } from './kind.ts';

export const shutdown: ActionKind = {
  preHookKind: 'PreShutdownJob',
  managed: { by: 'talos', steps: shutdownSteps },
  noDrain: () => undefined,
  etcdGuard: () => true,
  etcdMember: () => 'down',
  // Like kubectl drain: a node that was taken down needs a look before workloads come back.
  cordonAtEnd: 'keep',
  completion: () => 'down',
  words: { perform: 'perform the Shutdown of', managed: THROUGH_TALOS, done: 'shutdown done' },
};
