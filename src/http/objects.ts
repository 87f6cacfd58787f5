// Kubernetes objects as the HTTP API (and the CLI) show them.
import { API_VERSION } from '../api/common.ts';
import type { KubeObject } from '../kube/informer.ts';
import { API_METADATA_FIELDS } from './schemas.ts';

/** An object as the API returns it: without the API server's bookkeeping (managedFields). */
export function objectView(
  object: KubeObject & { spec?: unknown; status?: unknown },
): Record<string, unknown> {
  const metadata = object.metadata as Record<string, unknown>;
  return {
    apiVersion: object.apiVersion ?? API_VERSION,
    kind: object.kind,
    metadata: Object.fromEntries(
      API_METADATA_FIELDS.filter((f) => metadata[f] !== undefined).map((f) => [f, metadata[f]]),
    ),
    spec: object.spec,
    ...(object.status !== undefined ? { status: object.status } : {}),
  };
}
