// Which NodeActions a rollout counts as its own. A NodeAction that claims a rollout (an
// ownerReference to it) is only a claim: anyone allowed to create NodeActions could
// write one, mark it executed, and make the rollout report a node done that it never
// touched. The admission policy keeps the claim to the controller; the rollout does not
// rest on that alone, and counts an action only if it is what the rollout itself would
// have made for its node: its derived name (or its one retry's), its rollout label, its action and target,
// its requester. Anything else that claims the rollout is an impostor: reported, its
// node held, never counted.
import { ROLLOUT_LABEL } from '../api/names.ts';
import type { ObservedNodeAction } from '../api/node-action.ts';
import type { ObservedNodeRollout } from '../api/node-rollout.ts';
import { rolloutActionName, rolloutLabelValue, rolloutRetryName } from './naming.ts';

type OwnedMetadata = { ownerReferences?: { uid: string; kind?: string; name?: string }[] };
type Claimant = Pick<ObservedNodeAction, 'metadata' | 'spec'>;

/** The rollout an action claims to belong to: its ownerReference of kind NodeRollout. */
export function claimedRollout(
  action: Pick<ObservedNodeAction, 'metadata'>,
): { uid: string; name: string } | undefined {
  const ref = (action.metadata as OwnedMetadata).ownerReferences?.find((r) => r.kind === 'NodeRollout');
  return ref?.name ? { uid: ref.uid, name: ref.name } : undefined;
}

/**
 * Why an action that claims the rollout is not one the rollout made, in words; undefined
 * when it is. Only fields fixed for the rollout's life are compared (action, upgrade
 * image, requester): the others (execution, drain, deadlines, bypass) may have been
 * edited since the action was made.
 */
export function notMadeBy(rollout: ObservedNodeRollout, action: Claimant): string | undefined {
  const r = rollout.spec;
  const a = action.spec;
  const name = rolloutActionName(rollout.metadata.name, a.nodeName);
  const retry = rolloutRetryName(rollout.metadata.name, a.nodeName);
  const why: string[] = [];
  if (claimedRollout(action)?.uid !== rollout.metadata.uid) why.push('it is not owned by this rollout');
  if (action.metadata.name !== name && action.metadata.name !== retry) why.push(`its name is not ${name}`);
  if (action.metadata.labels?.[ROLLOUT_LABEL] !== rolloutLabelValue(rollout.metadata.name))
    why.push(`its label ${ROLLOUT_LABEL} does not name this rollout`);
  if (a.action !== r.action) why.push(`it is a ${a.action}, not a ${r.action}`);
  else if (r.action === 'Upgrade' && a.upgrade?.image !== r.upgrade?.image)
    why.push(`it installs ${a.upgrade?.image ?? 'no image'}, not ${r.upgrade?.image ?? ''}`);
  if (a.requestedBy !== r.requestedBy) why.push(`it was requested by ${a.requestedBy}, not ${r.requestedBy}`);
  return why.length ? why.join('; ') : undefined;
}

/** An action that claims the rollout without being one it made. */
export interface Impostor {
  name: string;
  uid: string;
  node: string;
  why: string;
}

/**
 * Splits the actions that claim the rollout (by ownerReference) into the ones it made
 * and impostors. Actions that do not claim it are left out of both.
 */
export function sortClaims<T extends Claimant>(
  rollout: ObservedNodeRollout,
  actions: Iterable<T>,
): { own: T[]; impostors: Impostor[] } {
  const own: T[] = [];
  const impostors: Impostor[] = [];
  for (const a of actions) {
    if (claimedRollout(a)?.uid !== rollout.metadata.uid) continue;
    const why = notMadeBy(rollout, a);
    if (why === undefined) own.push(a);
    else impostors.push({ name: a.metadata.name, uid: a.metadata.uid, node: a.spec.nodeName, why });
  }
  return { own, impostors };
}
