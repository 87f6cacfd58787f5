// resource: any kind the API server serves (CRDs included), found through API discovery
// so its resource name and scope are never guessed, with a CEL expression over each
// selected object (bound as `self`).
import type { Static } from 'typebox';
import type { ResourceProbe } from '../../api/cluster-health-check.ts';
import { KubeApiError, type RestClient } from '../../kube/rest.ts';
import { CelExpressionError, celEngine, formatFieldValue, type CelProgram, type FieldValue } from '../cel.ts';
import { replaceNodeVariables } from '../node-target.ts';
import type { Probe } from '../probe.ts';
import { count, labelQuery, listObjects, objectName, someOf, type KubeObject } from './kube-list.ts';

export type ResourceProbeSpec = Static<typeof ResourceProbe>;

export const resourceProbe: Probe<ResourceProbeSpec> = async (spec, context) => {
  const { rest, signal, node } = context;
  // Compiled before anything is read, so a broken expression is reported as such.
  const judgement =
    spec.listExpression === undefined
      ? undefined
      : celEngine.compile(spec.listExpression, node ? ['items', 'node'] : ['items']);
  const program =
    spec.expression === undefined
      ? undefined
      : celEngine.compile(spec.expression, node ? ['self', 'node'] : ['self']);
  const resource = await discoverKind(rest, spec.apiVersion, spec.kind, signal);
  if (spec.namespace !== undefined && !resource.namespaced)
    throw new Error(
      `${spec.kind} (${spec.apiVersion}) is cluster-scoped; remove resource.namespace (${spec.namespace})`,
    );

  const base = spec.apiVersion.includes('/') ? `/apis/${spec.apiVersion}` : `/api/${spec.apiVersion}`;
  const path =
    spec.namespace === undefined
      ? `${base}/${resource.name}`
      : `${base}/namespaces/${spec.namespace}/${resource.name}`;
  const labelSelector = labelQuery(spec.labelSelector);
  const fieldSelector =
    spec.name !== undefined
      ? `metadata.name=${spec.name}`
      : spec.fieldSelector === undefined
        ? undefined
        : replaceNodeVariables(spec.fieldSelector, node, 'resource.fieldSelector', escapeFieldValue);
  const items = await listObjects(rest, path, {
    labelSelector,
    fieldSelector,
    signal,
    sharedSince: context.readsSince,
    cached: context.cached !== undefined,
  }).catch((error: unknown) => {
    // The kind may have gone (CRD deleted) since discovery was cached.
    if (error instanceof KubeApiError && error.code === 404) forgetDiscovery(rest, spec.apiVersion);
    if (error instanceof KubeApiError && error.code === 400 && spec.fieldSelector !== undefined)
      throw new Error(
        `${spec.kind} (${spec.apiVersion}) cannot be selected by resource.fieldSelector ${fieldSelector ?? ''}: ${error.message}`,
        { cause: error },
      );
    throw error;
  });

  const selection = describeSelection(spec, resource.namespaced, labelSelector, fieldSelector);
  // List items of built-in kinds come without apiVersion and kind; give the objects both.
  const objects = items.map((item): KubeObject => ({
    apiVersion: spec.apiVersion,
    kind: spec.kind,
    ...item,
  }));
  if (judgement)
    return judgeList(
      judgement,
      objects,
      node?.object,
      `${count(objects.length, `${spec.kind} object`)} ${selection}`,
    );
  if (!program) throw new Error('resource needs expression or listExpression'); // the schema requires one

  if (items.length === 0 && spec.maxMatching === undefined)
    return {
      healthy: false,
      message: `no ${spec.kind} objects ${selection}: nothing to evaluate, so unhealthy`,
    };

  const failures: string[] = [];
  const matched: string[] = [];
  for (const object of objects) {
    const verdict = judge(program, object, node?.object);
    if (verdict === true) matched.push(objectName(object));
    else failures.push(`${objectName(object)} ${verdict}`);
  }
  const matching = matched.length;

  if (spec.maxMatching !== undefined) {
    // Here matching is the finding (a primary on this node): name what matched.
    const summary = `${matching}/${count(items.length, `${spec.kind} object`)} ${selection} match \`${program.expression}\` (at most ${spec.maxMatching} may)`;
    const healthy = matching <= spec.maxMatching;
    return { healthy, message: healthy || !matching ? summary : `${summary}: ${someOf(matched)}` };
  }

  const needed = spec.minMatching ?? items.length;
  const healthy = matching >= needed;
  const rule = spec.minMatching === undefined ? 'all must' : `at least ${spec.minMatching} must`;
  const summary = `${matching}/${count(items.length, `${spec.kind} object`)} ${selection} match \`${program.expression}\` (${rule})`;
  return { healthy, message: failures.length ? `${summary}: ${someOf(failures)}` : summary };
};

/**
 * The verdict of an expression over the whole selection (bound as `items`), for what no
 * object shows alone: "no volume whose only healthy replica is on this node" compares
 * each replica with its siblings. An empty selection is the expression's to judge too.
 */
