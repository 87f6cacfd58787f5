// Reading Kubernetes objects for probes, through the raw REST client so every field
// the server sends (a CRD's status included) reaches the probe: paginated lists, label
// and namespace scopes, and how objects are named in messages.
import type { Static } from 'typebox';
import type { LabelSelector } from '../../api/common.ts';
import { selectorToQuery } from '../../kube/labels.ts';
import type { RestClient } from '../../kube/rest.ts';
import { consistency } from '../probe.ts';

export type Selector = Static<ReturnType<typeof LabelSelector>>;

/** A Kubernetes object as JSON, with the metadata probes look at. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: {
    name?: string;
    namespace?: string;
    generation?: number;
    labels?: Record<string, string>;
  };
  [field: string]: unknown;
}

interface List<T> {
  items?: T[] | null;
  metadata?: { continue?: string };
}

const PAGE_SIZE = 500;
/** 100,000 objects: far past what a health check should select; stops a runaway list. */
const MAX_PAGES = 200;

export interface ListOptions {
  labelSelector?: string | undefined;
  fieldSelector?: string | undefined;
  signal: AbortSignal;
  /** Share an identical list sent since then (ProbeContext.readsSince; RestRequest.sharedSince). */
  sharedSince?: number | undefined;
  /** A periodic probe's list (ProbeContext.cached): answered from the watch cache, not a consistent read. */
  cached?: boolean | undefined;
}

/** Every object at a list path, page by page. */
export async function listObjects<T extends KubeObject = KubeObject>(
  rest: RestClient,
  path: string,
  options: ListOptions,
): Promise<T[]> {
  const items: T[] = [];
  let token: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const list = await rest.request<List<T>>(path, {
      query: {
        limit: PAGE_SIZE,
        continue: token,
        labelSelector: options.labelSelector,
        fieldSelector: options.fieldSelector,
        // A continue token carries the version of the list's first page.
        ...(token === undefined ? consistency(options.cached) : {}),
      },
      signal: options.signal,
      ...(options.sharedSince !== undefined ? { sharedSince: options.sharedSince } : {}),
    });
    items.push(...(list.items ?? []));
    token = list.metadata?.continue || undefined;
    if (token === undefined) return items;
  }
  throw new Error(`listing ${path} gave more than ${MAX_PAGES * PAGE_SIZE} objects; narrow the selection`);
}

export function labelQuery(selector: Selector | undefined): string | undefined {
  return selectorToQuery(selector);
}

/** Which namespaces a probe looks in: one, those matching a selector, or all. */
export interface NamespaceScope {
  namespace?: string | undefined;
  namespaceSelector?: Selector | undefined;
}

export interface ResolvedScope {
  /** Namespace to put in list paths, or undefined to list across all namespaces. */
  namespace: string | undefined;
  /** When listing across namespaces: keep only objects in these (undefined: keep all). */
  namespaces: ReadonlySet<string> | undefined;
  /** "in namespace rook-ceph", "in namespaces labelled team=storage (2)", "in all namespaces". */
  description: string;
}

export async function resolveScope(
  rest: RestClient,
  scope: NamespaceScope,
  signal: AbortSignal,
  cached?: boolean,
): Promise<ResolvedScope> {
  if (scope.namespace !== undefined)
    return {
      namespace: scope.namespace,
      namespaces: undefined,
      description: `in namespace ${scope.namespace}`,
    };
  const selector = labelQuery(scope.namespaceSelector);
  if (selector === undefined)
    return { namespace: undefined, namespaces: undefined, description: 'in all namespaces' };
  const found = await listObjects(rest, '/api/v1/namespaces', { labelSelector: selector, signal, cached });
  const names = new Set(found.map((n) => n.metadata?.name ?? ''));
  return {
    namespace: undefined,
    namespaces: names,
    description: `in namespaces labelled ${selector} (${names.size === 0 ? 'none' : [...names].sort().join(', ')})`,
  };
}

/** Lists `resource` of an API group/version (`/apis/apps/v1`, `/api/v1`) within a scope. */
export async function listInScope<T extends KubeObject = KubeObject>(
  rest: RestClient,
  base: string,
  resource: string,
  scope: ResolvedScope,
  options: ListOptions,
): Promise<T[]> {
  if (scope.namespaces?.size === 0) return [];
  const path =
    scope.namespace === undefined
      ? `${base}/${resource}`
      : `${base}/namespaces/${scope.namespace}/${resource}`;
  const items = await listObjects<T>(rest, path, options);
  const keep = scope.namespaces;
  return keep ? items.filter((o) => keep.has(o.metadata?.namespace ?? '')) : items;
}

/** `namespace/name`, or `name` for a cluster-scoped object. */
export function objectName(object: KubeObject): string {
  const { name = '?', namespace } = object.metadata ?? {};
  return namespace ? `${namespace}/${name}` : name;
}

/** The first few entries and how many more, so a message stays readable. */
export function someOf(entries: readonly string[], max = 5, separator = '; '): string {
  if (entries.length <= max) return entries.join(separator);
  return `${entries.slice(0, max).join(separator)}${separator}and ${entries.length - max} more`;
}

/** "1 Deployment", "3 Deployments". */
export function count(n: number, noun: string, plural = `${noun}s`): string {
  return `${n} ${n === 1 ? noun : plural}`;
}
