// The ValidatingAdmissionPolicy that makes a NodeAction's record trustworthy: its
// requestedBy is the real requester, a bypass is authorised and explained, the executed
// mark comes from the requester (or a bypass holder) of an Approved External action,
// and the metadata that assigns it to a controller or an idempotency key never changes.
import { GROUP, VERSION } from '../api/common.ts';
import {
  EXECUTED_ANNOTATION,
  IMMUTABLE_ACTION_ANNOTATIONS,
  IMMUTABLE_ACTION_LABELS,
  INSTANCE_LABEL as CONTROLLER_INSTANCE_LABEL,
} from '../api/names.ts';
import { VISIBLE_REASON } from '../api/node-action.ts';
import { SERVICE_ACCOUNT, labels } from './controller.ts';

export const POLICY_NAME = 'gatehouse-nodeaction-requests';

/** The controller's own identity, as the API server names a ServiceAccount. */
export function controllerUsername(namespace: string): string {
  return `system:serviceaccount:${namespace}:${SERVICE_ACCOUNT}`;
}

/** A CEL expression for the value of a label or annotation of `object`, '' if absent. */
function metadataValue(object: 'object' | 'oldObject', field: 'labels' | 'annotations', key: string): string {
  return `(${object} != null && has(${object}.metadata.${field}) && '${key}' in ${object}.metadata.${field} ? ${object}.metadata.${field}['${key}'] : '')`;
}

/**
 * Requests from the controller's own ServiceAccount are exempt from the requestedBy
 * and bypass-authorisation checks: its HTTP API creates NodeActions on behalf of
 * callers it has authenticated (TokenReview) and authorised (SubjectAccessReview for
 * create, and for bypass when asked), and puts the caller's name in requestedBy. A
 * reason is still required with any bypass, from everyone.
 */
export const CONTROLLER_EXEMPTION =
  "Requests from the gatehouse controller's ServiceAccount are exempt from the requestedBy and bypass checks: its HTTP API authenticates callers (TokenReview) and authorises them (SubjectAccessReview, including bypass) itself before creating a NodeAction on their behalf. A reason is required from everyone.";

/** A ValidatingAdmissionPolicy's validation, as the API server takes it. */
interface Validation {
  expression: string;
  messageExpression?: string;
  message: string;
  reason: 'Forbidden' | 'Invalid';
}

/**
 * The rules a NodeAction and a NodeRollout share, over the variables both policies
 * define (viaController, creating, mayBypass, bypassing): requestedBy is the requesting
 * user; a bypass needs the verb bypass and a reason; the controller-instance label needs
 * the verb too. Each kind says when a bypass and the label are judged.
 */
function requestRules(o: {
  /** CEL: the bypass rules do not apply (the action's: not created now or not bypassing). */
  bypassNotJudged: string;
  /** Where a bypass reason is recorded, for the message that asks for one. */
  reasonRecordedIn: string;
  /** CEL: the label's value needs no verb (the action's: empty at creation; the rollout's: unchanged). */
  instanceNeedsNoVerb: string;
  /** What the label hands to another controller instance, for its message. */
  handed: string;
}): { identity: Validation[]; instance: Validation } {
  return {
    identity: [
      {
        expression:
          '!variables.creating || variables.viaController || object.spec.requestedBy == request.userInfo.username',
        messageExpression:
          "'spec.requestedBy must be your own user name, ' + request.userInfo.username + ', not ' + object.spec.requestedBy + ' (see kubectl auth whoami)'",
        message: 'spec.requestedBy must be your own user name (see kubectl auth whoami)',
        reason: 'Forbidden',
      },
      {
        expression: `${o.bypassNotJudged} || variables.viaController || variables.mayBypass`,
        messageExpression: `'spec.bypass needs the verb bypass on nodeactions.${GROUP} (ClusterRole gatehouse:bypass), which ' + request.userInfo.username + ' does not hold; set healthChecks and hooks to false, or ask an administrator'`,
        message: `spec.bypass needs the verb bypass on nodeactions.${GROUP} (ClusterRole gatehouse:bypass)`,
        reason: 'Forbidden',
      },
      {
        expression: `${o.bypassNotJudged} || (has(object.spec.bypass.reason) && object.spec.bypass.reason.trim().size() > 0 && object.spec.bypass.reason.matches(${VISIBLE_REASON}))`,
        message: `spec.bypass.reason is required when bypassing health checks or hooks: say why, it is recorded in ${o.reasonRecordedIn}`,
        reason: 'Invalid',
      },
    ],
    instance: {
      expression: `${o.instanceNeedsNoVerb} || variables.mayBypass`,
      messageExpression: `'the label ${CONTROLLER_INSTANCE_LABEL} hands ${o.handed} to another controller instance, with its own budget: it needs the verb bypass on nodeactions.${GROUP}, which ' + request.userInfo.username + ' does not hold'`,
      message: `the label ${CONTROLLER_INSTANCE_LABEL} needs the verb bypass on nodeactions.${GROUP}`,
      reason: 'Forbidden',
    },
  };
}

