// Checks a request body against its JSON schema (derived from src/api, see schemas.ts)
// and turns every violation into a sentence naming the field and what is allowed.
// Cross-field rules (CEL) are the API server's to enforce; its refusals are passed on.
import Schema from 'typebox/schema';
import type { TLocalizedValidationError } from 'typebox/error';
import { isRecord, type OpenAPISchema } from '../manifests/openapi.ts';
import { ApiError, type FieldProblem } from './api-error.ts';
import { serverSetFieldMessage } from './schemas.ts';

/** Turns a JSON pointer (/spec/upgrade/image, /spec/x/0) into a field path (spec.upgrade.image, spec.x[0]). */
export function fieldPath(pointer: string): string {
  let path = '';
  for (const raw of pointer.split('/').slice(1)) {
    const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (/^\d+$/.test(part)) path += `[${part}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(part)) path += path ? `.${part}` : part;
    else path += `[${JSON.stringify(part)}]`;
  }
  return path;
}

/** The sub-schema a JSON pointer leads to (through properties and items). */
function schemaAt(root: OpenAPISchema, pointer: string): OpenAPISchema | undefined {
  let node: unknown = root;
  for (const raw of pointer.split('/').slice(1)) {
    const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (!isRecord(node)) return undefined;
    if (/^\d+$/.test(part) && isRecord(node.items)) node = node.items;
    else if (isRecord(node.properties) && isRecord(node.properties[part])) node = node.properties[part];
    else if (isRecord(node.additionalProperties)) node = node.additionalProperties;
    else return undefined;
  }
  return isRecord(node) ? node : undefined;
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'string') {
    const shown = value.length > 60 ? `${value.slice(0, 57)}...` : value;
    return JSON.stringify(shown);
  }
  return `${typeof value} ${JSON.stringify(value)}`;
}

function valueAt(value: unknown, pointer: string): unknown {
  let node = value;
  for (const raw of pointer.split('/').slice(1)) {
    const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (Array.isArray(node)) node = node[Number(part)];
    else if (isRecord(node)) node = node[part];
    else return undefined;
  }
  return node;
}

const TYPE_WORDS: Record<string, string> = {
  string: 'a string',
  integer: 'a whole number',
  number: 'a number',
  boolean: 'true or false',
  object: 'a JSON object',
  array: 'a JSON array',
};

function problem(root: OpenAPISchema, body: unknown, error: TLocalizedValidationError): FieldProblem[] {
  const at = fieldPath(error.instancePath);
  const where = at || 'the request body';
  const value = valueAt(body, error.instancePath);
  const schema = schemaAt(root, error.instancePath);
  const hint = typeof schema?.description === 'string' ? ` (${schema.description})` : '';
  switch (error.keyword) {
    case 'required': {
      const missing = (error.params as { requiredProperties?: string[] }).requiredProperties ?? [];
      return missing.map((name) => {
        const field = at ? `${at}.${name}` : name;
        const sub = schemaAt(root, `${error.instancePath}/${name}`);
        const subHint = typeof sub?.description === 'string' ? `: ${sub.description}` : '';
        return { field, message: `${field} is required${subHint}` };
      });
    }
    case 'additionalProperties': {
      const extra = (error.params as { additionalProperties?: string[] }).additionalProperties ?? [];
      const allowed = isRecord(schema?.properties) ? Object.keys(schema.properties) : [];
      return extra.map((name) => {
        const field = at ? `${at}.${name}` : name;
        return {
          field,
          message:
            serverSetFieldMessage(name) && at === 'spec'
              ? (serverSetFieldMessage(name) ?? '')
              : `${field} is not a field here; ${where} accepts ${allowed.join(', ')}`,
        };
      });
    }
    case 'boolean':
      // The `false` sub-schema behind additionalProperties: reported above.
      return [];
    case 'type': {
      const expected = String((error.params as { type?: unknown }).type);
      return [
        {
          field: where,
          message: `${where} must be ${TYPE_WORDS[expected] ?? expected}, not ${describeValue(value)}${hint}`,
        },
      ];
    }
    case 'enum': {
      const allowed = (error.params as { allowedValues?: unknown[] }).allowedValues ?? [];
      return [
        {
          field: where,
          message: `${where} must be one of ${allowed.map((v) => String(v)).join(', ')}, not ${describeValue(value)}`,
        },
      ];
    }
    case 'pattern':
      return [
        {
          field: where,
          message: `${where} must match ${String((error.params as { pattern?: string }).pattern)}, not ${describeValue(value)}${hint}`,
        },
      ];
    case 'minLength':
    case 'maxLength': {
      const limit = (error.params as { limit?: number }).limit ?? 0;
      const length = typeof value === 'string' ? Array.from(value).length : 0;
      return [
        {
          field: where,
          message:
            error.keyword === 'minLength'
              ? `${where} must not be empty${limit > 1 ? ` (at least ${String(limit)} characters)` : ''}`
              : `${where} must be at most ${String(limit)} characters long, not ${String(length)}`,
        },
      ];
    }
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum': {
      const { comparison, limit } = error.params as { comparison?: string; limit?: number };
      return [
        {
          field: where,
          message: `${where} must be ${String(comparison)} ${String(limit)}, not ${describeValue(value)}`,
        },
      ];
    }
    case 'minItems':
    case 'maxItems':
    case 'minProperties':
    case 'maxProperties': {
      const limit = (error.params as { limit?: number }).limit ?? 0;
      const what = error.keyword.endsWith('Items') ? 'items' : 'entries';
      return [
        {
          field: where,
          message: `${where} must have ${error.keyword.startsWith('min') ? 'at least' : 'at most'} ${String(limit)} ${what}`,
        },
      ];
    }
    default:
      return [{ field: where, message: `${where} ${error.message}${hint}` }];
  }
}

export interface Validator<T> {
  /** The value, typed, or an ApiError (422) listing every problem. */
  (value: unknown): T;
}

/** A validator for `schema` (a plain JSON schema), whose refusals name fields and allowed values. */
export function validator<T>(schema: OpenAPISchema, what: string): Validator<T> {
  return (value: unknown): T => {
    if (!isRecord(value)) {
      throw new ApiError(422, `${what} must be a JSON object, not ${describeValue(value)}`, {
        details: [{ field: '', message: `send a JSON object such as {"spec": {...}}` }],
      });
    }
    const [ok, errors] = Schema.Errors(schema, value);
    if (ok) return value as T;
    const seen = new Set<string>();
    const details = errors
      .flatMap((e) => problem(schema, value, e))
      .filter((p) => {
        const key = `${p.field}\n${p.message}`;
        if (seen.has(key)) return false;
        seen.add(key);
        return true;
      })
      .sort((a, b) => (a.field < b.field ? -1 : a.field > b.field ? 1 : 0));
    if (details.length === 0) {
      // A violation of a keyword we do not describe: still a refusal, never a crash.
      details.push({ field: '', message: `${what} does not match its schema` });
    }
    const [first] = details;
    const others = details.length - 1;
    const more =
      others > 0 ? ` (and ${String(others)} more problem${others > 1 ? 's' : ''}, see details)` : '';
    throw new ApiError(422, `${first?.message ?? 'invalid request'}${more}`, { details });
  };
}
