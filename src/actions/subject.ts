// Who an action's hook runs and boot announcement are about, from the action itself, and
// whether this controller performs it.
import { EXECUTED_ANNOTATION, RELEASED_ANNOTATION } from '../api/names.ts';
import {
  ACTION_PARAMETERS,
  type NodeActionSpec,
  type NodeActionStatus,
  type ObservedNodeAction,
} from '../api/node-action.ts';
import type { HookSubject } from '../hooks/job.ts';
import { kindOf, type ActionKind, type Performer } from './kinds/index.ts';
import type { ActionInput } from './observations.ts';
import { API_VERSION } from '../api/common.ts';

export function isExecutedMarked(action: Pick<ObservedNodeAction, 'metadata'>): boolean {
  return action.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true';
}

/** Whether a Maintenance carries its release (talos.dev/released: "true"). */
export function isReleaseMarked(action: Pick<ObservedNodeAction, 'metadata'>): boolean {
  return action.metadata.annotations?.[RELEASED_ANNOTATION] === 'true';
}

/** The action's parameters as its spec has them (upgrade, reboot, …): every parameter field set. */
export function actionParameters(spec: NodeActionSpec): Record<string, unknown> {
  const parameters: Record<string, unknown> = {};
  for (const field of Object.values(ACTION_PARAMETERS)) {
    if (field !== undefined && spec[field] !== undefined) parameters[field] = spec[field];
  }
  return parameters;
}

/** The image the action installs, for its hooks (GATEHOUSE_TARGET_IMAGE), as a spreadable member. */
export function targetImageOf(spec: NodeActionSpec): { targetImage?: string } {
  const image = kindOf(spec).targetImage?.(spec);
  return image !== undefined ? { targetImage: image } : {};
}

/** What each way of performing a Managed action needs of this controller. */
type Performing = Pick<ActionInput, 'execution' | 'noTalos'>;

const CAN_PERFORM: { readonly [P in Performer['by']]: (input: Performing) => boolean } = {
  // An executor with Talos credentials.
  talos: (input) => input.execution !== undefined && input.noTalos !== true,
  // An executor: cordoning and draining needs only Kubernetes.
  controller: (input) => input.execution !== undefined,
};

/** Whether this controller can perform a Managed action of the kind. */
export function performsHere(kind: ActionKind, input: Performing): boolean {
  return CAN_PERFORM[kind.managed.by](input);
}

/** Who the action's hook runs are for, about the given boot of its node. */
export function hookSubject(
  action: ObservedNodeAction,
  bootID: string | undefined,
  /** The status being decided, when newer than the observed one (a class just decided). */
  status: NodeActionStatus | undefined = action.status,
): HookSubject {
  const disruptionClass = status?.configDisruption?.class;
  return {
    node: action.spec.nodeName,
    ...(bootID ? { bootID } : {}),
    action: {
      name: action.metadata.name,
      uid: action.metadata.uid,
      action: action.spec.action,
      parameters: actionParameters(action.spec),
      ...targetImageOf(action.spec),
      ...(disruptionClass !== undefined ? { disruptionClass } : {}),
    },
    owner: {
      apiVersion: action.apiVersion ?? API_VERSION,
      kind: 'NodeAction',
      name: action.metadata.name,
      uid: action.metadata.uid,
      controller: true,
      blockOwnerDeletion: true,
    },
  };
}
