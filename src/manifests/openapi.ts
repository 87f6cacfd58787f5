// TypeBox schemas → structural OpenAPI v3, the dialect CustomResourceDefinitions accept.
//
// TypeBox emits JSON Schema. Kubernetes wants a subset with extensions: every node
// typed, no $id/$schema/$ref, no `additionalProperties` beside `properties`, no
// `const`/`anyOf` of alternatives (enum instead), `x-kubernetes-int-or-string` for
// int-or-string. The translation is an allow-list: a keyword it does not know fails
// the generation with the path of the schema, so nothing the API server would reject
// (or silently ignore) slips through.

export type OpenAPISchema = Record<string, unknown>;

/** Keywords copied as they are. */
const VALUE_KEYWORDS = new Set([
  'type',
  'format',
  'description',
  'default',
  'enum',
  'nullable',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'required',
]);

/** Extensions the API server understands. */
const KUBERNETES_EXTENSIONS = new Set([
  'x-kubernetes-validations',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-embedded-resource',
  'x-kubernetes-int-or-string',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
]);

/** JSON Schema bookkeeping that has no meaning in a CRD and is dropped. */
const DROPPED = new Set(['$id', '$schema', 'title', 'examples']);

/** Output key order, so the YAML reads description first and nested schemas last. */
const KEY_ORDER = [
  'description',
  'type',
  'format',
  'enum',
  'default',
  'nullable',
  'minimum',
  'exclusiveMinimum',
  'maximum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'x-kubernetes-int-or-string',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-embedded-resource',
  'x-kubernetes-map-type',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'required',
  'properties',
  'additionalProperties',
  'items',
  'x-kubernetes-validations',
];

export class SchemaTranslationError extends Error {
  override readonly name = 'SchemaTranslationError';
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function fail(path: string, problem: string): never {
  throw new SchemaTranslationError(`${path || '<root>'}: ${problem}`);
}

/** `anyOf` TypeBox emits for unions: string literals (an enum) or integer|string. */
function translateAnyOf(alternatives: unknown, path: string): OpenAPISchema {
  if (!Array.isArray(alternatives)) fail(path, 'anyOf must be a list');
  const items = alternatives.filter(isRecord);
  if (items.length === alternatives.length && items.every((a) => typeof a.const === 'string')) {
    return { type: 'string', enum: items.map((a) => a.const) };
  }
  const types = items.map((a) => (Object.keys(a).length === 1 ? a.type : undefined)).sort();
  if (types.length === 2 && types[0] === 'integer' && types[1] === 'string') {
    return { 'x-kubernetes-int-or-string': true };
  }
  return fail(
    path,
    'anyOf is only supported for string literals (an enum) or integer|string (int-or-string)',
  );
}

function inferEnumType(values: unknown, path: string): string {
  if (!Array.isArray(values) || values.length === 0) fail(path, 'enum must be a non-empty list');
  const kinds = new Set(values.map((v) => (Number.isInteger(v) ? 'integer' : typeof v)));
  const [only] = [...kinds];
  if (kinds.size !== 1 || !only || !['string', 'integer', 'number', 'boolean'].includes(only)) {
    fail(path, 'enum values must all be strings, all integers, all numbers or all booleans');
  }
  return only;
}

function ordered(schema: OpenAPISchema): OpenAPISchema {
  const out: OpenAPISchema = {};
  for (const key of KEY_ORDER) if (key in schema) out[key] = schema[key];
  return out;
}

/** Translates one TypeBox (JSON Schema) node and everything under it. */
export function toStructural(schema: unknown, path = ''): OpenAPISchema {
  if (!isRecord(schema)) return fail(path, 'a schema must be an object');
  let out: OpenAPISchema = {};
  // Enumerable keys only: TypeBox keeps its own markers (~kind, ~optional) non-enumerable.
  for (const [key, value] of Object.entries(schema)) {
    if (VALUE_KEYWORDS.has(key) || KUBERNETES_EXTENSIONS.has(key)) {
      out[key] = structuredClone(value);
    } else if (DROPPED.has(key)) {
      continue;
    } else if (key === 'const') {
      out.enum = [value];
    } else if (key === 'anyOf') {
      out = { ...out, ...translateAnyOf(value, path) };
    } else if (key === 'properties') {
      if (!isRecord(value)) fail(path, 'properties must be an object');
      out.properties = Object.fromEntries(
        Object.entries(value).map(([name, sub]) => [name, toStructural(sub, `${path}.${name}`)]),
      );
    } else if (key === 'items') {
      out.items = toStructural(value, `${path}[]`);
    } else if (key === 'patternProperties') {
      // TypeBox's Record(String, V): any key → additionalProperties: V.
      if (!isRecord(value) || Object.keys(value).length !== 1 || !('^.*$' in value)) {
        fail(path, 'patternProperties is only supported as TypeBox emits it for Record(String(), ...)');
      }
      out.additionalProperties = toStructural(value['^.*$'], `${path}{}`);
    } else if (key === 'additionalProperties') {
      // `false` is what pruning does anyway; `true` means keep unknown fields.
      if (value === true) out['x-kubernetes-preserve-unknown-fields'] = true;
      else if (value !== false) out.additionalProperties = toStructural(value, `${path}{}`);
    } else {
      fail(path, `keyword ${key} has no structural OpenAPI equivalent`);
    }
  }
  if (out.enum !== undefined && out.type === undefined) out.type = inferEnumType(out.enum, path);
  if (out.properties !== undefined && out.additionalProperties !== undefined) {
    fail(path, 'properties and additionalProperties cannot be combined in a structural schema');
  }
  if (
    out.type === undefined &&
    out['x-kubernetes-int-or-string'] !== true &&
    out['x-kubernetes-preserve-unknown-fields'] !== true
  ) {
    fail(path, 'every schema must have a type');
  }
  if (Array.isArray(out.required) && out.required.length === 0) delete out.required;
  const unordered = Object.keys(out).filter((k) => !KEY_ORDER.includes(k));
  if (unordered.length > 0) fail(path, `internal: no output position for ${unordered.join(', ')}`);
  return ordered(out);
}
