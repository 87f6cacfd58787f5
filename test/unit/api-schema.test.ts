// The CRD schemas generated from src/api are structural OpenAPI the API server
// accepts, every field explains itself, and the generation is deterministic.
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Type from 'typebox';
import Value from 'typebox/value';
import { parseAllDocuments } from 'yaml';
import type { ActionPolicy } from '../../src/api/action-policy.ts';
import type { ClusterHealthCheck } from '../../src/api/cluster-health-check.ts';
import { ACTIONS, type KindDefinition } from '../../src/api/common.ts';
import type { PreRebootJob } from '../../src/api/hooks.ts';
import { KINDS } from '../../src/api/kinds.ts';
import type { NodeAction } from '../../src/api/node-action.ts';
import { customResourceDefinition, openAPIV3Schema } from '../../src/manifests/crds.ts';
import { SchemaTranslationError, toStructural, type OpenAPISchema } from '../../src/manifests/openapi.ts';

/** Keywords a structural CRD schema may use (apiextensions.k8s.io/v1 JSONSchemaProps we emit). */
const ALLOWED = new Set([
  'description',
  'type',
  'format',
  'enum',
  'default',
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
  'properties',
  'additionalProperties',
  'items',
  'x-kubernetes-validations',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-embedded-resource',
  'x-kubernetes-int-or-string',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
]);

interface Node {
  path: string;
  schema: OpenAPISchema;
  /** A named field (a property), as opposed to array items or map values. */
  field: boolean;
}

function* walk(schema: OpenAPISchema, path = '', field = false): Generator<Node> {
  yield { path, schema, field };
  const properties = schema.properties as Record<string, OpenAPISchema> | undefined;
  for (const [name, sub] of Object.entries(properties ?? {})) yield* walk(sub, `${path}.${name}`, true);
  if (schema.items) yield* walk(schema.items as OpenAPISchema, `${path}[]`);
  if (typeof schema.additionalProperties === 'object') {
    yield* walk(schema.additionalProperties as OpenAPISchema, `${path}{}`);
  }
}

const schemas = KINDS.map((k) => ({ kind: k.kind, schema: openAPIV3Schema(k) }));

