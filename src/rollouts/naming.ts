// The names a rollout gives its NodeActions: derived from the rollout and the node alone,
// so that a restarted controller or a new leader asks for the same name and the API
// server refuses a second one (409) — the rollout acts on each node at most once
// (invariant 9) whatever its memory says.
import { createHash } from 'node:crypto';

const MAX_NAME = 253;
const MAX_LABEL_VALUE = 63;

function digest(text: string, length: number): string {
  return createHash('sha256').update(text).digest('hex').slice(0, length);
}

/**
 * `<rollout>-<node>` when that is a valid object name; otherwise a shortened prefix and
 * a digest of both, still one name per (rollout, node).
 */
export function rolloutActionName(rollout: string, node: string): string {
  const plain = `${rollout}-${node}`;
  if (plain.length <= MAX_NAME) return plain;
  const suffix = digest(`${rollout}\n${node}`, 16);
  return `${plain.slice(0, MAX_NAME - suffix.length - 1).replace(/[-.]+$/, '')}-${suffix}`;
}

/**
 * The name of a node's one retry (a node set aside by onDrainTimeout: Quarantine, tried
 * again at the end): derived like the first, with a digest no node name can produce by
 * itself, so a second retry is refused (409) as a second first action is.
 */
export function rolloutRetryName(rollout: string, node: string): string {
  const suffix = `-retry-${digest(`${rollout}\n${node}\nretry`, 8)}`;
  const first = rolloutActionName(rollout, node);
  return `${first.slice(0, MAX_NAME - suffix.length).replace(/[-.]+$/, '')}${suffix}`;
}

/** The talos.dev/rollout label value: the rollout's name, or a digest of a name too long for a label. */
export function rolloutLabelValue(rollout: string): string {
  if (rollout.length <= MAX_LABEL_VALUE && !rollout.includes('.')) return rollout;
  const suffix = digest(rollout, 10);
  const prefix = rollout
    .slice(0, MAX_LABEL_VALUE - suffix.length - 1)
    .replace(/\./g, '-')
    .replace(/-+$/, '');
  return `${prefix}-${suffix}`;
}
