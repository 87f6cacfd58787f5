// An informer's objects by the value of a label, so that selecting by label need not
// match every object. A periodic `nodes` check selects its Nodes from the controller's
// cache; with 5,000 Nodes and 1,000 checks that was five million label matches a minute,
// a third of a core in the first second after a start, when every check probes once
// (docs/decisions.md, "Selecting cached Nodes by label"). Node-scoped checks select the
// Nodes they evaluate (their nodeSelector) the same way. A label key is indexed the first
// time a selector asks for it, and kept up to date from then on. Selectors are written by
// whoever may write checks, and every write to the cache visits every indexed key: so at
// most MAX_INDEXED_LABELS keys are indexed, and a selector naming only others matches
// every object, as without an index.
import { labelMatcher, type LabelSelector } from './labels.ts';

/** The most label keys indexed; clusters' checks select by a handful (hostname, role, pool). */
export const MAX_INDEXED_LABELS = 32;

interface Labelled {
  metadata: { labels?: Record<string, string> };
}

export class LabelIndex<T extends Labelled> {
  /** label key → label value → the store's keys of the objects carrying it. */
  private readonly byKey = new Map<string, Map<string, Set<string>>>();

  private readonly store: ReadonlyMap<string, T>;

  constructor(store: ReadonlyMap<string, T>) {
    this.store = store;
  }

  /** The label keys indexed, in the order first asked for. */
  get labels(): string[] {
    return [...this.byKey.keys()];
  }

  /** How many (label, value, object) entries the index holds: none once the store is empty. */
  get size(): number {
    let size = 0;
    for (const values of this.byKey.values()) for (const keys of values.values()) size += keys.size;
    return size;
  }

  /** Call after `store` took `item` under `key` in place of `old`. */
  put(key: string, old: T | undefined, item: T): void {
    for (const [label, values] of this.byKey) {
      const before = old && labelOf(old, label);
      const after = labelOf(item, label);
      if (before === after) continue;
      if (before !== undefined) remove(values, before, key);
      if (after !== undefined) add(values, after, key);
    }
  }

  /** Call after `store` dropped `old`, which it held under `key`. */
  remove(key: string, old: T): void {
    for (const [label, values] of this.byKey) {
      const before = labelOf(old, label);
      if (before !== undefined) remove(values, before, key);
    }
  }

  /**
   * The objects `selector` selects, as matching every object would find them (in any
   * order). The candidates come from the narrowest of its equalities (matchLabels, or In
   * over a few values), each then matched against the whole selector; a selector without
   * one matches every object. The selector must be valid (labels.ts selectorValid).
   */
  select(selector: LabelSelector | undefined): T[] {
    const matches = labelMatcher(selector);
    const candidates = this.narrowest(selector);
    const selected: T[] = [];
    if (candidates === undefined) {
      for (const item of this.store.values()) if (matches(item.metadata.labels)) selected.push(item);
      return selected;
    }
    for (const key of candidates) {
      const item = this.store.get(key);
      if (item !== undefined && matches(item.metadata.labels)) selected.push(item);
    }
    return selected;
  }

  private narrowest(selector: LabelSelector | undefined): Iterable<string> | undefined {
    let narrowest: Iterable<string> | undefined;
    let size = Infinity;
    const consider = (label: string, values: readonly string[]): void => {
      const index = this.indexed(label);
      if (index === undefined) return;
      const sets = values.map((value) => index.get(value));
      const count = sets.reduce((sum, set) => sum + (set?.size ?? 0), 0);
      if (count >= size) return;
      size = count;
      narrowest = sets.length === 1 ? (sets[0] ?? []) : new Set(sets.flatMap((set) => (set ? [...set] : [])));
    };
    for (const [label, value] of Object.entries(selector?.matchLabels ?? {})) consider(label, [value]);
    for (const { key, operator, values = [] } of selector?.matchExpressions ?? [])
      if (operator === 'In') consider(key, values);
    return narrowest;
  }

  /**
   * The index of one label key, built from the store the first time it is asked for;
   * undefined for a key beyond the first MAX_INDEXED_LABELS.
   */
  private indexed(label: string): Map<string, Set<string>> | undefined {
    let values = this.byKey.get(label);
    if (values === undefined) {
      if (this.byKey.size >= MAX_INDEXED_LABELS) return undefined;
      values = new Map();
      for (const [key, item] of this.store) {
        const value = labelOf(item, label);
        if (value !== undefined) add(values, value, key);
      }
      this.byKey.set(label, values);
    }
    return values;
  }
}

/** An object's own label (never one inherited by its labels object, such as `constructor`). */
function labelOf(item: Labelled, label: string): string | undefined {
  const labels = item.metadata.labels;
  return labels && Object.hasOwn(labels, label) ? labels[label] : undefined;
}

function add(values: Map<string, Set<string>>, value: string, key: string): void {
  const keys = values.get(value);
  if (keys) keys.add(key);
  else values.set(value, new Set([key]));
}

function remove(values: Map<string, Set<string>>, value: string, key: string): void {
  const keys = values.get(value);
  if (!keys) return;
  keys.delete(key);
  if (keys.size === 0) values.delete(value);
}