export function admissionPolicyObjects(namespace: string): Record<string, unknown>[] {
  // An action's spec is immutable: what it bypasses, and its instance, are judged once.
  const actionRules = requestRules({
    bypassNotJudged: '!variables.creating || !variables.bypassing',
    reasonRecordedIn: 'the status and an Event',
    instanceNeedsNoVerb: `!variables.creating || variables.viaController || ${metadataValue('object', 'labels', CONTROLLER_INSTANCE_LABEL)} == ''`,
    handed: 'a NodeAction',
  });
  const policy = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: {
      name: POLICY_NAME,
      labels: labels(),
      annotations: {
        'talos.dev/description':
          'Refuses a NodeAction whose spec.requestedBy is not the requesting user, any bypass without the verb bypass on nodeactions.talos.dev or without a reason, an executed mark from anyone but the requester or a bypass holder, or on an action that is not Approved or not External, and any change of the labels and annotations that assign an action to a controller instance or an idempotency key.',
        'talos.dev/controller-exemption': CONTROLLER_EXEMPTION,
      },
    },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: {
        resourceRules: [
          {
            apiGroups: [GROUP],
            apiVersions: [VERSION],
            operations: ['CREATE', 'UPDATE'],
            resources: ['nodeactions'],
          },
        ],
      },
      variables: [
        {
          name: 'viaController',
          expression: `request.userInfo.username == '${controllerUsername(namespace)}'`,
        },
        { name: 'creating', expression: "request.operation == 'CREATE'" },
        {
          name: 'marking',
          expression: `${metadataValue('object', 'annotations', EXECUTED_ANNOTATION)} != ${metadataValue('oldObject', 'annotations', EXECUTED_ANNOTATION)}`,
        },
        {
          name: 'mayBypass',
          expression: `authorizer.group('${GROUP}').resource('nodeactions').check('bypass').allowed()`,
        },
        {
          name: 'bypassing',
          expression:
            'has(object.spec.bypass) && ((has(object.spec.bypass.healthChecks) && object.spec.bypass.healthChecks) || (has(object.spec.bypass.hooks) && object.spec.bypass.hooks))',
        },
      ],
      validations: [
        ...actionRules.identity,
        {
          // The HTTP API marks on its callers' behalf, after the same check of its own.
          expression:
            '!variables.marking || variables.viaController || object.spec.requestedBy == request.userInfo.username || variables.mayBypass',
          messageExpression: `'only the requester of NodeAction ' + object.metadata.name + ' (' + object.spec.requestedBy + ') or a holder of the verb bypass may set or change ${EXECUTED_ANNOTATION}, not ' + request.userInfo.username`,
          message: `only the action's requester or a holder of the verb bypass may set or change ${EXECUTED_ANNOTATION}`,
          reason: 'Forbidden',
        },
        {
          expression:
            "!variables.marking || (has(object.spec.execution) && object.spec.execution == 'External')",
          message: `${EXECUTED_ANNOTATION} is only for External actions: gatehouse performs a Managed action itself and knows when it did`,
          reason: 'Invalid',
        },
        {
          expression:
            "!variables.marking || (oldObject != null && has(oldObject.status) && has(oldObject.status.phase) && oldObject.status.phase == 'Approved')",
          messageExpression: `'${EXECUTED_ANNOTATION} may only be set once the action is Approved; NodeAction ' + object.metadata.name + ' is ' + (oldObject != null && has(oldObject.status) && has(oldObject.status.phase) ? oldObject.status.phase : 'not yet Pending')`,
          message: `${EXECUTED_ANNOTATION} may only be set once the action is Approved`,
          reason: 'Invalid',
        },
        // Another instance is another budget: choosing one is a kind of bypass.
        actionRules.instance,
        {
          expression: `variables.creating || (${[
            ...IMMUTABLE_ACTION_LABELS.map(
              (k) => `${metadataValue('object', 'labels', k)} == ${metadataValue('oldObject', 'labels', k)}`,
            ),
            ...IMMUTABLE_ACTION_ANNOTATIONS.map(
              (k) =>
                `${metadataValue('object', 'annotations', k)} == ${metadataValue('oldObject', 'annotations', k)}`,
            ),
          ].join(' && ')})`,
          message: `the labels ${IMMUTABLE_ACTION_LABELS.join(', ')} and the annotations ${IMMUTABLE_ACTION_ANNOTATIONS.join(', ')} are fixed when a NodeAction is created: they assign it to a controller instance and to an idempotency key`,
          reason: 'Forbidden',
        },
      ],
    },
  };
  return [policy, binding(POLICY_NAME), rolloutPolicy(namespace), binding(ROLLOUT_POLICY_NAME)];
}

