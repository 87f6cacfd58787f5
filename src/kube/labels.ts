// Label selectors (metav1.LabelSelector), evaluated as the API server does: matchLabels
// and matchExpressions ANDed; an absent or empty selector selects everything.

export interface LabelSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values?: string[];
}

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

export function matchesSelector(
  selector: LabelSelector | undefined,
  labels: Record<string, string> = {},
): boolean {
  if (!selector) return true;
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false;
  }
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, key);
    const value = labels[key];
    switch (operator) {
      case 'In':
        if (!has || !values.includes(value as string)) return false;
        break;
      case 'NotIn':
        if (has && values.includes(value as string)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
    }
  }
  return true;
}

/** The selector in the API's query-string syntax (for ?labelSelector=). */
export function selectorToQuery(selector: LabelSelector | undefined): string | undefined {
  if (!selector) return undefined;
  const parts = Object.entries(selector.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    if (operator === 'In') parts.push(`${key} in (${values.join(',')})`);
    else if (operator === 'NotIn') parts.push(`${key} notin (${values.join(',')})`);
    else if (operator === 'Exists') parts.push(key);
    else parts.push(`!${key}`);
  }
  return parts.length ? parts.join(',') : undefined;
}
