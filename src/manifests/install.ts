// Installing gatehouse into a cluster from the install set (what `gatehouse manifests`
// prints), in dependency order: namespace and CRDs first, then what refers to them.
import { serverSideApply, waitForEstablished, type Manifest } from '../kube/apply.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { MUTATING_ADMISSION_POLICY_API } from './finalizer-policy.ts';
import { DEFAULT_INSTALL, installSet, type InstallOptions } from './install-set.ts';

export interface InstallRequest extends Partial<InstallOptions> {
  /** Leave the controller's Deployment out (the controller runs elsewhere, e.g. in the demo or tests). */
  withoutDeployment?: boolean;
  fieldManager?: string;
}

/** Whether the API server serves MutatingAdmissionPolicy (Kubernetes 1.36 on). */
export async function servesMutatingAdmissionPolicy(client: RestClient): Promise<boolean> {
  try {
    const list = await client.request<{ resources: { name: string }[] }>(
      `/apis/${MUTATING_ADMISSION_POLICY_API}`,
    );
    return list.resources.some((r) => r.name === 'mutatingadmissionpolicies');
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 404) return false;
    throw error;
  }
}

export async function installGatehouse(client: RestClient, request: InstallRequest = {}): Promise<void> {
  const finalizerPolicy = request.finalizerPolicy ?? (await servesMutatingAdmissionPolicy(client));
  const objects = installSet({ ...DEFAULT_INSTALL, ...request, finalizerPolicy }) as Manifest[];
  const wanted = objects.filter((o) => !(request.withoutDeployment && o.kind === 'Deployment'));
  const first = wanted.filter((o) => o.kind === 'Namespace' || o.kind === 'CustomResourceDefinition');
  const rest = wanted.filter((o) => !first.includes(o));
  const fieldManager = request.fieldManager ?? 'gatehouse-install';
  await serverSideApply(client, first, fieldManager);
  await waitForEstablished(
    client,
    first.filter((o) => o.kind === 'CustomResourceDefinition').map((o) => o.metadata?.name ?? ''),
  );
  await serverSideApply(client, rest, fieldManager);
}
