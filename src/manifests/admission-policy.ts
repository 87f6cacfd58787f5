// The ValidatingAdmissionPolicy that makes a NodeAction's record trustworthy: its
// requestedBy is the real requester, a bypass is authorised and explained, the executed
// mark comes from the requester (or a bypass holder) of an Approved External action,
// and the metadata that assigns it to a controller or an idempotency key never changes.
import { GROUP, VERSION } from '../api/common.ts';
import {
  CONTROLLER_ONLY_ACTION_ANNOTATIONS,
  CONTROLLER_ONLY_ACTION_LABELS,
  EXECUTED_ANNOTATION,
  RELEASED_ANNOTATION,
  APPROVAL_ANNOTATION,
  APPROVAL_ANNOTATIONS,
  APPROVAL_BY_ANNOTATION,
  APPROVAL_FOR_ANNOTATION,
  APPROVAL_REASON_ANNOTATION,
  PROMOTE_ANNOTATION,
  PROMOTE_ANNOTATIONS,
  PROMOTED_BY_ANNOTATION,
  PROMOTE_REASON_ANNOTATION,
  IMMUTABLE_ACTION_ANNOTATIONS,
  IMMUTABLE_ACTION_LABELS,
  INSTANCE_LABEL as CONTROLLER_INSTANCE_LABEL,
} from '../api/names.ts';
import { VISIBLE_REASON } from '../api/node-action.ts';
import { NodeRolloutSpec } from '../api/node-rollout.ts';
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
  /** Added to the message refusing a bypass without the verb: when it is asked for. */
  verbWhen?: string;
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
        messageExpression: `'spec.bypass needs the verb bypass on nodeactions.${GROUP} (ClusterRole gatehouse:bypass)${o.verbWhen ?? ''}, which ' + request.userInfo.username + ' does not hold; set healthChecks and hooks to false, or ask an administrator'`,
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
          'Refuses a NodeAction whose spec.requestedBy is not the requesting user, any bypass without the verb bypass on nodeactions.talos.dev or without a reason, an executed mark from anyone but the requester or a bypass holder, or on an action that is not Approved or not External, a release (talos.dev/released) from anyone but the requester or a bypass holder, or on an action that is not Held, an answer to an approval hook (talos.dev/approval) from anyone but a holder of the verb approve the waiting approval names, in their own name, with a reason (and not the requester approving their own action unless allowed), any change of the labels and annotations that assign an action to a controller instance, an idempotency key or a rollout, and a rollout mark (label, bypass grantor, NodeRollout ownerReference) set by anyone but the controller.',
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
          name: 'releasing',
          expression: `${metadataValue('object', 'annotations', RELEASED_ANNOTATION)} != ${metadataValue('oldObject', 'annotations', RELEASED_ANNOTATION)}`,
        },
        {
          name: 'answering',
          expression: APPROVAL_ANNOTATIONS.map(
            (k) =>
              `${metadataValue('object', 'annotations', k)} != ${metadataValue('oldObject', 'annotations', k)}`,
          ).join(' || '),
        },
        {
          // The approval the action waits for, as the controller wrote it (the stored status).
          name: 'waitsForApproval',
          expression:
            'oldObject != null && has(oldObject.status) && has(oldObject.status.approval) && has(oldObject.status.approval.pending)',
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
        {
          // Who may make an action count for a rollout: who may say what a rollout did.
          name: 'mayMarkForRollouts',
          expression: `variables.viaController || authorizer.group('${GROUP}').resource('noderollouts').subresource('status').check('update').allowed()`,
        },
      ],
      validations: [
        ...actionRules.identity,
        ...markRules(),
        ...approvalRules(),
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
          message: `the labels ${IMMUTABLE_ACTION_LABELS.join(', ')} and the annotations ${IMMUTABLE_ACTION_ANNOTATIONS.join(', ')} are fixed when a NodeAction is created: they assign it to a controller instance, an idempotency key or a rollout`,
          reason: 'Forbidden',
        },
        ...rolloutMarkRules(),
      ],
    },
  };
  return [policy, binding(POLICY_NAME), rolloutPolicy(namespace), binding(ROLLOUT_POLICY_NAME)];
}

/**
 * The marks a requester sets on its own action, which the controller then acts on: the
 * executed mark (an External action performed) and the release (a Maintenance held out
 * of service put back): each only by the requester or a bypass holder, and only in the
 * phase it belongs to.
 */
