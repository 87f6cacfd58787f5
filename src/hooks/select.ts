// Which hooks run for a node, and in what order: by kind and node selector; ascending
// `order`, hooks of equal order together.
import type { HookKindName, HookSpec } from '../api/hooks.ts';
import { matchesSelector } from '../kube/labels.ts';

/** A hook as observed: its kind, identity and spec. */
export interface HookObject {
  kind: HookKindName;
  metadata: { name: string; namespace: string; uid: string; generation?: number };
  spec: HookSpec;
}

export function hookOrder(hook: HookObject): number {
  return hook.spec.order ?? 0;
}

export function hookRef(hook: HookObject): string {
  return `${hook.kind} ${hook.metadata.namespace}/${hook.metadata.name}`;
}

/** The hooks of `kind` that select a node with these labels, in run order (ties by namespace and name). */
export function selectHooks(
  hooks: readonly HookObject[],
  kind: HookKindName,
  nodeLabels: Record<string, string>,
): HookObject[] {
  return hooks
    .filter((h) => h.kind === kind && matchesSelector(h.spec.nodeSelector, nodeLabels))
    .sort(
      (a, b) =>
        hookOrder(a) - hookOrder(b) ||
        a.metadata.namespace.localeCompare(b.metadata.namespace) ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
}

/** Hooks grouped by order, ascending: each group runs in parallel, groups one after another. */
export function orderGroups(hooks: readonly HookObject[]): HookObject[][] {
  const groups = new Map<number, HookObject[]>();
  for (const h of hooks) {
    const group = groups.get(hookOrder(h)) ?? [];
    group.push(h);
    groups.set(hookOrder(h), group);
  }
  return [...groups.entries()].sort(([a], [b]) => a - b).map(([, g]) => g);
}
