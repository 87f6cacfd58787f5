// CustomResourceDefinitions, generated from the kind definitions in src/api.
import { GROUP, VERSION, type KindDefinition } from '../api/common.ts';
import { KINDS } from '../api/kinds.ts';
import { isRecord, toStructural, type OpenAPISchema } from './openapi.ts';

/**
 * The CRD's openAPIV3Schema. apiVersion, kind and metadata are the API server's own:
 * at the root a CRD may only declare them as a plain string and object.
 */
export function openAPIV3Schema(definition: KindDefinition): OpenAPISchema {
  const root = definition.schema as unknown as Record<string, unknown>;
  const properties = root.properties;
  if (!isRecord(properties)) throw new Error(`${definition.kind}: schema has no properties`);
  const description = (name: string): string => {
    const property = properties[name];
    const text = isRecord(property) ? property.description : undefined;
    if (typeof text !== 'string') throw new Error(`${definition.kind}: ${name} has no description`);
    return text;
  };
  return {
    description: root.description,
    type: 'object',
    required: ['spec'],
    properties: {
      apiVersion: { description: description('apiVersion'), type: 'string' },
      kind: { description: description('kind'), type: 'string' },
      metadata: { type: 'object' },
      spec: toStructural(properties.spec, `${definition.kind}.spec`),
      status: toStructural(properties.status, `${definition.kind}.status`),
    },
  };
}

export function crdName(definition: KindDefinition): string {
  return `${definition.plural}.${GROUP}`;
}

export function customResourceDefinition(definition: KindDefinition): Record<string, unknown> {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: crdName(definition),
      labels: { 'app.kubernetes.io/name': 'gatehouse', 'app.kubernetes.io/part-of': 'gatehouse' },
    },
    spec: {
      group: GROUP,
      scope: definition.scope,
      names: {
        kind: definition.kind,
        listKind: `${definition.kind}List`,
        plural: definition.plural,
        singular: definition.singular,
        shortNames: [...definition.shortNames],
        categories: [...definition.categories],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          schema: { openAPIV3Schema: openAPIV3Schema(definition) },
          subresources: { status: {} },
          additionalPrinterColumns: definition.printerColumns.map((c) => ({
            name: c.name,
            type: c.type,
            jsonPath: c.jsonPath,
            description: c.description,
            ...(c.priority ? { priority: c.priority } : {}),
          })),
          ...(definition.selectableFields?.length
            ? { selectableFields: definition.selectableFields.map((jsonPath) => ({ jsonPath })) }
            : {}),
        },
      ],
    },
  };
}

export function customResourceDefinitions(): Record<string, unknown>[] {
  return KINDS.map(customResourceDefinition);
}
