// Installing gatehouse into a cluster from the install set (what `gatehouse manifests`
// prints), in dependency order: namespace and CRDs first, then what refers to them.
import { serverSideApply, waitForEstablished, type Manifest } from '../kube/apply.ts';
import type { RestClient } from '../kube/rest.ts';
import { DEFAULT_INSTALL, installSet, type InstallOptions } from './install-set.ts';

export interface InstallRequest extends Partial<InstallOptions> {
  /** Leave the controller's Deployment out (the controller runs elsewhere, e.g. in the demo or tests). */
  withoutDeployment?: boolean;
  fieldManager?: string;
}

export async function installGatehouse(client: RestClient, request: InstallRequest = {}): Promise<void> {
  const objects = installSet({ ...DEFAULT_INSTALL, ...request }) as Manifest[];
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