describe('CRD schemas', () => {
  it('cover all twelve kinds of talos.dev/v1alpha1 with distinct names', () => {
    assert.deepEqual(KINDS.map((k) => k.kind).sort(), [
      'ActionPolicy',
      'ClusterHealthCheck',
      'NodeAction',
      'NodePrereadyJob',
      'NodeReadyJob',
      'NodeRollout',
      'NotificationPolicy',
      'PreMaintenanceJob',
      'PreRebootJob',
      'PreResetJob',
      'PreShutdownJob',
      'PreUpgradeJob',
    ]);
    const names = KINDS.flatMap((k) => [k.plural, k.singular, ...k.shortNames]);
    assert.equal(new Set(names).size, names.length, `names collide: ${names.join(', ')}`);
  });

  for (const { kind, schema } of schemas) {
    describe(kind, () => {
      it('uses only structural OpenAPI keywords, and is plain JSON (no symbols or hidden keys)', () => {
        assert.deepEqual(JSON.parse(JSON.stringify(schema)), schema);
        for (const { path, schema: node } of walk(schema)) {
          assert.deepEqual(Object.getOwnPropertySymbols(node), [], `${kind}${path} carries symbols`);
          for (const key of Object.keys(node))
            assert.ok(ALLOWED.has(key), `${kind}${path}: keyword ${key} is not allowed`);
        }
      });

      it('types every node and never combines properties with additionalProperties', () => {
        for (const { path, schema: node } of walk(schema)) {
          const typed =
            typeof node.type === 'string' ||
            node['x-kubernetes-int-or-string'] === true ||
            node['x-kubernetes-preserve-unknown-fields'] === true;
          assert.ok(typed, `${kind}${path} has no type`);
          assert.ok(
            !(node.properties && node.additionalProperties !== undefined),
            `${kind}${path}: properties + additionalProperties`,
          );
          if (node.additionalProperties === false) assert.fail(`${kind}${path}: additionalProperties: false`);
        }
      });

      it('describes every field', () => {
        for (const { path, schema: node, field } of walk(schema)) {
          if (!field || path === '.metadata') continue;
          assert.equal(typeof node.description, 'string', `${kind}${path} has no description`);
          assert.ok(
            (node.description as string).length >= 10,
            `${kind}${path}: description too short to help`,
          );
        }
      });

      it('bounds every string and list, so CEL rules stay within the cost budget', () => {
        for (const { path, schema: node } of walk(schema)) {
          if (path === '.apiVersion' || path === '.kind') continue; // the API server's own
          if (node.type === 'string') {
            assert.ok(
              node.maxLength !== undefined || node.enum !== undefined || node.format === 'date-time',
              `${kind}${path}: string without maxLength`,
            );
          }
          if (node.type === 'array')
            assert.ok(node.maxItems !== undefined, `${kind}${path}: array without maxItems`);
        }
      });

      it('has defaults within their own enum and type', () => {
        for (const { path, schema: node } of walk(schema)) {
          if (!('default' in node)) continue;
          const value = node.default;
          if (Array.isArray(node.enum))
            assert.ok(node.enum.includes(value), `${kind}${path}: default ${String(value)} not in enum`);
          const expected: Record<string, (v: unknown) => boolean> = {
            string: (v) => typeof v === 'string',
            integer: (v) => Number.isInteger(v),
            boolean: (v) => typeof v === 'boolean',
            object: (v) => typeof v === 'object' && v !== null,
          };
          const check = typeof node.type === 'string' ? expected[node.type] : undefined;
          if (check)
            assert.ok(
              check(value),
              `${kind}${path}: default ${JSON.stringify(value)} is not a ${String(node.type)}`,
            );
        }
      });

      it('gives every CEL rule a message that names a field', () => {
        for (const { path, schema: node } of walk(schema)) {
          for (const rule of (node['x-kubernetes-validations'] ?? []) as {
            rule: string;
            message: string;
          }[]) {
            assert.ok(rule.rule.length > 0);
            assert.match(
              rule.message,
              /^(spec|[a-zA-Z]+(\[\])?(\.[a-zA-Z.[\]]+)?)\b.* (must|is|may|needs|set)\b/,
              `${kind}${path}: ${rule.message}`,
            );
          }
        }
      });
    });
  }

  it('declare the status subresource, printer columns, short names and the gatehouse category', () => {
    for (const definition of KINDS) {
      const crd = customResourceDefinition(definition) as {
        spec: {
          names: { shortNames: string[]; categories: string[] };
          versions: {
            subresources: unknown;
            additionalPrinterColumns: { name: string; jsonPath: string }[];
          }[];
        };
      };
      assert.equal(crd.spec.versions.length, 1);
      const version = crd.spec.versions[0];
      assert.ok(version);
      assert.deepEqual(version.subresources, { status: {} });
      assert.ok(crd.spec.names.shortNames.length > 0);
      assert.ok(crd.spec.names.categories.includes('gatehouse'));
      assert.ok(version.additionalPrinterColumns.length >= 3);
      assert.equal(version.additionalPrinterColumns.at(-1)?.name, 'Age');
    }
  });

  it('let every list of actions name every action kind (a kind added must not make a full list invalid)', () => {
    // Every array whose items are the action enum, wherever it is in any kind's schema.
    const lists: { where: string; maxItems: unknown }[] = [];
    const walk = (node: unknown, where: string) => {
      if (Array.isArray(node)) node.forEach((n, i) => walk(n, `${where}[${String(i)}]`));
      if (typeof node !== 'object' || node === null) return;
      const o = node as Record<string, unknown>;
      const items = o.items as { enum?: unknown[] } | undefined;
      if (o.type === 'array' && JSON.stringify(items?.enum) === JSON.stringify([...ACTIONS]))
        lists.push({ where, maxItems: o.maxItems });
      for (const [k, v] of Object.entries(o)) walk(v, `${where}.${k}`);
    };
    for (const { kind, schema } of schemas) walk(schema, kind);
    assert.ok(lists.length >= 2, JSON.stringify(lists));
    for (const l of lists)
      assert.ok(l.maxItems === undefined || (l.maxItems as number) >= ACTIONS.length, JSON.stringify(l));
  });

  it('are generated identically every time', () => {
    const again = KINDS.map((k) => ({ kind: k.kind, schema: openAPIV3Schema(k) }));
    assert.equal(JSON.stringify(again), JSON.stringify(schemas));
  });
});