function judgeList(
  program: CelProgram,
  items: KubeObject[],
  node: object | undefined,
  selection: string,
): { healthy: boolean; message: string } {
  const verdict = program.evaluateVerdict(node ? { items, node } : { items });
  // A list expression is often long; name it rather than quote it then.
  const named = program.expression.length <= 120 ? `\`${program.expression}\`` : 'resource.listExpression';
  const findings =
    typeof verdict === 'string' ? [verdict] : verdict === false ? [''] : verdict === true ? [] : verdict;
  const said = findings.map((f) => f.trim()).filter(Boolean);
  if (!findings.length) return { healthy: true, message: `${selection}: ${named} holds` };
  if (!said.length) return { healthy: false, message: `${selection}: ${named} is false` };
  const message = someOf(said);
  return { healthy: false, message: message.length > 1024 ? `${message.slice(0, 1023)}…` : message };
}

/** true, or what is wrong with the object: the fields the expression read, or its error. */
function judge(program: CelProgram, self: KubeObject, node: object | undefined): true | string {
  const bindings = node ? { self, node } : { self };
  try {
    if (program.evaluate(bindings)) return true;
  } catch (error) {
    // An expression that fails on one object (a field it lacks) makes that object
    // unhealthy, as the schema says; only a broken expression is a probe error.
    if (error instanceof CelExpressionError) return `fails: ${error.reason}`;
    throw error;
  }
  const fields = program.explainFalse(bindings).map(relative).slice(0, 3);
  return fields.length ? `has ${fields.join(', ')}` : 'does not match';
}

/** `status.ceph.health == 'HEALTH_WARN'` rather than `self.status...`: the object is named already. */
function relative(field: FieldValue): string {
  const text = formatFieldValue(field);
  return text.replace(/^(no )?self\./, '$1');
}

function describeSelection(
  spec: ResourceProbeSpec,
  namespaced: boolean,
  labelSelector: string | undefined,
  fieldSelector: string | undefined,
): string {
  const parts = [
    namespaced ? (spec.namespace === undefined ? 'in all namespaces' : `in namespace ${spec.namespace}`) : '',
    spec.name === undefined ? '' : `named ${spec.name}`,
    labelSelector === undefined ? '' : `labelled ${labelSelector}`,
    spec.name !== undefined || fieldSelector === undefined ? '' : `with ${fieldSelector}`,
  ];
  return parts.filter(Boolean).join(' ') || 'in the cluster';
}

/** A field selector value with the characters the selector syntax gives meaning escaped. */
function escapeFieldValue(value: string): string {
  return value.replace(/[\\,=!]/g, (c) => `\\${c}`);
}

// --- discovery -----------------------------------------------------------------------

export interface DiscoveredResource {
  /** The plural resource name used in paths, e.g. cephclusters. */
  name: string;
  kind: string;
  namespaced: boolean;
  verbs: string[];
}

interface ResourceList {
  resources?: DiscoveredResource[];
}

/** Discovery documents change only when CRDs or aggregated APIs do; a short memory saves a request per probe. */
const DISCOVERY_TTL_MS = 30_000;
const discoveryCache = new WeakMap<
  RestClient,
  Map<string, { at: number; resources: DiscoveredResource[] }>
>();

function forgetDiscovery(rest: RestClient, apiVersion: string): void {
  discoveryCache.get(rest)?.delete(apiVersion);
}

async function fetchResources(
  rest: RestClient,
  apiVersion: string,
  signal: AbortSignal,
): Promise<DiscoveredResource[]> {
  const path = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  try {
    const list = await rest.request<ResourceList>(path, { signal });
    return (list.resources ?? []).filter((r) => !r.name.includes('/')); // not subresources
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 404)
      throw new Error(
        `the API server does not serve ${apiVersion} (GET ${path}: 404); is the API group installed (its CRD created)?`,
        { cause: error },
      );
    throw new Error(
      `API discovery of ${apiVersion} failed: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
}

/** The resource of `kind` in `apiVersion`, by API discovery (cached briefly; refreshed on a miss). */
export async function discoverKind(
  rest: RestClient,
  apiVersion: string,
  kind: string,
  signal: AbortSignal,
): Promise<DiscoveredResource> {
  let cache = discoveryCache.get(rest);
  if (!cache) {
    cache = new Map<string, { at: number; resources: DiscoveredResource[] }>();
    discoveryCache.set(rest, cache);
  }
  const cached = cache.get(apiVersion);
  const fresh = cached !== undefined && Date.now() - cached.at < DISCOVERY_TTL_MS;
  let resources = fresh ? cached.resources : undefined;
  let found = resources?.find((r) => r.kind === kind);
  if (!found) {
    resources = await fetchResources(rest, apiVersion, signal);
    cache.set(apiVersion, { at: Date.now(), resources });
    found = resources.find((r) => r.kind === kind);
  }
  if (!found) {
    const kinds = [...new Set(resources?.map((r) => r.kind))].sort();
    throw new Error(
      `${apiVersion} has no kind ${kind}; it serves ${kinds.length ? kinds.join(', ') : 'no kinds'}`,
    );
  }
  if (!found.verbs.includes('list'))
    throw new Error(`${kind} (${apiVersion}) cannot be listed (its verbs: ${found.verbs.join(', ')})`);
  return found;
}
