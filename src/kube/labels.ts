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
  return labelMatcher(selector)(labels);
}

/**
 * The selector as a function, its parts taken apart once: for matching many objects (a
 * periodic probe over the Node cache matches every Node) without allocating per object.
 */
export function labelMatcher(
  selector: LabelSelector | undefined,
): (labels?: Record<string, string>) => boolean {
  if (!selector) return () => true;
  const pairs = Object.entries(selector.matchLabels ?? {});
  const expressions = selector.matchExpressions ?? [];
  return (labels = {}) => {
    for (const [key, value] of pairs) if (labels[key] !== value) return false;
    for (const { key, operator, values = [] } of expressions) {
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
  };
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

// The API server's syntax for label keys and values (k8s.io/apimachinery validation):
// a value is at most 63 characters of alphanumerics, '-', '_' and '.', starting and ending
// with an alphanumeric (or empty); a key is such a name, optionally after a DNS subdomain
// prefix and '/'.
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function validKey(key: string): boolean {
  const slash = key.indexOf('/');
  if (slash < 0) return LABEL_NAME.test(key);
  const prefix = key.slice(0, slash);
  return prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix) && LABEL_NAME.test(key.slice(slash + 1));
}

function validValue(value: string): boolean {
  return value === '' || LABEL_NAME.test(value);
}

/**
 * Whether the API server would take this selector: matching it locally (a cache) gives the
 * server's answer only then. A selector it refuses is a request error there, never "no
 * match" — a caller that gets false asks the server, which says what is wrong.
 */
export function selectorValid(selector: LabelSelector | undefined): boolean {
  if (!selector) return true;
  for (const [key, value] of Object.entries(selector.matchLabels ?? {}))
    if (!validKey(key) || !validValue(value)) return false;
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    if (!validKey(key)) return false;
    const takesValues = operator === 'In' || operator === 'NotIn';
    if (takesValues ? values.length === 0 : values.length > 0) return false;
    if (!values.every(validValue)) return false;
  }
  return true;
}