function markRules(): Validation[] {
  const [executedBy, executedWhen] = requesterMark(
    'marking',
    EXECUTED_ANNOTATION,
    'Approved',
    'once the action is Approved',
  );
  // Putting a node back into service is the requester's to say, as performing it was;
  // set before the hold, it would end the hold as soon as it began.
  const [releasedBy, releasedWhen] = requesterMark(
    'releasing',
    RELEASED_ANNOTATION,
    'Held',
    'while a Maintenance is Held',
  );
  return [
    executedBy,
    {
      expression: "!variables.marking || (has(object.spec.execution) && object.spec.execution == 'External')",
      message: `${EXECUTED_ANNOTATION} is only for External actions: gatehouse performs a Managed action itself and knows when it did`,
      reason: 'Invalid',
    },
    executedWhen,
    releasedBy,
    releasedWhen,
  ];
}

/**
 * A person's answer to the approval an action waits for (status.approval.pending, which
 * the controller wrote): only a holder of the verb approve, in person (approval-by is the
 * user writing it), one the pending approval names (its groups or users), not the
 * requester approving their own action unless the approval allows it, with a reason, for
 * the hook that waits. The HTTP API answers on its callers' behalf after the same checks.
 */
function approvalRules(): Validation[] {
  const value = (k: string) => metadataValue('object', 'annotations', k);
  const answering = '!variables.answering';
  const waits = 'variables.waitsForApproval';
  const pending = 'oldObject.status.approval.pending';
  const user = 'request.userInfo.username';
  return [
    {
      expression: `${answering} || (${waits} && ${value(APPROVAL_FOR_ANNOTATION)} == ${pending}.hook)`,
      messageExpression: `'NodeAction ' + object.metadata.name + (!${waits} ? ' waits for no approval now: an answer (${APPROVAL_ANNOTATION}) is given while an approval hook waits' : ' waits for the approval of ' + ${pending}.hook + ': set ${APPROVAL_FOR_ANNOTATION} to it')`,
      message: `${APPROVAL_ANNOTATION} answers the approval the action waits for (status.approval.pending), named in ${APPROVAL_FOR_ANNOTATION}`,
      reason: 'Invalid',
    },
    {
      expression: `${answering} || (${value(APPROVAL_ANNOTATION)} in ['Approve', 'Refuse'] && ${value(APPROVAL_REASON_ANNOTATION)}.matches(${VISIBLE_REASON}))`,
      message: `${APPROVAL_ANNOTATION} is Approve or Refuse, with a reason in ${APPROVAL_REASON_ANNOTATION}: it is recorded with your name`,
      reason: 'Invalid',
    },
    {
      expression: `${answering} || variables.viaController || (authorizer.group('${GROUP}').resource('nodeactions').check('approve').allowed() && ${value(APPROVAL_BY_ANNOTATION)} == ${user})`,
      messageExpression: `'an approval needs the verb approve on nodeactions.${GROUP} (ClusterRole gatehouse:approve) and ${APPROVAL_BY_ANNOTATION} set to your own name (' + ${user} + ')'`,
      message: `an approval needs the verb approve on nodeactions.${GROUP} and ${APPROVAL_BY_ANNOTATION} set to the approver's own name`,
      reason: 'Forbidden',
    },
    {
      expression: `${answering} || variables.viaController || !${waits} || (!has(${pending}.groups) && !has(${pending}.users)) || (has(${pending}.groups) && request.userInfo.groups.exists(g, g in ${pending}.groups)) || (has(${pending}.users) && ${user} in ${pending}.users)`,
      messageExpression: `${user} + ' is not among the approvers of ' + ${pending}.hook + ' (its groups and users: status.approval.pending)'`,
      message: 'the approver is not among the groups and users the pending approval names',
      reason: 'Forbidden',
    },
    {
      expression: `${answering} || variables.viaController || !${waits} || ${value(APPROVAL_ANNOTATION)} != 'Approve' || object.spec.requestedBy != ${user} || ${pending}.allowSelfApproval`,
      messageExpression: `${user} + ' requested NodeAction ' + object.metadata.name + ' and may not approve it: ' + ${pending}.hook + ' asks for a second person (allowSelfApproval is false)'`,
      message:
        'the requester may not approve their own action unless the approval hook sets allowSelfApproval',
      reason: 'Forbidden',
    },
  ];
}

/**
 * The two rules of a mark a requester sets (the policy variable `variable` says it is
 * being set or changed): who may — the requester or a bypass holder (the HTTP API marks on
 * its callers' behalf, after the same check of its own) — and in which phase.
 */