describe('toStructural', () => {
  it('translates TypeBox maps, string unions and int-or-string, and drops JSON Schema bookkeeping', () => {
    const schema = Type.Object(
      {
        labels: Type.Record(Type.String(), Type.String(), { description: 'labels' }),
        mode: Type.Union([Type.Literal('A'), Type.Literal('B')], { description: 'mode' }),
        count: Type.Union([Type.Integer(), Type.String()], { description: 'count' }),
        fixed: Type.Literal('x', { description: 'fixed' }),
      },
      { $id: 'Thing', title: 'Thing', description: 'thing' },
    );
    assert.deepEqual(toStructural(schema), {
      description: 'thing',
      type: 'object',
      required: ['labels', 'mode', 'count', 'fixed'],
      properties: {
        labels: { description: 'labels', type: 'object', additionalProperties: { type: 'string' } },
        mode: { description: 'mode', type: 'string', enum: ['A', 'B'] },
        count: { description: 'count', 'x-kubernetes-int-or-string': true },
        fixed: { description: 'fixed', type: 'string', enum: ['x'] },
      },
    });
  });

  it('refuses what structural schemas cannot say, naming where', () => {
    const cases: [string, unknown, RegExp][] = [
      [
        'union of objects',
        Type.Object({ a: Type.Union([Type.Object({}), Type.Object({ b: Type.String() })]) }),
        /^\.a: anyOf/,
      ],
      ['not', Type.Object({ n: Type.Unsafe({ type: 'string', not: { const: 'x' } }) }), /^\.n: keyword not /],
      [
        'tuple',
        Type.Object({ t: Type.Tuple([Type.String(), Type.Integer()]) }),
        /^\.t: keyword (prefixItems|additionalItems|items)/,
      ],
      ['untyped', Type.Object({ u: Type.Unknown() }), /^\.u: every schema must have a type/],
      ['$ref', Type.Object({ r: Type.Ref('Other') }), /^\.r: keyword \$ref /],
    ];
    for (const [what, schema, message] of cases) {
      assert.throws(
        () => toStructural(schema),
        (e: unknown) => e instanceof SchemaTranslationError && message.test(e.message),
        what,
      );
    }
  });
});

describe('static types', () => {
  it('follow the schemas (checked by tsc), and the examples satisfy the schemas', async () => {
    // Compile-time: wrong values do not type-check.
    const action: NodeAction['spec'] = { nodeName: 'n', action: 'Reboot', requestedBy: 'me' };
    // @ts-expect-error: not an action
    const wrong: NodeAction['spec']['action'] = 'Explode';
    const policy: ActionPolicy['spec'] = { maxConcurrent: '25%' };
    const check: ClusterHealthCheck['spec'] = { nodes: { maxNotReady: 0 } };
    const hook: PreRebootJob['spec'] = { webhook: { service: { name: 'svc' } }, failurePolicy: 'Ignore' };
    assert.deepEqual(
      [action.action, wrong, policy.maxConcurrent, check.nodes, hook.failurePolicy],
      ['Reboot', 'Explode', '25%', { maxNotReady: 0 }, 'Ignore'],
    );

    // Run time: every example object validates against its TypeBox schema (CEL rules
    // aside; the integration tests have the API server judge those).
    const byKind = new Map<string, KindDefinition>(KINDS.map((k) => [k.kind, k]));
    const dir = join(import.meta.dirname, '..', '..', 'examples');
    let checked = 0;
    for (const file of (await readdir(dir)).filter((f) => f.endsWith('.yaml'))) {
      for (const doc of parseAllDocuments(await readFile(join(dir, file), 'utf8'))) {
        const object = doc.toJS() as { apiVersion: string; kind: string; metadata: { name: string } };
        const definition = byKind.get(object.kind);
        if (object.apiVersion !== 'talos.dev/v1alpha1' || !definition) continue;
        const errors = [...Value.Errors(definition.schema, object)].map(
          (e) => `${e.instancePath} ${e.message}`,
        );
        assert.deepEqual(errors, [], `${file}: ${object.kind} ${object.metadata.name}`);
        checked++;
      }
    }
    assert.ok(checked >= 14, `only ${checked} example objects found`);
  });
});
