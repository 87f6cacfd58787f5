// Reboot: the node boots again, into the same Talos.
import { rebootSteps } from '../../talos/plan.ts';
import { THROUGH_TALOS, type ActionKind } from './kind.ts';

export const reboot: ActionKind = {
  preHookKind: 'PreRebootJob',
  managed: { by: 'talos', steps: rebootSteps },
  noDrain: () => undefined,
  etcdGuard: () => true,
  etcdMember: () => 'down',
  cordonAtEnd: 'lift',
  completion: () => 'reboot',
  words: { perform: 'perform the Reboot of', managed: THROUGH_TALOS, done: 'reboot done' },
};