function requesterMark(
  variable: string,
  annotation: string,
  phase: string,
  when: string,
): [Validation, Validation] {
  const oldPhase = 'oldObject != null && has(oldObject.status) && has(oldObject.status.phase)';
  return [
    {
      expression: `!variables.${variable} || variables.viaController || object.spec.requestedBy == request.userInfo.username || variables.mayBypass`,
      messageExpression: `'only the requester of NodeAction ' + object.metadata.name + ' (' + object.spec.requestedBy + ') or a holder of the verb bypass may set or change ${annotation}, not ' + request.userInfo.username`,
      message: `only the action's requester or a holder of the verb bypass may set or change ${annotation}`,
      reason: 'Forbidden',
    },
    {
      expression: `!variables.${variable} || (${oldPhase} && oldObject.status.phase == '${phase}')`,
      messageExpression: `'${annotation} may only be set ${when}; NodeAction ' + object.metadata.name + ' is ' + (${oldPhase} ? oldObject.status.phase : 'not yet Pending')`,
      message: `${annotation} may only be set ${when}`,
      reason: 'Invalid',
    },
  ];
}

/**
 * What makes a NodeAction count for a NodeRollout is the controller's to write: the
 * rollout label, the bypass grantor and an ownerReference to a NodeRollout. A requester
 * who could set them would make a rollout report a node done that it never touched
 * (the rollout checks name, action, target and requester too: src/rollouts/membership.ts).
 * Besides the controller's ServiceAccount, whoever may write a rollout's status — which
 * says what the rollout did — may set them (an admin running the controller as itself).
 */
function rolloutMarkRules(): Validation[] {
  const marks = [
    ...CONTROLLER_ONLY_ACTION_LABELS.map((k) => `${metadataValue('object', 'labels', k)} == ''`),
    ...CONTROLLER_ONLY_ACTION_ANNOTATIONS.map((k) => `${metadataValue('object', 'annotations', k)} == ''`),
  ];
  const named = `the label ${CONTROLLER_ONLY_ACTION_LABELS.join(', ')}, the annotation ${CONTROLLER_ONLY_ACTION_ANNOTATIONS.join(', ')} and an ownerReference to a NodeRollout`;
  return [
    {
      expression: `!variables.creating || variables.mayMarkForRollouts || (${marks.join(' && ')})`,
      message: `${named} are set by the gatehouse controller alone (or whoever may update noderollouts/status), on the NodeActions a NodeRollout makes: request the action without them, or create a NodeRollout`,
      reason: 'Forbidden',
    },
    {
      // Only an ownerReference to a NodeRollout that was already there (the garbage
      // collector removes them when a rollout is orphaned: removing stays allowed).
      expression:
        "variables.mayMarkForRollouts || !has(object.metadata.ownerReferences) || object.metadata.ownerReferences.all(r, r.kind != 'NodeRollout' || (oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(o, o.kind == 'NodeRollout' && o.uid == r.uid)))",
      messageExpression:
        "'an ownerReference to a NodeRollout is set by the gatehouse controller alone (or whoever may update noderollouts/status), on the NodeActions the rollout makes: ' + request.userInfo.username + ' may not put one on NodeAction ' + object.metadata.name",
      message: `${named} are set by the gatehouse controller alone`,
      reason: 'Forbidden',
    },
  ];
}

/**
 * CEL: whether the two NodeRollout specs differ in anything but `paused`, field by field
 * from the schema (a new field is compared without anyone remembering to).
 */
function rolloutSpecOtherwiseEqual(): string {
  return Object.keys(NodeRolloutSpec.properties)
    .filter((f) => f !== 'paused')
    .map(
      (f) =>
        `has(object.spec.${f}) == has(oldObject.spec.${f}) && (!has(object.spec.${f}) || object.spec.${f} == oldObject.spec.${f})`,
    )
    .join(' && ');
}

/**
 * A promotion past the gate a rollout waits at (status.gate, which the controller wrote):
 * only by a holder of the verb promote on noderollouts, in their own name, with a reason,
 * for the gate that waits. The gate is read from the stored status (the old object).
 */
