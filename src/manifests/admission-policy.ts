// The ValidatingAdmissionPolicy that makes a NodeAction's record trustworthy: its
// requestedBy is the real requester, and a bypass is authorised and explained.
import { GROUP, VERSION } from '../api/common.ts';
import { SERVICE_ACCOUNT, labels } from './controller.ts';

export const POLICY_NAME = 'gatehouse-nodeaction-requests';

/** The controller's own identity, as the API server names a ServiceAccount. */
export function controllerUsername(namespace: string): string {
  return `system:serviceaccount:${namespace}:${SERVICE_ACCOUNT}`;
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

export function admissionPolicyObjects(namespace: string): Record<string, unknown>[] {
  const policy = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: {
      name: POLICY_NAME,
      labels: labels(),
      annotations: {
        'talos.dev/description':
          'Refuses a NodeAction whose spec.requestedBy is not the requesting user, and any bypass without the verb bypass on nodeactions.talos.dev or without a reason.',
        'talos.dev/controller-exemption': CONTROLLER_EXEMPTION,
      },
    },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: {
        resourceRules: [
          { apiGroups: [GROUP], apiVersions: [VERSION], operations: ['CREATE'], resources: ['nodeactions'] },
        ],
      },
      variables: [
        {
          name: 'viaController',
          expression: `request.userInfo.username == '${controllerUsername(namespace)}'`,
        },
        {
          name: 'bypassing',
          expression:
            'has(object.spec.bypass) && ((has(object.spec.bypass.healthChecks) && object.spec.bypass.healthChecks) || (has(object.spec.bypass.hooks) && object.spec.bypass.hooks))',
        },
      ],
      validations: [
        {
          expression: 'variables.viaController || object.spec.requestedBy == request.userInfo.username',
          messageExpression:
            "'spec.requestedBy must be your own user name, ' + request.userInfo.username + ', not ' + object.spec.requestedBy + ' (see kubectl auth whoami)'",
          message: 'spec.requestedBy must be your own user name (see kubectl auth whoami)',
          reason: 'Forbidden',
        },
        {
          expression: `!variables.bypassing || variables.viaController || authorizer.group('${GROUP}').resource('nodeactions').check('bypass').allowed()`,
          messageExpression: `'spec.bypass needs the verb bypass on nodeactions.${GROUP} (ClusterRole gatehouse:bypass), which ' + request.userInfo.username + ' does not hold; set healthChecks and hooks to false, or ask an administrator'`,
          message: `spec.bypass needs the verb bypass on nodeactions.${GROUP} (ClusterRole gatehouse:bypass)`,
          reason: 'Forbidden',
        },
        {
          expression:
            '!variables.bypassing || (has(object.spec.bypass.reason) && object.spec.bypass.reason.trim().size() > 0)',
          message:
            'spec.bypass.reason is required when bypassing health checks or hooks: say why, it is recorded in the status and an Event',
          reason: 'Invalid',
        },
      ],
    },
  };
  const binding = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: { name: POLICY_NAME, labels: labels() },
    spec: { policyName: POLICY_NAME, validationActions: ['Deny'] },
  };
  return [policy, binding];
}
