// Who an action's hook runs and boot announcement are about, from the action itself.
import { EXECUTED_ANNOTATION } from '../api/names.ts';
import type { NodeActionSpec, ObservedNodeAction } from '../api/node-action.ts';
import type { HookSubject } from '../hooks/job.ts';

export function isExecutedMarked(action: ObservedNodeAction): boolean {
  return action.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true';
}

export function actionParameters(spec: NodeActionSpec): Record<string, unknown> {
  const { upgrade, reboot, reset, configChange } = spec;
  return {
    ...(upgrade ? { upgrade } : {}),
    ...(reboot ? { reboot } : {}),
    ...(reset ? { reset } : {}),
    ...(configChange ? { configChange } : {}),
  };
}

/** Who the action's hook runs are for, about the given boot of its node. */
export function hookSubject(action: ObservedNodeAction, bootID: string | undefined): HookSubject {
  return {
    node: action.spec.nodeName,
    ...(bootID ? { bootID } : {}),
    action: {
      name: action.metadata.name,
      uid: action.metadata.uid,
      action: action.spec.action,
      parameters: actionParameters(action.spec),
      ...(action.spec.upgrade ? { targetImage: action.spec.upgrade.image } : {}),
    },
    owner: {
      apiVersion: action.apiVersion ?? 'talos.dev/v1alpha1',
      kind: 'NodeAction',
      name: action.metadata.name,
      uid: action.metadata.uid,
      controller: true,
      blockOwnerDeletion: true,
    },
  };
}
