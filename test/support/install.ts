// Installs gatehouse's API (deploy/: CRDs, RBAC, admission policy, and the controller's
// Namespace and ServiceAccount) into the test cluster. Idempotent and safe to run from
// several test files at once; nothing is ever uninstalled, since other files use it too.
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { serverSideApply, waitForEstablished } from './kube.ts';

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Every document of a YAML file, as objects. */
export async function readManifests(path: string): Promise<KubernetesObject[]> {
  const text = await readFile(path, 'utf8');
  return parseAllDocuments(text)
    .map((d) => d.toJS() as KubernetesObject | null)
    .filter((o): o is KubernetesObject => o !== null);
}

export async function installGatehouseAPI(kc: KubeConfig): Promise<void> {
  const deploy = join(repoRoot, 'deploy');
  const crdFiles = (await readdir(join(deploy, 'crds'))).filter((f) => f.endsWith('.yaml')).sort();
  const crds = (await Promise.all(crdFiles.map((f) => readManifests(join(deploy, 'crds', f))))).flat();
  // The controller's Deployment is left out: there is no controller image in the sandbox.
  const controller = (await readManifests(join(deploy, 'controller.yaml'))).filter(
    (o) => o.kind !== 'Deployment',
  );
  const namespace = controller.filter((o) => o.kind === 'Namespace');
  await serverSideApply(kc, [...namespace, ...crds]);
  await waitForEstablished(
    kc,
    crds.map((c) => c.metadata?.name ?? ''),
  );
  await serverSideApply(kc, [
    ...(await readManifests(join(deploy, 'rbac.yaml'))),
    ...(await readManifests(join(deploy, 'admission-policy.yaml'))),
    ...controller.filter((o) => o.kind !== 'Namespace'),
  ]);
}
