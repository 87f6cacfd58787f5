// Applying manifests as kubectl does: find each kind's resource through discovery,
// server-side apply it as written, and wait for CRDs to be served.
import { waitFor } from '../wait.ts';
import type { RestClient } from './rest.ts';

export interface Manifest {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string };
}

interface DiscoveredResource {
  name: string;
  kind: string;
  namespaced: boolean;
}

/** Discovery per client, refreshed when a kind is not found (a CRD just installed). */
const discovery = new WeakMap<RestClient, Map<string, DiscoveredResource[]>>();

async function resources(client: RestClient, base: string, refresh: boolean): Promise<DiscoveredResource[]> {
  let cache = discovery.get(client);
  if (!cache) discovery.set(client, (cache = new Map<string, DiscoveredResource[]>()));
  let list = refresh ? undefined : cache.get(base);
  if (!list) {
    list = (await client.request<{ resources: DiscoveredResource[] }>(base)).resources;
    cache.set(base, list);
  }
  return list;
}

/** The collection path of an object's kind, e.g. /apis/apps/v1/namespaces/web/deployments. */
export async function resourcePath(client: RestClient, object: Manifest): Promise<string> {
  const apiVersion = object.apiVersion ?? '';
  const base = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  const find = (list: DiscoveredResource[]) =>
    list.find((r) => r.kind === object.kind && !r.name.includes('/'));
  const resource = find(await resources(client, base, false)) ?? find(await resources(client, base, true));
  if (!resource) throw new Error(`${apiVersion} has no resource of kind ${String(object.kind)}`);
  const namespace = resource.namespaced ? `/namespaces/${object.metadata?.namespace ?? 'default'}` : '';
  return `${base}${namespace}/${resource.name}`;
}

/** Server-side applies objects in order (create or update, idempotent; conflicts forced to `fieldManager`). */
export async function serverSideApply<T extends Manifest>(
  client: RestClient,
  objects: readonly T[],
  fieldManager: string,
): Promise<T[]> {
  const applied: T[] = [];
  for (const object of objects) {
    const path = `${await resourcePath(client, object)}/${object.metadata?.name ?? ''}`;
    applied.push(await client.apply<T>(path, object, fieldManager));
  }
  return applied;
}

/**
 * Waits until every named CustomResourceDefinition is Established and its kind is in discovery.
 * Established says the CRD's handler is ready, but the API server adds the group version to
 * discovery a moment later (a separate controller): a client that looks its kind up right after
 * Established can get a 404 for the group version, which is what kubectl users see as
 * "no matches for kind" after `kubectl apply` of a CRD and its first object.
 */
export async function waitForEstablished(client: RestClient, names: readonly string[]): Promise<void> {
  type Crd = {
    spec: { group: string; names: { plural: string }; versions: { name: string; served: boolean }[] };
    status?: { conditions?: { type: string; status: string }[] };
  };
  await Promise.all(
    names.map((name) =>
      waitFor(`CRD ${name} to be established and discoverable`, async (observe) => {
        const crd = await client.request<Crd>(
          `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`,
        );
        observe(JSON.stringify(crd.status?.conditions ?? []));
        if (!crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) {
          return undefined;
        }
        for (const version of crd.spec.versions.filter((v) => v.served)) {
          const base = `/apis/${crd.spec.group}/${version.name}`;
          const listed = await resources(client, base, true).catch(() => []);
          if (!listed.some((r) => r.name === crd.spec.names.plural)) {
            observe(`established, but ${base} does not list ${crd.spec.names.plural} yet`);
            return undefined;
          }
        }
        return true;
      }),
    ),
  );
}