function promotionRules(): Validation[] {
  const value = (k: string) => metadataValue('object', 'annotations', k);
  const waits = 'oldObject != null && has(oldObject.status) && has(oldObject.status.gate)';
  return [
    {
      expression: `!variables.promoting || (${waits} && ${value(PROMOTE_ANNOTATION)} == oldObject.status.gate.id && ${value(PROMOTE_REASON_ANNOTATION)}.matches(${VISIBLE_REASON}))`,
      messageExpression: `'NodeRollout ' + object.metadata.name + (${waits} ? ' waits at ' + oldObject.status.gate.id + ': set ${PROMOTE_ANNOTATION} to it, with a reason in ${PROMOTE_REASON_ANNOTATION}' : ' waits at no gate: there is nothing to promote')`,
      message: `${PROMOTE_ANNOTATION} names the gate the rollout waits at (status.gate.id), with a reason in ${PROMOTE_REASON_ANNOTATION}`,
      reason: 'Invalid',
    },
    {
      expression: `!variables.promoting || variables.viaController || (authorizer.group('${GROUP}').resource('noderollouts').check('promote').allowed() && ${value(PROMOTED_BY_ANNOTATION)} == request.userInfo.username)`,
      messageExpression: `'a promotion needs the verb promote on noderollouts.${GROUP} (ClusterRole gatehouse:promote) and ${PROMOTED_BY_ANNOTATION} set to your own name (' + request.userInfo.username + ')'`,
      message: `a promotion needs the verb promote on noderollouts.${GROUP} and ${PROMOTED_BY_ANNOTATION} set to the promoter's own name`,
      reason: 'Forbidden',
    },
  ];
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
 * is where they are checked. A rollout's spec (unlike an action's) may be edited, and
 * every edit of a rollout that bypasses widens, re-aims or speeds up the bypass (more
 * nodes, more at once, unpaused): so a bypass is judged at creation and on any change of
 * the spec while it bypasses, but pausing it — the verb is the same one, bypass on
 * nodeactions, so one ClusterRole (gatehouse:bypass) governs both — and who changed it
 * is recorded in spec.bypass.grantedBy, which must be the user making the change.
 */
function rolloutPolicy(namespace: string): Record<string, unknown> {
  const bypassing = (o: 'object' | 'oldObject') =>
    `(${o} != null && has(${o}.spec.bypass) && ((has(${o}.spec.bypass.healthChecks) && ${o}.spec.bypass.healthChecks) || (has(${o}.spec.bypass.hooks) && ${o}.spec.bypass.hooks)))`;
  const rules = requestRules({
    bypassNotJudged: '!variables.bypassJudged',
    reasonRecordedIn: 'the status and an Event of every NodeAction of the rollout',
    instanceNeedsNoVerb: `variables.viaController || ${metadataValue('object', 'labels', CONTROLLER_INSTANCE_LABEL)} == ${metadataValue('oldObject', 'labels', CONTROLLER_INSTANCE_LABEL)}`,
    handed: 'a NodeRollout (and its NodeActions)',
    verbWhen: ' to set it, and to change anything but spec.paused: true in a rollout that bypasses',
  });
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: {
      name: ROLLOUT_POLICY_NAME,
      labels: labels(),
      annotations: {
        'talos.dev/description':
          "Refuses a NodeRollout whose spec.requestedBy is not the requesting user; a bypass, and any change but a pause of the spec of a rollout that bypasses, without the verb bypass on nodeactions.talos.dev, without a reason, or with a spec.bypass.grantedBy that is not the user making it; and a controller-instance label set without that verb: the rollout's NodeActions carry them, created by the controller on the requester's behalf.",
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
          // Pausing stops a rollout: anyone allowed to edit it may, as anyone may delete it.
          name: 'onlyPausing',
          expression: `!variables.creating && has(object.spec.paused) && object.spec.paused && !(has(oldObject.spec.paused) && oldObject.spec.paused) && ${rolloutSpecOtherwiseEqual()}`,
        },
        {
          name: 'bypassJudged',
          expression:
            'variables.bypassing && (variables.creating || object.spec != oldObject.spec) && !variables.onlyPausing',
        },
        {
          name: 'promoting',
          expression: PROMOTE_ANNOTATIONS.map(
            (k) =>
              `${metadataValue('object', 'annotations', k)} != ${metadataValue('oldObject', 'annotations', k)}`,
          ).join(' || '),
        },
      ],
      validations: [
        ...rules.identity,
        rules.instance,
        ...promotionRules(),
        {
          expression:
            '!variables.bypassJudged || variables.viaController || (has(object.spec.bypass.grantedBy) ? object.spec.bypass.grantedBy : object.spec.requestedBy) == request.userInfo.username',
          messageExpression:
            "'spec.bypass.grantedBy must name who changes a NodeRollout that bypasses, ' + request.userInfo.username + ', not ' + (has(object.spec.bypass.grantedBy) ? object.spec.bypass.grantedBy : object.spec.requestedBy + ' (spec.requestedBy, as grantedBy is absent)') + ': it is recorded as the grantor of the bypass on every NodeAction the rollout makes; set spec.bypass.grantedBy: ' + request.userInfo.username",
          message:
            'spec.bypass.grantedBy must name who changes a NodeRollout that bypasses (absent: spec.requestedBy); set it to your own user name',
          reason: 'Forbidden',
        },
      ],
    },
  };
}