function binding(policyName: string): Record<string, unknown> {
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: { name: policyName, labels: labels() },
    spec: { policyName, validationActions: ['Deny'] },
  };
}

export const ROLLOUT_POLICY_NAME = 'gatehouse-noderollout-requests';

/**
 * The same rules for a NodeRollout, whose NodeActions the controller creates with the
 * rollout's requestedBy and bypass (its own requests are exempt above): so the rollout
 * is where they are checked. A bypass is checked whenever it is set or changed, since a
 * rollout's spec (unlike an action's) may be edited; the verb is the same one, bypass on
 * nodeactions, so one ClusterRole (gatehouse:bypass) governs both.
 */
function rolloutPolicy(namespace: string): Record<string, unknown> {
  const bypassing = (o: 'object' | 'oldObject') =>
    `(${o} != null && has(${o}.spec.bypass) && ((has(${o}.spec.bypass.healthChecks) && ${o}.spec.bypass.healthChecks) || (has(${o}.spec.bypass.hooks) && ${o}.spec.bypass.hooks)))`;
  const rules = requestRules({
    bypassNotJudged: '!variables.bypassing || !variables.bypassChanged',
    reasonRecordedIn: 'the status and an Event of every NodeAction of the rollout',
    instanceNeedsNoVerb: `variables.viaController || ${metadataValue('object', 'labels', CONTROLLER_INSTANCE_LABEL)} == ${metadataValue('oldObject', 'labels', CONTROLLER_INSTANCE_LABEL)}`,
    handed: 'a NodeRollout (and its NodeActions)',
  });
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: {
      name: ROLLOUT_POLICY_NAME,
      labels: labels(),
      annotations: {
        'talos.dev/description':
          "Refuses a NodeRollout whose spec.requestedBy is not the requesting user, a bypass set or changed without the verb bypass on nodeactions.talos.dev or without a reason, and a controller-instance label set without that verb: the rollout's NodeActions carry them, created by the controller on the requester's behalf.",
      },
    },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: {
        resourceRules: [
          {
            apiGroups: [GROUP],
            apiVersions: [VERSION],
            operations: ['CREATE', 'UPDATE'],
            resources: ['noderollouts'],
          },
        ],
      },
      variables: [
        {
          name: 'viaController',
          expression: `request.userInfo.username == '${controllerUsername(namespace)}'`,
        },
        { name: 'creating', expression: "request.operation == 'CREATE'" },
        {
          name: 'mayBypass',
          expression: `authorizer.group('${GROUP}').resource('nodeactions').check('bypass').allowed()`,
        },
        { name: 'bypassing', expression: bypassing('object') },
        {
          name: 'bypassChanged',
          expression:
            'variables.creating || (has(object.spec.bypass) != has(oldObject.spec.bypass)) || (has(object.spec.bypass) && object.spec.bypass != oldObject.spec.bypass)',
        },
      ],
      validations: [...rules.identity, rules.instance],
    },
  };
}
