// The MutatingAdmissionPolicy that puts the controller's finalizer on a NodeAction as it
// is created, so the controller need not write it before the action's first status: one
// write fewer on the gate's path. It is an optimisation only — the controller adds the
// finalizer wherever it is missing, so the policy fails open (Ignore), and it is
// installed only where the API server serves MutatingAdmissionPolicy (Kubernetes 1.36 on;
// 1.34–1.35 with the beta API enabled). Whoever creates an action may also leave the
// finalizer out or put it in themselves: either way the controller's rules hold.
import { GROUP, VERSION } from '../api/common.ts';
import { INSTANCE_LABEL, NODE_ACTION_FINALIZER } from '../api/names.ts';
import { labels } from './controller.ts';

export const FINALIZER_POLICY_NAME = 'gatehouse-nodeaction-finalizer';

/** The group and version the policy needs from the API server. */
export const MUTATING_ADMISSION_POLICY_API = 'admissionregistration.k8s.io/v1';

export function finalizerPolicyObjects(): Record<string, unknown>[] {
  const finalizer = JSON.stringify(NODE_ACTION_FINALIZER);
  return [
    {
      apiVersion: MUTATING_ADMISSION_POLICY_API,
      kind: 'MutatingAdmissionPolicy',
      metadata: {
        name: FINALIZER_POLICY_NAME,
        labels: labels(),
        annotations: {
          'talos.dev/description': `Adds the finalizer ${NODE_ACTION_FINALIZER} to a NodeAction as it is created, which the controller would otherwise add in a write of its own before the action's first status. Optional: without it the controller adds the finalizer itself.`,
        },
      },
      spec: {
        failurePolicy: 'Ignore',
        reinvocationPolicy: 'Never',
        matchConstraints: {
          resourceRules: [
            {
              apiGroups: [GROUP],
              apiVersions: [VERSION],
              operations: ['CREATE'],
              resources: ['nodeactions'],
            },
          ],
        },
        matchConditions: [
          // The default controller instance's actions only: an action labelled for an
          // instance that is not running would otherwise wait on its deletion for ever.
          {
            name: 'default-instance',
            expression: `!has(object.metadata.labels) || !(${JSON.stringify(INSTANCE_LABEL)} in object.metadata.labels)`,
          },
          {
            name: 'finalizer-missing',
            expression: `!has(object.metadata.finalizers) || !(${finalizer} in object.metadata.finalizers)`,
          },
        ],
        mutations: [
          {
            patchType: 'JSONPatch',
            jsonPatch: {
              expression: `has(object.metadata.finalizers) ? [JSONPatch{op: "add", path: "/metadata/finalizers/-", value: ${finalizer}}] : [JSONPatch{op: "add", path: "/metadata/finalizers", value: [${finalizer}]}]`,
            },
          },
        ],
      },
    },
    {
      apiVersion: MUTATING_ADMISSION_POLICY_API,
      kind: 'MutatingAdmissionPolicyBinding',
      metadata: { name: FINALIZER_POLICY_NAME, labels: labels() },
      spec: { policyName: FINALIZER_POLICY_NAME },
    },
  ];
}
